"""What is being exported: the inference model and what is known about how it was trained (from the
checkpoint's record and step counter, and the ``config.yaml`` that ``unisent fit`` writes beside it)."""

from __future__ import annotations

import json
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import nn

from ..objectives import objective_from_record
from .hub import dataset_id, display_path

__all__ = ["ExportSource", "ObjectiveRecord", "TrainingRecord", "load_export_source"]

RUN_CONFIG = "config.yaml"


@dataclass
class ObjectiveRecord:
    """One training objective as the model card lists it (``init_args``: defaults included;
    ``citation``: the papers, one per line, a wrapper's and the wrapped one's)."""

    name: str
    class_path: str
    init_args: dict[str, Any]
    weight: float = 1.0
    citation: str = ""


@dataclass
class TrainingRecord:
    """What is known about how a model was trained (everything optional): the ``base_model`` (a preset,
    hub id or directory), ``data`` lines, ``settings`` rows (batch size, optimiser, schedule, ...) and the
    training files as the card's ``datasets`` (``unisent.export.hub.dataset_id``)."""

    base_model: str | None = None
    objectives: list[ObjectiveRecord] = field(default_factory=list)
    data: list[str] = field(default_factory=list)
    settings: list[tuple[str, str]] = field(default_factory=list)
    run_config_file: Path | None = None
    datasets: list[str] = field(default_factory=list)


@dataclass
class ExportSource:
    """A model ready to export: the inference model (what ``unisent.load`` returns), its ``kind``
    (``checkpoint``, ``encoder directory`` or ``preset or model id``), name and training record;
    ``truncate_dim``: what the source directory records (an export written with ``--truncate-dim``)."""

    model: nn.Module
    kind: str
    name: str
    record: TrainingRecord
    truncate_dim: int | None = None


def _short(value: Any) -> str:
    return json.dumps(value, default=str) if isinstance(value, (dict, list)) else str(value)


def _objective_from_instance(objective: Any) -> ObjectiveRecord:
    spec = objective.config()
    return ObjectiveRecord(
        name=str(objective.name),
        class_path=spec["class_path"],
        init_args=dict(spec.get("init_args", {})),
        weight=float(getattr(objective, "weight", 1.0)),
        citation="\n".join(getattr(objective, "citations", None) or [str(getattr(objective, "citation", "") or "")]),
    )


def _find_run_config(candidates: list[Path]) -> Path | None:
    return next((d / RUN_CONFIG for d in candidates if (d / RUN_CONFIG).is_file()), None)


def _read_run_config(path: Path) -> dict[str, Any]:
    import yaml

    from ..io.model_files import ModelFileError, check_nesting, read_model_bytes

    try:  # at most 1 MiB, 100,000 values (no alias bomb), 64 levels deep
        config = yaml.safe_load(read_model_bytes(path, 2**20, "a run's config.yaml"))
        check_nesting(config, str(path), max_values=100_000)
    except (OSError, yaml.YAMLError, ModelFileError, RecursionError) as err:
        reason = str(err).splitlines()[0] if str(err) else type(err).__name__
        print(f"unisent: {path}: not read ({reason}); the model card leaves the run's settings out", file=sys.stderr)
        return {}
    return config if isinstance(config, dict) else {}


def _dig(config: dict[str, Any], dotted: str) -> Any:
    value: Any = config
    for key in dotted.split("."):
        if not isinstance(value, dict) or key not in value:
            return None
        value = value[key]
    return value


def _data_lines(train: Any) -> tuple[list[str], list[str]]:
    """``data.train`` of a run config -> one line per objective, and the training files."""
    lines: list[str] = []
    paths: list[str] = []
    for name, source in train.items() if isinstance(train, dict) else ():
        source = {"path": source} if isinstance(source, str) else source
        if not isinstance(source, dict) or "path" not in source:
            lines.append(f"`{name}`: {_short(source)}")
            continue
        paths += [str(source["path"])] if source["path"] else []
        extra = []
        if source.get("columns"):
            extra.append(f"columns {_short(source['columns'])}")
        if source.get("max_records"):
            extra.append(f"first {source['max_records']} records")
        lines.append(f"`{name}`: `{display_path(source['path'])}`" + (f" ({', '.join(extra)})" if extra else ""))
    return lines, paths


def _optimizer_text(spec: Any) -> str | None:
    if isinstance(spec, dict) and "class_path" in spec:
        args = spec.get("init_args") or {}
        shown = ", ".join(f"{k} {v}" for k, v in args.items() if k in ("lr", "weight_decay", "betas", "eps"))
        return spec["class_path"].rsplit(".", 1)[-1] + (f" ({shown})" if shown else "")
    return None if spec is None else _short(spec)


_SETTINGS = (
    ("data.batch_size", "batch size (per process)"),
    ("model.train.schedule.warmup_steps", "warm-up steps"),
    ("model.train.schedule.warmup_ratio", "warm-up ratio"),
    ("model.train.schedule.decay", "learning-rate schedule"),
    ("model.warmup_steps", "warm-up steps"),  # run configs written before model.train
    ("model.warmup_ratio", "warm-up ratio"),
    ("model.warmup", "warm-up"),
    ("model.schedule", "learning-rate schedule"),
    ("trainer.max_epochs", "max epochs"),
    ("trainer.max_steps", "max steps"),
    ("trainer.accumulate_grad_batches", "gradient accumulation"),
    ("trainer.precision", "precision"),
    ("trainer.devices", "devices"),
    ("seed_everything", "seed"),
)


def _settings_from_run_config(config: dict[str, Any]) -> list[tuple[str, str]]:
    optimizer = _optimizer_text(_dig(config, "model.optimizer"))
    rows = [("optimizer", optimizer)] if optimizer else []
    for dotted, label in _SETTINGS:
        value = _dig(config, dotted)
        if value is None or (dotted == "trainer.max_steps" and value == -1):
            continue
        rows.append((label, _short(value)))
    return rows


def _apply_run_config(record: TrainingRecord, path: Path | None, *, objectives: bool) -> None:
    """Fill ``record`` from a LightningCLI ``config.yaml`` (objectives only when ``objectives``)."""
    if path is None:
        return
    config = _read_run_config(path)
    if not isinstance(config.get("model"), dict) or not ({"data", "trainer"} & set(config)):
        return  # not a unisent fit config (an unrelated config.yaml in the parent directory)
    record.run_config_file = path
    record.data, paths = _data_lines(_dig(config, "data.train"))
    record.datasets = [dataset_id(p) for p in paths]
    record.settings = _settings_from_run_config(config) + record.settings
    base = _dig(config, "model.encoder.model")
    if base and not record.base_model:
        record.base_model = str(base)
    specs = _dig(config, "model.objectives")
    if objectives and isinstance(specs, list):  # built through the objectives' registry only, on the ``meta``
        with torch.device("meta"):  # device (the card needs its record, not its tensors: ``hidden_size: 16000``)
            record.objectives = [
                _objective_from_instance(objective_from_record(s, source=str(path), field=f"model.objectives[{i}]"))
                for i, s in enumerate(specs)
            ]


def _checkpoint_progress(path: Path) -> list[tuple[str, str]]:
    """Lightning's step and epoch counters (memory-mapped: no tensor is loaded)."""
    from ..io import load_checkpoint

    try:
        ckpt = load_checkpoint(path, mmap=True)
    except Exception:  # noqa: BLE001 - the counters are optional
        return []
    labels = {"global_step": "optimizer steps (at this checkpoint)", "epoch": "epoch (at this checkpoint)"}
    return [(label, str(ckpt[key])) for key, label in labels.items() if isinstance(ckpt.get(key), int)]


def load_export_source(spec: str | os.PathLike[str], training_data: list[str] | None = None) -> ExportSource:
    """Load what ``spec`` names for export (as ``unisent.load`` does), with its training record.

    ``spec``: a ``.ckpt`` from ``unisent fit``, a ``save_pretrained`` directory (``<run>/encoder``), a
    preset name or a model directory / hub id; ``training_data``: lines listed before those found in
    ``config.yaml``. A ``FileNotFoundError`` or ``ValueError`` (not a unisent checkpoint) otherwise."""
    from .._loader import load

    path = Path(spec).expanduser()
    record = TrainingRecord()
    if path.suffix == ".ckpt":
        if not path.is_file():
            raise FileNotFoundError(f"checkpoint {str(path)!r} does not exist")
        from ..lightning_module import UnisentModule

        module = UnisentModule.from_checkpoint(path)
        model = module.inference_model()
        run = module.run_config()
        record.base_model = str(run.get("encoder", {}).get("model") or "") or None
        record.objectives = [_objective_from_instance(o) for o in module.objectives]
        record.settings = _checkpoint_progress(path)
        _apply_run_config(record, _find_run_config([path.parent, path.parent.parent]), objectives=False)
        kind = "checkpoint"
    elif path.is_dir():
        model = load(str(path))
        _apply_run_config(record, _find_run_config([path.parent]), objectives=True)
        kind = "encoder directory"
    else:
        model = load(str(spec))
        record.base_model = str(spec)
        kind = "preset or model id"
    from ..inference.truncation import TruncatedModel

    truncate_dim = None
    if isinstance(model, TruncatedModel):  # re-exported whole; the recorded dim is written again
        model, truncate_dim = model.model, model.truncate_dim
    model.eval()
    if training_data:
        record.data = list(training_data) + record.data
    return ExportSource(model=model, kind=kind, name=path.name or str(spec), record=record, truncate_dim=truncate_dim)
