"""Matryoshka representation learning (Kusupati et al., 2022): nested prefixes of the sentence vector."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, cast

import torch
from torch import nn

from ..encoders.encoder import Encoder
from ..io.imports import import_object
from .objective import BatchSchema, EncodeFn, Objective, ObjectiveOutput, objective_from_record

if TYPE_CHECKING:
    from datasets import Dataset  # pyright: ignore[reportMissingTypeStubs]  # datasets ships no stubs

__all__ = ["Matryoshka"]

CITATION = (
    "Kusupati, Bhatt, Rege, Wallingford, Sinha, Ramanujan, Howard-Snyder, Chen, Kakade, Jain and Farhadi. "
    "Matryoshka Representation Learning. NeurIPS 2022. https://arxiv.org/abs/2205.13147"
)


class Matryoshka(Objective):
    """Matryoshka representation learning: the wrapped objective's loss at every prefix length of ``dims``.

    The wrapped objective's [`embed`][unisent.objectives.Objective.embed] runs once per step and its
    [`loss_at`][unisent.objectives.Objective.loss_at] once per dim, through the same graph. Terms are logged as
    ``<term>@<d>`` (``train/simcse/contrastive@64``); the loss is ``sum_d w_d * objective.total(terms at d)``.

    Every other hook and, by default, the name are the wrapped objective's. Any in-batch objective can be wrapped
    unless its [`prefix_error`][unisent.objectives.Objective.prefix_error] says why not (CMLM, EASE).

    Args:
        objective: the objective to train at every dim (YAML: a nested ``class_path``/``init_args``);
            its own ``weight`` is ignored.
        dims: prefix lengths, strictly decreasing, at most the hidden size (e.g. ``[768, 512, 256, 128, 64]``).
        weights: ``w_d``, one per dim; default 1 each (the paper's).
    """

    citation = CITATION

    def __init__(
        self,
        objective: Objective | Mapping[str, Any],
        dims: list[int],
        weights: list[float] | None = None,
        weight: float = 1.0,
        name: str | None = None,
    ) -> None:
        if isinstance(objective, Mapping):  # rebuilt from a checkpoint's record (config()): through the registry
            objective = objective_from_record(objective, source="Matryoshka", field="objective")
        if not isinstance(objective, Objective):  # pyright: ignore[reportUnnecessaryIsInstance]  # records pass anything
            raise TypeError(f"Matryoshka wraps an Objective, got {type(objective).__name__}")
        reason = objective.prefix_error()
        if reason:
            raise ValueError(f"Matryoshka cannot wrap {type(objective).__name__}: {reason}")
        dims = [int(d) for d in dims]
        if not dims or any(d < 1 for d in dims) or any(a <= b for a, b in zip(dims, dims[1:], strict=False)):
            raise ValueError(
                f"Matryoshka dims must be positive and strictly decreasing, e.g. [256, 128, 64]; got {dims}"
            )
        weights = [1.0] * len(dims) if weights is None else [float(w) for w in weights]
        if len(weights) != len(dims) or any(w < 0 for w in weights):
            raise ValueError(f"Matryoshka needs one weight >= 0 per dim: {len(dims)} dims {dims}, weights {weights}")
        super().__init__(weight=weight, name=name or objective.name)
        self.objective = objective  # a child module: its parameters train
        self.dims, self.weights = dims, weights
        # the wrapped objective's fields and settings (set when it was built)
        self.batch_keys, self.text_keys = objective.batch_keys, objective.text_keys
        self.optional_keys, self.param_lr = objective.optional_keys, objective.param_lr
        self.extends_vocabulary = objective.extends_vocabulary

    @classmethod
    def name_in_recipe(cls, init_args: Mapping[str, Any] | None) -> str:
        """``name``, else the wrapped objective's name in the recipe (its ``data.train`` key)."""
        args = dict(init_args or {})
        inner = args.get("objective")
        if args.get("name") or not isinstance(inner, Mapping) or "class_path" not in inner:
            return super().name_in_recipe(args)
        inner = cast(Mapping[str, Any], inner)
        return import_object(inner["class_path"]).name_in_recipe(inner.get("init_args"))

    # ------------------------------------------------------------------------ the wrapped objective's
    def encoder_like_modules(self) -> list[torch.nn.Module]:
        return self.objective.encoder_like_modules()

    @property
    def schema(self) -> BatchSchema:
        return self.objective.schema

    def collate(self, features: Sequence[dict[str, Any]], pad_id: int) -> dict[str, Any]:
        return self.objective.collate(features, pad_id)

    def setup_data(self, dataset: Dataset) -> Dataset | None:
        return self.objective.setup_data(dataset)

    def setup_for(self, encoder: Encoder) -> None:
        if self.dims[0] > encoder.hidden_size:
            raise ValueError(
                f"Matryoshka dim {self.dims[0]} exceeds the encoder's hidden size {encoder.hidden_size}; "
                f"dims: {self.dims}"
            )
        self.objective.setup_for(encoder)

    def inference_model(self, encoder: Encoder) -> nn.Module | None:
        return self.objective.inference_model(encoder)

    # ------------------------------------------------------------------------------------ the loss
    def prefix_error(self) -> str | None:
        return "it is one already: give one Matryoshka every dim"

    def forward(self, encoder: Encoder, batch: dict[str, Any]) -> ObjectiveOutput:
        self.setup_for(encoder)  # the dims against the hidden size: a one-line error
        return self.loss(self.embed(encoder, batch), batch)

    def embed(self, encode: EncodeFn, batch: dict[str, Any]) -> list[torch.Tensor]:
        return self.objective.embed(encode, batch)

    def loss(self, views: list[torch.Tensor], batch: dict[str, Any]) -> ObjectiveOutput:
        """The wrapped objective's loss at every dim, its terms and metrics named ``<term>@<d>``."""
        terms: dict[str, torch.Tensor] = {}
        metrics: dict[str, torch.Tensor | float] = {}
        for d in self.dims:
            out = ObjectiveOutput.of(self.objective.loss_at(views, batch, d))
            terms.update({f"{k}@{d}": v for k, v in out.terms.items()})
            metrics.update({f"{k}@{d}": v for k, v in out.metrics.items()})
        return ObjectiveOutput(terms=terms, metrics=metrics)

    def total(self, terms: Mapping[str, torch.Tensor]) -> torch.Tensor:
        """``sum_d w_d * objective.total(terms at d)``."""
        parts: list[torch.Tensor] = []
        for d, w in zip(self.dims, self.weights, strict=True):
            suffix = f"@{d}"
            at_d = {k[: -len(suffix)]: v for k, v in terms.items() if k.endswith(suffix)}
            parts.append(w * self.objective.total(at_d))
        return sum(parts[1:], parts[0])  # dims is never empty

    # ------------------------------------------------------------------------------------ run record
    @property
    def citations(self) -> tuple[str, ...]:
        return (*super().citations, *self.objective.citations)

    def config(self) -> dict[str, Any]:
        spec = super().config()
        spec["init_args"]["objective"] = self.objective.config()
        return spec

    def extra_repr(self) -> str:
        return f"dims={self.dims}, weights={self.weights}, weight={self.weight}, name={self.name!r}"
