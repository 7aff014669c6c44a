"""Merging runs of ``unisent fit`` that share a starting model into one model (docs/merging.md).

The merged model is the union of the runs' objectives on one encoder: its encoder weights are merged by a
method of ``methods`` (task vectors against the starting model, which is rebuilt from the runs' own
record: the backbone and the objectives that extend its vocabulary), and every objective keeps its own
parameters from the run that trained it (GaussCSE's Gaussian head, EASE's entity table, CMLM's projections
and MLM head); an objective that several runs trained (two seeds of one recipe) gets the weighted mean of
their parameters, as there is no shared start to take task vectors from.

Everything is checked before anything is written, each problem one line naming the run: a checkpoint of
``unisent fit`` (read as data; only registered objectives are built), the same backbone, tokenizers that
agree on every token they share (one run's added tokens are rows the others did not train: their task
vector there is 0), the same shapes, one definition of each objective.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from ..io.files import atomic_write
from ..io.model_files import check_model_directory
from .methods import METHODS, merge_tensors

__all__ = ["DEFAULT_DENSITY", "MergeError", "MergeInput", "merge_runs", "read_inputs"]

#: ``density`` when none is given: TIES keeps the top 20% of each task vector (Yadav et al. 2023, the paper's
#: k = 20), DARE drops 90% (Yu et al. 2024's drop rate 0.9); the other methods keep every entry
DEFAULT_DENSITY = {"linear": 1.0, "task_arithmetic": 1.0, "ties": 0.2, "dare_ties": 0.1}


class MergeError(ValueError):
    """Runs that cannot be merged (one line, naming the run and what differs)."""


@dataclass
class MergeInput:
    """One run to merge: its checkpoint, its rebuilt module (weights loaded) and its record."""

    path: Path
    module: Any
    record: dict[str, Any]


def _checkpoint_of(source: str | os.PathLike[str]) -> Path:
    path = Path(source)
    if path.is_dir():
        check_model_directory(path, what="run folder", read=False)  # last.ckpt linked out of it: refused
        ckpt = path / "checkpoints" / "last.ckpt"
        if not ckpt.is_file():
            raise MergeError(
                f"{path}: no checkpoints/last.ckpt in this folder; give a run folder of `unisent fit` or a .ckpt "
                "(an exported encoder has no objectives' heads to merge)"
            )
        return ckpt
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such run folder or checkpoint")
    return path


def read_inputs(sources: Sequence[str | os.PathLike[str]]) -> list[MergeInput]:
    """Every run's record read (as data) and its backbone checked against the first's, then every run
    rebuilt from its checkpoint (``module_from_checkpoint``)."""
    from ..checkpoint_record import CHECKPOINT_KEY, check_unisent_checkpoint
    from ..io import load_checkpoint
    from ..lightning_module import UnisentModule

    if len(sources) < 2:
        raise MergeError(f"merging needs at least two runs, got {len(sources)}")
    records: list[tuple[Path, dict[str, Any]]] = []
    for source in sources:
        ckpt = _checkpoint_of(source)
        check_unisent_checkpoint(ckpt)
        records.append((ckpt, load_checkpoint(ckpt, mmap=True)[CHECKPOINT_KEY]))
    _check_backbones(records)
    inputs: list[MergeInput] = []
    for ckpt, record in records:
        module = UnisentModule.from_checkpoint(ckpt)
        if len(module.objectives) != len(record["objectives"]):
            raise MergeError(
                f"{ckpt}: some of its objectives are not registered (a plugin's: --import MODULE), so their "
                "parameters cannot be carried into the merged model"
            )
        inputs.append(MergeInput(ckpt, module, record))
    return inputs


def _check_backbones(records: list[tuple[Path, dict[str, Any]]]) -> None:
    (first_path, first), *others = records
    for path, record in others:
        for key in ("model", "pooler"):
            mine, theirs = record["encoder"].get(key), first["encoder"].get(key)
            if mine != theirs:
                raise MergeError(
                    f"{path} starts from {key} {mine!r}, {first_path} from {theirs!r}: merging needs runs of one "
                    "starting model"
                )


def _union_objectives(inputs: list[MergeInput]) -> tuple[list[dict[str, Any]], dict[str, list[tuple[int, int]]]]:
    """Every objective once (its record), and for each name the (run, index in that run) that trained it."""
    specs: dict[str, dict[str, Any]] = {}
    owners: dict[str, list[tuple[int, int]]] = {}
    for r, item in enumerate(inputs):
        for i, objective in enumerate(item.module.objectives):
            spec = item.record["objectives"][i]
            if objective.name in specs and specs[objective.name] != spec:
                first = inputs[owners[objective.name][0][0]].path
                raise MergeError(
                    f"objective {objective.name!r} is set differently in {first} and {item.path} "
                    "(class_path or init_args): one merged model carries one definition of each objective"
                )
            specs.setdefault(objective.name, spec)
            owners.setdefault(objective.name, []).append((r, i))
    return list(specs.values()), owners


def _build_union(inputs: list[MergeInput], specs: list[dict[str, Any]]) -> Any:
    """The merged model before merging: the starting encoder with every objective (fresh heads)."""
    from ..encoders import EncoderConfig
    from ..lightning_module import UnisentModule
    from ..objectives import objective_from_record

    source = str(inputs[0].path)
    objectives = [objective_from_record(s, source=source, field=f"objectives[{i}]") for i, s in enumerate(specs)]
    return UnisentModule(encoder=EncoderConfig(**inputs[0].record["encoder"]), objectives=objectives)


def _check_tokenizers(inputs: list[MergeInput], union: Any) -> None:
    merged = union.encoder.tokenizer.get_vocab()
    for item in inputs:
        vocab = item.module.encoder.tokenizer.get_vocab()
        for token, index in vocab.items():
            if merged.get(token) != index:
                raise MergeError(
                    f"{item.path}: its tokenizer gives {token!r} the id {index}, the merged model's "
                    f"{merged.get(token)}: merging needs runs whose tokenizers agree on every token they share"
                )


def _aligned(tensor: torch.Tensor, base: torch.Tensor, key: str, path: Path) -> torch.Tensor:
    """``tensor`` in ``base``'s shape: rows another run's tokens added (a vocabulary-sized first dimension) are
    taken from ``base`` (this run never trained them); any other difference is an error."""
    if tensor.shape == base.shape:
        return tensor
    if tensor.dim() == base.dim() and tensor.shape[1:] == base.shape[1:] and tensor.shape[0] < base.shape[0]:
        return torch.cat([tensor.to(base.dtype), base[tensor.shape[0] :]])
    raise MergeError(
        f"{path}: tensor {key} has shape {tuple(tensor.shape)}, the merged model's {tuple(base.shape)}: "
        "merging needs runs of the same architecture"
    )


def _keys(
    union: Any, states: list[dict[str, Any]], owners: dict[str, list[tuple[int, int]]]
) -> dict[str, list[tuple[int, str]]]:
    """Every key of the merged model's state and where each run keeps it: ``(run, key there)``. The encoder's
    keys are the starting model's (every run has them); an objective's are its first run's (a table sized
    by the data, like EASE's, exists only in a trained run)."""
    keys: dict[str, list[tuple[int, str]]] = {}
    for key in union.state_dict():
        if key.startswith("encoder."):
            keys[key] = [(r, key) for r in range(len(states))]
    for position, objective in enumerate(union.objectives):
        first, index = owners[objective.name][0]
        for key in states[first]:
            prefix = f"objectives.{index}."
            if key.startswith(prefix):
                rest = key[len(prefix) :]
                keys[f"objectives.{position}.{rest}"] = [
                    (r, f"objectives.{i}.{rest}") for r, i in owners[objective.name]
                ]
    return keys


def _one_value(key: str, values: list[Any], paths: list[Path]) -> Any:
    """What several runs hold under a key that is not merged (extra state, integers): the same, or an error."""
    same = [torch.equal(v, values[0]) if isinstance(v, torch.Tensor) else v == values[0] for v in values[1:]]
    if not all(same):
        raise MergeError(f"{paths[1 + same.index(False)]}: {key} differs from {paths[0]}'s (not a weight to merge)")
    return values[0]


def _merge_state(
    inputs: list[MergeInput],
    union: Any,
    owners: dict[str, list[tuple[int, int]]],
    weights: list[float],
    settings: dict[str, Any],
) -> dict[str, Any]:
    base = union.state_dict()
    states = [item.module.state_dict() for item in inputs]
    generator = torch.Generator().manual_seed(settings["seed"])
    merged: dict[str, Any] = {}
    for key, sources in sorted(_keys(union, states, owners).items()):
        missing = [(r, k) for r, k in sources if k not in states[r]]
        if missing:
            raise MergeError(
                f"{inputs[missing[0][0]].path}: no tensor {missing[0][1]}; merging needs runs of one architecture"
            )
        values = [states[r][k] for r, k in sources]
        paths = [inputs[r].path for r, _ in sources]
        start = base.get(key)
        if start is not None and isinstance(start, torch.Tensor):
            values = [_aligned(v, start, key, p) for v, p in zip(values, paths)]
        if not isinstance(values[0], torch.Tensor) or not values[0].is_floating_point():
            merged[key] = _one_value(key, values, paths)
        elif key.startswith("objectives."):  # a head: its run's, or the mean of the runs that trained it
            shares = [weights[r] for r, _ in sources]
            merged[key] = values[0].clone() if len(values) == 1 else merge_tensors(None, values, shares, "linear")
        else:
            merged[key] = merge_tensors(
                start,
                values,
                weights,
                settings["method"],
                density=settings["density"],
                scale=settings["scale"],
                generator=generator,
            )
    return merged


def _sha256(path: Path) -> str:
    from huggingface_hub.utils.sha import sha_fileobj  # by chunks of 1 MiB

    with path.open("rb") as f:
        return sha_fileobj(f).hex()


def merge_runs(
    runs: Sequence[str | os.PathLike[str]],
    out: str | os.PathLike[str],
    *,
    method: str = "ties",
    weights: Sequence[float] | None = None,
    density: float | None = None,
    scale: float = 1.0,
    seed: int = 0,
) -> dict[str, Any]:
    """Merge runs of one starting model into ``out``: ``encoder/`` (what ``unisent.load``, ``evaluate`` and
    ``export`` read), ``checkpoints/last.ckpt`` (every objective's parameters: the entity table, the panel)
    and ``merge.json`` (the method, weights, density, scale, DARE's seed and each input's SHA-256).

    Args:
        runs: run folders of ``unisent fit`` (their ``checkpoints/last.ckpt``) or checkpoints.
        out: a new or empty folder.
        method: one of ``METHODS``.
        weights: one per run (default: 1 each).
        density: share of task-vector entries kept (default ``DEFAULT_DENSITY`` of the method).
        scale: factor of the merged task vector.
        seed: DARE's random source.

    Returns:
        the merge record (also written to ``out/merge.json``).
    """
    from ..checkpoint_record import CHECKPOINT_KEY
    from ..inference.base import save_at_inference_length

    if method not in METHODS:
        raise MergeError(f"unknown merge method {method!r}; one of {', '.join(METHODS)}")
    weights = [1.0] * len(runs) if weights is None else [float(w) for w in weights]
    if len(weights) != len(runs):
        raise MergeError(f"{len(runs)} runs and {len(weights)} weights: give one weight per run, in the runs' order")
    if method in ("linear", "ties", "dare_ties") and sum(weights) <= 0:
        raise MergeError(f"{method}: the weights must sum to more than 0, got {weights}")
    density = DEFAULT_DENSITY[method] if density is None else float(density)
    if not 0.0 < density <= 1.0:
        raise MergeError(f"density must be in (0, 1], got {density}")
    target = Path(out)
    if target.exists() and (not target.is_dir() or any(target.iterdir())):
        raise MergeError(f"--out {target} exists and is not an empty folder; choose another or remove it")
    inputs = read_inputs(runs)
    specs, owners = _union_objectives(inputs)
    union = _build_union(inputs, specs)
    _check_tokenizers(inputs, union)
    settings = {"method": method, "density": density, "scale": scale, "seed": seed}
    state = _merge_state(inputs, union, owners, weights, settings)
    union.load_state_dict(state)
    union.eval()
    model = union.inference_model()  # two objectives with inference heads: refused here, before any file
    record = {
        "method": method,
        "weights": weights,
        "density": density,
        "scale": scale,
        "seed": seed,
        "start": inputs[0].record["encoder"].get("model"),
        "objectives": {name: [str(inputs[r].path) for r, _ in found] for name, found in owners.items()},
        "runs": [{"checkpoint": str(item.path), "sha256": _sha256(item.path)} for item in inputs],
    }
    ckpt = {CHECKPOINT_KEY: union.run_config(), "state_dict": state, "global_step": 0, "merge": record}
    with atomic_write(target / "checkpoints" / "last.ckpt", "wb") as fh:  # whole or not at all
        torch.save(ckpt, fh)
    encoder_dir, lengths = save_at_inference_length(model, target / "encoder")
    (target / "merge.json").write_text(json.dumps(record, indent=1) + "\n", encoding="utf-8")
    print(f"unisent merge: {method} of {len(inputs)} runs saved to {encoder_dir}{lengths}", file=sys.stderr)
    return record
