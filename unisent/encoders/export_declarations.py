"""How the plain [`Encoder`][unisent.encoders.Encoder] is exported and described (``EncoderModel``,
its base; most of it is asked of the pooler): ``sentence-transformers`` (the pooler's modules, then
``Normalize``, built-in classes only), ``huggingface`` (the pooling as ``transformers`` code in the card,
[`hf_usage_code`][unisent.export.hf_usage_code]; ``cls_mlp`` may be written into the backbone's own pooler, as SimCSE's
``simcse_to_huggingface.py`` does) and ``onnx`` (``EncoderOnnxGraph``).
"""

from __future__ import annotations

import inspect
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

import torch
from torch import nn

from ..inference.base import (
    HUGGINGFACE,
    ONNX,
    SENTENCE_TRANSFORMERS,
    InferenceModel,
    NotExportableError,
    OnnxGraph,
    STModule,
)
from ..io.model_files import looks_like_path, read_model_json
from .poolers import Pooler, build_pooler
from .presets import PRESETS, resolve_preset_path

if TYPE_CHECKING:
    from transformers import PreTrainedModel, PreTrainedTokenizerBase

    from .config import EncoderConfig

__all__ = ["EncoderModel", "EncoderOnnxGraph", "hf_usage_code"]


def hf_usage_code(pooler: str | Pooler, max_length: int, mlp_in_backbone: bool = False, normalize: bool = False) -> str:
    """Runnable ``transformers`` code, loading ``model_dir = "."`` and defining ``embed(sentences)``, that
    reproduces unisent's embeddings for ``pooler`` (a name or an instance). ``mlp_in_backbone``: the pooler
    was written into the backbone's own pooler; ``normalize``: ``embed`` L2-normalises."""
    if isinstance(pooler, str):
        pooler = build_pooler(pooler, 1)  # the recipe is the same for every size
    setup, body = pooler.huggingface_code(in_backbone=mlp_in_backbone)
    call = "model(**batch, output_hidden_states=True)" if pooler.needs_hidden_states else "model(**batch)"
    pool = "pool" if normalize else "embed"
    normalizing = (
        [
            "",
            "",
            "def embed(sentences: list[str]) -> torch.Tensor:",
            "    return torch.nn.functional.normalize(pool(sentences), p=2, dim=-1)  # the model's L2 normalisation",
        ]
        if normalize
        else []
    )
    lines = [
        "import torch",
        "from transformers import AutoModel, AutoTokenizer",
        "",
        'model_dir = "."  # this directory (or the hub id it was uploaded to)',
        "tokenizer = AutoTokenizer.from_pretrained(model_dir)",
        "model = AutoModel.from_pretrained(model_dir).eval()",
        *setup,
        "",
        "",
        f"def {pool}(sentences: list[str]) -> torch.Tensor:",
        "    batch = tokenizer(sentences, padding=True, truncation=True, "
        f'max_length={max_length}, return_tensors="pt")',
        "    with torch.no_grad():",
        f"        out = {call}",
        *("    " + line for line in body),
        *normalizing,
        "",
        "",
        'embeddings = embed(["A man is playing a guitar.", "Someone plays music."])',
    ]
    return "\n".join(lines) + "\n"


def _st_max_seq_length(model: str) -> int | None:
    """``max_seq_length`` of ``model``'s ``sentence_bert_config.json`` (a preset, a directory, or a hub id
    in the local cache, never the network), else None."""
    location: str | None = model
    if model in PRESETS:
        try:
            location = resolve_preset_path(PRESETS[model])
        except ImportError:
            return None
    path = Path(location).expanduser() / "sentence_bert_config.json"
    if not path.parent.is_dir():
        if looks_like_path(location):
            return None
        try:
            from huggingface_hub import try_to_load_from_cache

            cached = try_to_load_from_cache(location, "sentence_bert_config.json")
        except Exception:  # noqa: BLE001 - not a valid repo id: no cached configuration
            return None
        if not isinstance(cached, str):
            return None
        path = Path(cached)
    try:
        value = read_model_json(path, dict)["max_seq_length"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return value if isinstance(value, int) and value > 0 else None


class EncoderModel(InferenceModel):
    """Base of [`Encoder`][unisent.encoders.Encoder]: its card, its exports and their checks (uses the
    encoder's ``backbone``, ``tokenizer``, ``pooler``, ``config``, ``hidden_size`` and ``save_pretrained``)."""

    export_formats: ClassVar[tuple[str, ...]] = (SENTENCE_TRANSFORMERS, HUGGINGFACE, ONNX)
    pooler: Pooler
    config: EncoderConfig
    backbone: PreTrainedModel
    tokenizer: PreTrainedTokenizerBase

    def position_limit(self) -> int | None:
        """The most tokens the backbone can take: ``max_position_embeddings``, less RoBERTa's offset
        (XLM-R and RoBERTa count positions from ``padding_idx + 1``: 514 -> 512); None if unknown."""
        positions = getattr(self.backbone.config, "max_position_embeddings", None)
        if not isinstance(positions, int) or positions <= 0:
            return None
        embeddings = getattr(getattr(self.backbone, "embeddings", None), "position_embeddings", None)
        padding_idx = getattr(embeddings, "padding_idx", None)
        return positions - (padding_idx + 1 if isinstance(padding_idx, int) else 0)

    def native_max_length(self, base_model: str | None = None) -> int | None:
        """The backbone's own maximum length, what an export keeps: its Sentence Transformers
        ``max_seq_length`` (256 for ``minilm-l6``), else the tokenizer's (512 for BERT), capped by
        ``position_limit``, else None; never a preset's ``max_length`` (the papers' training length).
        ``base_model`` (the backbone the run was trained from) is asked before ``config.model``."""
        limit = self.position_limit()
        found: int | None = None
        for name in (base_model, self.config.model):
            if name and (found := _st_max_seq_length(name)) is not None:
                break
        if found is None:
            declared = getattr(self.tokenizer, "model_max_length", None)
            if isinstance(declared, int) and 0 < declared < 1_000_000:  # unset is int(1e30)
                found = declared
        if found is None:
            return None
        return min(found, limit) if limit else found

    @contextmanager
    def export_max_length(
        self, max_length: int | None = None, base_model: str | None = None
    ) -> Iterator[tuple[int, int] | None]:
        """Context: ``config.max_length`` set to ``max_length``, else ``config.inference_max_length``, else
        ``native_max_length``, else unchanged; yields ``(length before, length of the export)``.
        ``ValueError`` for a chosen length that is not positive or exceeds the backbone's positions."""
        current = self.config.max_length
        limit = self.position_limit()
        chosen = max_length if max_length is not None else getattr(self.config, "inference_max_length", None)
        if chosen is not None:
            what = "a maximum length" if max_length is not None else "model.encoder.inference_max_length"
            if chosen < 1:
                raise ValueError(f"{what} must be a positive number of tokens, got {chosen}")
            if limit and chosen > limit:
                raise ValueError(
                    f"{what} of {chosen} tokens exceeds the {limit} positions of the "
                    f"backbone ({type(self.backbone).__name__}); use at most {limit}"
                )
            length = chosen
        else:
            length = self.native_max_length(base_model) or current
        self.config.max_length = length
        try:
            yield current, length
        finally:
            self.config.max_length = current

    def card_facts(self) -> list[tuple[str, str]]:
        config = self.backbone.config
        arch = ", ".join(getattr(config, "architectures", None) or [type(self.backbone).__name__])
        layers = getattr(config, "num_hidden_layers", "?")
        params = sum(p.numel() for p in self.parameters())
        return [
            ("architecture", f"{arch} ({config.model_type}, {layers} layers, {params / 1e6:.1f} M parameters)"),
            ("pooling", self.pooler.description),
            ("embedding dimension", str(self.hidden_size)),
            ("max sequence length", f"{self.config.max_length} tokens (longer inputs are truncated)"),
            *([("normalisation", "L2: unit-length embeddings (`Normalize`)")] if self.config.normalize else []),
            ("similarity", self.similarity_fn_name),
        ]

    def sentence_transformers_modules(self) -> list[STModule]:
        """The pooler's modules, then ``Normalize`` when the encoder normalises (what ``encode`` gives)."""
        modules = self.pooled_sentence_transformers_modules()
        if self.config.normalize:
            modules.append(STModule("Normalize", "sentence_transformers.models.Normalize", {}))
        return modules

    def pooled_sentence_transformers_modules(self) -> list[STModule]:
        """The pooler's modules only (what ``encode_pooled`` gives): a head on the encoder follows these."""
        return self.pooler.sentence_transformers_modules(self.backbone.config)

    @property
    def similarity_fn_name(self) -> str:
        return self.config.similarity or "cosine"

    def sentence_transformers_model_config(self) -> dict[str, Any]:
        spec = self.config.sentence_transformers or {}
        return {
            "prompts": dict(spec.get("prompts") or {}),
            "default_prompt_name": spec.get("default_prompt_name"),
            "similarity_fn_name": self.similarity_fn_name,
        }

    def sentence_transformers_config(self) -> dict[str, Any]:
        lower = bool((self.config.sentence_transformers or {}).get("do_lower_case"))
        st_config: dict[str, Any] = {"max_seq_length": self.config.max_length, "do_lower_case": lower}
        if self.pooler.needs_hidden_states:
            st_config["config_args"] = {"output_hidden_states": True}
        return st_config

    def sentence_transformers_note(self) -> str:
        return self.pooler.sentence_transformers_note

    def onnx_graph(self, normalize: bool | None = None) -> OnnxGraph:
        """The encoder as one traceable module (``EncoderOnnxGraph``); ``NotExportableError`` for a
        model with a default prompt (not in the graph)."""
        declared = self.config.sentence_transformers or {}
        if declared.get("default_prompt_name") and (declared.get("prompts") or {}).get(declared["default_prompt_name"]):
            raise NotExportableError("a model with a default prompt has no ONNX export yet (the prompt is not in it)")
        graph = EncoderOnnxGraph(self, bool(self.config.normalize) if normalize is None else normalize)
        return OnnxGraph(graph, ("last_hidden_state", "sentence_embedding"), graph.token_type_ids)

    def mlp_in_backbone(self) -> bool:
        """Whether a ``huggingface`` export carries the pooler inside the backbone's own pooler."""
        with self.pooler.into_backbone(self.backbone, self.tokenizer) as done:
            return done

    def write_huggingface(self, out: Path) -> None:
        """``save_pretrained``, with the pooler copied into the backbone's own where it fits."""
        with self.pooler.into_backbone(self.backbone, self.tokenizer):
            self.save_pretrained(out)

    def huggingface_usage(self) -> str:
        code = hf_usage_code(self.pooler, self.config.max_length, self.mlp_in_backbone(), bool(self.config.normalize))
        return f"""With `transformers`: load the backbone with `AutoModel` and pool as below
({self.pooler.description}):

```python
{code.rstrip()}
```

With unisent (reads `unisent_encoder.json` and `pooler.pt`; same embeddings):

```python
import unisent

model = unisent.load("path/to/this/directory")
embeddings = model.encode(["A man is playing a guitar.", "Someone plays music."])
```
"""


class EncoderOnnxGraph(nn.Module):
    """An encoder's forward for tracing: ``(input_ids, attention_mask[, token_type_ids])`` ->
    ``(last_hidden_state, sentence_embedding)``: the backbone's own forward (never the unpadded one),
    the pooler, then L2 normalisation when ``normalize``. ``token_type_ids`` is an input where the
    backbone takes it (BERT), as in Sentence Transformers' ONNX files."""

    def __init__(self, encoder: EncoderModel, normalize: bool = False) -> None:
        super().__init__()
        self.encoder = encoder
        self.normalize = normalize
        forward = inspect.signature(encoder.backbone.forward).parameters
        self.token_type_ids = "token_type_ids" in forward and getattr(encoder.backbone.config, "type_vocab_size", 0) > 0

    def pooled(
        self, input_ids: torch.Tensor, attention_mask: torch.Tensor, token_type_ids: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """``(last_hidden_state, the pooler's vectors)`` (not normalised: what a head reads)."""
        extra = {"token_type_ids": token_type_ids} if token_type_ids is not None else {}
        pooler = self.encoder.pooler
        out = self.encoder.backbone(
            input_ids=input_ids,
            attention_mask=attention_mask,
            output_hidden_states=pooler.needs_hidden_states,
            **extra,
        )
        return out.last_hidden_state, pooler(out.last_hidden_state, attention_mask, out.hidden_states)

    def forward(
        self, input_ids: torch.Tensor, attention_mask: torch.Tensor, token_type_ids: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        last, pooled = self.pooled(input_ids, attention_mask, token_type_ids)
        return last, nn.functional.normalize(pooled, dim=-1) if self.normalize else pooled
