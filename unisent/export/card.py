"""The model card (README.md) of an exported model."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from .registry import Exporter
from .source import ExportSource

__all__ = ["hub_id", "read_results", "render_card"]


def read_results(path: str | Path) -> dict[str, Any]:
    """Read and check a results file written by ``unisent evaluate --output``.

    Raises:
        FileNotFoundError: the file does not exist.
        ValueError: it is not JSON with ``{"tasks": {name: {"main_metric", "score"}}}``.
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"results file {str(path)!r} does not exist")
    try:
        results = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as err:
        raise ValueError(f"{path}: not valid JSON ({err.msg} at line {err.lineno})") from None
    tasks = results.get("tasks") if isinstance(results, dict) else None
    if not isinstance(tasks, dict) or not tasks:
        raise ValueError(f"{path}: expected the JSON of `unisent evaluate --output` with a non-empty 'tasks' object")
    for name, entry in tasks.items():
        if not isinstance(entry, Mapping) or "main_metric" not in entry or "score" not in entry:
            raise ValueError(f"{path}: task {name!r} has no 'main_metric' and 'score'")
    return results


def hub_id(base_model: str | None) -> str | None:
    """The Hugging Face Hub id behind a recorded base model (a preset or an id), None for local paths."""
    from ..encoders import PRESETS

    if not base_model:
        return None
    if base_model in PRESETS:
        location = PRESETS[base_model].model
        return None if location.startswith("package:") else location
    if base_model.startswith(("/", ".", "~")) or base_model.count("/") > 1 or Path(base_model).expanduser().exists():
        return None
    return base_model


def _base_model_text(base_model: str | None) -> str:
    from ..encoders import PRESETS

    if not base_model:
        return "not recorded"
    preset = PRESETS.get(base_model)
    return f"{base_model} (unisent preset: {preset.note or preset.model})" if preset else base_model


def _cell(value: Any) -> str:
    return str(value).replace("|", "\\|").replace("\n", " ")


def _table(header: tuple[str, ...], rows: list[tuple[Any, ...]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(_cell(v) for v in row) + " |" for row in rows]
    return lines


def _front_matter(exporter: Exporter, source: ExportSource) -> str:
    meta: dict[str, Any] = {
        "library_name": exporter.library_name,
        "pipeline_tag": exporter.pipeline_tag,
        "tags": ["unisent", "sentence-embeddings", *exporter.model_tags(source.model)],
    }
    base = hub_id(source.record.base_model)
    if base:
        meta["base_model"] = base
    return "---\n" + yaml.safe_dump(meta, sort_keys=False) + "---\n"


def _evaluation(results: dict[str, Any], results_name: str) -> list[str]:
    lines = ["## Evaluation", "", f"Scores from `unisent evaluate` (`{results_name}`), in percent:", ""]
    rows = [(name, r["main_metric"], f"{float(r['score']):.2f}") for name, r in results["tasks"].items()]
    lines += _table(("task", "metric", "score"), rows)
    groups = results.get("groups") or {}
    if groups:
        lines += ["", "Groups (mean over their tasks):", ""]
        rows = [(g, r.get("main_metric", ""), f"{float(r['score']):.2f}", r.get("n_tasks", "")) for g, r in groups.items()]
        lines += _table(("group", "metric", "score", "tasks"), rows)
    skipped = results.get("skipped") or {}
    if skipped:
        lines += ["", "Not evaluated: " + "; ".join(f"{k} ({v})" for k, v in skipped.items())]
    data_dir = (results.get("config") or {}).get("data_dir")
    if data_dir:
        lines += ["", f"Evaluation data: `{data_dir}`."]
    return lines


def render_card(
    exporter: Exporter,
    source: ExportSource,
    *,
    title: str,
    results: dict[str, Any] | None = None,
    results_name: str = "results.json",
    check: tuple[float | None, str] | None = None,
) -> str:
    """The README.md of an exported model.

    Args:
        exporter: the exporter that wrote the files (facts, usage, card metadata).
        source: the exported model and its training record.
        title: the card's heading.
        results: output of :func:`read_results`, or None.
        results_name: the results file's name, shown in the card.
        check: ``(max difference, how)`` from :meth:`Exporter.verify`, or None if not run.
    """
    from .._version import __version__

    record = source.record
    lines = [_front_matter(exporter, source), f"# {title}", ""]
    lines += [
        f"A sentence embedding model trained with unisent and exported "
        f"in the **{exporter.format}** format by `unisent export` (unisent {__version__}) from the "
        f"{source.kind} `{source.name}`.",
        "",
    ]
    facts = [("base model", _base_model_text(record.base_model)), *exporter.facts(source.model)]
    lines += ["## Model", ""] + _table(("", ""), facts) + [""]

    lines += ["## Training objectives", ""]
    if record.objectives:
        for obj in record.objectives:
            lines.append(f"### `{obj.name}`: `{obj.class_path}` (weight {obj.weight:g})")
            lines.append("")
            settings = ", ".join(f"`{k}={_setting(v)}`" for k, v in obj.init_args.items())
            lines.append(f"Settings: {settings or 'defaults'}.")
            lines.append("")
            lines.append(f"Citation: {obj.citation or 'none recorded by the objective class'}")
            lines.append("")
    else:
        lines += ["Not recorded (export from a `.ckpt` of `unisent fit`, or from `<run>/encoder`, to list them).", ""]

    lines += ["## Training data", ""]
    if record.data:
        lines += [f"- {line}" for line in record.data]
    else:
        lines.append("Not recorded (pass `--training-data` to `unisent export` to describe it).")
    if record.settings:
        lines += ["", "Training settings" + (f" (from `{record.run_config_file.name}`)" if record.run_config_file else "") + ":", ""]
        lines += _table(("setting", "value"), record.settings)
    lines.append("")

    if results is not None:
        lines += _evaluation(results, results_name) + [""]

    lines += ["## Usage", "", exporter.usage(source.model).strip(), ""]
    if check is not None:
        diff, how = check
        if diff is None:
            lines += [f"Export check: not run ({how}).", ""]
        else:
            lines += [f"Export check: {how}; largest absolute difference to unisent's `encode`: {diff:.2e}.", ""]

    citations = [o.citation for o in record.objectives if o.citation]
    if citations:
        lines += ["## Citation", ""] + [f"- {c}" for c in dict.fromkeys(citations)] + [""]
    return "\n".join(lines).rstrip() + "\n"


def _setting(value) -> str:
    """A setting for the card; long lists (e.g. an AMR vocabulary of thousands of symbols) are summarised."""
    if isinstance(value, (list, tuple)) and len(value) > 12:
        head = ", ".join(json.dumps(v, default=str) for v in value[:3])
        return f"[{head}, ... ({len(value):,} items)]"
    return json.dumps(value, default=str)
