"""The ``unisent`` record of a ``unisent fit`` checkpoint (``CHECKPOINT_KEY``: encoder settings, every
objective's ``class_path`` and arguments, the balancer), its check, and rebuilding a module from it."""

from __future__ import annotations

import sys
from functools import partial
from pathlib import Path
from typing import Any

import torch

from .encoders import EncoderConfig
from .io import CheckpointError, load_checkpoint
from .io.model_files import ModelFileError, check_fits, state_error_line
from .io.registry import RegistryError
from .objectives import Objective, objective_class, objective_from_record
from .training_config import EvaluationConfig, ModelConfigError

__all__ = [
    "CHECKPOINT_KEY",
    "Placeholder",
    "check_unisent_checkpoint",
    "inference_objectives",
    "module_from_checkpoint",
    "renumbered_state",
]

#: the key of the record in the checkpoint's top-level dict
CHECKPOINT_KEY = "unisent"

# older checkpoints hold these dataclasses (plain fields: safe to unpickle), also under old module paths
torch.serialization.add_safe_globals(
    [
        EncoderConfig,
        EvaluationConfig,
        (EncoderConfig, "unisent.encoders.encoder.EncoderConfig"),
        (EvaluationConfig, "unisent.module.EvaluationConfig"),
    ]
)


def check_unisent_checkpoint(path: str | Path) -> None:
    """Check that ``path`` is a complete checkpoint of ``unisent fit`` before anything loads it (read as
    data, memory-mapped: no tensor is loaded); every problem is one line naming the file (truncated, not
    PyTorch, holding code: [`UnsafeCheckpointError`][unisent.io.UnsafeCheckpointError], another program's).

    Raises:
        FileNotFoundError: no such file.
        unisent.io.CheckpointError: what is wrong with it.
    """
    ckpt = load_checkpoint(path, mmap=True)  # as data: a file that names code is refused, nothing runs
    if not isinstance(ckpt, dict) or CHECKPOINT_KEY not in ckpt or "state_dict" not in ckpt:
        what = (
            f"a {type(ckpt).__name__}"
            if not isinstance(ckpt, dict)
            else (f"keys: {', '.join(sorted(map(str, ckpt))[:6])}" if ckpt else "an empty dict")
        )
        raise CheckpointError(
            f"checkpoint {path} was not written by `unisent fit` (it holds {what}, not the "
            f"{CHECKPOINT_KEY!r} record and state_dict); give a .ckpt from a run's checkpoints/ folder"
        )
    record = ckpt[CHECKPOINT_KEY]
    _check_training_state(ckpt, path)
    if (
        not isinstance(ckpt["state_dict"], dict)
        or not all(isinstance(k, str) for k in ckpt["state_dict"])
        or not isinstance(record, dict)
        or not isinstance(record.get("encoder"), dict)
        or not isinstance(record.get("objectives"), list)
    ):
        raise CheckpointError(
            f"checkpoint {path}: its state_dict (names -> values) or its {CHECKPOINT_KEY!r} record's 'encoder' or "
            "'objectives' is missing or of the wrong type; it was not written by `unisent fit`"
        )


def _check_training_state(ckpt: dict, path: str | Path) -> None:
    """The counters ``--ckpt_path`` resumes from: ``global_step``, ``epoch`` and the fit loop's progress are
    non-negative integers in nested objects (a malformed one is one line, not Lightning's traceback)."""
    loops = ckpt.get("loops", {})
    fit = loops.get("fit_loop", {}) if isinstance(loops, dict) else None
    counters = {key: ckpt[key] for key in ("global_step", "epoch") if key in ckpt}
    for name in ("epoch_progress", "epoch_loop.batch_progress"):
        progress = fit.get(name, {}) if isinstance(fit, dict) else None
        for part in ("current", "total"):
            values = progress.get(part, {}) if isinstance(progress, dict) else None
            if not isinstance(values, dict):
                raise CheckpointError(f"checkpoint {path}: loops.fit_loop.{name}.{part} is malformed (not an object)")
            counters |= {f"loops.fit_loop.{name}.{part}.{k}": v for k, v in values.items()}
    for key, value in counters.items():
        if type(value) is not int or value < 0:
            raise CheckpointError(f"checkpoint {path}: {key} must be a non-negative integer, got {value!r:.60}")


# ---------------------------------------------------------------------------------- inference from a record
class Placeholder(Objective):
    """The one objective of a module rebuilt for inference when none of the checkpoint's is importable."""

    name = "unloaded"

    def forward(self, encoder, batch):  # pragma: no cover - never trained
        raise RuntimeError("a model rebuilt for inference has no objective to train")


def inference_objectives(
    specs: list[dict[str, Any]], source: str = "checkpoint", state: dict[str, Any] | None = None
) -> tuple[dict[int, Objective], dict[int, str]]:
    """The record's objectives that are registered ([`objective_class`][unisent.objectives.objective_class]), built, by
    position, and the class paths of the others (inference does not need them); an unregistered name is
    never imported or called. With the checkpoint's ``state``, each is first built on the ``meta`` device and
    checked against its ``objectives.<i>.`` tensors (``check_fits``): ``hidden_size: 16000`` is refused unallocated."""
    built: dict[int, Objective] = {}
    skipped: dict[int, str] = {}
    for i, spec in enumerate(specs):
        field = f"{CHECKPOINT_KEY}.objectives[{i}]"
        name = spec.get("class_path") if isinstance(spec, dict) else None
        try:
            objective_class(name, source=source, field=f"{field}.class_path")
        except RegistryError:
            skipped[i] = str(name)
            continue
        if state is not None:
            prefix, settings = f"objectives.{i}.", spec.get("init_args")
            shapes = {
                k[len(prefix) :]: tuple(v.shape)
                for k, v in state.items()
                if k.startswith(prefix) and hasattr(v, "shape")
            }
            settings = {f"{field}.init_args.{k}": v for k, v in settings.items()} if isinstance(settings, dict) else {}
            build = partial(objective_from_record, spec, source=source, field=field)
            check_fits(build, shapes, config_file=source, settings=settings, weights_file=f"its state_dict's {prefix}*")
        built[i] = objective_from_record(spec, source=source, field=field)
    return built, skipped


def renumbered_state(
    state: dict[str, Any], kept: list[int], skipped: dict[int, str], source: str = "checkpoint"
) -> dict[str, Any]:
    """A checkpoint's weights for a module of only the ``kept`` objectives: the balancer's (training-only)
    and the skipped objectives' state dropped, ``objectives.<i>.`` renumbered."""
    new_index = {old: new for new, old in enumerate(kept)}
    out: dict[str, Any] = {}
    for key, value in state.items():
        if key.startswith("balancer."):
            continue
        if key.startswith("objectives."):
            index, _, rest = key.removeprefix("objectives.").partition(".")
            if not (index.isdigit() and rest and (int(index) in skipped or int(index) in new_index)):
                raise CheckpointError(
                    f"{source}: state_dict key {key!r:.120} names no objective of its {CHECKPOINT_KEY}.objectives "
                    f"(it has {len(kept) + len(skipped)})"
                )
            if int(index) in skipped:
                continue
            key = f"objectives.{new_index[int(index)]}.{rest}"
        out[key] = value
    return out


def module_from_checkpoint(cls: type, path: str | Path, map_location: str = "cpu"):
    """``cls`` (``UnisentModule``) rebuilt from a checkpoint of ``unisent fit``,
    weights loaded. Unregistered objectives are skipped with one line, unless the encoder does not load
    without them ([`CheckpointError`][unisent.io.CheckpointError])."""
    check_unisent_checkpoint(path)
    ckpt = load_checkpoint(path, map_location=map_location)
    record = ckpt[CHECKPOINT_KEY]
    try:  # the record names classes: only registered objectives are built from it, nothing else is called
        objectives, skipped = inference_objectives(record["objectives"], f"checkpoint {path}", ckpt["state_dict"])
        encoder = EncoderConfig(**record["encoder"])
    except ModelFileError as err:  # sizes that do not fit the tensors: the line names the checkpoint already
        raise CheckpointError(str(err)) from None
    except (ValueError, TypeError, KeyError) as err:
        raise CheckpointError(f"checkpoint {path}: its {CHECKPOINT_KEY!r} record: {err}") from err
    kept = [i for i in range(len(record["objectives"])) if i not in skipped]
    try:
        module = cls(encoder=encoder, objectives=[objectives[i] for i in kept] or [Placeholder()])
    except ModelConfigError as err:  # e.g. two objectives of one name: the record's, so the line names the file
        raise CheckpointError(f"checkpoint {path}: its {CHECKPOINT_KEY!r} record: {err}") from None
    state = renumbered_state(ckpt["state_dict"], kept, skipped, f"checkpoint {path}")
    try:
        module.load_state_dict(state)
    except RuntimeError as err:  # e.g. a skipped objective had added tokens to the encoder
        if not skipped:  # tensors of other shapes than the record's model: one line, the first of them
            raise CheckpointError(
                f"checkpoint {path}: its tensors do not fit the model its record describes: {state_error_line(err)}"
            ) from None
        raise CheckpointError(
            f"checkpoint {path}: the encoder does not load without the objective(s) "
            f"{', '.join(skipped.values())}: {state_error_line(err)}"
        ) from err
    if skipped:
        print(
            f"unisent: {path}: skipped objective(s) {', '.join(skipped.values())} ({CHECKPOINT_KEY}.objectives: not "
            "registered objectives, so nothing they name was imported or run; inference does not need them: "
            "--import MODULE to load a plugin's)",
            file=sys.stderr,
        )
    return module
