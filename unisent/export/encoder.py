"""Exporters of :class:`~unisent.encoders.Encoder` (backbone + tokenizer + pooler).

Both formats start from ``Encoder.save_pretrained`` (backbone, tokenizer, ``unisent_encoder.json``
and ``pooler.pt``), so ``unisent.load(DIR)`` reproduces the embeddings from either. Then:

- ``sentence-transformers`` adds ``modules.json`` and one built-in Sentence Transformers module per
  pooling step, in the classic layout (``sentence_transformers.models.*`` class paths, legacy config
  keys) that Sentence Transformers 3 and newer load without ``trust_remote_code`` (tested with 6.2). ``avg_first_last`` is
  a ``WeightedLayerPooling`` with weight 1 on layers 1 and L and 0 on the others (its weighted mean is
  then exactly the average of the two) followed by mean ``Pooling``; the hidden states are switched
  on through ``config_args`` in ``sentence_bert_config.json``, not in ``config.json``.
- ``huggingface`` documents the pooling as runnable ``transformers`` code in the model card. For
  ``cls_mlp`` the MLP is also copied into the backbone's own pooler when that is a Linear + Tanh on
  the first token (BERT, RoBERTa, XLM-R...), as SimCSE's ``simcse_to_huggingface.py`` does, so that
  ``AutoModel(...)(...).pooler_output`` is the embedding.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

import torch
from torch import nn

from ..encoders import Encoder
from .registry import PROBE_SENTENCES, Exporter, register_exporter

__all__ = ["EncoderHuggingFaceExporter", "EncoderSentenceTransformersExporter", "hf_usage_code"]

POOLING_TEXT = {
    "cls": "the `[CLS]` (first) token's last hidden state (`cls`)",
    "cls_mlp": "the `[CLS]` token's last hidden state through the trained MLP, Linear + Tanh "
               "(SimCSE's `cls`; unisent `cls_mlp`)",
    "cls_mlp_train_only": "the `[CLS]` token's last hidden state; the MLP used in training is dropped at "
                          "inference (SimCSE's `cls_before_pooler`; unisent `cls_mlp_train_only`)",
    "mean": "the mean of the last hidden states over the non-padding tokens (`mean`)",
    "max": "the element-wise maximum of the last hidden states over the non-padding tokens (`max`)",
    "avg_first_last": "the mean over the non-padding tokens of the average of the first layer's output "
                      "(`hidden_states[1]`) and the last layer's (`hidden_states[-1]`) (`avg_first_last`)",
}

ST_POOLING_MODE = {
    "cls": "cls_token", "cls_mlp": "cls_token", "cls_mlp_train_only": "cls_token",
    "mean": "mean_tokens", "max": "max_tokens", "avg_first_last": "mean_tokens",
}
_ST_MODES = ("cls_token", "mean_tokens", "max_tokens", "mean_sqrt_len_tokens", "weightedmean_tokens", "lasttoken")


def _pooler_name(encoder: Encoder) -> str:
    return str(encoder.config.pooler)


def _num_layers(encoder: Encoder) -> int:
    config = encoder.backbone.config
    layers = getattr(config, "num_hidden_layers", None)
    if layers is None:
        raise ValueError(f"{type(config).__name__} has no num_hidden_layers; cannot export avg_first_last")
    return int(layers)


def _common_facts(encoder: Encoder) -> list[tuple[str, str]]:
    config = encoder.backbone.config
    arch = ", ".join(getattr(config, "architectures", None) or [type(encoder.backbone).__name__])
    layers = getattr(config, "num_hidden_layers", "?")
    params = sum(p.numel() for p in encoder.parameters())
    return [
        ("architecture", f"{arch} ({config.model_type}, {layers} layers, {params / 1e6:.1f} M parameters)"),
        ("pooling", POOLING_TEXT[_pooler_name(encoder)]),
        ("embedding dimension", str(encoder.hidden_size)),
        ("max sequence length", f"{encoder.config.max_length} tokens (longer inputs are truncated)"),
        ("similarity", "cosine"),
    ]


def _write_json(path: Path, data: object) -> None:
    path.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")


def _max_abs_diff(a: torch.Tensor, b: torch.Tensor) -> float:
    if a.shape != b.shape:
        return float("inf")
    return float((a.float() - b.float()).abs().max())


# ------------------------------------------------------------------------------ sentence-transformers
def _st_modules(encoder: Encoder) -> list[tuple[str, str, dict, dict[str, torch.Tensor] | None]]:
    """``(folder, class path, config, weights)`` of every module after the Transformer."""
    from ..encoders.poolers import ClsMlpPooler

    pooler = _pooler_name(encoder)
    hidden = encoder.hidden_size
    modules: list[tuple[str, str, dict, dict[str, torch.Tensor] | None]] = []
    if pooler == "avg_first_last":
        layers = _num_layers(encoder)
        weights = torch.zeros(layers)
        weights[0] += 1.0  # hidden_states[1]: the first layer's output
        weights[-1] += 1.0  # hidden_states[L]: the last (one layer: weight 2, the same state twice)
        config = {"word_embedding_dimension": hidden, "layer_start": 1, "num_hidden_layers": layers}
        modules.append(("WeightedLayerPooling", "sentence_transformers.models.WeightedLayerPooling", config,
                        {"layer_weights": weights}))
    mode = ST_POOLING_MODE[pooler]
    pooling = {"word_embedding_dimension": hidden, **{f"pooling_mode_{m}": m == mode for m in _ST_MODES},
               "include_prompt": True}
    modules.append(("Pooling", "sentence_transformers.models.Pooling", pooling, None))
    if pooler == "cls_mlp":
        mlp = encoder.pooler
        assert isinstance(mlp, ClsMlpPooler)
        dense = {"in_features": hidden, "out_features": hidden, "bias": True,
                 "activation_function": "torch.nn.modules.activation.Tanh"}
        weights = {"linear.weight": mlp.dense.weight.detach().cpu().contiguous(),
                   "linear.bias": mlp.dense.bias.detach().cpu().contiguous()}
        modules.append(("Dense", "sentence_transformers.models.Dense", dense, weights))
    return modules


@register_exporter(Encoder)
class EncoderSentenceTransformersExporter(Exporter):
    """An :class:`Encoder` as a Sentence Transformers directory (``SentenceTransformer(DIR)``)."""

    format = "sentence-transformers"
    library_name = "sentence-transformers"
    pipeline_tag = "sentence-similarity"
    tags = ("sentence-transformers", "sentence-similarity", "feature-extraction")

    def write(self, model: nn.Module, out: Path) -> None:
        from safetensors.torch import save_file

        encoder = model
        assert isinstance(encoder, Encoder)
        encoder.save_pretrained(out)
        st_config: dict = {"max_seq_length": encoder.config.max_length, "do_lower_case": False}
        if encoder.pooler.needs_hidden_states:
            st_config["config_args"] = {"output_hidden_states": True}
        _write_json(out / "sentence_bert_config.json", st_config)
        entries = [{"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"}]
        for idx, (folder, class_path, config, weights) in enumerate(_st_modules(encoder), start=1):
            path = out / f"{idx}_{folder}"
            path.mkdir()
            _write_json(path / "config.json", config)
            if weights is not None:
                save_file(weights, str(path / "model.safetensors"))
            entries.append({"idx": idx, "name": str(idx), "path": path.name, "type": class_path})
        _write_json(out / "modules.json", entries)
        _write_json(out / "config_sentence_transformers.json",
                    {"prompts": {}, "default_prompt_name": None, "similarity_fn_name": "cosine"})

    def facts(self, model: nn.Module) -> list[tuple[str, str]]:
        assert isinstance(model, Encoder)
        modules = " -> ".join(["Transformer"] + [folder for folder, *_ in _st_modules(model)])
        return _common_facts(model) + [("Sentence Transformers modules", modules)]

    def usage(self, model: nn.Module) -> str:
        assert isinstance(model, Encoder)
        note = ""
        if _pooler_name(model) == "avg_first_last":
            note = (
                "\n`avg_first_last` is exported with built-in modules only: `WeightedLayerPooling` with weight 1 on "
                "layers 1 and L (0 elsewhere), whose weighted mean is the average of the two, then mean `Pooling`. "
                "The hidden states are enabled by `config_args` in `sentence_bert_config.json`.\n"
            )
        elif _pooler_name(model) == "cls_mlp":
            note = "\nThe `Dense` module (Linear + Tanh) holds the MLP of the `cls_mlp` pooler.\n"
        return f"""With [Sentence Transformers](https://www.sbert.net) (3 or newer):

```python
from sentence_transformers import SentenceTransformer

model = SentenceTransformer("path/to/this/directory")
embeddings = model.encode(["A man is playing a guitar.", "Someone plays music."])
```
{note}
With unisent (same embeddings; `unisent encode` streams large files):

```python
import unisent

model = unisent.load("path/to/this/directory")
embeddings = model.encode(["A man is playing a guitar.", "Someone plays music."])
```
"""

    def verify(self, model: nn.Module, out: Path, sentences: Sequence[str]) -> tuple[float | None, str]:
        try:
            from sentence_transformers import SentenceTransformer
        except ImportError:
            return None, "sentence-transformers is not installed"
        assert isinstance(model, Encoder)
        st = SentenceTransformer(str(out), device="cpu")
        got = torch.as_tensor(st.encode(list(sentences), convert_to_numpy=True))
        return _max_abs_diff(got, model.encode(list(sentences))), (
            f"`SentenceTransformer(DIR).encode` on {len(sentences)} sentences"
        )


# ------------------------------------------------------------------------------ huggingface
def _compatible_backbone_pooler(encoder: Encoder) -> nn.Module | None:
    """The backbone's own pooler if it is a Linear (hidden -> hidden) + Tanh, else None."""
    target = getattr(encoder.backbone, "pooler", None)
    dense = getattr(target, "dense", None)
    if not isinstance(dense, nn.Linear) or not isinstance(getattr(target, "activation", None), nn.Tanh):
        return None
    if dense.weight.shape != encoder.pooler.dense.weight.shape or dense.bias is None:
        return None
    return target


@contextmanager
def _mlp_in_backbone_pooler(encoder: Encoder) -> Iterator[bool]:
    """Temporarily copy the ``cls_mlp`` MLP into the backbone's pooler; yields whether it was done.

    The copy is kept only if ``pooler_output`` then equals unisent's pooled output on a probe
    sentence (so a pooler that is not "Linear + Tanh of the first token" is left alone).
    """
    target = _compatible_backbone_pooler(encoder) if _pooler_name(encoder) == "cls_mlp" else None
    if target is None:
        yield False
        return
    saved = {k: v.detach().clone() for k, v in target.state_dict().items()}
    was_training = encoder.training
    encoder.eval()
    try:
        with torch.no_grad():
            target.dense.weight.copy_(encoder.pooler.dense.weight)
            target.dense.bias.copy_(encoder.pooler.dense.bias)
            ids = encoder.tokenize_ids([PROBE_SENTENCES[1]])
            device = next(encoder.parameters()).device
            input_ids = torch.tensor(ids, device=device)
            mask = torch.ones_like(input_ids)
            out = encoder.backbone(input_ids=input_ids, attention_mask=mask)
            same = out.pooler_output is not None and torch.allclose(
                out.pooler_output, encoder.pooler(out.last_hidden_state, mask), atol=1e-6
            )
        if not same:
            target.load_state_dict(saved)
        yield same
    finally:
        target.load_state_dict(saved)
        encoder.train(was_training)


def hf_usage_code(pooler: str, max_length: int, mlp_in_backbone: bool = False) -> str:
    """Runnable ``transformers`` code that reproduces unisent's embeddings for ``pooler``.

    The code loads ``model_dir = "."`` (the exported directory as the working directory) and defines
    ``embed(sentences) -> torch.Tensor``.
    """
    hidden_states = pooler == "avg_first_last"
    masked_mean = [
        'mask = batch["attention_mask"].unsqueeze(-1).to(states.dtype)',
        "return (states * mask).sum(1) / mask.sum(1).clamp(min=1.0)",
    ]
    setup: list[str] = []
    if pooler in ("cls", "cls_mlp_train_only"):
        body = ["return out.last_hidden_state[:, 0]"]
    elif pooler == "cls_mlp" and mlp_in_backbone:
        body = ["return out.pooler_output  # the model's pooler holds the trained MLP (Linear + Tanh on [CLS])"]
    elif pooler == "cls_mlp":
        setup = [
            "# The trained MLP (Linear + Tanh on [CLS]); for a hub id, fetch pooler.pt with",
            "# huggingface_hub.hf_hub_download first.",
            'mlp = torch.load(f"{model_dir}/pooler.pt", map_location="cpu", weights_only=True)',
        ]
        body = ['return torch.tanh(out.last_hidden_state[:, 0] @ mlp["dense.weight"].T + mlp["dense.bias"])']
    elif pooler == "mean":
        body = ["states = out.last_hidden_state", *masked_mean]
    elif pooler == "max":
        body = [
            'mask = batch["attention_mask"].unsqueeze(-1).bool()',
            'return out.last_hidden_state.masked_fill(~mask, float("-inf")).amax(1)',
        ]
    elif pooler == "avg_first_last":
        body = ["states = (out.hidden_states[1] + out.hidden_states[-1]) / 2  # first layer's output and last", *masked_mean]
    else:
        raise ValueError(f"no transformers recipe for pooler {pooler!r}")
    call = "model(**batch, output_hidden_states=True)" if hidden_states else "model(**batch)"
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
        "def embed(sentences: list[str]) -> torch.Tensor:",
        f'    batch = tokenizer(sentences, padding=True, truncation=True, max_length={max_length}, return_tensors="pt")',
        "    with torch.no_grad():",
        f"        out = {call}",
        *("    " + line for line in body),
        "",
        "",
        'embeddings = embed(["A man is playing a guitar.", "Someone plays music."])',
    ]
    return "\n".join(lines) + "\n"


@register_exporter(Encoder)
class EncoderHuggingFaceExporter(Exporter):
    """An :class:`Encoder` as a ``transformers`` directory plus unisent's pooler settings."""

    format = "huggingface"
    library_name = "transformers"
    pipeline_tag = "feature-extraction"
    tags = ("feature-extraction",)

    def write(self, model: nn.Module, out: Path) -> None:
        encoder = model
        assert isinstance(encoder, Encoder)
        with _mlp_in_backbone_pooler(encoder):
            encoder.save_pretrained(out)

    @staticmethod
    def _mlp_in_backbone(encoder: Encoder) -> bool:
        with _mlp_in_backbone_pooler(encoder) as in_backbone:
            return in_backbone

    def facts(self, model: nn.Module) -> list[tuple[str, str]]:
        assert isinstance(model, Encoder)
        return _common_facts(model)

    def usage(self, model: nn.Module) -> str:
        assert isinstance(model, Encoder)
        pooler = _pooler_name(model)
        code = hf_usage_code(pooler, model.config.max_length, self._mlp_in_backbone(model))
        return f"""With `transformers`: load the backbone with `AutoModel` and pool as below
({POOLING_TEXT[pooler]}):

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

    def verify(self, model: nn.Module, out: Path, sentences: Sequence[str]) -> tuple[float | None, str]:
        assert isinstance(model, Encoder)
        reloaded = Encoder.from_pretrained(out).eval()
        return _max_abs_diff(reloaded.encode(list(sentences)), model.encode(list(sentences))), (
            f"`unisent.load(DIR).encode` on {len(sentences)} sentences"
        )
