"""Poolers: token states -> one vector per sentence, each declaring its own export (Sentence
Transformers modules, ``transformers`` recipe, description), so the encoder never branches on pooler
names. A new pooler is one class under ``@register_pooler("name")`` (example: docs/plugins.md), or
named in YAML by its dotted class path, which imports (and so registers) it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, ClassVar, Literal, TypeVar, get_args

import torch
from jsonargparse.typing import extend_base_type, restricted_string_type
from torch import nn

from ..inference.base import NotExportableError, STModule
from ..io.registry import register_class

__all__ = [
    "POOLERS",
    "MeanPooler",
    "Pooler",
    "PoolerName",
    "PoolerPath",
    "PoolingModeError",
    "RegisteredPoolerName",
    "build_pooler",
    "check_export_modes",
    "head_pooler",
    "pooler_class",
    "register_pooler",
    "st_pooling",
]

P = TypeVar("P", bound=type)

#: Registered poolers: the name users write (``EncoderConfig.pooler``) -> the class.
POOLERS: dict[str, type[Pooler]] = {}

#: Sentence Transformers' ``Pooling`` modes (all written, one of them true).
ST_POOLING_MODES = (
    "cls_token",
    "mean_tokens",
    "max_tokens",
    "mean_sqrt_len_tokens",
    "weightedmean_tokens",
    "lasttoken",
)

#: the sentence on which ``cls_mlp`` checks the MLP it wrote into the backbone's own pooler
PROBE = "Two dogs run across the grass in the park while a child throws a ball for them to catch again."

#: ``transformers`` recipe lines: the masked mean of ``states`` over the non-padding tokens.
MASKED_MEAN_LINES = (
    'mask = batch["attention_mask"].unsqueeze(-1).to(states.dtype)',
    "return (states * mask).sum(1) / mask.sum(1).clamp(min=1.0)",
)


def register_pooler(name: str) -> Callable[[P], P]:
    """Class decorator: register a [`Pooler`][unisent.encoders.Pooler] subclass under ``name`` (``TypeError`` for
    another class, ``ValueError`` when another class holds ``name``)."""

    def decorate(cls: P) -> P:
        register_class(POOLERS, name, cls, Pooler, "pooler").name = name
        return cls

    return decorate


class PoolingModeError(ValueError):
    """A pooler's export declares a ``Pooling`` mode outside ``ST_POOLING_MODES`` (raised when the
    encoder is built, ``check_export_modes``)."""


def st_pooling(hidden_size: int, mode: str) -> STModule:
    """Sentence Transformers' ``Pooling`` module in ``mode``; [`PoolingModeError`][unisent.encoders.PoolingModeError]
    (naming the closest) for a mode outside ``ST_POOLING_MODES``, e.g. the short name ``weightedmean``."""
    if mode not in ST_POOLING_MODES:
        from ..io import unknown_name

        raise PoolingModeError(unknown_name("st_pooling", "Sentence Transformers pooling mode", mode, ST_POOLING_MODES))
    config = {
        "word_embedding_dimension": hidden_size,
        **{f"pooling_mode_{m}": m == mode for m in ST_POOLING_MODES},
        "include_prompt": True,
    }
    return STModule("Pooling", "sentence_transformers.models.Pooling", config)


class Pooler(nn.Module):
    """Base class: ``forward(last_hidden, attention_mask, hidden_states) -> (batch, dim)``.

    Class attributes (a pooler that its ``configure`` builds may set the second and third per instance):
        name: the registered name (set by [`register_pooler`][unisent.encoders.register_pooler]).
        needs_hidden_states: the forward needs every layer's states (``output_hidden_states``).
        description: the model card's "pooling" row.
        sentence_transformers_note: shown under the Sentence Transformers snippet of the model card.
        prompt_length: prompt tokens to leave out (set by ``encode``; read by poolers that support prompts).
    """

    prompt_length: int | None = None
    name: ClassVar[str] = ""
    needs_hidden_states: bool = False
    description: str = ""
    sentence_transformers_note: ClassVar[str] = ""

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

    def configure(self, declared: dict[str, Any], location: str) -> None:
        """Called once by the encoder before ``pooler.pt`` is loaded, with the resolved
        ``EncoderConfig.sentence_transformers`` (``{}`` for a plain model) and the model's directory or
        hub id: a pooler whose structure the model declares builds it here (the default does nothing)."""

    def sentence_transformers_modules(self, backbone_config: Any) -> list[STModule]:
        """The Sentence Transformers modules after the ``Transformer`` that compute this pooling (built-in
        classes only: no ``trust_remote_code``). ``backbone_config``: the backbone's ``transformers`` config."""
        raise NotExportableError(
            f"pooler {self.name or type(self).__name__!r} declares no Sentence Transformers modules"
        )

    def huggingface_code(self, in_backbone: bool = False) -> tuple[list[str], list[str]]:
        """The pooling as ``transformers`` code for the model card: ``(setup lines, body lines)``. Setup runs once after
        ``model`` is loaded (from ``model_dir``); the body ends ``embed(sentences)``, may use ``torch``, ``batch``
        (tokenizer output) and ``out`` (model output, ``hidden_states`` included when ``needs_hidden_states``), and
        returns the embeddings. ``in_backbone``: [`into_backbone`][unisent.encoders.Pooler.into_backbone] did."""
        raise NotExportableError(f"pooler {self.name or type(self).__name__!r} declares no transformers recipe")

    @contextmanager
    def into_backbone(self, backbone: nn.Module, tokenizer: Any) -> Iterator[bool]:
        """For a ``huggingface`` export: temporarily write this pooler into the backbone's own pooler
        (restored afterwards; ``tokenizer`` encodes a probe sentence); yields whether it did. The default
        does nothing."""
        yield False


def _masked_mean(states: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
    mask = attention_mask.unsqueeze(-1).to(states.dtype)
    return (states * mask).sum(1) / mask.sum(1).clamp_min(1.0)


@register_pooler("cls")
class ClsPooler(Pooler):
    """The first token's final state (``[CLS]`` / ``<s>``)."""

    description = "the `[CLS]` (first) token's last hidden state (`cls`)"

    def forward(self, last_hidden, attention_mask, hidden_states=None):
        return last_hidden[:, 0]

    def sentence_transformers_modules(self: Pooler, backbone_config):  # Pooler: cls_mlp_train_only's too
        return [st_pooling(self.hidden_size, "cls_token")]

    def huggingface_code(self: Pooler, in_backbone=False):
        return [], ["return out.last_hidden_state[:, 0]"]


@register_pooler("cls_mlp")
class ClsMlpPooler(Pooler):
    """``[CLS]`` followed by SimCSE's MLP (Linear + Tanh), in training and at inference. For
    ``transformers`` it is copied into the backbone's own pooler when that is a Linear + Tanh of the
    first token (BERT, RoBERTa, XLM-R...), else the card applies ``pooler.pt``."""

    train_only: ClassVar[bool] = False
    description = (
        "the `[CLS]` token's last hidden state through the trained MLP, Linear + Tanh "
        "(SimCSE's `cls`; unisent `cls_mlp`)"
    )
    sentence_transformers_note = "The `Dense` module (Linear + Tanh) holds the MLP of the `cls_mlp` pooler."

    def __init__(self, hidden_size: int) -> None:
        super().__init__(hidden_size)
        self.dense = nn.Linear(hidden_size, hidden_size)
        self.activation = nn.Tanh()

    def forward(self, last_hidden, attention_mask, hidden_states=None):
        cls = last_hidden[:, 0]
        if self.train_only and not self.training:
            return cls
        return self.activation(self.dense(cls))

    def sentence_transformers_modules(self, backbone_config):
        return [
            st_pooling(self.hidden_size, "cls_token"),
            STModule.dense(self.dense, "torch.nn.modules.activation.Tanh"),
        ]

    def huggingface_code(self, in_backbone=False):
        if in_backbone:
            return [], ["return out.pooler_output  # the model's pooler holds the trained MLP (Linear + Tanh on [CLS])"]
        setup = [
            "# The trained MLP (Linear + Tanh on [CLS]); for a hub id, fetch pooler.pt with",
            "# huggingface_hub.hf_hub_download first.",
            'mlp = torch.load(f"{model_dir}/pooler.pt", map_location="cpu", weights_only=True)',
        ]
        return setup, ['return torch.tanh(out.last_hidden_state[:, 0] @ mlp["dense.weight"].T + mlp["dense.bias"])']

    def _backbone_pooler(self, backbone: nn.Module) -> nn.Linear | None:
        """The Linear of the backbone's own pooler if it is a Linear (hidden -> hidden, with bias) + Tanh, else None."""
        target = getattr(backbone, "pooler", None)
        dense = getattr(target, "dense", None)
        if not isinstance(dense, nn.Linear) or not isinstance(getattr(target, "activation", None), nn.Tanh):
            return None
        if dense.weight.shape != self.dense.weight.shape or dense.bias is None:
            return None
        return dense

    @contextmanager
    def into_backbone(self, backbone: nn.Module, tokenizer: Any) -> Iterator[bool]:
        """Copy the MLP into the backbone's pooler, kept only if ``pooler_output`` then equals this
        pooler's output on a probe sentence (run in eval mode; training modes are restored)."""
        target = self._backbone_pooler(backbone)
        if target is None:
            yield False
            return
        saved = {k: v.detach().clone() for k, v in target.state_dict().items()}
        modes = [(module, module.training) for module in (*backbone.modules(), *self.modules())]
        backbone.eval()
        self.eval()
        try:
            with torch.no_grad():
                target.weight.copy_(self.dense.weight)
                target.bias.copy_(self.dense.bias)
                ids = tokenizer([PROBE], truncation=True, max_length=16, return_token_type_ids=False)
                device = next(backbone.parameters()).device
                input_ids = torch.tensor(ids["input_ids"], device=device)
                mask = torch.ones_like(input_ids)
                out = backbone(input_ids=input_ids, attention_mask=mask)
                same = out.pooler_output is not None and torch.allclose(
                    out.pooler_output, self(out.last_hidden_state, mask), atol=1e-6
                )
            if not same:
                target.load_state_dict(saved)
            yield same
        finally:
            target.load_state_dict(saved)
            for module, training in modes:
                module.training = training


@register_pooler("cls_mlp_train_only")
class ClsMlpTrainOnlyPooler(ClsMlpPooler):
    """SimCSE's ``mlp_only_train``: the MLP is used in training, dropped at inference."""

    train_only = True
    description = (
        "the `[CLS]` token's last hidden state; the MLP used in training is dropped at "
        "inference (SimCSE's `cls_before_pooler`; unisent `cls_mlp_train_only`)"
    )
    sentence_transformers_note = ""
    # at inference it is `cls`: the cls pooler's exports, and no MLP written into the backbone
    sentence_transformers_modules = ClsPooler.sentence_transformers_modules
    huggingface_code = ClsPooler.huggingface_code
    into_backbone = Pooler.into_backbone


@register_pooler("mean")
class MeanPooler(Pooler):
    """Mean of the final states over non-padding tokens."""

    description = "the mean of the last hidden states over the non-padding tokens (`mean`)"

    def forward(self, last_hidden, attention_mask, hidden_states=None):
        return _masked_mean(last_hidden, attention_mask)

    def sentence_transformers_modules(self, backbone_config):
        return [st_pooling(self.hidden_size, "mean_tokens")]

    def huggingface_code(self, in_backbone=False):
        return [], ["states = out.last_hidden_state", *MASKED_MEAN_LINES]


@register_pooler("max")
class MaxPooler(Pooler):
    """Element-wise max of the final states over non-padding tokens."""

    description = "the element-wise maximum of the last hidden states over the non-padding tokens (`max`)"

    def forward(self, last_hidden, attention_mask, hidden_states=None):
        mask = attention_mask.unsqueeze(-1).bool()
        return last_hidden.masked_fill(~mask, torch.finfo(last_hidden.dtype).min).amax(1)

    def sentence_transformers_modules(self, backbone_config):
        return [st_pooling(self.hidden_size, "max_tokens")]

    def huggingface_code(self, in_backbone=False):
        return [], [
            'mask = batch["attention_mask"].unsqueeze(-1).bool()',
            'return out.last_hidden_state.masked_fill(~mask, float("-inf")).amax(1)',
        ]


@register_pooler("avg_first_last")
class AvgFirstLastPooler(Pooler):
    """Masked mean of the average of ``hidden_states[1]`` (layer 1's output, not the embeddings) and
    ``hidden_states[-1]``, as SimCSE's ``avg_first_last``; exported as described in ``sentence_transformers_note``."""

    needs_hidden_states = True
    description = (
        "the mean over the non-padding tokens of the average of the first layer's output "
        "(`hidden_states[1]`) and the last layer's (`hidden_states[-1]`) (`avg_first_last`)"
    )
    sentence_transformers_note = (
        "`avg_first_last` is exported with built-in modules only: `WeightedLayerPooling` with weight 1 on "
        "layers 1 and L (0 elsewhere), whose weighted mean is the average of the two, then mean `Pooling`. "
        "The hidden states are enabled by `config_args` in `sentence_bert_config.json`."
    )

    def forward(self, last_hidden, attention_mask, hidden_states=None):
        if hidden_states is None:
            raise ValueError("avg_first_last needs the backbone's hidden states (output_hidden_states=True)")
        return _masked_mean((hidden_states[1] + hidden_states[-1]) / 2, attention_mask)

    def sentence_transformers_modules(self, backbone_config):
        layers = getattr(backbone_config, "num_hidden_layers", None)
        if layers is None:
            raise NotExportableError(
                f"{type(backbone_config).__name__} has no num_hidden_layers; cannot export avg_first_last"
            )
        weights = torch.zeros(int(layers))
        weights[0] += 1.0  # hidden_states[1]: the first layer's output
        weights[-1] += 1.0  # hidden_states[L]: the last (one layer: weight 2, the same state twice)
        config = {"word_embedding_dimension": self.hidden_size, "layer_start": 1, "num_hidden_layers": int(layers)}
        return [
            STModule(
                "WeightedLayerPooling",
                "sentence_transformers.models.WeightedLayerPooling",
                config,
                {"layer_weights": weights},
            ),
            st_pooling(self.hidden_size, "mean_tokens"),
        ]

    def huggingface_code(self, in_backbone=False):
        return [], [
            "states = (out.hidden_states[1] + out.hidden_states[-1]) / 2  # first layer's output and last",
            *MASKED_MEAN_LINES,
        ]


#: The built-in pooler names, as a type: the config parser lists them as choices.
PoolerName = Literal["cls", "cls_mlp", "cls_mlp_train_only", "mean", "max", "avg_first_last"]
assert set(get_args(PoolerName)) <= set(POOLERS)


def _registered(cls: type, value: str) -> None:
    if value not in POOLERS:
        raise ValueError(f"{value!r} is no registered pooler ({', '.join(POOLERS)})")


if TYPE_CHECKING:  # plain strings to a type checker; jsonargparse checks them when it parses a config
    PoolerPath = RegisteredPoolerName = str
else:
    #: A pooler's dotted class path, as a type: how YAML names a pooler from outside unisent.
    PoolerPath = restricted_string_type("PoolerPath", r"^[A-Za-z_]\w*(\.[A-Za-z_]\w*)+$")
    #: A name registered when the config is parsed (a plugin's pooler, by ``--import`` or an entry point), as a type.
    RegisteredPoolerName = extend_base_type("RegisteredPoolerName", str, _registered)


def pooler_class(name: str, *, source: str = "model.encoder.pooler", field: str = "pooler") -> type[Pooler]:
    """The pooler class of a registered name or dotted class path (``unisent.io.registry.resolve``:
    anything else is a ``RegistryError`` listing the registered poolers, raised before any import)."""
    from ..io.registry import resolve, subclasses

    table: dict[str, type[Pooler]] = {**subclasses(Pooler), **POOLERS}
    return resolve(name, table, source=source, field=field, what="pooler")


def build_pooler(name: str, hidden_size: int) -> Pooler:
    """Build the pooler called ``name`` (a registered name or a dotted class path)."""
    return pooler_class(name)(hidden_size)


def head_pooler(name: Any, hidden_size: int, *, source: str = "pooler") -> Pooler:
    """A built-in, parameter-free pooler for a head that reads other vectors than its encoder's (GaussCSE's
    ``pooler: cls``). Only the names in ``POOLERS`` registered by unisent itself (no class path, no
    plugin: the name comes from a model file), and only those without weights; ``ValueError`` naming
    ``source`` and the choices otherwise."""
    builtin = {k: v for k, v in POOLERS.items() if v.__module__ == __name__}
    choices = sorted(k for k, v in builtin.items() if not any(True for _ in v(4).parameters()))
    if not isinstance(name, str) or name not in choices:
        raise ValueError(f"{source}: {name!r} is not a built-in pooler without weights; one of {', '.join(choices)}")
    return builtin[name](hidden_size)


def check_export_modes(pooler: Pooler, backbone_config: Any) -> None:
    """Ask ``pooler`` for its Sentence Transformers modules when the encoder is built, so that a bad ``Pooling`` mode
    ([`PoolingModeError`][unisent.encoders.PoolingModeError]) is named before training, not at ``unisent export``; any
    other failure is left to the export to report."""
    try:
        pooler.sentence_transformers_modules(backbone_config)
    except PoolingModeError as err:
        name = pooler.name or f"{type(pooler).__module__}.{type(pooler).__qualname__}"
        raise PoolingModeError(f"model.encoder.pooler {name!r}: {str(err).removeprefix('st_pooling: ')}") from None
    except Exception:  # noqa: BLE001 - not exportable (NotExportableError) or not yet: the export says why
        return
