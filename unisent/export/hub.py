"""What a model card tells the Hugging Face Hub (base model, licence, language, datasets, results), and
``unisent export --push-to ORG/NAME``.

Every fact is read from the preset, the backbone's own card, the run's ``config.yaml`` or
``unisent evaluate --output``; nothing is guessed. An unknown fact is left out, except the licence:
``other`` until ``--license`` gives one. Local paths never reach a card (``display_path``,
``scrub_paths``)."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

__all__ = [
    "DEFAULT_LICENSE",
    "PushError",
    "backbone_metadata",
    "check_repo_id",
    "dataset_id",
    "display_path",
    "hub_id",
    "model_index",
    "push_to_hub",
    "scrub_paths",
]

#: the ``license`` of a card whose backbone's licence is not known (the Hub's value for "not standard")
DEFAULT_LICENSE = "other"

#: licence and languages of the presets' hub backbones, from their Hub model cards
KNOWN_BACKBONES: dict[str, dict[str, Any]] = {
    "bert-base-uncased": {"license": "apache-2.0", "language": ["en"]},
    "roberta-base": {"license": "mit", "language": ["en"]},
    "bert-base-multilingual-cased": {"license": "apache-2.0", "language": ["multilingual"]},
    "xlm-roberta-base": {"license": "mit", "language": ["multilingual"]},
    "sentence-transformers/LaBSE": {"license": "apache-2.0", "language": ["multilingual"]},
    "sentence-transformers/all-MiniLM-L6-v2": {"license": "apache-2.0", "language": ["en"]},
}

#: Hub dataset ids of training files by name: the recipes' files, and the bundled samples
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


def display_path(path: str | Path) -> str:
    """``path`` as a card shows it: as written when relative, relative to the working directory or the
    unisent checkout when under one, else its name."""
    text = str(path)
    candidate = Path(text).expanduser()
    if not (candidate.is_absolute() or text.startswith("~")):
        return text
    resolved = candidate.resolve()
    for root in (Path.cwd().resolve(), Path(__file__).resolve().parents[2]):  # the unisent checkout
        if root != Path("/") and resolved != root and resolved.is_relative_to(root):
            return str(resolved.relative_to(root))
    return candidate.name or text


def scrub_paths(text: str) -> str:
    """``text`` with every absolute (or ``~``) file path replaced by ``display_path`` of it."""
    return _ABSOLUTE.sub(lambda m: display_path(m.group(0)), text)


def _is_bundled(path: Path) -> bool:
    from ..resources import RESOURCES

    try:
        resolved = (path if path.is_absolute() else Path.cwd() / path).resolve()
        return resolved.is_relative_to(RESOURCES) or resolved.parent.name == "samples"
    except OSError:
        return False


def dataset_id(path: str) -> str:
    """The Hub id of a training file where known, else its ``display_path``."""
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
    """The YAML front matter of a base model's card (at most 1 MiB and 100,000 values); {} if none."""
    from ..io.model_files import ModelFileError, read_front_matter

    try:
        meta = read_front_matter(readme, 2**20, "a model card")
    except (OSError, ModelFileError):
        return {}
    return meta if isinstance(meta, dict) else {}


def backbone_metadata(base_model: str | None) -> dict[str, Any]:
    """``{"license": ..., "language": [...]}`` of the backbone as far as known: its local card's front
    matter, else ``KNOWN_BACKBONES``."""
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
        language = meta.get("language")
        if language:
            found["language"] = [str(v) for v in language] if isinstance(language, (list, tuple)) else [str(language)]
    known = KNOWN_BACKBONES.get(hub_id(base_model) or "", {})
    return {**known, **found}


def model_index(name: str, results: dict[str, Any]) -> list[dict[str, Any]]:
    """The Hub's ``model-index`` of ``read_results`` output: one entry per task, its main metric in percent."""
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


#: a Hugging Face access token as it may appear in a message
_TOKEN = re.compile(r"\bhf_[A-Za-z0-9]{8,}")


def redact_token(text: str) -> str:
    """``text`` without the Hub token in use or anything shaped like one (a message may end in a log)."""
    from huggingface_hub import get_token

    try:
        token = get_token()
    except Exception:  # noqa: BLE001 - an unreadable token file: nothing to redact but the pattern
        token = None
    if token:
        text = text.replace(token, "hf_***")
    return _TOKEN.sub("hf_***", text)


class PushError(RuntimeError):
    """The export could not be uploaded (offline, no token, refused): one line, the export stays on disk."""


def check_repo_id(repo_id: str) -> str:
    """``repo_id`` if it is a valid Hub repository name ``ORG/NAME``, else a ``PushError``; checked
    before anything is exported."""
    from huggingface_hub.utils import HFValidationError, validate_repo_id

    shown = repr(repo_id) if len(repo_id) <= 120 else repr(repo_id[:120] + "...")
    if repo_id.count("/") != 1 or not all(repo_id.split("/")):
        raise PushError(f"--push-to {shown}: give the repository as ORG/NAME (or USER/NAME)")
    try:
        validate_repo_id(repo_id)
    except HFValidationError as err:
        reason = str(err).split(":")[0].rstrip(".")
        raise PushError(f"--push-to {shown} is not a Hub repository name: {reason}") from None
    return repo_id


def push_to_hub(
    folder: str | os.PathLike, repo_id: str, *, private: bool = False, commit_message: str | None = None
) -> str:
    """Create the model repository ``repo_id`` if needed and upload ``folder``; returns the commit URL, or
    raises ``PushError`` (offline, the hub unreachable or refusing)."""
    from huggingface_hub import create_repo, upload_folder

    from ..encoders.loading import _hub_reachable, _offline

    folder = Path(folder)
    later = f"the export is in {folder}; upload it later with `hf upload {repo_id} {folder}`"
    check_repo_id(repo_id)
    if _offline():
        raise PushError(f"--push-to {repo_id}: HF_HUB_OFFLINE is set, nothing was uploaded; {later}")
    if not _hub_reachable():
        raise PushError(f"--push-to {repo_id}: the Hugging Face Hub cannot be reached, nothing was uploaded; {later}")
    try:
        create_repo(repo_id, repo_type="model", private=private, exist_ok=True)
        info = upload_folder(
            repo_id=repo_id,
            folder_path=str(folder),
            repo_type="model",
            commit_message=commit_message or f"Upload {folder.name} exported by unisent",
        )
    except Exception as err:  # noqa: BLE001 - auth, refusal, network: one line, the export stays
        first = redact_token(str(err).strip().splitlines()[0]) if str(err).strip() else ""
        raise PushError(f"--push-to {repo_id}: the upload failed ({type(err).__name__}: {first}); {later}") from None
    return str(getattr(info, "commit_url", info))
