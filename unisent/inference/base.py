"""The contract of an inference model: how it saves, loads and exports itself.

Every model that ``unisent.load`` returns (the plain [`Encoder`][unisent.encoders.Encoder],
[`GaussianEncoder`][unisent.models.GaussianEncoder], [`PCREncoder`][unisent.models.PCREncoder], a user's own head)
derives from [`InferenceModel`][unisent.inference.InferenceModel] and declares, in its own class:

- **saving and loading**: ``save_pretrained(directory)`` writes its files and a record
  (``unisent_model.json``: its registered type and class path, see ``unisent.inference.model_types``);
  ``from_pretrained(directory)`` reads them back;
- **Sentence Transformers export**: the modules after the ``Transformer``
  ([`InferenceModel.sentence_transformers_modules`][unisent.inference.InferenceModel.sentence_transformers_modules],
  e.g. a pooler's ``Pooling`` and ``Dense``, a head's ``Dense``); the generic writer here lays out ``modules.json`` and
  the module folders;
- **the model card**: its summary rows ([`InferenceModel.card_facts`][unisent.inference.InferenceModel.card_facts]), its
  usage text and tags;
- **the export check**: how the written files are loaded back and compared with ``encode``;
- **ONNX export**: the module an ONNX export traces
  ([`InferenceModel.onnx_graph`][unisent.inference.InferenceModel.onnx_graph], an ``OnnxGraph``), with the pooling, the
  normalisation and any head inside the graph.

This module imports only the foundation ([`unisent.io`][unisent.io]), so every layer above can build on it.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Generator, Sequence
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, cast

import numpy as np
import torch
from torch import Tensor, nn

from ..io import write_json

__all__ = [
    "HUGGINGFACE",
    "MODEL_RECORD",
    "ONNX",
    "SENTENCE_TRANSFORMERS",
    "InferenceModel",
    "NotExportableError",
    "OnnxGraph",
    "STModule",
    "max_abs_diff",
    "save_at_inference_length",
    "set_inference_length",
    "share_files",
    "to_tensor",
]

#: The record every ``save_pretrained`` writes: ``{"type": registered name, "class_path": ...}``.
MODEL_RECORD = "unisent_model.json"
#: The export formats the model contract knows.
SENTENCE_TRANSFORMERS = "sentence-transformers"
HUGGINGFACE = "huggingface"
ONNX = "onnx"

_ST_USAGE_SENTENCES = '["A man is playing a guitar.", "Someone plays music."]'


class NotExportableError(TypeError):
    """A model (or its pooler) declares no way to export itself to the asked format."""


@dataclass
class STModule:
    """One Sentence Transformers module after the ``Transformer``.

    Attributes:
        name: the folder stem (``Pooling`` -> ``1_Pooling``) and the module's name in the card.
        class_path: the Sentence Transformers class (``sentence_transformers.models.Dense``).
        config: its ``config.json``.
        weights: its ``model.safetensors`` tensors, if it has weights.
        label: how the model card lists it (default: ``name``), e.g. ``Dense (mean)``.
    """

    name: str
    class_path: str
    config: dict[str, Any]
    weights: dict[str, torch.Tensor] | None = None
    label: str = ""

    @classmethod
    def dense(
        cls, linear: nn.Linear, activation: str = "torch.nn.modules.linear.Identity", label: str = ""
    ) -> STModule:
        """A ``Dense`` module holding ``linear`` (weights copied to the CPU) and ``activation``."""
        weights = {"linear.weight": linear.weight.detach().cpu().contiguous()}
        bias = cast("Tensor | None", linear.bias)  # None for Linear(bias=False), which torch types as a Parameter
        if bias is not None:
            weights["linear.bias"] = bias.detach().cpu().contiguous()
        config = {
            "in_features": linear.in_features,
            "out_features": linear.out_features,
            "bias": bias is not None,
            "activation_function": activation,
        }
        return cls("Dense", "sentence_transformers.models.Dense", config, weights, label)


@dataclass
class OnnxGraph:
    """What an ONNX export of a model traces
    ([`InferenceModel.onnx_graph`][unisent.inference.InferenceModel.onnx_graph]).

    Attributes:
        module: ``forward(input_ids, attention_mask[, token_type_ids])`` (each (batch, seq) int64) -> a
            tuple of float tensors, named by ``outputs``; traced with eager attention.
        outputs: the output names. The first is ``last_hidden_state`` (batch, seq, hidden), the token
            vectors that Sentence Transformers' ONNX backend pools with the directory's own modules;
            ``sentence_embedding`` (batch, dim) is what the model's ``encode`` returns (pooled, through
            any head, normalised where the model normalises); a Gaussian model adds ``variance``.
        token_type_ids: whether ``module`` takes ``token_type_ids`` (the backbone has them: BERT).
    """

    module: nn.Module
    outputs: tuple[str, ...]
    token_type_ids: bool = False


def share_files(directory: str | os.PathLike[str], every_file: bool = False) -> None:
    """Give the files under ``directory`` the usual permissions (``0o666`` minus the umask, as ``open``
    creates them; folders ``0o777`` minus the umask).

    ``safetensors``' ``save_file`` (the backbone's ``model.safetensors``, a ``Dense`` module's weights)
    creates its file with ``0o600``, unlike every other file of a saved model. By default only such
    private files (mode ``0o600``) are widened, so that a user's own file in the directory keeps its
    mode; ``every_file`` sets every file and folder (a fresh export directory).
    """
    umask = os.umask(0)
    os.umask(umask)
    file_mode, dir_mode = 0o666 & ~umask, 0o777 & ~umask
    for path in Path(directory).rglob("*"):
        if path.is_symlink():
            continue
        mode = path.stat().st_mode & 0o777
        if path.is_dir():
            if every_file and mode != dir_mode:
                path.chmod(dir_mode)
        elif mode != file_mode and (every_file or mode == 0o600):
            path.chmod(file_mode)


def max_abs_diff(a: Any, b: Any) -> float:
    """Largest absolute difference of two (n, d) arrays; ``inf`` when the shapes differ."""
    a, b = torch.as_tensor(a).float(), torch.as_tensor(b).float()
    if a.shape != b.shape:
        return float("inf")
    return float((a - b).abs().max())


class InferenceModel(nn.Module):
    """Base class of every inference model: ``encode``, save/load, and its own export declarations.

    A subclass implements [`encode`][unisent.inference.InferenceModel.encode] (its signature),
    [`save_pretrained`][unisent.inference.InferenceModel.save_pretrained] (ending with
    [`write_model_record`][unisent.inference.InferenceModel.write_model_record]),
    [`from_pretrained`][unisent.inference.InferenceModel.from_pretrained] and
    [`card_facts`][unisent.inference.InferenceModel.card_facts]; to export to Sentence Transformers it lists its modules
    in [`sentence_transformers_modules`][unisent.inference.InferenceModel.sentence_transformers_modules] (or overrides
    [`write_sentence_transformers_layout`][unisent.inference.InferenceModel.write_sentence_transformers_layout] for
    another layout). Registering it with [`unisent.inference.register_model`][unisent.inference.register_model] gives it
    a stable type name for ``unisent.load``.

    Class attributes:
        model_type: the registered name (set by ``register_model``); recorded in ``unisent_model.json``.
        export_formats: the formats [`unisent.export.export_model`][unisent.export.export_model] may write for this
            class.
        card_tags: extra model card tags of this model type.
    """

    model_type: ClassVar[str] = ""
    #: whether the exporters' generic check applies (reload the directory, compare ``encode`` on probe
    #: sentences); a model whose ``encode`` needs more than sentences says False and checks itself in
    #: ``export_checks`` (``RetrofittedEncoder``: graphs)
    generic_export_check: ClassVar[bool] = True
    export_formats: ClassVar[tuple[str, ...]] = (SENTENCE_TRANSFORMERS,)
    card_tags: ClassVar[tuple[str, ...]] = ()

    def encode(
        self,
        sentences: Sequence[str],
        batch_size: int = 64,
        *,
        normalize: bool = False,
        precision: str = "auto",
        show_progress_bar: bool = False,
    ) -> Tensor:
        """The one signature of every model type's ``encode`` (a type may add keywords): float32 (n, d) on the CPU,
        rows in input order; ``precision``: ``auto``, ``fp32`` or ``bf16`` (``unisent.hardware``). By default
        [`embed`][unisent.inference.InferenceModel.embed]'s vectors, L2-normalised with ``normalize``."""
        out = self.embed(sentences, batch_size, precision, show_progress_bar)
        return nn.functional.normalize(out, dim=-1) if normalize else out

    def embed(self, sentences: Sequence[str], batch_size: int, precision: str, show_progress_bar: bool) -> Tensor:
        """The vectors [`encode`][unisent.inference.InferenceModel.encode] returns before ``normalize`` (a type that
        overrides ``encode`` needs none)."""
        raise NotImplementedError(f"{type(self).__name__} implements neither encode nor embed")

    # ------------------------------------------------------------------------------ save / load
    def save_pretrained(self, directory: str | os.PathLike[str]) -> Path:  # pragma: no cover - abstract
        """Write the model to ``directory`` (created); end with
        [`write_model_record`][unisent.inference.InferenceModel.write_model_record]."""
        raise NotImplementedError(f"{type(self).__name__} does not implement save_pretrained")

    @classmethod
    def from_pretrained(cls, directory: str | os.PathLike[str]) -> InferenceModel:  # pragma: no cover - abstract
        """Load a directory written by [`save_pretrained`][unisent.inference.InferenceModel.save_pretrained]."""
        raise NotImplementedError(f"{cls.__name__} does not implement from_pretrained")

    @classmethod
    def from_name(cls, name: str) -> InferenceModel:
        """Build the model from a name that is no saved directory (a preset, a hub id): what
        ``unisent.load`` does for the default type (the plain encoder); other types have no names."""
        raise NotImplementedError(f"{cls.__name__} cannot be built from a name ({name!r}); give a saved directory")

    @classmethod
    def is_saved_in(cls, directory: str | os.PathLike[str]) -> bool:
        """Whether ``directory`` holds this type although it has no ``unisent_model.json`` (directories
        written before the record existed); ``False`` by default."""
        return False

    def write_model_record(self, directory: str | os.PathLike[str]) -> None:
        """Write ``unisent_model.json``: this class's registered type and its class path; and give the
        saved files the usual permissions (``share_files``: ``model.safetensors`` is written
        ``0o600`` by ``safetensors``, every other file ``0o644`` under the usual umask)."""
        cls = type(self)
        record = {"type": cls.model_type or None, "class_path": f"{cls.__module__}.{cls.__qualname__}"}
        write_json(Path(directory) / MODEL_RECORD, record)
        share_files(directory)

    # ------------------------------------------------------------------------------ maximum length
    @contextmanager
    def export_max_length(
        self, max_length: int | None = None, base_model: str | None = None
    ) -> Generator[tuple[int, int] | None, None, None]:
        """While exporting: tokenise up to the length the export keeps, restored afterwards.

        Yields ``(length the model had, length of the export)``, or None for a model without a
        maximum length of its own (the default here; a model with an encoder overrides it, see
        ``unisent.encoders.export_declarations.EncoderModel``).

        Args:
            max_length: the length asked for (``unisent export --max-seq-length``); None: the model's.
            base_model: the backbone the model was trained from (a preset name, hub id or directory).

        Raises:
            ValueError: a ``max_length`` for a model that has none to set.
        """
        if max_length is not None:
            raise ValueError(f"{type(self).__name__} has no maximum sequence length to set")
        yield None

    # ------------------------------------------------------------------------------ model card
    def card_facts(self) -> list[tuple[str, str]]:  # pragma: no cover - abstract
        """``(label, value)`` rows of the model card's summary table (architecture, pooling, heads...)."""
        raise NotImplementedError(f"{type(self).__name__} does not implement card_facts")

    def unisent_usage(self) -> str:
        """Markdown: loading and encoding with unisent (the closing part of every usage section)."""
        return f"""With unisent (same embeddings; `unisent encode` streams large files):

```python
import unisent

model = unisent.load("path/to/this/directory")
embeddings = model.encode({_ST_USAGE_SENTENCES})
```
"""

    # ------------------------------------------------------------------------------ sentence-transformers
    def sentence_transformers_modules(self) -> list[STModule]:
        """The Sentence Transformers modules after the ``Transformer``, in order."""
        raise NotExportableError(f"{type(self).__name__} declares no Sentence Transformers modules")

    def sentence_transformers_config(self) -> dict[str, Any]:
        """``sentence_bert_config.json`` (``max_seq_length``, ``config_args``...)."""
        raise NotExportableError(f"{type(self).__name__} declares no Sentence Transformers config")

    def save_sentence_transformers_root(self, out: Path) -> None:
        """The files beside ``modules.json`` (the ``Transformer``'s and unisent's): by default
        [`save_pretrained`][unisent.inference.InferenceModel.save_pretrained], so that ``unisent.load(DIR)`` returns
        this model again."""
        self.save_pretrained(out)

    @property
    def similarity_fn_name(self) -> str:
        """The similarity this model's ``encode`` vectors are compared with (Sentence Transformers'
        ``similarity_fn_name``: ``cosine``, ``dot``, ``euclidean`` or ``manhattan``); ``cosine`` by default."""
        return "cosine"

    def sentence_transformers_model_config(self) -> dict[str, Any]:
        """``config_sentence_transformers.json``: prompts, default prompt and
        [`similarity_fn_name`][unisent.inference.InferenceModel.similarity_fn_name]."""
        return {"prompts": {}, "default_prompt_name": None, "similarity_fn_name": self.similarity_fn_name}

    def write_sentence_transformers_layout(self, out: Path, write: Callable[[InferenceModel, Path], None]) -> bool:
        """A model whose Sentence Transformers export is not the usual layout writes it here and returns True
        (``write(model, directory)`` exports an inner model the usual way: a retrofitted model's ``text/`` and
        ``amr/``); False (the default): the exporter writes the usual layout
        ([`save_sentence_transformers_root`][unisent.inference.InferenceModel.save_sentence_transformers_root], then the
        modules this model declares; ``unisent.export.formats.write_sentence_transformers``)."""
        return False

    def sentence_transformers_facts(self) -> list[tuple[str, str]]:
        """The card's rows for a Sentence Transformers export:
        [`card_facts`][unisent.inference.InferenceModel.card_facts] and the module chain."""
        chain = " -> ".join(["Transformer"] + [m.label or m.name for m in self.sentence_transformers_modules()])
        return self.card_facts() + [("Sentence Transformers modules", chain)]

    def sentence_transformers_note(self) -> str:
        """Markdown shown after the Sentence Transformers snippet (how an unusual part is exported)."""
        return ""

    def sentence_transformers_usage(self) -> str:
        """Markdown of the card's usage section for a Sentence Transformers export."""
        note = self.sentence_transformers_note().strip()
        return f"""With [Sentence Transformers](https://www.sbert.net) (3 or newer):

```python
from sentence_transformers import SentenceTransformer

model = SentenceTransformer("path/to/this/directory")
embeddings = model.encode({_ST_USAGE_SENTENCES})
```
{chr(10) + note + chr(10) if note else ""}
{self.unisent_usage()}"""

    # ------------------------------------------------------------------------------ export checks
    def export_checks(self, out: Path, sentences: Sequence[str], format: str) -> list[tuple[float, str]]:
        """Checks of an export of ``format`` beyond the exporters' generic one (``unisent.load`` and, for Sentence
        Transformers, ``SentenceTransformer`` of the directory against
        [`encode`][unisent.inference.InferenceModel.encode], in ``unisent.export.formats``):
        ``(largest absolute difference, how it was checked)`` each.
        Default: none."""
        return []

    # ------------------------------------------------------------------------------ onnx
    def onnx_graph(self) -> OnnxGraph:
        """The module an ONNX export traces (only types that list ``onnx`` in ``export_formats``): the
        backbone, the pooling and any head, so that the ONNX file's ``sentence_embedding`` output is
        [`encode`][unisent.inference.InferenceModel.encode]'s vectors (see ``OnnxGraph``)."""
        raise NotExportableError(f"{type(self).__name__} declares no ONNX graph")

    # ------------------------------------------------------------------------------ huggingface
    def write_huggingface(self, out: Path) -> None:
        """Write a ``transformers`` directory (``AutoModel``) plus unisent's files (only types that list
        ``huggingface`` in ``export_formats``)."""
        raise NotExportableError(f"{type(self).__name__} declares no huggingface export")

    def huggingface_usage(self) -> str:
        """Markdown of the card's usage section for a ``huggingface`` export."""
        raise NotExportableError(f"{type(self).__name__} declares no huggingface export")


def to_tensor(output: Any, n_rows: int, source: str = "model.encode") -> Tensor:
    """Convert an encoder's output (tensor, array or list of rows) to a float32 CPU tensor (n_rows, d).

    Raises:
        ValueError: the output is not a matrix with ``n_rows`` rows.
    """
    if isinstance(output, (list, tuple)) and output and isinstance(output[0], (Tensor, np.ndarray)):
        output = torch.stack([torch.as_tensor(row) for row in cast("Sequence[Any]", output)])
    tensor = torch.as_tensor(output).detach().cpu().float()
    if tensor.ndim != 2 or tensor.shape[0] != n_rows:
        raise ValueError(f"{source} returned shape {tuple(tensor.shape)} for {n_rows} sentences; want (n, d)")
    return tensor


def save_at_inference_length(model: nn.Module, directory: str | os.PathLike[str]) -> tuple[Path, str]:
    """Save a run's inference model at its inference length, not its training one: ``config.max_length`` set to
    ``encoder.inference_max_length``, else the backbone's own limit, while it is written
    ([`InferenceModel.export_max_length`][unisent.inference.InferenceModel.export_max_length]). Returns the directory
    and a note on the lengths for the message (``"; inputs up to 256 tokens (trained at 32)"``; empty for a model
    without a length)."""
    choose = getattr(model, "export_max_length", None)
    with choose() if choose is not None else nullcontext() as lengths:
        saved = Path(cast(InferenceModel, model).save_pretrained(directory))  # or any module with its save_pretrained
    return saved, f"; inputs up to {lengths[1]} tokens (trained at {lengths[0]})" if lengths else ""


def set_inference_length(model: nn.Module, max_length: int | None = None) -> int | None:
    """Set ``model``'s maximum length for good: ``max_length``, else ``encoder.inference_max_length``, else the
    backbone's own (what ``save_at_inference_length`` saves); returns it (None: a model without a length, left as it
    is). ``unisent.load`` of a ``.ckpt`` applies it, so that the checkpoint and the run's saved encoder encode alike.

    Raises:
        ValueError: ``max_length`` is not positive or exceeds the backbone's positions, or is given for a
            model without a maximum length.
    """
    choose = getattr(model, "export_max_length", None)
    if choose is None:
        if max_length is not None:
            raise ValueError(f"{type(model).__name__} has no maximum sequence length to set")
        return None
    with choose(max_length) as lengths:
        pass
    if lengths is None:
        return None
    cast(Any, model.config).max_length = lengths[1]  # a model with a length: its config has max_length
    return lengths[1]
