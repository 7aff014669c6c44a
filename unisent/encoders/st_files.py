"""What a Sentence Transformers model's files declare, read without running it, and the ``sentence-transformers`` pooler
that runs its modules after the ``Transformer`` (so ``unisent.load(DIR)`` encodes as ``SentenceTransformer(DIR)``). What
unisent cannot represent is a one-line
[`SentenceTransformersModuleError`][unisent.encoders.SentenceTransformersModuleError], never a silent fallback to
another pooling."""

from __future__ import annotations

import inspect
import json
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, cast

from torch import nn

from ..inference.base import STModule
from ..io.model_files import check_fits, inside, read_model_json, weight_shapes
from ..io.registry import RegistryError, fixed_names, resolve
from .config import UNISENT_CONFIG
from .loading import _hub_kwargs, _offline, resolve_model_location
from .poolers import Pooler, register_pooler

__all__ = [
    "SentenceTransformersModuleError",
    "SentenceTransformersPooler",
    "activation_classes",
    "module_classes",
    "read_sentence_transformers",
    "set_lowercase",
    "split_normalize",
]

#: The modules after the ``Transformer`` that unisent runs (they read only token states, mask, layers).
SUPPORTED_MODULES = ("Pooling", "Dense", "Normalize", "WeightedLayerPooling", "LayerNorm", "Dropout")
#: ``sentence_bert_config.json`` keys that unisent applies; others must hold their default.
_TRANSFORMER_KEYS = {"max_seq_length", "do_lower_case"}
_TRANSFORMER_DEFAULTS: dict[str, Any] = {
    "model_args": {},
    "tokenizer_args": {},
    "config_args": {},
    "model_kwargs": {},
    "processor_kwargs": {},
    "config_kwargs": {},
    "processing_kwargs": {},
    "transformer_task": "feature-extraction",
    "modality_config": None,
    "unpad_inputs": None,
    "query_length": None,
    "document_length": None,
    "query_expansion": None,
    "tokenizer_name_or_path": None,
    "cache_dir": None,
    "backend": "torch",
    "module_output_name": "token_embeddings",
}
#: the text modality as Sentence Transformers 5+ writes it (the only one unisent runs)
_TEXT_MODALITY = {"text": {"method": "forward", "method_output_name": "last_hidden_state"}}
SIMILARITY_FUNCTIONS = ("cosine", "dot", "euclidean", "manhattan")


class SentenceTransformersModuleError(RegistryError):
    """A Sentence Transformers model declares something unisent cannot represent (one line: file, module, field)."""


def local_files_only(location: str) -> bool:
    """Whether Sentence Transformers' readers must stay in the local cache (offline, or the hub unreachable)."""
    return _offline() or bool(_hub_kwargs(location).get("local_files_only"))


def _file(location: str, filename: str, subfolder: str = "") -> str | None:
    """A file of a directory or hub id (local, else the hub cache), or None. A local directory is read here, as
    Sentence Transformers' ``load_file_path`` reads it, without importing Sentence Transformers (4-5 s): loading a
    plain Hugging Face directory needs none of it."""
    if Path(location).expanduser().is_dir():
        local = Path(location).expanduser() / subfolder / filename
        return str(local) if local.exists() else None
    from sentence_transformers.util import load_file_path

    return load_file_path(location, filename, subfolder=subfolder, local_files_only=local_files_only(location))


def _module_path(location: str, entry: dict, where: str) -> str:
    """A ``modules.json`` entry's ``path`` (its sub-folder), which must lie inside the model's directory."""
    path = entry.get("path") or ""
    file, _, module = where.partition(": ")
    inside(location, path, source=file, field=f"{module}: path")
    return str(path)


def _check_module_sizes(location: str, cls: type, config: dict, path: str) -> None:
    """A module's ``config.json`` sizes against its weights (``check_fits``)."""
    if not path:
        return
    folder = Path(location, path)
    weights = next((folder / n for n in ("model.safetensors", "pytorch_model.bin") if (folder / n).is_file()), None)
    settings = {k: v for k, v in config.items() if k != "activation_function"}
    check_fits(  # without weights, what it describes is checked against none: a Dense of 30M outputs is refused
        lambda: cls(**settings),
        weight_shapes(weights) if weights else {},
        config_file=folder / "config.json",
        settings=settings,
        weights_file=weights or f"{folder} (no weights file)",
    )


def _module_config(cls: type, config: Any, where: str) -> dict[str, Any]:
    """A module's configuration (``where``: file and field): a JSON object of the keys ``cls`` saves
    (``config_keys``), its required ones present; else one ``SentenceTransformersModuleError`` line."""
    if not isinstance(config, dict):
        raise SentenceTransformersModuleError(f"{where} must be a JSON object, got {config!r:.80}")
    parameters = inspect.signature(cls).parameters
    known = set(getattr(cls, "config_keys", None) or parameters)
    unknown = sorted(set(config) - known)
    missing = [n for n, p in parameters.items() if p.default is p.empty and p.kind != p.VAR_KEYWORD and n not in config]
    if unknown or missing:
        what = f"unknown key {unknown[0]!r}" if unknown else f"missing key {missing[0]!r}"
        keys = ", ".join(sorted(known))
        raise SentenceTransformersModuleError(f"{where}: {what} for {cls.__name__} (its keys: {keys})")
    return config


def module_classes() -> Mapping[str, type]:
    """The registry of ``modules.json`` / ``unisent_encoder.json`` module ``type``: Sentence Transformers'
    own module classes."""
    import torch

    try:
        from sentence_transformers.sentence_transformer import modules
    except ImportError:  # Sentence Transformers 5
        from sentence_transformers import models as modules  # pyright: ignore[reportAttributeAccessIssue]  # ST 5 only
    found = [o for o in vars(modules).values() if isinstance(o, type) and issubclass(o, torch.nn.Module)]
    return fixed_names("sentence_transformers.", found)


def activation_classes() -> Mapping[str, type]:
    """The registry of a ``Dense`` module's ``activation_function``: torch's activation modules and ``Identity``."""
    import torch
    from torch.nn.modules import activation

    skip = {"Module", "NonDynamicallyQuantizableLinear", "MultiheadAttention"}
    found = [o for n, o in vars(activation).items() if isinstance(o, type) and issubclass(o, torch.nn.Module)]
    return fixed_names("torch.", [o for o in found if o.__name__ not in skip] + [torch.nn.Identity])


def _module_type(type_path: Any, source: str, field: str) -> type:
    """A module ``type`` through ``module_classes``: a ``RegistryError`` naming ``source`` and ``field`` otherwise."""
    return resolve(type_path, module_classes(), source=source, field=field, what="Sentence Transformers module")


def _activation(name: Any, source: str, field: str) -> type:
    """A ``Dense`` module's ``activation_function`` through ``activation_classes`` (nothing is imported)."""
    return resolve(name, activation_classes(), source=source, field=field, what="torch activation")


def _module_class(type_path: Any, where: str) -> type:
    """The class of a ``modules.json`` entry, through ``module_classes`` (nothing else is imported)."""
    file, _, module = where.partition(": ")
    try:
        return _module_type(type_path, file, f"{module}: type")
    except RegistryError as err:
        raise SentenceTransformersModuleError(str(err)) from None


def _check_transformer(location: str, entry: dict, where: str) -> dict[str, Any]:
    try:
        from sentence_transformers.base.modules.transformer import Transformer
    except ImportError:  # Sentence Transformers 5
        from sentence_transformers.models import Transformer  # pyright: ignore[reportMissingImports]  # ST 5 only

    cls = _module_class(entry.get("type"), where)
    if not (isinstance(cls, type) and issubclass(cls, Transformer)):
        raise SentenceTransformersModuleError(
            f"{where}: the first module must be a Transformer, got {entry.get('type')!r}; unisent cannot represent it"
        )
    path = _module_path(location, entry, where)
    config_file = _file(location, "sentence_bert_config.json", path)
    config = read_model_json(config_file, dict) if config_file else {}
    name = f"{Path(location, path, 'sentence_bert_config.json')}"
    for key, value in config.items():
        if key in _TRANSFORMER_KEYS:
            continue
        if key in ("config_args", "config_kwargs") and set(value or {}) <= {"output_hidden_states"}:
            continue  # the hidden states a WeightedLayerPooling needs: the pooler asks for them itself
        if key in _TRANSFORMER_DEFAULTS and value in (_TRANSFORMER_DEFAULTS[key], None, {}):
            continue
        if key == "modality_config" and value == _TEXT_MODALITY:
            continue
        raise SentenceTransformersModuleError(
            f"{name}: {key}={json.dumps(value)} of the Transformer cannot be represented by unisent "
            f"(it applies max_seq_length and do_lower_case only)"
        )
    if path:
        raise SentenceTransformersModuleError(
            f"{where}: the Transformer lies in the sub-folder {path!r}; unisent loads the backbone from the root only"
        )
    return config


def read_sentence_transformers(model: str) -> dict[str, Any]:
    """What a Sentence Transformers directory or hub id declares beyond its backbone (``{}`` without a
    ``modules.json``): ``{"modules": [{"type", "path", "config"}...], "max_seq_length", "do_lower_case", "prompts",
    "default_prompt_name",
    "similarity_fn_name"}``; [`SentenceTransformersModuleError`][unisent.encoders.SentenceTransformersModuleError] for
    what unisent cannot represent."""
    location = resolve_model_location(model)
    modules_file = _file(location, "modules.json")
    if modules_file is None:
        return {}
    entries = read_model_json(modules_file)
    if not isinstance(entries, list) or not entries or not all(isinstance(e, dict) for e in entries):
        raise SentenceTransformersModuleError(f"{location}/modules.json: expected a non-empty list of modules")
    where = [
        f"{location}/modules.json: module {e.get('idx', i)} ({e.get('path') or e.get('type')})"
        for i, e in enumerate(entries)
    ]
    transformer = _check_transformer(location, entries[0], where[0])
    length = transformer.get("max_seq_length")
    if length is not None and not (type(length) is int and length > 0):
        file = Path(location, "sentence_bert_config.json")
        raise SentenceTransformersModuleError(f"{file}: max_seq_length={length!r:.40} is not a positive integer")
    modules = []
    for entry, at in zip(entries[1:], where[1:]):
        cls = _module_class(entry.get("type"), at)
        if cls.__name__ not in SUPPORTED_MODULES:
            raise SentenceTransformersModuleError(
                f"{at}: {cls.__name__} cannot be represented by unisent (it runs {', '.join(SUPPORTED_MODULES)} "
                "after a Transformer)"
            )
        path = _module_path(location, entry, at)
        config = cls.load_config(location, subfolder=path, local_files_only=local_files_only(location))
        config = _module_config(cls, config, f"{Path(location, path, 'config.json')}")
        if "activation_function" in config:  # Sentence Transformers' Dense.load imports it: the registry first
            _activation(config["activation_function"], str(Path(location, path, "config.json")), "activation_function")
        if Path(location).is_dir():
            _check_module_sizes(location, cls, config, path)
        modules.append({"type": entry["type"], "path": path, "config": json.loads(json.dumps(config))})
    st_config_file = _file(location, "config_sentence_transformers.json")
    st_config = read_model_json(st_config_file, dict) if st_config_file else {}
    kind = st_config.get("model_type", "SentenceTransformer")
    if kind != "SentenceTransformer":
        raise SentenceTransformersModuleError(
            f"{location}/config_sentence_transformers.json: model_type={kind!r} cannot be represented by unisent "
            "(a SentenceTransformer embedding model is needed)"
        )
    similarity = st_config.get("similarity_fn_name") or "cosine"
    if similarity not in SIMILARITY_FUNCTIONS:
        raise SentenceTransformersModuleError(
            f"{location}/config_sentence_transformers.json: similarity_fn_name={similarity!r} is not one of "
            f"{', '.join(SIMILARITY_FUNCTIONS)}"
        )
    if not isinstance(st_config.get("prompts") or {}, dict):
        raise SentenceTransformersModuleError(
            f"{location}/config_sentence_transformers.json: prompts must be a JSON object of name: text"
        )
    prompts = {str(k): str(v) for k, v in (st_config.get("prompts") or {}).items()}
    default_prompt = st_config.get("default_prompt_name")
    if default_prompt is not None and default_prompt not in prompts:
        raise SentenceTransformersModuleError(
            f"{location}/config_sentence_transformers.json: default_prompt_name={default_prompt!r} is not one of "
            f"its prompts ({', '.join(prompts) or 'none'})"
        )
    return {
        "modules": modules,
        "max_seq_length": transformer.get("max_seq_length") or _tokenizer_max_length(location),
        "do_lower_case": bool(transformer.get("do_lower_case", False)),
        "prompts": prompts,
        "default_prompt_name": default_prompt,
        "similarity_fn_name": similarity,
    }


def _tokenizer_max_length(location: str) -> int | None:
    """Without ``max_seq_length`` (Sentence Transformers 5+): the tokenizer's ``model_max_length`` capped
    by ``max_position_embeddings``, as Sentence Transformers truncates."""
    tokenizer_file = _file(location, "tokenizer_config.json")
    declared = (read_model_json(tokenizer_file, dict) if tokenizer_file else {}).get("model_max_length")
    config_file = _file(location, "config.json")
    positions = (read_model_json(config_file, dict) if config_file else {}).get("max_position_embeddings")
    found = [v for v in (declared, positions) if isinstance(v, int) and 0 < v < 1_000_000]
    return min(found) if found else None


def split_normalize(spec: dict[str, Any]) -> tuple[list[dict[str, Any]], bool]:
    """``(modules without a trailing Normalize, whether there was one)``: that ``Normalize`` becomes
    ``EncoderConfig.normalize``, so training losses and heads see the vectors before it."""
    modules = list(spec.get("modules") or [])
    if modules and modules[-1]["type"].rsplit(".", 1)[-1] == "Normalize":
        config = modules[-1]["config"]
        if config.get("module_input_name", "sentence_embedding") == "sentence_embedding" and (
            config.get("module_output_name") in (None, "sentence_embedding")
        ):
            return modules[:-1], True
    return modules, False


def set_lowercase(tokenizer) -> None:
    """Apply ``do_lower_case``: a ``Lowercase`` normaliser in front of a fast tokenizer's own."""
    from tokenizers.normalizers import Lowercase
    from tokenizers.normalizers import Sequence as NormalizerSequence

    if not getattr(tokenizer, "is_fast", False):
        raise SentenceTransformersModuleError(
            f"do_lower_case needs a fast tokenizer; {type(tokenizer).__name__} is not one"
        )
    normalizer = tokenizer.backend_tokenizer.normalizer
    parts = [*normalizer] if isinstance(normalizer, NormalizerSequence) else [normalizer] if normalizer else []
    if any(isinstance(part, Lowercase) for part in parts):
        return
    tokenizer.backend_tokenizer.normalizer = NormalizerSequence([Lowercase(), *parts])


def _instantiate(type_path: Any, config: Any, *, source: str, field: str) -> nn.Module:
    """A module built from its recorded configuration (weights come later from ``pooler.pt``); class
    and activation go through ``module_classes`` and ``activation_classes``."""
    cls = _module_type(type_path, source, f"{field}.type")
    if cls.__name__ not in SUPPORTED_MODULES:
        raise SentenceTransformersModuleError(
            f"{source}: {field}.type {type_path!r} cannot be represented by unisent (it runs "
            f"{', '.join(SUPPORTED_MODULES)} after a Transformer)"
        )
    config = dict(_module_config(cls, config, f"{source}: {field}.config"))
    if "activation_function" in config:
        activation = _activation(config["activation_function"], source, f"{field}.config.activation_function")
        config["activation_function"] = activation()
    try:
        return cls(**config)
    except (TypeError, ValueError) as err:
        raise SentenceTransformersModuleError(f"{source}: {field}.config: {type(err).__name__}: {err}") from None


@register_pooler("sentence-transformers")
class SentenceTransformersPooler(Pooler):
    """A Sentence Transformers model's modules after the ``Transformer`` (``SUPPORTED_MODULES``), as
    Sentence Transformers' own classes: loaded by ``configure``, or for a directory unisent saved,
    built from the recorded configuration (weights from ``pooler.pt``)."""

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
                cls = _module_type(entry.get("type"), source, f"{field}.type")
                subfolder = entry.get("path") or ""
                inside(location, subfolder, source=source, field=f"{field}.path")  # no path out of the directory
                module = cls.load(location, subfolder=subfolder, local_files_only=local_files_only(location))
            self.modules_.append(module)
            self.types.append(entry["type"])
        self.needs_hidden_states = any(t.endswith("WeightedLayerPooling") for t in self.types)
        dims = [get() for m in self.modules_ if (get := getattr(m, "get_embedding_dimension", None))]
        self.output_size = next((d for d in reversed(dims) if isinstance(d, int)), self.hidden_size)
        self.description = "Sentence Transformers modules: " + " -> ".join(self._labels())
        self._dry_run(source)

    def _dry_run(self, source: str) -> None:
        """The modules run once on zeros of the backbone's width: a chain without a ``Pooling``, or sizes that do
        not follow each other (``embedding_dimension: 1`` after a 32-wide backbone) are one line now, not at the
        first ``encode``."""
        import torch

        states = torch.zeros(1, 2, self.hidden_size)
        layers = 1 + max([getattr(m, "num_hidden_layers", 0) for m in self.modules_] + [0])
        try:
            with torch.no_grad():
                out = self(states, torch.ones(1, 2, dtype=torch.long), (states,) * layers)
            if out.dim() != 2 or out.shape[-1] != self.output_size:
                raise ValueError(f"they give vectors of shape {list(out.shape)}, not {self.output_size} wide")
        except Exception as err:  # noqa: BLE001 - what the modules' own code raises, as one line naming the file
            first = (str(err).strip().splitlines() or [""])[0]
            raise SentenceTransformersModuleError(
                f"{source}: its modules do not run on the backbone's {self.hidden_size}-wide token states "
                f"({type(err).__name__}: {first:.200})"
            ) from None

    def _labels(self) -> list[str]:
        labels = []
        for module in cast("Iterable[Any]", self.modules_):  # Sentence Transformers' modules, told apart by name
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
        for type_path, module in zip(self.types, cast("Iterable[Any]", self.modules_)):
            state = {k: v.detach().cpu().contiguous() for k, v in module.state_dict().items()}
            modules.append(STModule(type(module).__name__, type_path, module.get_config_dict(), state or None))
        return modules

    def huggingface_code(self, in_backbone=False):
        from ..inference.base import NotExportableError

        raise NotExportableError(
            "a Sentence Transformers model's modules have no transformers recipe; export it as sentence-transformers"
        )
