"""CMLM (Yang et al., 2021): masked language modelling of a sentence conditioned on its neighbour's vector."""

from __future__ import annotations

import inspect
import warnings
from collections.abc import Callable
from typing import Any, Literal, cast

import torch
import torch.nn.functional as F
from torch import nn

from ..encoders.encoder import Encoder
from ..encoders.loading import resolve_model_location
from ..models.projection import ProjectionEncoder, SentenceProjection
from .objective import Objective, ObjectiveOutput

__all__ = ["CMLM", "MaskedLMHead", "ProjectionEncoder", "SentenceProjection", "mask_tokens"]

CITATION = (
    "Yang, Zhang, Cer, Darve and Kurzweil (Yang et al.). Universal Sentence Representation Learning with "
    "Conditional Masked Language Model. EMNLP 2021. https://aclanthology.org/2021.emnlp-main.502"
)


# ------------------------------------------------------------------------------------------ masking
def _check_masking(ratio: float, mask_prob: float, random_prob: float, ratio_name: str) -> None:
    if not 0.0 < ratio <= 1.0:
        raise ValueError(f"{ratio_name} must be in (0, 1], got {ratio}")
    if mask_prob < 0 or random_prob < 0 or mask_prob + random_prob > 1:
        raise ValueError(
            f"need mask_prob, random_prob >= 0 and mask_prob + random_prob <= 1, got {mask_prob}, {random_prob}"
        )


def mask_tokens(
    input_ids: torch.Tensor,  # (batch, seq)
    attention_mask: torch.Tensor,  # (batch, seq)
    *,
    special_ids: torch.Tensor,  # (n_special,)
    mask_token_id: int,
    replacement_ids: torch.Tensor,  # (n_replacement,)
    ratio: float = 0.3125,
    mask_prob: float = 0.8,
    random_prob: float = 0.1,
    generator: torch.Generator | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """BERT-style masking of a padded batch, vectorised. Candidates are real tokens that are not in ``special_ids``.
    Per row, ``k = floor(ratio * n + u)`` of its ``n`` candidates are chosen uniformly (``u ~ U(0, 1)``: stochastic
    rounding, so the expected fraction is exactly ``ratio``; the paper: 80 of 256 = 0.3125), at least one if any.
    Each becomes ``[MASK]`` with probability ``mask_prob``, a uniform draw from ``replacement_ids`` (the vocabulary
    minus specials) with ``random_prob``, else stays. ``generator``: default the global RNG. Returns the corrupted
    ids and a bool mask of the positions to predict, both (batch, seq).
    """
    _check_masking(ratio, mask_prob, random_prob, "mask ratio")
    device = input_ids.device

    def rand(*shape: int) -> torch.Tensor:
        where = generator.device if generator is not None else device
        return torch.rand(*shape, generator=generator, device=where).to(device)

    candidates = attention_mask.bool() & ~torch.isin(input_ids, special_ids.to(device))  # (batch, seq)
    n = candidates.sum(1)  # (batch,)
    k = torch.floor(ratio * n + rand(n.shape[0])).long()
    k = torch.minimum(torch.where(n > 0, k.clamp_min(1), k), n)
    scores = rand(*input_ids.shape).masked_fill(~candidates, 2.0)  # non-candidates sort last
    ranks = scores.argsort(dim=1).argsort(dim=1)
    targets = (ranks < k.unsqueeze(1)) & candidates
    action = rand(*input_ids.shape)
    to_mask = targets & (action < mask_prob)
    to_random = targets & (action >= mask_prob) & (action < mask_prob + random_prob)
    replacement_ids = replacement_ids.to(device)
    pick = (rand(*input_ids.shape) * len(replacement_ids)).long().clamp_max(len(replacement_ids) - 1)
    masked = torch.where(to_mask, torch.full_like(input_ids, mask_token_id), input_ids)
    masked = torch.where(to_random, replacement_ids[pick], masked)
    return masked, targets


# ------------------------------------------------------------------------------------------ modules
class MaskedLMHead(nn.Module):
    """BERT's MLM head: dense + activation + LayerNorm, then the vocabulary projection by the encoder's
    input embeddings (passed to ``forward``: tied without a shared parameter); only the bias is its own."""

    def __init__(
        self,
        hidden_size: int,
        vocab_size: int,
        activation: str | Callable[[torch.Tensor], torch.Tensor] = "gelu",
        layer_norm_eps: float = 1e-12,
        init_std: float = 0.02,
    ) -> None:
        super().__init__()
        from transformers.activations import ACT2FN

        self.dense = nn.Linear(hidden_size, hidden_size)
        self.activation: Callable[[torch.Tensor], torch.Tensor] = (
            ACT2FN[activation] if isinstance(activation, str) else activation
        )
        self.layer_norm = nn.LayerNorm(hidden_size, eps=layer_norm_eps)
        self.bias = nn.Parameter(torch.zeros(vocab_size))
        nn.init.normal_(self.dense.weight, std=init_std)
        nn.init.zeros_(self.dense.bias)

    def forward(self, hidden: torch.Tensor, embeddings: torch.Tensor) -> torch.Tensor:
        """(n, d) states and the (vocab, d) embedding matrix -> (n, vocab) logits."""
        h = self.layer_norm(self.activation(self.dense(hidden)))
        return F.linear(h, embeddings, self.bias)


def _pretrained_mlm_head(location: str) -> dict[str, torch.Tensor] | None:
    """The MLM head of the checkpoint at ``location`` (BERT, RoBERTa/XLM-R/MPNet, DistilBERT, ModernBERT) as
    a ``MaskedLMHead`` state dict; ``None`` without one (a ``BertModel``, a sentence-transformers export)."""
    from transformers import AutoModelForMaskedLM
    from transformers.utils import logging as hf_logging

    verbosity, bars = hf_logging.get_verbosity(), hf_logging.is_progress_bar_enabled()
    hf_logging.set_verbosity_error()  # "Some weights were not initialized" is what we test for
    hf_logging.disable_progress_bar()
    try:
        loaded = AutoModelForMaskedLM.from_pretrained(location, output_loading_info=True, trust_remote_code=False)  # pyright: ignore[reportUnknownMemberType, reportUnknownVariableType]  # transformers: untyped
        mlm, info = cast(tuple[Any, dict[str, list[str]]], loaded)  # the model: duck-typed below, per architecture
    except (OSError, ValueError, KeyError):
        return None
    finally:
        hf_logging.set_verbosity(verbosity)
        if bars:
            hf_logging.enable_progress_bar()
    decoder = None  # the vocabulary projection whose bias is the head's (when the head has no bias of its own)
    if hasattr(mlm, "cls") and hasattr(mlm.cls, "predictions"):
        prefix, head = "cls.predictions.", mlm.cls.predictions
        dense, norm, dense_key = head.transform.dense, head.transform.LayerNorm, "transform.dense.weight"
    elif hasattr(mlm, "lm_head") and hasattr(mlm.lm_head, "dense") and hasattr(mlm.lm_head, "layer_norm"):
        prefix, head = "lm_head.", mlm.lm_head
        dense, norm, dense_key = head.dense, head.layer_norm, "dense.weight"
    elif hasattr(mlm, "vocab_transform") and hasattr(mlm, "vocab_projector"):  # DistilBERT
        prefix, head, decoder = "", mlm, mlm.vocab_projector
        dense, norm, dense_key = mlm.vocab_transform, mlm.vocab_layer_norm, "vocab_transform.weight"
    elif hasattr(mlm, "head") and hasattr(mlm.head, "norm") and hasattr(mlm, "decoder"):  # ModernBERT
        prefix, head, decoder = "", mlm, mlm.decoder
        dense, norm, dense_key = mlm.head.dense, mlm.head.norm, "head.dense.weight"
    else:
        return None
    missing = set(info.get("missing_keys", ()))
    if prefix + dense_key in missing:  # the checkpoint has no MLM head: transformers initialised one
        return None
    if decoder is None:
        loaded_bias = getattr(head, "bias", None) is not None and prefix + "bias" not in missing
        bias = head.bias if loaded_bias else head.decoder.bias
    else:
        bias = decoder.bias

    def own(tensor: torch.Tensor | None, like: torch.Tensor) -> torch.Tensor:  # ModernBERT's head has no biases: 0
        return (tensor if tensor is not None else torch.zeros_like(like)).detach().clone()

    return {
        "dense.weight": dense.weight.detach().clone(),
        "dense.bias": own(dense.bias, dense.weight[:, 0]),
        "layer_norm.weight": norm.weight.detach().clone(),
        "layer_norm.bias": own(norm.bias, norm.weight),
        "bias": own(bias, mlm.get_input_embeddings().weight[:, 0]),
    }


def _head_settings(config: Any) -> tuple[str, float]:  # a transformers PretrainedConfig: attributes per architecture
    """The activation and LayerNorm epsilon of the architecture's MLM head."""
    if getattr(config, "model_type", "") == "modernbert":
        return config.classifier_activation, config.norm_eps
    activation = getattr(config, "hidden_act", None) or getattr(config, "activation", None) or "gelu"
    return activation, getattr(config, "layer_norm_eps", 1e-12)


def _input_embeddings(encoder: Encoder) -> torch.Tensor:
    """The backbone's (vocab, d) input embedding matrix (every transformers model's is an ``nn.Embedding``)."""
    return cast(nn.Embedding, encoder.backbone.get_input_embeddings()).weight


# ------------------------------------------------------------------------------------------ objective
class CMLM(Objective):
    """Conditional masked language modelling on pairs of consecutive sentences.

    Records ``{"s1", "s2"}``, swapped per example with probability ``swap_prob``. The first sentence's pooled vector
    ``v`` is mapped to N vectors by [`SentenceProjection`][unisent.models.SentenceProjection]; the second, masked, is
    encoded by the SAME backbone with its token embeddings prefixed by the N vectors, and an MLM head predicts the
    masked tokens. At inference only ``s1 -> v`` is kept. Loss term ``mlm``; metric ``accuracy``.

    Args:
        num_projections: N (15 in the paper; Table 7 tries 1, 5, 10, 15, 20).
        identity: ``v`` itself is one of the N vectors (the paper).
        projection_size: width of P's hidden layers (0 = hidden size).
        mask_ratio: fraction of s2's tokens to predict (paper: 80 of 256 = 0.3125).
        mask_prob: share of the predicted tokens replaced by [MASK] (BERT's 0.8).
        random_prob: share replaced by a random token (BERT's 0.1).
        swap_prob: probability of swapping s1 and s2 (paper: 0.5).
        positions: position ids of the second pass (the paper does not say): ``own`` gives s2 its positions when
            encoded alone and the N prefix vectors position 0 (the [CLS] slot); ``continuous`` numbers
            0 .. N + L - 1 (needs N + L <= max positions).
        skip: Table 7's "skip" variant: each masked token's output is concatenated with the N vectors
            (``[h; v_p1; ...; v_pN]``) and mapped back to d by a linear layer initialised to pass ``h``.
        proj: Table 7's "proj" variant: the sentence vector is the mean of the N projections, at inference too (a
            [`ProjectionEncoder`][unisent.models.ProjectionEncoder]).
        head_init: ``auto`` loads the checkpoint's MLM head when it has one, else a fresh one; ``fresh`` always a
            fresh one. The vocabulary projection is always tied to the input embeddings.
        hidden_size: size of the pooled vector; 0 = taken from the encoder in
            [`setup_for`][unisent.objectives.CMLM.setup_for].
        max_length: see [`Objective`][unisent.objectives.Objective] (the paper truncates at 256).
    """

    name = "cmlm"
    batch_keys = text_keys = ("s1", "s2")
    citation = CITATION

    def __init__(
        self,
        num_projections: int = 15,
        identity: bool = True,
        projection_size: int = 0,
        projection_activation: Literal["gelu", "relu", "tanh"] = "gelu",
        mask_ratio: float = 0.3125,
        mask_prob: float = 0.8,
        random_prob: float = 0.1,
        swap_prob: float = 0.5,
        positions: Literal["own", "continuous"] = "own",
        skip: bool = False,
        proj: bool = False,
        head_init: Literal["auto", "fresh"] = "auto",
        hidden_size: int = 0,
        weight: float = 1.0,
        name: str | None = None,
        max_length: int | None = None,
    ) -> None:
        super().__init__(weight=weight, name=name, max_length=max_length)
        _check_masking(mask_ratio, mask_prob, random_prob, "mask_ratio")
        if not 0.0 <= swap_prob <= 1.0:
            raise ValueError(f"swap_prob must be in [0, 1], got {swap_prob}")
        if positions not in ("own", "continuous"):
            raise ValueError(f"positions must be 'own' or 'continuous', got {positions!r}")
        if head_init not in ("auto", "fresh"):
            raise ValueError(f"head_init must be 'auto' or 'fresh', got {head_init!r}")
        if num_projections < 1:
            raise ValueError(f"num_projections must be >= 1, got {num_projections}")
        self.projection_settings: dict[str, Any] = {  # SentenceProjection's arguments but hidden_size
            "num_projections": num_projections,
            "mlp_size": projection_size,
            "activation": projection_activation,
            "identity": identity,
        }
        self.mask_ratio, self.mask_prob, self.random_prob = mask_ratio, mask_prob, random_prob
        self.swap_prob = swap_prob
        self.positions = positions
        self.skip, self.proj = skip, proj
        self.head_init = head_init
        self.projection: SentenceProjection | None = None
        self.head: MaskedLMHead | None = None
        self.skip_layer: nn.Linear | None = None
        self.mlm_head_source = ""  # "pretrained" or "fresh", set by setup_for
        self._vocab: dict[str, Any] = {}
        if hidden_size:
            self.projection = SentenceProjection(hidden_size, **self.projection_settings)

    # ------------------------------------------------------------------------------- parameters
    def setup_for(self, encoder: Encoder) -> None:
        """Build P, the MLM head (and the skip layer) for ``encoder``."""
        d = encoder.hidden_size
        if self.projection is None:
            self.projection = SentenceProjection(d, **self.projection_settings)
            self._init_args["hidden_size"] = d
        if self.head is None:
            config = encoder.backbone.config
            embeddings = _input_embeddings(encoder)
            self.head = MaskedLMHead(
                d, embeddings.shape[0], *_head_settings(config), getattr(config, "initializer_range", 0.02)
            )
            state = None
            if self.head_init == "auto":
                state = _pretrained_mlm_head(resolve_model_location(encoder.config.model))
                if state is not None and state["bias"].shape[0] != embeddings.shape[0]:
                    warnings.warn(
                        f"the MLM head of {encoder.config.model!r} has {state['bias'].shape[0]} outputs, "
                        f"the embeddings {embeddings.shape[0]} rows: using a fresh head",
                        stacklevel=2,
                    )
                    state = None
            if state is not None:
                self.head.load_state_dict(state)
            self.mlm_head_source = "pretrained" if state is not None else "fresh"
            self.head.to(embeddings.device)
        if self.skip and self.skip_layer is None:
            n = self.projection.num_projections
            self.skip_layer = nn.Linear((n + 1) * d, d)
            with torch.no_grad():  # start as the plain path: h passes through, the projections add 0
                self.skip_layer.weight.zero_()
                self.skip_layer.weight[:, :d].copy_(torch.eye(d))
                self.skip_layer.bias.zero_()
        self.projection.to(encoder.backbone.device)
        tok = encoder.tokenizer
        if tok.mask_token_id is None:
            raise ValueError(f"CMLM needs a tokenizer with a mask token; {encoder.config.model!r} has none")
        special = sorted(set(tok.all_special_ids))
        vocab = _input_embeddings(encoder).shape[0]
        allowed = torch.ones(vocab, dtype=torch.bool)
        allowed[[i for i in special if i < vocab]] = False
        self._vocab = {
            "special": torch.tensor(special, dtype=torch.long),
            "mask": tok.mask_token_id,
            "replacement": allowed.nonzero().squeeze(1),
        }
        params = inspect.signature(type(encoder.backbone).forward).parameters
        self._backbone_takes = {k for k in ("position_ids", "token_type_ids") if k in params}

    # ------------------------------------------------------------------------------- steps
    def mask(
        self, input_ids: torch.Tensor, attention_mask: torch.Tensor, generator: torch.Generator | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """``mask_tokens`` with this objective's settings and the encoder's vocabulary."""
        if self._vocab["special"].device != input_ids.device:  # moved once, not at every step
            self._vocab = {k: v.to(input_ids.device) if torch.is_tensor(v) else v for k, v in self._vocab.items()}
        return mask_tokens(
            input_ids,
            attention_mask,
            special_ids=self._vocab["special"],
            mask_token_id=self._vocab["mask"],
            replacement_ids=self._vocab["replacement"],
            ratio=self.mask_ratio,
            mask_prob=self.mask_prob,
            random_prob=self.random_prob,
            generator=generator,
        )

    def masked_lm(
        self,
        encoder: Encoder,
        first: dict[str, torch.Tensor],
        masked_second: dict[str, torch.Tensor],
        targets: torch.Tensor,  # (batch, seq) bool
        labels: torch.Tensor,  # (batch, seq) the original ids of the second sentence
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """``(mean cross-entropy, accuracy)`` of predicting ``labels[targets]`` from the masked second
        sentence given the first."""
        if self.head is None:
            self.setup_for(encoder)
        v = encoder(first["input_ids"], first["attention_mask"])  # (batch, d)
        vp = cast(SentenceProjection, self.projection)(v)  # (batch, N, d); setup_for built it
        if not targets.any():  # nothing to predict (e.g. only special tokens): a zero loss on the graph
            zero = vp.sum() * 0.0
            return zero, zero.detach()
        logits = self._predict(encoder, vp, masked_second["input_ids"], masked_second["attention_mask"], targets)
        gold = labels[targets]  # (n_masked,)
        loss = F.cross_entropy(logits.float(), gold)
        accuracy = (logits.detach().argmax(-1) == gold).float().mean()
        return loss, accuracy

    def _predict(
        self, encoder: Encoder, vp: torch.Tensor, ids: torch.Tensor, mask: torch.Tensor, targets: torch.Tensor
    ) -> torch.Tensor:
        backbone = encoder.backbone
        batch, n, _ = vp.shape
        length = ids.shape[1]
        tokens = backbone.get_input_embeddings()(ids)  # (batch, L, d)
        embeds = torch.cat([vp.to(tokens.dtype), tokens], dim=1)  # (batch, N + L, d)
        attention = torch.cat([mask.new_ones(batch, n), mask], dim=1)
        offset = getattr(backbone.embeddings, "padding_idx", -1) + 1 if hasattr(backbone, "embeddings") else 0
        if self.positions == "own":
            positions = torch.cat([torch.zeros(n, dtype=torch.long), torch.arange(length)])
        else:
            positions = torch.arange(n + length)
        kwargs = {}
        if "position_ids" in self._backbone_takes:
            kwargs["position_ids"] = (positions + offset).to(ids.device).unsqueeze(0).expand(batch, -1)
        if "token_type_ids" in self._backbone_takes:
            kwargs["token_type_ids"] = torch.zeros_like(attention)
        out = backbone(inputs_embeds=embeds, attention_mask=attention, **kwargs)
        hidden = out.last_hidden_state[:, n:][targets]  # (n_masked, d): gathered before the vocabulary
        if self.skip_layer is not None:
            rows = targets.nonzero()[:, 0]
            hidden = self.skip_layer(torch.cat([hidden, vp[rows].flatten(1).to(hidden.dtype)], dim=-1))
        return cast(MaskedLMHead, self.head)(hidden, _input_embeddings(encoder))  # (n_masked, vocab); from masked_lm

    def forward(self, encoder: Encoder, batch: dict[str, Any]) -> ObjectiveOutput:
        if self.head is None:
            self.setup_for(encoder)
        s1, s2 = batch["s1"], batch["s2"]
        swap = (torch.rand(s1["input_ids"].shape[0]) < self.swap_prob).to(s1["input_ids"].device).unsqueeze(1)
        first = {k: torch.where(swap, s2[k], s1[k]) for k in ("input_ids", "attention_mask")}
        second = {k: torch.where(swap, s1[k], s2[k]) for k in ("input_ids", "attention_mask")}
        masked_ids, targets = self.mask(second["input_ids"], second["attention_mask"])
        loss, accuracy = self.masked_lm(
            encoder,
            first,
            {"input_ids": masked_ids, "attention_mask": second["attention_mask"]},
            targets,
            second["input_ids"],
        )
        return ObjectiveOutput(terms={"mlm": loss}, metrics={"accuracy": accuracy})

    # ------------------------------------------------------------------------------- inference
    def inference_model(self, encoder: Encoder) -> ProjectionEncoder | None:
        """A [`ProjectionEncoder`][unisent.models.ProjectionEncoder] for the "proj" variant, else ``None`` (the plain
        encoder)."""
        if not self.proj:
            return None
        if self.projection is None:
            self.setup_for(encoder)
        return ProjectionEncoder(encoder, cast(SentenceProjection, self.projection))  # setup_for built it
