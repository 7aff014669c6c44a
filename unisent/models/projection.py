"""CMLM's projection ``P`` and the inference model of its "proj" variant (Yang et al., 2021)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, ClassVar, Literal

import torch
from torch import nn

from ..inference.model_types import register_model
from .wrapper import EncoderWrapper

if TYPE_CHECKING:
    from ..encoders.encoder import Encoder

__all__ = ["ProjectionEncoder", "SentenceProjection"]

_ACTIVATIONS = {"gelu": nn.GELU, "relu": nn.ReLU, "tanh": nn.Tanh}


class SentenceProjection(nn.Module):
    """``P``: a sentence vector (batch, d) -> N vectors (batch, N, d).

    A 3-layer MLP ``d -> hidden -> hidden -> k * d`` with ``k = N - 1`` when the identity is one of
    the projections (the paper: "one of the projections being the identity mapping"; ``v`` is then
    the first of the N vectors), else ``k = N``.

    Args:
        hidden_size: d.
        num_projections: N (15 in the paper).
        mlp_size: width of the two hidden layers; 0 = d.
        activation: between the layers (``gelu``, ``relu`` or ``tanh``; the paper does not say).
        identity: make ``v`` itself one of the N vectors.
    """

    def __init__(
        self,
        hidden_size: int,
        num_projections: int = 15,
        mlp_size: int = 0,
        activation: Literal["gelu", "relu", "tanh"] = "gelu",
        identity: bool = True,
    ) -> None:
        super().__init__()
        if num_projections < 1:
            raise ValueError(f"num_projections must be >= 1, got {num_projections}")
        if activation not in _ACTIVATIONS:
            raise ValueError(f"unknown activation {activation!r}; valid: {', '.join(_ACTIVATIONS)}")
        self.settings = {
            "hidden_size": hidden_size,
            "num_projections": num_projections,
            "mlp_size": mlp_size,
            "activation": activation,
            "identity": identity,
        }
        self.identity = identity
        self.num_projections = num_projections
        learned = num_projections - int(identity)
        width = mlp_size or hidden_size
        self.mlp = None
        if learned:
            act = _ACTIVATIONS[activation]
            self.mlp = nn.Sequential(
                nn.Linear(hidden_size, width),
                act(),
                nn.Linear(width, width),
                act(),
                nn.Linear(width, learned * hidden_size),
            )

    def forward(self, v: torch.Tensor) -> torch.Tensor:
        """(batch, d) -> (batch, N, d); with ``identity`` the first vector is ``v``."""
        parts = [v.unsqueeze(1)] if self.identity else []
        if self.mlp is not None:
            parts.append(self.mlp(v).view(v.shape[0], -1, v.shape[1]))
        return torch.cat(parts, dim=1)


@register_model("cmlm-projection")
class ProjectionEncoder(EncoderWrapper["Encoder"]):
    """Inference model of CMLM's "proj" variant: the sentence vector is the mean of the N projections.

    ``unisent.load`` returns it for a directory it saved (the projection is in
    ``cmlm_projection.pt`` / ``.json`` beside the encoder's files) or a checkpoint of ``CMLM(proj=True)``.
    Not exportable to Sentence Transformers: the mean over the identity and the MLP's projections is
    a skip connection, which no built-in module chain computes.
    """

    head_attr = "projection"
    head_class = SentenceProjection
    head_stem = "cmlm_projection"
    export_formats: ClassVar[tuple[str, ...]] = ()

    def __init__(self, encoder: Encoder, projection: SentenceProjection) -> None:
        super().__init__()
        self.encoder = encoder
        self.projection = projection

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        """Token ids (batch, seq) -> mean of the projections (batch, d)."""
        return self.projection(self.encoder(input_ids, attention_mask)).mean(dim=1)

    @torch.inference_mode()
    def embed(self, sentences: Sequence[str], batch_size: int, precision: str, show_progress_bar: bool) -> torch.Tensor:
        """The mean of the projections, float32 (n, d) on the CPU, rows in input order (see
        [`Encoder.encode`][unisent.encoders.Encoder.encode])."""
        pooled = self.encoder.encode_pooled(
            sentences, batch_size, precision=precision, show_progress_bar=show_progress_bar
        )
        return torch.cat(self.map_head(self.projection, pooled, lambda c: self.projection(c).mean(dim=1).float().cpu()))

    def head_facts(self) -> list[tuple[str, str]]:
        s = self.projection.settings
        return [
            (
                "CMLM projection",
                f"mean of {s['num_projections']} projections{' (one of them the identity)' if s['identity'] else ''}",
            )
        ]
