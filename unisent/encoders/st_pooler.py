"""The ``sentence-transformers`` pooler: a Sentence Transformers model's modules after its
``Transformer``, run as Sentence Transformers' own module classes, so that ``unisent.load(DIR).encode``
computes what ``SentenceTransformer(DIR).encode`` computes.

It is built from what the model declares (``EncoderConfig.sentence_transformers["modules"]``, read by
:func:`~unisent.encoders.st_files.read_sentence_transformers`); the encoder's resolved settings pick
it (:mod:`.resolution`) for a model that is no preset and names no pooler.
"""

from __future__ import annotations

import inspect
from pathlib import Path
from typing import Any

from torch import nn

from ..inference.base import STModule
from .config import UNISENT_CONFIG
from .poolers import Pooler, register_pooler
from .st_files import SentenceTransformersModuleError, local_files_only

__all__ = ["SentenceTransformersPooler"]


def _instantiate(type_path: str, config: dict[str, Any]) -> nn.Module:
    """A module from its configuration (its weights come from the encoder's saved state), with the
    conversions of its class's ``load``: an activation function named by its class path."""
    from sentence_transformers.util import import_from_string

    cls = import_from_string(type_path)
    config = dict(config)
    activation = config.get("activation_function")
    if isinstance(activation, str):
        if not activation.startswith("torch."):
            raise SentenceTransformersModuleError(
                f"{type_path}: activation_function {activation!r} is not a torch module; unisent cannot represent it"
            )
        config["activation_function"] = import_from_string(activation)()
    accepted = set(inspect.signature(cls).parameters)
    return cls(**{k: v for k, v in config.items() if k in accepted})


@register_pooler("sentence-transformers")
class SentenceTransformersPooler(Pooler):
    """The modules after the ``Transformer`` of a Sentence Transformers model, run as Sentence
    Transformers' own module classes on the token states (``Pooling`` in any of its modes, with
    ``include_prompt``; ``Dense`` with its activation; ``WeightedLayerPooling``; ``LayerNorm``;
    ``Dropout``; a ``Normalize`` that is not the last module).

    Built by :meth:`configure` from ``EncoderConfig.sentence_transformers["modules"]``: loaded with
    each class's ``load`` from the model's directory (or hub cache), or, for a directory unisent saved,
    built from the recorded configuration, its weights then coming from the encoder's ``pooler.pt``.
    Exported as the same modules, with the configuration each module writes itself.
    """

    description = "the model's own Sentence Transformers modules after the Transformer"

    def __init__(self, hidden_size: int) -> None:
        super().__init__(hidden_size)
        self.modules_ = nn.ModuleList()
        self.types: list[str] = []
        self.output_size = hidden_size
        self.needs_hidden_states = False
        self.prompt_length: int | None = None

    def configure(self, declared: dict[str, Any], location: str) -> None:
        entries = list(declared.get("modules") or [])
        if not entries:
            raise SentenceTransformersModuleError(
                f"pooler 'sentence-transformers' needs the modules of a Sentence Transformers model; {location!r} "
                "declares none (no modules.json)"
            )
        saved_by_unisent = Path(location, UNISENT_CONFIG).is_file()
        for entry in entries:
            if saved_by_unisent:
                module = _instantiate(entry["type"], entry["config"])
            else:
                from sentence_transformers.util import import_from_string

                cls = import_from_string(entry["type"])
                module = cls.load(location, subfolder=entry["path"], local_files_only=local_files_only(location))
            self.modules_.append(module)
            self.types.append(entry["type"])
        self.needs_hidden_states = any(t.endswith("WeightedLayerPooling") for t in self.types)
        dims = [m.get_embedding_dimension() for m in self.modules_ if hasattr(m, "get_embedding_dimension")]
        self.output_size = next((d for d in reversed(dims) if isinstance(d, int)), self.hidden_size)
        self.description = "Sentence Transformers modules: " + " -> ".join(self._labels())

    def _labels(self) -> list[str]:
        labels = []
        for module in self.modules_:
            name = type(module).__name__
            if name == "Pooling":
                modes = module.pooling_mode if isinstance(module.pooling_mode, str) else "+".join(module.pooling_mode)
                name += f" ({modes}{'' if module.include_prompt else ', prompt excluded'})"
            elif name == "Dense":
                name += f" ({module.in_features} -> {module.out_features}, {type(module.activation_function).__name__})"
            labels.append(name)
        return labels

    def forward(self, last_hidden, attention_mask, hidden_states=None):
        features: dict[str, Any] = {"token_embeddings": last_hidden, "attention_mask": attention_mask}
        if hidden_states is not None:
            features["all_layer_embeddings"] = hidden_states
        if self.prompt_length:
            features["prompt_length"] = self.prompt_length
        for module in self.modules_:
            features = module(features)
        return features["sentence_embedding"]

    def sentence_transformers_modules(self, backbone_config):
        modules = []
        for type_path, module in zip(self.types, self.modules_):
            state = {k: v.detach().cpu().contiguous() for k, v in module.state_dict().items()}
            modules.append(STModule(type(module).__name__, type_path, module.get_config_dict(), state or None))
        return modules

    def huggingface_code(self, in_backbone=False):
        from ..inference.base import NotExportableError

        raise NotExportableError(
            "a Sentence Transformers model's modules have no transformers recipe; export it as sentence-transformers"
        )
