"""The objective protocol: a declared batch schema, a collator and named loss terms."""

from __future__ import annotations

import inspect
import re
from collections.abc import Sequence
from typing import Any

import torch
from torch import nn

from ..encoders.encoder import Encoder, pad_batch

__all__ = ["Objective", "encode_views"]


def _snake(name: str) -> str:
    return re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", name).lower()


class _RecordsInitArgs(type(nn.Module)):
    """Metaclass that stores the constructor arguments of every instance in ``_init_args``."""

    def __call__(cls, *args: Any, **kwargs: Any):
        obj = super().__call__(*args, **kwargs)
        params = inspect.signature(cls.__init__).parameters
        bound = inspect.signature(cls.__init__).bind(None, *args, **kwargs)
        bound.apply_defaults()
        init_args = {}
        for key, value in list(bound.arguments.items())[1:]:
            if params[key].kind is inspect.Parameter.VAR_KEYWORD:
                init_args.update(value)
            elif params[key].kind is not inspect.Parameter.VAR_POSITIONAL:
                init_args[key] = value
        object.__setattr__(obj, "_init_args", init_args)
        return obj


class Objective(nn.Module, metaclass=_RecordsInitArgs):
    """Base class of training objectives.

    A subclass declares which record fields it needs (:attr:`batch_keys`), which of those are
    text to tokenise (:attr:`text_keys`) and which may be null (:attr:`optional_keys`), and
    implements :meth:`forward`, which returns a dict of named loss terms. The training module sums ``weight * sum(term_weights[k] * terms[k])`` over
    objectives and logs every term as ``train/<name>/<term>``.

    A subclass may live in any package; it is used from YAML with ``class_path``. Constructor
    arguments are recorded automatically (see :meth:`config`) so that checkpoints can rebuild it.

    Args:
        weight: multiplier of this objective's loss in the total.
        name: the key of this objective's data in ``data.train`` and in the logs; defaults to the
            class name in snake case with a trailing ``_objective`` removed.
        max_length: token limit for this objective's texts; default: the encoder's.
    """

    batch_keys: tuple[str, ...] = ()
    text_keys: tuple[str, ...] = ()
    optional_keys: tuple[str, ...] = ()
    citation: str = ""

    def __init__(self, weight: float = 1.0, name: str | None = None, max_length: int | None = None) -> None:
        super().__init__()
        self.weight = float(weight)
        self.name = name or re.sub(r"_objective$", "", _snake(type(self).__name__))
        self.max_length = max_length
        self.term_weights: dict[str, float] = {}

    # -------------------------------------------------------------------------------- data side
    def collate(self, features: Sequence[dict[str, Any]], pad_id: int) -> dict[str, Any]:
        """Batch tokenised records.

        All text fields of one batch are padded to one common length, so that an objective can
        stack several views and run a single forward pass. Text fields become
        ``{"input_ids": (batch, seq), "attention_mask": (batch, seq)}``; numeric fields become
        tensors and anything else a list.
        """
        batch: dict[str, Any] = {}
        if self.text_keys:
            length = max(len(f[k]) for f in features for k in self.text_keys)
            for key in self.text_keys:
                ids, mask = pad_batch([f[key] for f in features], pad_id, length)
                batch[key] = {"input_ids": ids, "attention_mask": mask}
        for key in self.batch_keys:
            if key in self.text_keys:
                continue
            values = [f[key] for f in features]
            batch[key] = torch.as_tensor(values) if isinstance(values[0], (int, float, bool)) else values
        return batch

    def setup_data(self, dataset) -> Any:
        """Called once per ``fit`` with this objective's tokenised training set (a ``datasets.Dataset``)
        before the optimiser is built; may build state from the data (e.g. an entity vocabulary) and
        may return a filtered dataset to train on instead (``None`` keeps it)."""
        return None

    # -------------------------------------------------------------------------------- model side
    def forward(self, encoder: Encoder, batch: dict[str, Any]) -> dict[str, torch.Tensor]:  # pragma: no cover
        raise NotImplementedError

    def total(self, terms: dict[str, torch.Tensor]) -> torch.Tensor:
        """This objective's loss from its terms (before :attr:`weight`)."""
        return sum(self.term_weights.get(k, 1.0) * v for k, v in terms.items())

    # -------------------------------------------------------------------------------- run record
    def config(self) -> dict[str, Any]:
        """``{"class_path": ..., "init_args": ...}``: enough to rebuild this objective."""
        cls = type(self)
        return {"class_path": f"{cls.__module__}.{cls.__qualname__}", "init_args": dict(self._init_args)}

    def extra_repr(self) -> str:
        return ", ".join(f"{k}={v!r}" for k, v in self._init_args.items())


def encode_views(encoder: Encoder, batch: dict[str, Any], keys: Sequence[str], repeat: int = 1) -> list[torch.Tensor]:
    """Encode several text fields of a batch in ONE forward pass over the stacked views.

    Args:
        encoder: the shared encoder.
        batch: output of :meth:`Objective.collate` (text fields padded to one length).
        keys: text fields to stack, in order.
        repeat: how many times to stack the fields (2 for SimCSE's two dropout views).

    Returns:
        One (batch, hidden) tensor per stacked view: ``len(keys) * repeat`` tensors, the keys in
        order, repeated.
    """
    ids = torch.cat([batch[k]["input_ids"] for k in keys] * repeat)  # (views * batch, seq)
    mask = torch.cat([batch[k]["attention_mask"] for k in keys] * repeat)
    pooled = encoder(ids, mask)  # (views * batch, hidden)
    return list(pooled.chunk(len(keys) * repeat))
