"""Unpadded ("packed") forward of BERT-family backbones: no compute is spent on padding tokens.

Padding wastes most of the linear-layer work (STS-B at max length 32, batch 64: 2.2 padded tokens per
real one). Every layer except attention works token by token, so the real tokens are gathered into one
``(tokens, hidden)`` matrix; only attention scatters back to ``(batch, heads, seq, head_dim)`` for
``scaled_dot_product_attention``. The same modules run in the same order as the Hugging Face forward,
so real tokens get the same result; padding positions are zero.

Supported: ``BertLayer``-structured encoders (BERT, RoBERTa, XLM-R, MiniLM, ELECTRA, ...) with absolute
position embeddings and no cross-attention (``supports_packing``); others use the Hugging Face
forward. On CUDA, finding the real tokens (``nonzero``) synchronises with the host once per forward.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, cast

import torch
from torch import nn
from torch.nn import functional as F

if TYPE_CHECKING:  # the structure supports_packing checks (RoBERTa, MiniLM, ... copy BERT's modules)
    from transformers.models.bert.modeling_bert import BertLayer, BertModel

__all__ = ["packed_forward", "supports_packing"]


def supports_packing(backbone: nn.Module) -> bool:
    """True if ``packed_forward`` computes exactly what ``backbone.forward`` does."""
    config = getattr(backbone, "config", None)
    layers = getattr(getattr(backbone, "encoder", None), "layer", None)
    if config is None or layers is None or not hasattr(backbone, "embeddings") or len(layers) == 0:
        return False
    if getattr(config, "is_decoder", False) or getattr(config, "add_cross_attention", False):
        return False
    if getattr(config, "position_embedding_type", "absolute") != "absolute":
        return False
    if getattr(config, "chunk_size_feed_forward", 0):
        return False
    for layer in layers:
        attention = getattr(layer, "attention", None)
        self_attn = getattr(attention, "self", None)
        if not all(hasattr(self_attn, name) for name in ("query", "key", "value", "dropout", "scaling")):
            return False
        if not (hasattr(attention, "output") and hasattr(layer, "intermediate") and hasattr(layer, "output")):
            return False
        # the output modules must be the standard dense -> dropout -> LayerNorm(x + residual)
        for block in (getattr(attention, "output", None), layer.output):
            if not all(hasattr(block, name) for name in ("dense", "dropout", "LayerNorm")):
                return False
    return True


def packed_forward(
    backbone: nn.Module,
    input_ids: torch.Tensor,  # (batch, seq)
    attention_mask: torch.Tensor,  # (batch, seq), 1 = real token
    *,
    token_type_ids: torch.Tensor | None = None,
    output_hidden_states: bool = False,
    layers: list[nn.Module] | None = None,
) -> tuple[torch.Tensor, tuple[torch.Tensor, ...] | None]:
    """``(last_hidden_state, hidden_states)`` of ``backbone`` like its own forward, padding skipped; ``hidden_states``
    (embeddings, then every layer's output) is None unless ``output_hidden_states``. ``layers``: the stack to run
    instead of ``backbone.encoder.layer`` (e.g. its lower layers, then a head's own copies of the top ones:
    [`unisent.encoders.Encoder.forward`][unisent.encoders.Encoder.forward]'s ``top_layers``)."""
    batch, seq = input_ids.shape
    keep = attention_mask.bool()
    index = keep.reshape(-1).nonzero().squeeze(1)  # (tokens,) positions of real tokens in batch*seq
    bert = cast("BertModel", backbone)  # BERT-structured (supports_packing)
    embeddings = bert.embeddings(input_ids=input_ids, token_type_ids=token_type_ids)  # (batch, seq, hidden)
    if index.numel() == batch * seq:  # no padding (e.g. a length-sorted batch): nothing to gather or mask
        index, key_mask = None, None
        hidden = embeddings.reshape(batch * seq, -1)
    else:
        hidden = embeddings.reshape(batch * seq, -1).index_select(0, index)  # (tokens, hidden)
        key_mask = keep[:, None, None, :]  # (batch, 1, 1, seq): attend to real keys only

    def pad(x: torch.Tensor) -> torch.Tensor:  # (tokens, dim) -> (batch, seq, dim), zeros at padding
        if index is None:
            return x.view(batch, seq, -1)
        return x.new_zeros(batch * seq, x.shape[-1]).index_copy(0, index, x).view(batch, seq, -1)

    states = [embeddings.masked_fill(~keep[..., None], 0.0)] if output_hidden_states else None
    for layer in cast("list[BertLayer]", bert.encoder.layer if layers is None else layers):
        hidden = _packed_layer(layer, hidden, pad, index, key_mask, batch, seq)
        if states is not None:
            states.append(pad(hidden))
    last = states[-1] if states is not None else pad(hidden)
    return last, (tuple(states) if states is not None else None)


def _packed_layer(
    layer: BertLayer,
    hidden: torch.Tensor,
    pad: Callable[[torch.Tensor], torch.Tensor],
    index: torch.Tensor | None,
    key_mask: torch.Tensor | None,
    batch: int,
    seq: int,
) -> torch.Tensor:
    attn = layer.attention.self
    head_dim = attn.attention_head_size

    def heads(x: torch.Tensor) -> torch.Tensor:  # (tokens, hidden) -> (batch, heads, seq, head_dim)
        return pad(x).view(batch, seq, -1, head_dim).transpose(1, 2)

    context = F.scaled_dot_product_attention(
        heads(attn.query(hidden)),
        heads(attn.key(hidden)),
        heads(attn.value(hidden)),
        attn_mask=key_mask,
        dropout_p=attn.dropout.p if attn.training else 0.0,
        scale=attn.scaling,
    )  # (batch, heads, seq, head_dim)
    context = context.transpose(1, 2).reshape(batch * seq, -1)
    if index is not None:
        context = context.index_select(0, index)  # (tokens, hidden)
    attended = layer.attention.output(context, hidden)  # dense -> dropout -> LayerNorm(+ residual)
    return layer.output(layer.intermediate(attended), attended)
