"""Poolers: token states -> one vector per sentence.

Every pooler is a small ``nn.Module`` with the same call signature, so the encoder never branches on
pooler names. The table :data:`POOLERS` maps the names users write in YAML to the classes.
"""

from __future__ import annotations

from typing import Literal, get_args

import torch
from torch import nn

__all__ = ["POOLERS", "PoolerName", "Pooler", "build_pooler", "needs_hidden_states"]


class Pooler(nn.Module):
    """Base class: ``forward(last_hidden, attention_mask, hidden_states) -> (batch, dim)``."""

    needs_hidden_states: bool = False

    def __init__(self, hidden_size: int) -> None:
        super().__init__()
        self.hidden_size = hidden_size

    def forward(  # pragma: no cover - abstract
        self,
        last_hidden: torch.Tensor,  # (batch, seq, dim)
        attention_mask: torch.Tensor,  # (batch, seq)
        hidden_states: tuple[torch.Tensor, ...] | None = None,
    ) -> torch.Tensor:
        raise NotImplementedError


def _masked_mean(states: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
    mask = attention_mask.unsqueeze(-1).to(states.dtype)  # (batch, seq, 1)
    return (states * mask).sum(1) / mask.sum(1).clamp_min(1.0)


class ClsPooler(Pooler):
    """The first token's final state (``[CLS]`` / ``<s>``)."""

    def forward(self, last_hidden, attention_mask, hidden_states=None):
        return last_hidden[:, 0]


class ClsMlpPooler(Pooler):
    """``[CLS]`` followed by SimCSE's MLP (Linear + Tanh), in training and at inference."""

    train_only: bool = False

    def __init__(self, hidden_size: int) -> None:
        super().__init__(hidden_size)
        self.dense = nn.Linear(hidden_size, hidden_size)
        self.activation = nn.Tanh()

    def forward(self, last_hidden, attention_mask, hidden_states=None):
        cls = last_hidden[:, 0]
        if self.train_only and not self.training:
            return cls
        return self.activation(self.dense(cls))


class ClsMlpTrainOnlyPooler(ClsMlpPooler):
    """SimCSE's ``mlp_only_train``: the MLP is used in training, dropped at inference."""

    train_only = True


class MeanPooler(Pooler):
    """Mean of the final states over non-padding tokens."""

    def forward(self, last_hidden, attention_mask, hidden_states=None):
        return _masked_mean(last_hidden, attention_mask)


class MaxPooler(Pooler):
    """Element-wise max of the final states over non-padding tokens."""

    def forward(self, last_hidden, attention_mask, hidden_states=None):
        mask = attention_mask.unsqueeze(-1).bool()
        return last_hidden.masked_fill(~mask, torch.finfo(last_hidden.dtype).min).amax(1)


class AvgFirstLastPooler(Pooler):
    """Masked mean of the average of the first transformer layer and the last layer.

    As in SimCSE's ``avg_first_last``: ``hidden_states[1]`` (output of layer 1, not the embedding
    layer) and ``hidden_states[-1]``.
    """

    needs_hidden_states = True

    def forward(self, last_hidden, attention_mask, hidden_states=None):
        if hidden_states is None:
            raise ValueError("avg_first_last needs the backbone's hidden states (output_hidden_states=True)")
        return _masked_mean((hidden_states[1] + hidden_states[-1]) / 2, attention_mask)


POOLERS: dict[str, type[Pooler]] = {
    "cls": ClsPooler,
    "cls_mlp": ClsMlpPooler,
    "cls_mlp_train_only": ClsMlpTrainOnlyPooler,
    "mean": MeanPooler,
    "max": MaxPooler,
    "avg_first_last": AvgFirstLastPooler,
}


#: The pooler names, as a type: the config parser validates against it and lists the choices.
PoolerName = Literal["cls", "cls_mlp", "cls_mlp_train_only", "mean", "max", "avg_first_last"]
assert set(get_args(PoolerName)) == set(POOLERS)


def build_pooler(name: str, hidden_size: int) -> Pooler:
    """Build the pooler called ``name``; an unknown name lists the valid ones."""
    try:
        cls = POOLERS[name]
    except KeyError:
        raise ValueError(f"unknown pooler {name!r}; valid poolers: {', '.join(POOLERS)}") from None
    return cls(hidden_size)


def needs_hidden_states(name: str) -> bool:
    return POOLERS[name].needs_hidden_states
