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
from ..io.model_files import inside
from ..io.registry import resolve
from .config import UNISENT_CONFIG
from .poolers import Pooler, register_pooler
from .st_files import (
    SUPPORTED_MODULES,
    SentenceTransformersModuleError,
    activation_classes,
    local_files_only,
    module_classes,
)

__all__ = ["SentenceTransformersPooler"]


def _instantiate(type_path: Any, config: Any, *, source: str, field: str) -> nn.Module:
    """A module from its configuration (its weights come from the encoder's saved state), with the
    conversions of its class's ``load``: an activation function named by its class path. Both names go
    through the registry (:func:`~unisent.encoders.st_files.module_classes`, ``activation_classes``): only
    the supported Sentence Transformers modules and torch's activations are ever built."""
    cls = resolve(
        type_path, module_classes(), source=source, field=f"{field}.type", what="Sentence Transformers module"
    )
    if cls.__name__ not in SUPPORTED_MODULES:
        raise SentenceTransformersModuleError(
            f"{source}: {field}.type {type_path!r} cannot be represented by unisent (it runs "
            f"{', '.join(SUPPORTED_MODULES)} after a Transformer)"
        )
    if not isinstance(config, dict):
        raise SentenceTransformersModuleError(f"{source}: {field}.config must be a JSON object, got {config!r:.80}")
    config = dict(config)
    activation = config.get("activation_function")
    if isinstance(activation, str):
        activation_cls = resolve(
            activation,
            activation_classes(),
            source=source,
            field=f"{field}.config.activation_function",
            what="torch activation",
        )
        config["activation_function"] = activation_cls()
    accepted = set(inspect.signature(cls).parameters)
    try:
        return cls(**{k: v for k, v in config.items() if k in accepted})
    except (TypeError, ValueError) as err:
        raise SentenceTransformersModuleError(f"{source}: {field}.config: {type(err).__name__}: {err}") from None


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
        source = str(Path(location, UNISENT_CONFIG)) if saved_by_unisent else f"{location}/modules.json"
        for i, entry in enumerate(entries):
            field = f"sentence_transformers.modules[{i}]"
            if not isinstance(entry, dict):
                raise SentenceTransformersModuleError(f"{source}: {field} must be a JSON object, got {entry!r:.80}")
            if saved_by_unisent:
                module = _instantiate(entry.get("type"), entry.get("config"), source=source, field=field)
            else:
                cls = resolve(
                    entry.get("type"),
                    module_classes(),
                    source=source,
                    field=f"{field}.type",
                    what="Sentence Transformers module",
                )
                subfolder = entry.get("path") or ""
                inside(location, subfolder, source=source, field=f"{field}.path")  # no path out of the directory
                module = cls.load(location, subfolder=subfolder, local_files_only=local_files_only(location))
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
