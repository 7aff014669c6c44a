"""GaussCSE (Yoda et al., 2023): sentences as diagonal Gaussians, asymmetric similarity 1/(1+KL)."""

from __future__ import annotations

from typing import Any, Literal, cast

import torch

from ..encoders.encoder import Encoder
from ..encoders.poolers import head_pooler
from ..losses.gaussian_kl import GAUSS_SETS, gauss_cse_loss
from ..models.gaussian import GaussianEncoder, GaussianHead
from .objective import EncodeFn, Objective, encode_views

__all__ = ["GaussCSE", "GaussianHead", "GaussianEncoder"]


CITATION = (
    "Yoda, Tsukagoshi, Sasano and Takeda. Sentence Representations via Gaussian Embedding. EACL 2024 "
    "(arXiv:2305.12990)."
)


class GaussCSE(Objective):
    """GaussCSE's contrastive loss (eq. 4) on NLI triples ``{"anchor", "positive", "negative"}`` (``negative`` only with
    the ``con`` set); the pooled vector (the paper: ``[CLS]``) goes through a
    [`GaussianHead`][unisent.models.GaussianHead].

    Args:
        sets: the denominator's negatives: ``[ent]``, ``[ent, con]``, ``[ent, rev]`` (best for entailment
            direction) or ``[ent, con, rev]``.
        temperature: tau (0.05 in the paper).
        similarity: ``sum`` (the paper: KL summed over dimensions) or ``mean`` (the authors' code).
        variance: see [`GaussianHead`][unisent.models.GaussianHead].
        mean_activation: see [`GaussianHead`][unisent.models.GaussianHead].
        var_floor: see [`GaussianHead`][unisent.models.GaussianHead].
        point: what ``encode`` returns: ``mean`` (the paper's STS vector) or ``pooled`` (the encoder's
            own, e.g. when other objectives train it; docs/training.md, "Combining objectives").
        head_lr: learning rate of the Gaussian head; ``None`` (the paper): the optimiser's. A head on a
            shared or frozen encoder learns in few steps only at a higher rate (docs/results/unified.md).
        encoder_grad: scale of the gradient this loss sends into the encoder (the head's is unchanged): 1 (the
            paper); 0 trains the head alone, without a graph through the encoder; the unified recipe: 0.1.
        length_input: the variance also reads each sentence's log token count (not in the paper).
        pooler: the vectors the Gaussian head reads: ``None`` (the encoder's sentence vectors) or a built-in
            pooler without weights, ``cls`` (the paper's [CLS]) while the encoder pools ``mean`` for the
            other objectives and ``encode`` (docs/methods/gausscse.md, "The head's own pooler").
        own_layers: the head reads its own copies of the encoder's top ``own_layers`` layers, started from
            the encoder's weights, over the encoder's lower layers (not in the paper; task-specific top layers):
            this loss then moves the encoder's lower layers and its own copies, not the top that ``encode`` and
            the other objectives read. The copies learn as the encoder does (its rate, held while
            ``model.train.heads.only_ratio`` holds it), not at ``head_lr``, and ``encoder_grad`` scales their
            gradient as the encoder's (docs/methods/gausscse.md, "Own top layers").
        hidden_size: size of the pooled vector; 0 = taken from the encoder at the first step.
    """

    name = "gausscse"
    citation = CITATION

    def __init__(
        self,
        sets: list[str] | None = None,
        temperature: float = 0.05,
        similarity: Literal["sum", "mean"] = "sum",
        variance: Literal["exp", "softplus", "elu"] = "exp",
        mean_activation: Literal["none", "tanh"] = "none",
        var_floor: float = 1e-6,
        point: Literal["mean", "pooled"] = "mean",
        head_lr: float | None = None,
        encoder_grad: float = 1.0,
        length_input: bool = False,
        pooler: str | None = None,
        own_layers: int = 0,
        hidden_size: int = 0,
        weight: float = 1.0,
        name: str | None = None,
        max_length: int | None = None,
    ) -> None:
        super().__init__(weight=weight, name=name, max_length=max_length)
        self.sets = tuple(sets or ("ent", "rev"))
        if "ent" not in self.sets or not set(self.sets) <= set(GAUSS_SETS):
            raise ValueError(f"sets must contain 'ent' and be drawn from {GAUSS_SETS}, got {list(self.sets)}")
        if not 0.0 <= encoder_grad <= 1.0:
            raise ValueError(f"encoder_grad must be in [0, 1], got {encoder_grad}")
        if pooler is not None:
            head_pooler(pooler, 1, source="GaussCSE pooler")  # a built-in name without weights, or ValueError
        self.temperature = temperature
        self.similarity: Literal["sum", "mean"] = similarity
        self.param_lr = head_lr
        self.encoder_grad = float(encoder_grad)
        self.head_settings: dict[str, Any] = {  # GaussianHead's arguments but hidden_size
            "variance": variance,
            "mean_activation": mean_activation,
            "var_floor": var_floor,
            "point": point,
            "length_input": length_input,
            "pooler": pooler,
            "own_layers": own_layers,
        }
        self.head = GaussianHead(hidden_size, **self.head_settings) if hidden_size else None
        self.batch_keys = self.text_keys = (
            ("anchor", "positive", "negative") if "con" in self.sets else ("anchor", "positive")
        )

    def setup_for(self, encoder: Encoder) -> None:
        """Create the head for ``encoder``."""
        if self.head is None:
            size = encoder.hidden_size if self.head_settings["pooler"] is None else encoder.backbone.config.hidden_size
            self.head = GaussianHead(size, **self.head_settings)
            self._init_args["hidden_size"] = size
        self.head.attach(encoder)

    def encoder_like_modules(self) -> list[torch.nn.Module]:
        """The own top layers: they learn at the encoder's rate and are held with it
        (``model.train.heads.only_ratio``)."""
        layers = self.head.top_layers if self.head is not None else None  # None: no own layers
        return [layers] if layers is not None else []

    def forward(self, encoder: Encoder, batch: dict[str, Any]) -> dict[str, torch.Tensor]:
        self.setup_for(encoder)
        return cast(dict[str, torch.Tensor], super().forward(encoder, batch))  # the base's loss(embed(...))

    def _built_head(self) -> GaussianHead:
        """The head, built by ``setup_for`` (which the training module calls first)."""
        if self.head is None:
            raise RuntimeError("GaussCSE.setup_for(encoder) was not called: the head is not built")
        return self.head

    def embed(self, encode: EncodeFn, batch: dict[str, Any]) -> list[torch.Tensor]:
        """The pooled vectors of each field; the encoder receives ``encoder_grad`` x the loss's gradient."""
        top, pooler = self._built_head().top_layers, self.head_settings["pooler"]
        with torch.set_grad_enabled(torch.is_grad_enabled() and self.encoder_grad > 0):
            pooled = encode_views(encode, batch, self.text_keys, pooler=pooler, top_layers=top)
        if 0 < self.encoder_grad < 1:  # same values; the encoder receives encoder_grad x the gradient
            pooled = [v.detach() + self.encoder_grad * (v - v.detach()) for v in pooled]
        return pooled

    def loss(self, views: list[torch.Tensor], batch: dict[str, Any], dim: int | None = None) -> dict[str, torch.Tensor]:
        """The loss of the head's Gaussians of ``views``; ``dim``: of their first ``dim`` coordinates (the
        marginal Gaussians)."""
        head = self._built_head()
        if head.config.length_input:  # token counts per view, from the attention masks
            gauss = [head(v, batch[k]["attention_mask"].sum(dim=1)) for v, k in zip(views, self.text_keys)]
        else:
            gauss = [head(v) for v in views]
        if dim is not None:
            gauss = [(mu[..., :dim], var[..., :dim]) for mu, var in gauss]
        loss = gauss_cse_loss(
            gauss[0],
            gauss[1],
            gauss[2] if "con" in self.sets else None,
            sets=self.sets,
            temperature=self.temperature,
            reduction=self.similarity,
        )
        return {"contrastive": loss}

    def loss_at(self, views: list[torch.Tensor], batch: dict[str, Any], dim: int) -> dict[str, torch.Tensor]:
        """The head reads the whole pooled vector; the Gaussians are cut to ``dim``."""
        return self.loss(views, batch, dim)

    def prefix_error(self) -> str | None:
        if self.head_settings["point"] == "pooled":
            return (
                "with point: pooled: it trains prefixes of the Gaussians (mean and variance), while encode would "
                "return the pooled vector; use point: mean"
            )
        return None

    def inference_model(self, encoder: Encoder) -> GaussianEncoder:
        self.setup_for(encoder)
        return GaussianEncoder(encoder, self._built_head())
