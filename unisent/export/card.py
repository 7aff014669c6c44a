"""The model card (README.md) of an exported model."""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from .exporters import Exporter
from .hub import (
    DEFAULT_LICENSE,
    backbone_metadata,
    display_path,
    hub_id,
    model_index,
    scrub_paths,
)
from .source import ExportSource

__all__ = ["card_metadata", "default_name", "hub_id", "read_results", "render_card"]


def read_results(path: str | os.PathLike[str]) -> dict[str, Any]:
    """Read a ``unisent evaluate --output`` file: a ``FileNotFoundError``, or a ``ValueError`` when it is not
    JSON with ``{"tasks": {name: {"main_metric", "score"}}}``."""
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


def _base_model_text(base_model: str | None) -> str:
    from ..encoders import PRESETS

    if not base_model:
        return "not recorded"
    preset = PRESETS.get(base_model)
    return f"{base_model} (unisent preset: {preset.note or preset.model})" if preset else display_path(base_model)


def default_name(source: ExportSource) -> str:
    """The default ``--name``: backbone and methods (``all-MiniLM-L6-v2 + SimCSE``), never a local path."""
    base = source.record.base_model
    shown = (hub_id(base) or display_path(base)) if base else source.name
    shown = Path(shown.rstrip("/")).name or shown
    methods = list(dict.fromkeys(o.class_path.rsplit(".", 1)[-1] for o in source.record.objectives))
    return " + ".join([shown, *methods])


def _cell(value: Any) -> str:
    return str(value).replace("|", "\\|").replace("\n", " ")


def _table(header: tuple[str, ...], rows: list[tuple[Any, ...]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(_cell(v) for v in row) + " |" for row in rows]
    return lines


def card_metadata(
    exporter: Exporter,
    source: ExportSource,
    *,
    name: str,
    results: dict[str, Any] | None = None,
    license: str | None = None,
    language: list[str] | None = None,
) -> dict[str, Any]:
    """The card's front matter; unknown facts are left out (``unisent.export.hub``)."""
    record = source.record
    known = backbone_metadata(record.base_model)
    meta: dict[str, Any] = {}
    base = hub_id(record.base_model)
    if base:
        meta["base_model"] = base
    meta["license"] = license or known.get("license") or DEFAULT_LICENSE
    languages = list(language or known.get("language") or [])
    if languages:
        meta["language"] = languages
    if record.datasets:
        meta["datasets"] = list(dict.fromkeys(record.datasets))
    methods = [o.class_path.rsplit(".", 1)[-1].lower() for o in record.objectives]
    tags = ["unisent", "sentence-similarity", "feature-extraction", *exporter.model_tags(source.model), *methods]
    meta["tags"] = list(dict.fromkeys(tags))
    meta["library_name"] = exporter.library_name
    meta["pipeline_tag"] = exporter.pipeline_tag
    if results is not None:
        meta["model-index"] = model_index(name, results)
    return meta


def _evaluation(results: dict[str, Any], results_name: str) -> list[str]:
    lines = ["## Evaluation", "", f"Scores from `unisent evaluate` (`{results_name}`), in percent:", ""]
    rows = [(name, r["main_metric"], f"{float(r['score']):.2f}") for name, r in results["tasks"].items()]
    lines += _table(("task", "metric", "score"), rows)
    groups = results.get("groups") or {}
    if groups:
        lines += ["", "Groups (mean over their tasks):", ""]
        rows = [
            (g, r.get("main_metric", ""), f"{float(r['score']):.2f}", r.get("n_tasks", "")) for g, r in groups.items()
        ]
        lines += _table(("group", "metric", "score", "tasks"), rows)
    skipped = results.get("skipped") or {}
    if skipped:
        lines += ["", "Not evaluated: " + "; ".join(f"{k} ({v})" for k, v in skipped.items())]
    data_dir = (results.get("config") or {}).get("data_dir")
    if data_dir:
        lines += ["", f"Evaluation data: `{display_path(data_dir)}`."]
    return lines


def render_card(
    exporter: Exporter,
    source: ExportSource,
    *,
    title: str | None = None,
    results: dict[str, Any] | None = None,
    results_name: str = "results.json",
    check: tuple[float | None, str] | None = None,
    license: str | None = None,
    language: list[str] | None = None,
    folder: Path | None = None,
) -> str:
    """The README.md of an exported model: front matter (``card_metadata``) and the sections, with no local absolute
    path (``scrub_paths``). ``title`` defaults to [`default_name`][unisent.export.default_name]; ``results``:
    ``read_results`` output; ``check``: ``(max difference, how)`` of
    [`Exporter.verify`][unisent.export.Exporter.verify]; ``license`` and ``language`` default to the backbone's
    (licence: ``other``); ``folder``: the export's files, whose sizes the cost section lists."""
    from huggingface_hub import ModelCardData

    from .._version import __version__

    title = title or default_name(source)
    record = source.record
    meta = card_metadata(exporter, source, name=title, results=results, license=license, language=language)
    front = "---\n" + ModelCardData(**meta).to_yaml() + "\n---\n"  # its ``model-index`` read as ``eval_results``
    lines = [front, f"# {title}", ""]
    trained = "trained with unisent and " if record.objectives or source.kind != "preset or model id" else ""
    lines += [
        f"A sentence embedding model {trained}exported "
        f"in the **{exporter.format}** format by `unisent export` (unisent {__version__}) from the "
        f"{source.kind} `{source.name}`.",
        "",
    ]
    facts = [("base model", _base_model_text(record.base_model)), *exporter.facts(source.model)]
    lines += ["## Model", ""] + _table(("", ""), facts) + [""]
    if meta["license"] == DEFAULT_LICENSE and not license:
        lines += [
            "Licence: not known for the base model (`license: other` above); give it with "
            "`unisent export --license` before publishing.",
            "",
        ]

    lines += _cost(source.model, results, folder)
    lines += ["## Training objectives", ""]
    if record.objectives:
        for obj in record.objectives:
            lines.append(f"### `{obj.name}`: `{obj.class_path}` (weight {obj.weight:g})")
            lines.append("")
            settings = ", ".join(f"`{k}={_setting(v)}`" for k, v in obj.init_args.items())
            lines.append(f"Settings: {settings or 'defaults'}.")
            lines.append("")
            cited = "; ".join(obj.citation.splitlines())
            lines.append(f"Citation: {cited or 'none recorded by the objective class'}")
            lines.append("")
    else:
        lines += ["Not recorded (export from a `.ckpt` of `unisent fit`, or from `<run>/encoder`, to list them).", ""]

    lines += ["## Training data", ""]
    if record.data:
        lines += [f"- {line}" for line in record.data]
    else:
        lines.append("Not recorded (pass `--training-data` to `unisent export` to describe it).")
    if record.settings:
        lines += [
            "",
            "Training settings" + (f" (from `{record.run_config_file.name}`)" if record.run_config_file else "") + ":",
            "",
        ]
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

    citations = [c for o in record.objectives for c in o.citation.splitlines() if c]
    if citations:
        lines += ["## Citation", ""] + [f"- {c}" for c in dict.fromkeys(citations)] + [""]
    return scrub_paths("\n".join(lines).rstrip() + "\n")


def _cost(model: Any, results: dict[str, Any] | None, folder: Path | None) -> list[str]:
    """The card's cost section: parameters per part, the export's files and, when ``results`` has them
    (``unisent evaluate --cost``), encode times per output against the start."""
    from ..inference.cost import cost_table, file_sizes, parameter_parts

    measured = (results or {}).get("cost")
    parts = parameter_parts(model)
    cost = {**(measured or {}), "parameters": parts, "total_parameters": sum(parts.values())}
    if folder is not None:
        files = {k: v for k, v in file_sizes(folder).items() if k != "README.md"}
        cost |= {"files": files, "total_bytes": sum(files.values())}
    lines = ["## Cost", "", *cost_table(cost), ""]
    if not measured:
        lines += [
            "Encode time: not measured for this card (`unisent evaluate --model MODEL --cost --output "
            "results.json`, then `unisent export ... --results results.json`).",
            "",
        ]
    return lines


def _setting(value) -> str:
    """A setting for the card; long lists (an AMR vocabulary) are summarised."""
    if isinstance(value, (list, tuple)) and len(value) > 12:
        head = ", ".join(json.dumps(v, default=str) for v in value[:3])
        return f"[{head}, ... ({len(value):,} items)]"
    return json.dumps(value, default=str)
