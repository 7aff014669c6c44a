"""GaussCSE (Yoda et al., 2023): sentences as diagonal Gaussians, asymmetric similarity 1/(1+KL)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal

import torch
import torch.nn.functional as F
from torch import nn

from ..encoders.encoder import Encoder, EncoderWrapper
from ..losses.gaussian import GAUSS_SETS, gauss_cse_loss, gaussian_similarity_matrix
from .base import Objective, encode_views

__all__ = ["GaussCSE", "GaussianHead", "GaussianEncoder"]

CITATION = (
    "Yoda, Tsukagoshi, Sasano and Takeda. Sentence Representations via Gaussian Embedding. EACL 2024 "
    "(arXiv:2305.12990)."
)


class GaussianHead(nn.Module):
    """Two linear maps of the pooled vector: a mean and a positive diagonal variance.

    Args:
        hidden_size: size of the pooled sentence vector (and of the Gaussian).
        variance: ``exp`` of a log-variance (default, the authors' code), ``softplus`` or ``elu``
            (ELU + 1).
        mean_activation: ``none`` (the paper: a linear layer) or ``tanh`` (the authors' code).
        var_floor: added to every variance, keeps KL finite in low precision.
    """

    def __init__(
        self,
        hidden_size: int,
        variance: Literal["exp", "softplus", "elu"] = "exp",
        mean_activation: Literal["none", "tanh"] = "none",
        var_floor: float = 1e-6,
    ) -> None:
        super().__init__()
        if variance not in ("exp", "softplus", "elu") or mean_activation not in ("none", "tanh"):
            raise ValueError(f"unknown variance {variance!r} or mean_activation {mean_activation!r}")
        self.settings = {"hidden_size": hidden_size, "variance": variance, "mean_activation": mean_activation,
                         "var_floor": var_floor}
        self.mean = nn.Linear(hidden_size, hidden_size)
        self.var = nn.Linear(hidden_size, hidden_size)

    def forward(self, pooled: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(batch, hidden) -> ``(mu, var)``, each (batch, hidden), in float32."""
        mu = self.mean(pooled).float()
        if self.settings["mean_activation"] == "tanh":
            mu = torch.tanh(mu)
        raw = self.var(pooled).float()
        kind = self.settings["variance"]
        if kind == "exp":
            var = torch.exp(raw.clamp(max=60.0))
        elif kind == "softplus":
            var = F.softplus(raw)
        else:
            var = F.elu(raw) + 1.0
        return mu, var + self.settings["var_floor"]


class GaussianEncoder(EncoderWrapper):
    """Inference model of GaussCSE: ``encode`` gives the means, ``encode_gaussian`` (means, variances).

    ``unisent.load`` returns it for a GaussCSE checkpoint or a directory it saved (the head is in
    ``gaussian_head.pt`` / ``.json`` beside the encoder's files).
    """

    head_class = GaussianHead
    head_stem = "gaussian_head"

    def __init__(self, encoder: Encoder, head: GaussianHead) -> None:
        super().__init__()
        self.encoder = encoder
        self.head = head

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        """Token ids (batch, seq) -> means (batch, hidden)."""
        return self.head(self.encoder(input_ids, attention_mask))[0]

    @torch.inference_mode()
    def encode_gaussian(
        self, sentences: Sequence[str], batch_size: int = 64, *, bf16: bool = False, show_progress_bar: bool = False
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Means and variances, each a float32 (n, hidden) tensor on the CPU, rows in input order."""
        pooled = self.encoder.encode(sentences, batch_size, bf16=bf16, show_progress_bar=show_progress_bar)
        mu, var = zip(*self.map_head(self.head, pooled, self.head))
        return torch.cat(mu).cpu(), torch.cat(var).cpu()

    def encode(self, sentences: Sequence[str], batch_size: int = 64, *, normalize: bool = False, **kw) -> torch.Tensor:
        """The means (point embeddings, e.g. for cosine STS)."""
        mu, _ = self.encode_gaussian(sentences, batch_size, **kw)
        return F.normalize(mu, dim=-1) if normalize else mu

    def similarity(self, a: Sequence[str], b: Sequence[str], reduction: Literal["sum", "mean"] = "sum") -> torch.Tensor:
        """``sim(a_i || b_j)`` for all pairs: (len(a), len(b)). ``a_i`` entails ``b_j`` when this is
        larger than ``sim(b_j || a_i)``."""
        (mu_a, var_a), (mu_b, var_b) = self.encode_gaussian(a), self.encode_gaussian(b)
        return gaussian_similarity_matrix(mu_a, var_a, mu_b, var_b, reduction)


class GaussCSE(Objective):
    """GaussCSE's contrastive loss on NLI triples (eq. 4).

    Records ``{"anchor", "positive", "negative"}`` = (premise, entailment hypothesis, contradiction
    hypothesis); ``negative`` is needed only with the contradiction set. The encoder's pooled vector
    (the paper: ``[CLS]``) goes through a :class:`GaussianHead`.

    Args:
        sets: which negatives enter the denominator: ``[ent]``, ``[ent, con]``, ``[ent, rev]`` (best
            entailment direction) or ``[ent, con, rev]``.
        temperature: tau (0.05 in the paper).
        similarity: ``sum`` (the paper: KL summed over dimensions) or ``mean`` (the authors' code).
        variance, mean_activation, var_floor: see :class:`GaussianHead`.
        hidden_size: size of the pooled vector; 0 = taken from the encoder at the first step.
        weight, name, max_length: see :class:`~unisent.objectives.Objective`.
    """

    citation = CITATION

    def __init__(
        self,
        sets: list[str] | None = None,
        temperature: float = 0.05,
        similarity: Literal["sum", "mean"] = "sum",
        variance: Literal["exp", "softplus", "elu"] = "exp",
        mean_activation: Literal["none", "tanh"] = "none",
        var_floor: float = 1e-6,
        hidden_size: int = 0,
        weight: float = 1.0,
        name: str | None = None,
        max_length: int | None = None,
    ) -> None:
        super().__init__(weight=weight, name=name or "gausscse", max_length=max_length)
        self.sets = tuple(sets or ("ent", "rev"))
        if "ent" not in self.sets or not set(self.sets) <= set(GAUSS_SETS):
            raise ValueError(f"sets must contain 'ent' and be drawn from {GAUSS_SETS}, got {list(self.sets)}")
        self.temperature = temperature
        self.similarity = similarity
        self.head_settings = {"variance": variance, "mean_activation": mean_activation, "var_floor": var_floor}
        self.head = GaussianHead(hidden_size, **self.head_settings) if hidden_size else None
        self.batch_keys = self.text_keys = ("anchor", "positive", "negative") if "con" in self.sets else ("anchor", "positive")

    def setup_for(self, encoder: Encoder) -> None:
        """Create the head for ``encoder`` (called by the training module before the optimiser is built)."""
        if self.head is None:
            self.head = GaussianHead(encoder.hidden_size, **self.head_settings)
            self._init_args["hidden_size"] = encoder.hidden_size

    def forward(self, encoder: Encoder, batch: dict[str, Any]) -> dict[str, torch.Tensor]:
        self.setup_for(encoder)
        views = [self.head(v) for v in encode_views(encoder, batch, self.text_keys)]
        loss = gauss_cse_loss(
            views[0], views[1], views[2] if "con" in self.sets else None,
            sets=self.sets, temperature=self.temperature, reduction=self.similarity,
        )
        return {"contrastive": loss}

    def inference_model(self, encoder: Encoder) -> GaussianEncoder:
        self.setup_for(encoder)
        return GaussianEncoder(encoder, self.head)
