"""What a model card tells the Hugging Face Hub: base model, licence, language, datasets, results.

Everything here is read from what is known about the backbone and the run (the preset, the backbone's
own model card, the run's ``config.yaml``, ``unisent evaluate --output``); nothing is guessed. A fact
that is not known is left out, except the licence, which is ``other`` until the user gives one
(``unisent export --license``), as the Hub does for a model without a standard licence.

Local paths never reach a card: :func:`display_path` shows a file relative to the working directory
(or to the unisent package for its bundled samples), else by its name, and :func:`scrub_paths` removes
any absolute path left in the text.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

__all__ = [
    "DEFAULT_LICENSE",
    "KNOWN_BACKBONES",
    "KNOWN_DATASETS",
    "TASK_TYPES",
    "backbone_metadata",
    "dataset_id",
    "display_path",
    "eval_results",
    "hub_id",
    "model_index",
    "scrub_paths",
]

#: the ``license`` of a card whose backbone's licence is not known (the Hub's value for "not standard")
DEFAULT_LICENSE = "other"

#: licence and languages of the presets' hub backbones, from their model cards on the Hub (a packaged
#: model's own README.md is read instead, see :func:`backbone_metadata`)
KNOWN_BACKBONES: dict[str, dict[str, Any]] = {
    "bert-base-uncased": {"license": "apache-2.0", "language": ["en"]},
    "roberta-base": {"license": "mit", "language": ["en"]},
    "bert-base-multilingual-cased": {"license": "apache-2.0", "language": ["multilingual"]},
    "xlm-roberta-base": {"license": "mit", "language": ["multilingual"]},
    "sentence-transformers/LaBSE": {"license": "apache-2.0", "language": ["multilingual"]},
    "sentence-transformers/all-MiniLM-L6-v2": {"license": "apache-2.0", "language": ["en"]},
}

#: Hub dataset ids of training files by name: the files the recipes name, and the bundled samples
#: (the repository's ``samples/`` and ``unisent/resources``; their LICENSE.md says where each comes from)
KNOWN_DATASETS: dict[str, str] = {
    "nli_for_simcse.csv": "princeton-nlp/datasets-for-simcse",
    "wiki1m_for_simcse.txt": "princeton-nlp/datasets-for-simcse",
}
_BUNDLED_DATASETS: dict[str, str] = {
    "nli_triples.jsonl": "stanfordnlp/snli",
    "snli_dev_triples.jsonl": "stanfordnlp/snli",
    "sentences.txt": "sentence-transformers/stsb",
}

#: ``unisent evaluate`` task group -> the model-index task type (the names MTEB's cards use)
TASK_TYPES: dict[str, str] = {
    "sts": "STS",
    "stsb-multi": "STS",
    "sts17": "STS",
    "analysis": "STS",
    "stc": "Clustering",
    "mewsc16": "Clustering",
    "tatoeba": "BitextMining",
    "bucc": "BitextMining",
    "transfer": "Classification",
    "nli": "PairClassification",
    "xnli": "PairClassification",
    "pawsx": "PairClassification",
}

_ABSOLUTE = re.compile(r"(?<![\w.:/\\~-])~?/(?:[\w.+@-]+/)+[\w.+@-]*")


def _package_root() -> Path:
    return Path(__file__).resolve().parents[2]


def display_path(path: str | Path) -> str:
    """``path`` as a card may show it: as written when relative, relative to the working directory
    or the unisent checkout when under one, else its name alone."""
    text = str(path)
    candidate = Path(text).expanduser()
    if not (candidate.is_absolute() or text.startswith("~")):
        return text
    resolved = candidate.resolve()
    for root in (Path.cwd().resolve(), _package_root()):
        try:
            relative = resolved.relative_to(root)
        except ValueError:
            continue
        if root != Path("/") and str(relative) != ".":
            return str(relative)
    return candidate.name or text


def scrub_paths(text: str) -> str:
    """``text`` with every absolute (or ``~``) file path replaced by :func:`display_path` of it."""
    return _ABSOLUTE.sub(lambda m: display_path(m.group(0)), text)


def _is_bundled(path: Path) -> bool:
    from ..resources import RESOURCES

    try:
        resolved = (path if path.is_absolute() else Path.cwd() / path).resolve()
        return resolved.is_relative_to(RESOURCES) or resolved.parent.name == "samples"
    except OSError:
        return False


def dataset_id(path: str) -> str:
    """The Hub id of a training file where it is known (:data:`KNOWN_DATASETS`, the bundled samples),
    else its :func:`display_path`."""
    name = Path(path).name
    if name in KNOWN_DATASETS:
        return KNOWN_DATASETS[name]
    if name in _BUNDLED_DATASETS and _is_bundled(Path(path).expanduser()):
        return _BUNDLED_DATASETS[name]
    return display_path(path)


def hub_id(base_model: str | None) -> str | None:
    """The Hugging Face Hub id behind a recorded base model (a preset or an id), None for local paths."""
    from ..encoders import PRESETS

    if not base_model:
        return None
    if base_model in PRESETS:
        preset = PRESETS[base_model]
        return preset.hub_id or (None if preset.model.startswith("package:") else preset.model)
    if base_model.startswith(("/", ".", "~")) or base_model.count("/") > 1 or Path(base_model).expanduser().exists():
        return None
    return base_model


def _front_matter_of(readme: Path) -> dict[str, Any]:
    """The YAML front matter of a base model's card, read as a model's file: a regular file of at most 1 MiB
    whose YAML expands to at most 100,000 values (no alias bomb); {} when it has none or is unreadable."""
    import yaml

    from ..io.model_files import ModelFileError, check_nesting, read_model_bytes

    if not readme.is_file():
        return {}
    try:
        text = read_model_bytes(readme, 2**20, "a model card").decode("utf-8")
        if not text.startswith("---"):
            return {}
        parts = text.split("---", 2)
        meta = yaml.safe_load(parts[1]) if len(parts) == 3 else None
        check_nesting(meta, str(readme), max_values=100_000)
    except (OSError, UnicodeDecodeError, yaml.YAMLError, ModelFileError, RecursionError):
        return {}
    return meta if isinstance(meta, dict) else {}


def _as_list(value: Any) -> list[str]:
    if value is None:
        return []
    return [str(v) for v in value] if isinstance(value, (list, tuple)) else [str(value)]


def backbone_metadata(base_model: str | None) -> dict[str, Any]:
    """``{"license": ..., "language": [...]}`` of the backbone, as far as known: its own model card
    (README.md front matter of a local or packaged directory), else :data:`KNOWN_BACKBONES`."""
    from ..encoders import PRESETS
    from ..encoders.presets import resolve_preset_path

    if not base_model:
        return {}
    directory: Path | None = None
    if base_model in PRESETS:
        try:
            location = resolve_preset_path(PRESETS[base_model])
        except ImportError:
            location = ""
        directory = Path(location) if location and Path(location).is_dir() else None
    elif Path(base_model).expanduser().is_dir():
        directory = Path(base_model).expanduser()
    found: dict[str, Any] = {}
    if directory is not None:
        meta = _front_matter_of(directory / "README.md")
        if meta.get("license"):
            found["license"] = str(meta["license"])
        if meta.get("language"):
            found["language"] = _as_list(meta["language"])
    known = KNOWN_BACKBONES.get(hub_id(base_model) or "", {})
    return {**known, **found}


def eval_results(results: dict[str, Any]) -> list[Any]:
    """``huggingface_hub.EvalResult`` objects of ``unisent evaluate`` (or ``--mteb``) results: one per
    task, its main metric in percent; the card's ``model-index`` is generated from them."""
    from huggingface_hub import EvalResult

    out = []
    for entry in model_index("", results)[0]["results"]:
        metric = entry["metrics"][0]
        dataset = entry["dataset"]
        out.append(
            EvalResult(
                task_type=entry["task"]["type"],
                dataset_type=dataset["type"],
                dataset_name=dataset["name"],
                dataset_split=dataset.get("split"),
                metric_type=metric["type"],
                metric_value=metric["value"],
                metric_name=metric["name"],
            )
        )
    return out


def model_index(name: str, results: dict[str, Any]) -> list[dict[str, Any]]:
    """The Hub's ``model-index`` of ``unisent evaluate`` results: one entry per task, its main metric
    (in percent, as unisent reports it).

    Args:
        name: the model's name.
        results: output of :func:`~unisent.export.read_results`.
    """
    entries = []
    for task, entry in results["tasks"].items():
        group = str(entry.get("group") or "")
        split = next((s for s in ("test", "dev", "validation", "train") if task.endswith(f"-{s}")), None)
        dataset: dict[str, Any] = {"type": task, "name": f"{task} (unisent evaluate)"}
        if split:
            dataset["split"] = split
        metric = str(entry["main_metric"])
        entries.append(
            {
                "task": {"type": entry.get("task_type") or TASK_TYPES.get(group, group or "sentence-similarity")},
                "dataset": dataset,
                "metrics": [{"type": metric, "value": round(float(entry["score"]), 4), "name": f"{metric} (%)"}],
            }
        )
    return [{"name": name, "results": entries}]
