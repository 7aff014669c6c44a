"""Matryoshka representation learning (Kusupati et al., 2022): any pooled-vector objective, trained
at several nested prefixes of the sentence vector at once."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch
from torch import nn

from ..encoders.encoder import Encoder
from ..io.imports import import_object
from .objective import BatchSchema, Objective, ObjectiveOutput, objective_from_record

__all__ = ["Matryoshka", "TruncatingEncoder"]

CITATION = (
    "Kusupati, Bhatt, Rege, Wallingford, Sinha, Ramanujan, Howard-Snyder, Chen, Kakade, Jain and Farhadi. "
    "Matryoshka Representation Learning. NeurIPS 2022. https://arxiv.org/abs/2205.13147"
)


class TruncatingEncoder:
    """Stands in for the encoder during one of :class:`Matryoshka`'s passes over the wrapped objective.

    Calling it returns the real encoder's pooled vectors truncated to ``[..., :dim]``. The first pass
    (``cache is None`` on entry) runs the real encoder and records each call's output, in call order; the
    later passes return those recorded tensors, truncated: the encoder runs once per step and every
    prefix's loss flows back through the same graph. Every other attribute is the real encoder's.
    """

    def __init__(self, encoder: Encoder, dim: int | None, cache: list[tuple[tuple, torch.Tensor]] | None) -> None:
        self._encoder, self._dim = encoder, dim
        self._replay = cache is not None
        self.cache: list[tuple[tuple, torch.Tensor]] = cache if cache is not None else []
        self._calls = 0

    def __call__(self, *args: Any, **kwargs: Any) -> torch.Tensor:
        shapes = tuple(tuple(a.shape) if torch.is_tensor(a) else a for a in (*args, *kwargs.values()))
        if not self._replay:
            self.cache.append((shapes, self._encoder(*args, **kwargs)))
        elif self._calls >= len(self.cache) or self.cache[self._calls][0] != shapes:
            raise RuntimeError(
                f"Matryoshka: the wrapped objective called the encoder differently at dim {self._dim} than in its "
                "first pass; its forward must encode the same inputs in the same order at every dim"
            )
        out = self.cache[self._calls][1]
        self._calls += 1
        return out[..., : self._dim]

    def __getattr__(self, name: str) -> Any:
        return getattr(self._encoder, name)


class Matryoshka(Objective):
    """Matryoshka representation learning: the wrapped objective's loss at every prefix length of ``dims``.

    The wrapped objective's :meth:`forward` runs once per dim with a stand-in encoder
    (:class:`TruncatingEncoder`) whose pooled vectors are the real ones cut to their first ``d``
    coordinates; the encoder itself runs once per step (the first pass's outputs are reused). Its
    terms are logged as ``<term>@<d>`` (``train/simcse/contrastive@64``) and the loss is
    ``sum_d w_d * objective.total(terms at d)``. After training, the first ``d`` coordinates of a
    sentence vector are a sentence vector of their own.

    Every other hook (data schema, collate, ``setup_for``, ``setup_data``, ``inference_model``) is the
    wrapped objective's, and its name is the wrapped one's by default, so ``data.train`` keys do not
    change. Only objectives whose loss is computed from the encoder's pooled vectors alone can be
    wrapped: classes that set ``matryoshka_ready = True`` (SimCSE, BitextRetrieval, AMRSimCSE, GaussCSE).
    An objective that also sets ``matryoshka_cuts_outputs = True`` cuts its own outputs instead: GaussCSE's
    head reads the whole pooled vector and the loss at ``d`` is the KL of the first ``d`` coordinates of
    each mean *and* variance (its ``output_dim``, set for each pass; with ``point: mean`` only, so that
    ``encode``'s vector is the one whose prefixes are trained). CMLM (its MLM runs through the backbone)
    and EASE (its entity vectors are projected to the full hidden size) are refused.

    Args:
        objective: the objective to train at every dim (from YAML: a nested ``class_path``/``init_args``).
            Its own ``weight`` is ignored; this objective's ``weight`` counts.
        dims: prefix lengths, strictly decreasing, the largest at most the encoder's hidden size
            (e.g. ``[768, 512, 256, 128, 64]``).
        weights: ``w_d``, one per dim; default 1 each (the paper's).
        weight: multiplier of this objective's loss in the total.
        name: default: the wrapped objective's name.
    """

    citation = CITATION

    def __init__(
        self,
        objective: Objective,
        dims: list[int],
        weights: list[float] | None = None,
        weight: float = 1.0,
        name: str | None = None,
    ) -> None:
        if isinstance(objective, Mapping):  # rebuilt from a checkpoint's record (config()): through the registry
            objective = objective_from_record(objective, source="Matryoshka", field="objective")
        if not isinstance(objective, Objective):
            raise TypeError(f"Matryoshka wraps an Objective, got {type(objective).__name__}")
        if not getattr(objective, "matryoshka_ready", False):
            raise ValueError(
                f"Matryoshka cannot wrap {type(objective).__name__}: its loss is not computed from the encoder's "
                "pooled vectors alone (wrap SimCSE, BitextRetrieval, AMRSimCSE, GaussCSE, "
                "or a class with matryoshka_ready = True)"
            )
        if (
            getattr(objective, "matryoshka_cuts_outputs", False)
            and getattr(objective, "head_settings", {}).get("point") == "pooled"
        ):
            raise ValueError(
                f"Matryoshka cannot wrap {type(objective).__name__} with point: pooled: it trains prefixes of the "
                "Gaussians (mean and variance), while encode would return the pooled vector; use point: mean"
            )
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

    @classmethod
    def name_in_recipe(cls, init_args: Mapping[str, Any] | None) -> str:
        """``name``, else the wrapped objective's name in the recipe (its ``data.train`` key)."""
        args = dict(init_args or {})
        inner = args.get("objective")
        if args.get("name") or not isinstance(inner, Mapping) or "class_path" not in inner:
            return super().name_in_recipe(args)
        return import_object(inner["class_path"]).name_in_recipe(inner.get("init_args"))

    # ------------------------------------------------------------------------ the wrapped objective's
    @property
    def batch_keys(self) -> tuple[str, ...]:
        return self.objective.batch_keys

    @property
    def text_keys(self) -> tuple[str, ...]:
        return self.objective.text_keys

    @property
    def optional_keys(self) -> tuple[str, ...]:
        return self.objective.optional_keys

    @property
    def extends_vocabulary(self) -> bool:
        return self.objective.extends_vocabulary

    @property
    def param_lr(self) -> float | None:
        return self.objective.param_lr

    @property
    def cache_ready(self) -> bool:
        return self.objective.cache_ready

    @property
    def schema(self) -> BatchSchema:
        return self.objective.schema

    def collate(self, features: Sequence[dict[str, Any]], pad_id: int) -> dict[str, Any]:
        return self.objective.collate(features, pad_id)

    def setup_data(self, dataset) -> Any:
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
    def forward(self, encoder: Encoder, batch: dict[str, Any]) -> ObjectiveOutput:
        if self.dims[0] > encoder.hidden_size:
            self.setup_for(encoder)  # the one-line error
        terms: dict[str, torch.Tensor] = {}
        metrics: dict[str, torch.Tensor | float] = {}
        cache = None
        own = getattr(self.objective, "matryoshka_cuts_outputs", False)  # it cuts its own outputs (GaussCSE)
        for d in self.dims:
            proxy = TruncatingEncoder(encoder, None if own else d, cache)
            if own:
                self.objective.output_dim = d
            try:
                out = ObjectiveOutput.of(self.objective(proxy, batch))
            finally:
                if own:
                    self.objective.output_dim = None
            cache = proxy.cache
            terms.update({f"{k}@{d}": v for k, v in out.terms.items()})
            metrics.update({f"{k}@{d}": v for k, v in out.metrics.items()})
        return ObjectiveOutput(terms=terms, metrics=metrics)

    def total(self, terms: Mapping[str, torch.Tensor]) -> torch.Tensor:
        """``sum_d w_d * objective.total(terms at d)``."""
        loss = 0.0
        for d, w in zip(self.dims, self.weights, strict=True):
            suffix = f"@{d}"
            at_d = {k[: -len(suffix)]: v for k, v in terms.items() if k.endswith(suffix)}
            loss = loss + w * self.objective.total(at_d)
        return loss

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
