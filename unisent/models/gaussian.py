"""GaussCSE's inference model (Yoda et al., 2023): sentences as diagonal Gaussians.

The export serves both worlds: ``SentenceTransformer(DIR)`` gives the **means** (Transformer -> Pooling -> [the pooler's
Dense] -> a ``Dense`` holding the mean layer of the head), the point embeddings GaussCSE's STS scores use;
``unisent.load(DIR)`` gives the whole [`GaussianEncoder`][unisent.models.GaussianEncoder] (``encode_gaussian``,
``similarity``: the asymmetric KL similarity that captures entailment direction) from the ``gaussian_head.pt`` /
``gaussian_head.json`` files beside them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Literal, cast

import torch
import torch.nn.functional as F
from torch import nn

from ..encoders.poolers import head_pooler
from ..inference.base import ONNX, SENTENCE_TRANSFORMERS, NotExportableError, OnnxGraph, STModule, max_abs_diff
from ..inference.model_types import register_model
from ..losses.gaussian_kl import gaussian_similarity_matrix
from .wrapper import EncoderWrapper

if TYPE_CHECKING:
    from ..encoders.encoder import Encoder
    from ..encoders.export_declarations import EncoderOnnxGraph

__all__ = ["GaussianEncoder", "GaussianHead", "GaussianHeadSettings"]

_ACTIVATION = {"none": "torch.nn.modules.linear.Identity", "tanh": "torch.nn.modules.activation.Tanh"}


@dataclass
class GaussianHeadSettings:
    """A [`GaussianHead`][unisent.models.GaussianHead]'s settings, saved in ``gaussian_head.json``. Each
    option added after the first heads were saved defaults to the behaviour of before, so that a head saved
    without its key loads as it was trained; the file holds such a key only when it is not the default
    (``GaussianHeadSettings.saved``).

    Attributes:
        hidden_size: size of the pooled sentence vector (and of the Gaussian).
        variance: ``exp`` of a log-variance (default, the authors' code), ``softplus`` or ``elu``
            (ELU + 1).
        mean_activation: ``none`` (the paper: a linear layer) or ``tanh`` (the authors' code).
        var_floor: added to every variance, keeps KL finite in low precision.
        point: the point embedding the inference model's ``encode`` returns: ``mean`` (the Gaussian
            mean, GaussCSE's STS vector) or ``pooled`` (the encoder's pooled vector under the head:
            what other objectives trained in the same run, e.g. EASE, CMLM, AMR, shape); ``encode_gaussian``
            gives (mean, variance) either way.
        length_input: the variance map also reads ``log`` of each sentence's token count (special
            tokens included, after truncation). Not in the paper: mean pooling divides the token
            count away, and a sentence's specificity, which the variance stands for, goes with its
            length ([CLS] of a fine-tuned BERT, the paper's vector, can carry it). ``forward`` then needs
            ``lengths``. docs/results/unified.md measures it.
        pooler: the vectors the head reads: ``None`` (the encoder's sentence vectors) or a built-in
            pooler without weights, e.g. ``cls`` (the paper's ``[CLS]``) under an encoder that pools
            ``mean`` for everything else (``unisent.encoders.poolers.head_pooler``).
        own_layers: the head reads the pooled output of its own copies of the encoder's top ``own_layers``
            layers over the encoder's lower ones (task-specific top layers, as in hard parameter sharing),
            so its loss does not move the top of the encoder that the other objectives and ``encode`` read.
            0: none. The copies are made from the encoder by [`attach`][unisent.models.GaussianHead.attach]
            (training starts them from the encoder's weights) and saved with the head.
    """

    hidden_size: int
    variance: Literal["exp", "softplus", "elu"] = "exp"
    mean_activation: Literal["none", "tanh"] = "none"
    var_floor: float = 1e-6
    point: Literal["mean", "pooled"] = "mean"
    length_input: bool = False
    pooler: str | None = None
    own_layers: int = 0

    def __post_init__(self) -> None:
        if self.pooler is not None:  # a built-in name without weights, or ValueError
            head_pooler(self.pooler, self.hidden_size, source="pooler")
        if type(self.own_layers) is not int or self.own_layers < 0:
            raise ValueError(f"own_layers must be an integer >= 0, got {self.own_layers!r}")
        if self.variance not in ("exp", "softplus", "elu") or self.mean_activation not in ("none", "tanh"):
            raise ValueError(f"unknown variance {self.variance!r} or mean_activation {self.mean_activation!r}")
        if self.point not in ("mean", "pooled"):
            raise ValueError(f"point must be 'mean' or 'pooled', got {self.point!r}")

    def saved(self) -> dict[str, Any]:
        """The JSON of ``gaussian_head.json``: the four settings every head has saved, and each later one
        only when it is not its default (a head that does not use an option loads where it is unknown)."""
        later = {f.name: f.default for f in fields(self)[4:]}  # the fields after var_floor
        return {k: v for k, v in asdict(self).items() if k not in later or v != later[k]}


class GaussianHead(nn.Module):
    """Two linear maps of the pooled vector: a mean and a positive diagonal variance.

    Its arguments are the fields of ``GaussianHeadSettings`` (``config``; ``settings``: as saved): ``hidden_size``,
    then the others by keyword.
    """

    def __init__(self, hidden_size: int, **settings: Any) -> None:
        super().__init__()
        self.config = GaussianHeadSettings(hidden_size, **settings)
        self.mean = nn.Linear(hidden_size, hidden_size)
        self.var = nn.Linear(hidden_size + int(self.config.length_input), hidden_size)
        self.layers = nn.ModuleList()  # the own top layers, from [`attach`][unisent.models.GaussianHead.attach]

    def attach(self, encoder: nn.Module) -> GaussianHead:
        """Give the head its own copies of ``encoder``'s top ``own_layers`` layers (once; none without)."""
        k = self.config.own_layers
        if k and not len(self.layers):
            try:
                self.layers = cast("Encoder", encoder).top_layer_copies(k)
            except ValueError as err:
                raise ValueError(f"GaussCSE own_layers: {err}") from None
        return self

    @property
    def top_layers(self) -> nn.ModuleList | None:
        """The layers the encoder runs on top of its lower ones for this head, or ``None``: its own."""
        return self.layers if len(self.layers) else None

    @property
    def settings(self) -> dict[str, Any]:
        """The settings as ``gaussian_head.json`` holds them (``GaussianHeadSettings.saved``)."""
        return self.config.saved()

    def forward(self, pooled: torch.Tensor, lengths: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """(batch, hidden) -> ``(mu, var)``, each (batch, hidden), in float32. ``lengths`` (batch,): token
        counts, needed (and only read) with ``length_input``.

        Computed in float32 even under bf16 autocast: the variance is ``exp`` of the layer's output, and a
        bf16 output (8 bits of mantissa: steps of 0.03 at a log-variance of 5) would move every variance by
        up to 3% before the KL sums them over all dimensions. The two layers are a small part of a step."""
        with torch.autocast(pooled.device.type, enabled=False):
            return self._forward(pooled.float(), lengths)

    def _forward(self, pooled: torch.Tensor, lengths: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
        mu = self.mean(pooled).float()
        if self.config.mean_activation == "tanh":
            mu = torch.tanh(mu)
        var_in = pooled
        if self.config.length_input:
            if lengths is None:
                raise ValueError("this Gaussian head reads each sentence's token count (length_input): pass lengths")
            log_len = lengths.to(device=pooled.device, dtype=pooled.dtype).clamp(min=1).log().unsqueeze(-1)
            var_in = torch.cat([pooled, log_len], dim=-1)
        raw = self.var(var_in).float()
        kind = self.config.variance
        if kind == "exp":
            var = torch.exp(raw.clamp(max=60.0))
        elif kind == "softplus":
            var = F.softplus(raw)
        else:
            var = F.elu(raw) + 1.0
        return mu, var + self.config.var_floor


@register_model("gaussian")
class GaussianEncoder(EncoderWrapper):
    """Inference model of GaussCSE: ``encode`` gives the point embeddings (the means, or the pooled
    vectors for a head with ``point="pooled"``), ``encode_gaussian`` (means, variances).

    ``unisent.load`` returns it for a GaussCSE checkpoint or a directory it saved (the head is in
    ``gaussian_head.pt`` / ``.json`` beside the encoder's files).
    """

    head_class = GaussianHead
    head_stem = "gaussian_head"
    card_tags = ("gaussian-embeddings", "gausscse")
    export_formats: ClassVar[tuple[str, ...]] = (SENTENCE_TRANSFORMERS, ONNX)

    def __init__(self, encoder: nn.Module, head: GaussianHead) -> None:
        super().__init__()
        self.encoder = encoder
        self.head = head.attach(encoder)

    @classmethod
    def build_head(cls, settings: dict, encoder: nn.Module) -> GaussianHead:
        """The head of ``settings``, with its own top layers shaped as ``encoder``'s (weights loaded after)."""
        return GaussianHead(**settings).attach(encoder)

    @property
    def point(self) -> str:
        """``mean`` or ``pooled``: what [`encode`][unisent.inference.InferenceModel.encode] and
        [`forward`][unisent.models.GaussianEncoder.forward] return."""
        return self.head.config.point

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        """Token ids (batch, seq) -> point embeddings (batch, hidden): the means, or the pooled vectors."""
        if self.point == "pooled":
            return self.encoder(input_ids, attention_mask)
        head = self.head
        return head(self.encoder(input_ids, attention_mask, pooler=head.config.pooler, top_layers=head.top_layers))[0]

    @torch.inference_mode()
    def encode_gaussian(
        self,
        sentences: Sequence[str],
        batch_size: int = 64,
        *,
        precision: str = "auto",
        show_progress_bar: bool = False,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Means and variances, each a float32 (n, hidden) tensor on the CPU, rows in input order. The
        encoder runs at ``precision`` as in ``Encoder.encode``; the head in fp32."""
        pooled = self.encoder.encode_pooled(
            sentences,
            batch_size,
            precision=precision,
            show_progress_bar=show_progress_bar,
            pooler=self.head.config.pooler,
            top_layers=self.head.top_layers,
        )
        if self.head.config.length_input:  # the token counts ride along as a last column, chunked with the vectors
            lengths = torch.tensor([len(ids) for ids in self.encoder.tokenize_ids(sentences)], dtype=pooled.dtype)
            mu, var = zip(
                *self.map_head(
                    self.head, torch.cat([pooled, lengths[:, None]], dim=-1), lambda c: self.head(c[:, :-1], c[:, -1])
                )
            )
        else:
            mu, var = zip(*self.map_head(self.head, pooled, self.head))
        return torch.cat(mu).cpu(), torch.cat(var).cpu()

    def embed(self, sentences: Sequence[str], batch_size: int, precision: str, show_progress_bar: bool) -> torch.Tensor:
        """The point embeddings (e.g. for cosine STS): the means, or with ``point="pooled"`` the
        encoder's own ``encode`` (its pooled vectors, normalised if the encoder normalises)."""
        options = {"precision": precision, "show_progress_bar": show_progress_bar}
        if self.point == "pooled":
            return self.encoder.encode(sentences, batch_size, **options)
        return self.encode_gaussian(sentences, batch_size, **options)[0]

    def similarity(self, a: Sequence[str], b: Sequence[str], reduction: Literal["sum", "mean"] = "sum") -> torch.Tensor:
        """``sim(a_i || b_j)`` for all pairs: (len(a), len(b)). ``b_j`` entails ``a_i`` when this is
        larger than ``sim(b_j || a_i)`` (the direction tasks score ``sim(hyp || pre) > sim(pre || hyp)``)."""
        (mu_a, var_a), (mu_b, var_b) = self.encode_gaussian(a), self.encode_gaussian(b)
        return gaussian_similarity_matrix(mu_a, var_a, mu_b, var_b, reduction)

    # ------------------------------------------------------------------------------ exports
    def head_facts(self) -> list[tuple[str, str]]:
        s = self.head.config
        return [
            (
                "Gaussian head",
                f"mean: Linear{' + Tanh' if s.mean_activation == 'tanh' else ''}; "
                f"variance: Linear{' of [pooled, log token count]' if s.length_input else ''} + "
                f"{s.variance} (+ {s.var_floor:g})"
                + (f"; reads the `{s.pooler}` vector, not the encoder's" if s.pooler else "")
                + (f"; over its own copies of the top {s.own_layers} layers" if s.own_layers else ""),
            ),
            (
                "point embedding (`encode`)",
                "the pooled vector under the head" if self.point == "pooled" else "the Gaussian mean",
            ),
        ]

    def sentence_transformers_modules(self) -> list[STModule]:
        if self.point == "pooled":  # the encoder's own modules: its pooled (and normalised) vectors
            return self.encoder.sentence_transformers_modules()
        if self.head.top_layers is not None:
            raise NotExportableError(
                "a Gaussian head over its own top layers has no Sentence Transformers modules for its means "
                "(with point: pooled the encoder's vectors export, and unisent.load reads the head)"
            )
        if self.head.config.pooler is not None:  # the means: the head's own pooling (e.g. cls), then its mean layer
            pool = self.encoder.named_pooler(self.head.config.pooler)
            return (
                pool.sentence_transformers_modules(self.encoder.backbone.config)
                + self.head_sentence_transformers_modules()
            )
        return super().sentence_transformers_modules()

    def head_sentence_transformers_modules(self) -> list[STModule]:
        """The mean layer as a ``Dense`` (the variances stay in ``gaussian_head.pt`` for unisent)."""
        return [STModule.dense(self.head.mean, _ACTIVATION[self.head.config.mean_activation], "Dense (mean)")]

    def sentence_transformers_usage(self) -> str:
        point = (
            "**pooled vectors** (the encoder's sentence vectors under the Gaussian head)"
            if self.point == "pooled"
            else "**means**"
        )
        pooled_note = (
            """
These pooled vectors are the encoder's own: if the encoder was frozen during training (as in
`recipes/gausscse/quickstart.yaml`), they are exactly the base model's vectors, unchanged by this
training. What the training learned is in the Gaussian head (the entailment direction comes from the
variances), which only `unisent.load` below uses.
"""
            if self.point == "pooled"
            else ""
        )
        return f"""This is a Gaussian sentence embedding model (GaussCSE): each sentence is a Gaussian with a mean
and a diagonal variance. The directory holds both.

The {point} with [Sentence Transformers](https://www.sbert.net) (point embeddings for cosine
similarity, retrieval, clustering):

```python
from sentence_transformers import SentenceTransformer

model = SentenceTransformer("path/to/this/directory")
vectors = model.encode(["A man is playing a guitar.", "Someone plays music."])
```
{pooled_note}
The **full model** with unisent: means and variances, and the asymmetric similarity
`sim(a || b) = 1 / (1 + KL(a || b))`; `b` entails `a` when `sim(a || b) > sim(b || a)`
(the premise entails the hypothesis when `sim(hypothesis || premise)` is the larger):

```python
import unisent

model = unisent.load("path/to/this/directory")
mu, var = model.encode_gaussian(["A man is playing a guitar.", "Someone plays music."])
sim = model.similarity(["A man is playing a guitar."], ["Someone plays music."])
```
"""

    def onnx_graph(self) -> OnnxGraph:
        """The encoder's graph and the head: outputs ``last_hidden_state``, ``sentence_embedding``
        ([`encode`][unisent.inference.InferenceModel.encode]'s point embeddings), ``mean`` and ``variance``
        (``encode_gaussian``'s); the token counts a ``length_input`` head reads are the attention mask's sums."""
        encoder = self.encoder.onnx_graph(normalize=False)
        name = self.head.config.pooler
        pool = None if name is None else self.encoder.named_pooler(name)
        if pool is not None and pool.needs_hidden_states:
            raise NotExportableError(f"a Gaussian head that reads the {name!r} vectors has no ONNX graph")
        if self.head.top_layers is not None and (pool or self.encoder.pooler).needs_hidden_states:
            raise NotExportableError("a Gaussian head over its own top layers pools the last layer only in ONNX")
        graph = _GaussianOnnxGraph(
            cast("EncoderOnnxGraph", encoder.module), self.head, self.point, bool(self.encoder.config.normalize), pool
        )
        return OnnxGraph(graph, ("last_hidden_state", "sentence_embedding", "mean", "variance"), encoder.token_type_ids)

    def export_checks(self, out: Path, sentences: Sequence[str], format: str) -> list[tuple[float, str]]:
        """Besides the exporters' check of ``encode`` (the pooled vectors or the means): the variances
        through ``unisent.load(DIR).encode_gaussian`` (a Sentence Transformers export keeps them for unisent)."""
        if format != SENTENCE_TRANSFORMERS:
            return []
        _, var = self.encode_gaussian(list(sentences), precision="fp32")
        saved = cast(GaussianEncoder, type(self).from_pretrained(out))
        _, var2 = saved.eval().encode_gaussian(list(sentences), precision="fp32")
        return [(max_abs_diff(var2, var), "`unisent.load(DIR).encode_gaussian` (variances)")]


class _GaussianOnnxGraph(nn.Module):
    """[`GaussianEncoder.onnx_graph`][unisent.models.GaussianEncoder.onnx_graph]'s module:
    ``(last_hidden_state, point embedding, mean, variance)``."""

    def __init__(
        self,
        encoder: EncoderOnnxGraph,
        head: GaussianHead,
        point: str,
        normalize_pooled: bool,
        pool: nn.Module | None = None,
    ) -> None:
        super().__init__()
        self.encoder, self.head, self.point, self.normalize_pooled = encoder, head, point, normalize_pooled
        self.pool = pool  # the head's own pooler (GaussianHead.pooler), or None: the encoder's pooled vectors

    def forward(
        self, input_ids: torch.Tensor, attention_mask: torch.Tensor, token_type_ids: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        if self.head.top_layers is None:
            last, pooled = self.encoder.pooled(input_ids, attention_mask, token_type_ids)
            read = pooled if self.pool is None else self.pool(last, attention_mask, None)
        else:
            last, pooled, read = self._own_layers(input_ids, attention_mask, token_type_ids)
        lengths = attention_mask.sum(dim=1) if self.head.config.length_input else None
        mu, var = self.head._forward(read.float(), lengths)
        if self.point == "pooled":
            point = F.normalize(pooled, dim=-1) if self.normalize_pooled else pooled
        else:
            point = mu * 1.0  # a tensor of its own: an ONNX output is one tensor, "mean" is another
        return last, point, mu, var

    def _own_layers(
        self, input_ids: torch.Tensor, attention_mask: torch.Tensor, token_type_ids: torch.Tensor | None
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``(last_hidden_state, the encoder's pooled vectors, what the head reads)``: the head's own copies run
        on the backbone's state below its top ``k`` layers, padded, with BERT's additive attention mask (the
        unpadded forward of ``Encoder.forward(top_layers=...)`` is not traceable; equal to 1e-5)."""
        encoder = self.encoder.encoder
        extra = {"token_type_ids": token_type_ids} if token_type_ids is not None else {}
        out = encoder.backbone(input_ids=input_ids, attention_mask=attention_mask, output_hidden_states=True, **extra)
        pooled = encoder.pooler(out.last_hidden_state, attention_mask, out.hidden_states)
        own = self.head.layers  # (not empty: this runs for a head with top_layers)
        hidden = out.hidden_states[-1 - len(own)]  # the input of the first layer the copies replace
        additive = (1.0 - attention_mask[:, None, None, :].to(hidden.dtype)) * torch.finfo(hidden.dtype).min
        for layer in own:
            hidden = layer(hidden, attention_mask=additive)
            hidden = hidden[0] if isinstance(hidden, tuple) else hidden  # transformers 4 returns a tuple
        pool = self.pool if self.pool is not None else encoder.pooler
        return out.last_hidden_state, pooled, pool(hidden, attention_mask, None)
