"""The objective contract ([`Objective`][unisent.objectives.Objective]) and building objectives from records."""

from __future__ import annotations

import inspect
import re
import warnings
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, cast

import torch
from torch import nn

from ..data.schema import PREDICT_SCHEMA, BatchSchema
from ..encoders import Encoder
from ..io.registry import resolve, subclasses

if TYPE_CHECKING:
    from datasets import Dataset  # pyright: ignore[reportMissingTypeStubs]  # datasets ships no stubs

__all__ = [
    "PREDICT_SCHEMA",
    "BatchSchema",
    "EncodeFn",
    "Objective",
    "ObjectiveOutput",
    "encode_views",
    "objective_class",
    "objective_from_record",
]


class EncodeFn(Protocol):
    """What [`Objective.embed`][unisent.objectives.Objective.embed] calls:
    ``(input_ids, attention_mask) -> pooled vectors`` (one row per row); the options are the encoder's (``pooler``,
    ``top_layers``: [`forward`][unisent.encoders.Encoder.forward])."""

    def __call__(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, **options: Any) -> torch.Tensor: ...


@dataclass
class ObjectiveOutput(Mapping[str, torch.Tensor]):
    """What [`Objective.forward`][unisent.objectives.Objective.forward] returns when it reports metrics as well as loss
    terms: ``terms`` (named scalars) are summed into the loss ([`Objective.total`][unisent.objectives.Objective.total]);
    ``metrics`` (e.g. a classifier's accuracy) are only logged, detached. Both are logged as
    ``train/<objective>/<name>``. As a mapping it is its loss terms, so code written for a plain dict of terms keeps
    working.
    """

    terms: dict[str, torch.Tensor]
    metrics: dict[str, torch.Tensor | float] = field(default_factory=dict)

    def __getitem__(self, key: str) -> torch.Tensor:
        return self.terms[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self.terms)

    def __len__(self) -> int:
        return len(self.terms)

    @classmethod
    def of(cls, output: object) -> ObjectiveOutput:
        """Normalise what ``forward`` returned (checked: it is an extension's): a plain mapping is a set of loss
        terms, no metrics."""
        if isinstance(output, ObjectiveOutput):
            clash = sorted(set(output.terms) & set(output.metrics))
            if clash:
                raise ValueError(f"{', '.join(clash)} is both a loss term and a metric; give them distinct names")
            return output
        if isinstance(output, Mapping):
            return cls(terms=dict(cast(Mapping[str, torch.Tensor], output)))
        raise TypeError(
            f"Objective.forward must return a dict of loss terms or an ObjectiveOutput, got {type(output).__name__}"
        )


def _missing_methods(cls: object) -> str:
    """What ``cls`` lacks of the objective contract (``""``: nothing): ``forward``, or ``embed`` and ``loss``."""
    own = {m for m in ("forward", "embed", "loss") if getattr(cls, m) is not getattr(Objective, m)}
    # embed makes it in-batch: the default forward, GradCache and Matryoshka then call loss too
    return " and ".join(m for m in ("embed", "loss") if m not in own) if "embed" in own or "forward" not in own else ""


class _RecordsInitArgs(type(nn.Module)):
    """Metaclass that checks the objective contract and stores the constructor arguments of every instance in
    ``_init_args``."""

    def __call__(cls, *args: Any, **kwargs: Any):
        if missing := _missing_methods(cls):
            raise TypeError(
                f"{cls.__qualname__} does not implement {missing}: an objective implements forward, or embed and "
                "loss (an in-batch objective; docs/new-objective.md)"
            )
        obj = super().__call__(*args, **kwargs)
        params = inspect.signature(cls.__init__).parameters
        bound = inspect.signature(cls.__init__).bind(None, *args, **kwargs)
        bound.apply_defaults()
        init_args: dict[str, Any] = {}
        for key, value in list(bound.arguments.items())[1:]:
            if params[key].kind is inspect.Parameter.VAR_KEYWORD:
                init_args.update(value)
            elif params[key].kind is not inspect.Parameter.VAR_POSITIONAL:
                init_args[key] = value
        object.__setattr__(obj, "_init_args", init_args)
        return obj


class Objective(nn.Module, metaclass=_RecordsInitArgs):
    """Base class of training objectives.

    A subclass declares which record fields it needs (``batch_keys``), which are text to tokenise (``text_keys``) and
    which may be null (``optional_keys``), and computes named loss terms (a dict or an
    [`ObjectiveOutput`][unisent.objectives.ObjectiveOutput]) either as an in-batch objective,
    [`embed`][unisent.objectives.Objective.embed] (views from the encoder) and
    [`loss`][unisent.objectives.Objective.loss] (terms from the views), which trains cached and under Matryoshka, or
    with [`forward`][unisent.objectives.Objective.forward]. This contract is checked when an instance is built: a
    class that implements neither ``forward`` nor ``embed`` and ``loss`` (or ``embed`` without ``loss``) is refused
    with a ``TypeError`` naming the missing method; every other hook has a default. The training module sums
    ``weight * sum(term_weights[k] * terms[k])`` over objectives and calls every hook on every objective; each documents
    its default (the table: docs/new-objective.md). A subclass may live in any package (YAML: ``class_path``);
    constructor arguments are recorded ([`config`][unisent.objectives.Objective.config]) so that checkpoints can rebuild
    it.

    Args:
        weight: multiplier of this objective's loss in the total.
        name: the key of this objective's data in ``data.train`` and in the logs; default
            [`default_name`][unisent.objectives.Objective.default_name] (``AlignUniform`` -> ``align_uniform``).
        max_length: token limit for this objective's texts; default: the encoder's.
    """

    #: the class's default name (``SimCSE.name == "simcse"``); an instance's ``name=`` overrides it
    name: str = ""
    batch_keys: tuple[str, ...] = ()
    text_keys: tuple[str, ...] = ()
    optional_keys: tuple[str, ...] = ()
    citation: str = ""
    #: ``True`` if ``setup_for`` adds tokens to the shared encoder (AMR): set up before the others,
    #: so that parameters sized by the vocabulary (CMLM's MLM head) see the final one.
    extends_vocabulary: bool = False
    #: learning rate of this objective's own parameters (own parameter groups, same schedule); ``None``:
    #: the optimiser's. GaussCSE sets it with ``head_lr``.
    param_lr: float | None = None
    _init_args: dict[str, Any]  # the constructor's arguments (set by the metaclass): ``config``

    def encoder_like_modules(self) -> list[torch.nn.Module]:
        """Own modules that learn as the encoder does: their parameters take its rate and schedule rather
        than ``param_lr`` / ``model.train.heads.lr``, and they are held and in eval mode while it is held
        (``model.train.heads.only_ratio``); e.g. GaussCSE's own copies of top layers."""
        return []

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        old = [flag for flag in ("cache_ready", "matryoshka_ready") if flag in vars(cls)]
        if old and cls.embed is Objective.embed:  # an objective written for the flags of an earlier unisent
            warnings.warn(
                f"{cls.__qualname__}: {' and '.join(old)} no longer mean anything; an objective trains cached and "
                "under Matryoshka when it implements embed and loss instead of forward (docs/new-objective.md)",
                stacklevel=2,
            )

    def __init__(self, weight: float = 1.0, name: str | None = None, max_length: int | None = None) -> None:
        super().__init__()
        self.weight = float(weight)
        self.name = name or self.default_name()
        self.max_length = max_length
        self.term_weights: dict[str, float] = {}

    @classmethod
    def default_name(cls) -> str:
        """The class's ``name``, else its snake-case class name without ``_objective``."""
        snake = re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", cls.__name__).lower()
        return cls.name or re.sub(r"_objective$", "", snake)

    @classmethod
    def name_in_recipe(cls, init_args: Mapping[str, Any] | None) -> str:
        """The name an instance built with a recipe's ``init_args`` will have, without building it."""
        return (init_args or {}).get("name") or cls.default_name()

    # -------------------------------------------------------------------------------- data side
    @property
    def schema(self) -> BatchSchema:
        """This objective's [`BatchSchema`][unisent.data.BatchSchema] from its key tuples and ``max_length``; one that
        overrides [`setup_data`][unisent.objectives.Objective.setup_data] needs all its records at once (no stream)."""
        return BatchSchema(
            tuple(self.batch_keys),
            tuple(self.text_keys),
            tuple(self.optional_keys),
            self.max_length,
            needs_all_records=type(self).setup_data is not Objective.setup_data,
        )

    def collate(self, features: Sequence[dict[str, Any]], pad_id: int) -> dict[str, Any]:
        """Batch tokenised records ([`BatchSchema.collate`][unisent.data.BatchSchema.collate]); override to convert
        fields (label ids)."""
        return self.schema.collate(features, pad_id)

    def setup_data(self, dataset: Dataset) -> Dataset | None:
        """Called once per ``fit`` with the tokenised training set (a ``datasets.Dataset``) before the optimiser is
        built; may build state from it and return a filtered dataset to train on. Default: ``None`` (as it is)."""
        return None

    # -------------------------------------------------------------------------------- model side
    def setup_for(self, encoder: Encoder) -> None:
        """Called with the shared encoder when the module is built, before the optimiser: build parameters sized by
        the encoder here. May be called again and must then leave what exists unchanged. Default: nothing."""

    def forward(self, encoder: Encoder, batch: dict[str, Any]) -> dict[str, torch.Tensor] | ObjectiveOutput:
        """The loss terms of one batch (``{name: scalar tensor}`` or an
        [`ObjectiveOutput`][unisent.objectives.ObjectiveOutput]). Default: [`loss`][unisent.objectives.Objective.loss]
        of [`embed`][unisent.objectives.Objective.embed]; an objective that reaches into the backbone (CMLM) overrides
        it."""
        return self.loss(self.embed(encoder, batch), batch)

    # ------------------------------------------------------------------------- the in-batch contract
    def embed(self, encode: EncodeFn, batch: dict[str, Any]) -> list[torch.Tensor]:
        """This objective's views, each with the batch's rows, from calls ``encode(input_ids, attention_mask) ->
        pooled`` (the encoder, or GradCache's chunked one). Implementing ``embed`` and
        [`loss`][unisent.objectives.Objective.loss] makes an objective in-batch: it then trains cached and under
        [`Matryoshka`][unisent.objectives.Matryoshka]."""
        raise NotImplementedError(f"{type(self).__name__} implements forward, not embed and loss")

    def loss(self, views: list[torch.Tensor], batch: dict[str, Any]) -> dict[str, torch.Tensor] | ObjectiveOutput:
        """The loss terms from [`embed`][unisent.objectives.Objective.embed]'s views (its own parameters: heads, tables,
        are used here)."""
        raise NotImplementedError(f"{type(self).__name__} implements forward, not embed and loss")

    def loss_at(
        self, views: list[torch.Tensor], batch: dict[str, Any], dim: int
    ) -> dict[str, torch.Tensor] | ObjectiveOutput:
        """The loss of the first ``dim`` coordinates of the sentence vectors
        ([`Matryoshka`][unisent.objectives.Matryoshka]). Default: [`loss`][unisent.objectives.Objective.loss] of the
        views cut to ``[..., :dim]`` (GaussCSE cuts its head's outputs instead)."""
        return self.loss([v[..., :dim] for v in views], batch)

    @property
    def in_batch(self) -> bool:
        """Whether this objective implements [`embed`][unisent.objectives.Objective.embed] (and so
        [`loss`][unisent.objectives.Objective.loss])."""
        return type(self).embed is not Objective.embed

    def prefix_error(self) -> str | None:
        """Why this objective cannot train at prefixes of the vector ([`Matryoshka`][unisent.objectives.Matryoshka]), or
        ``None``."""
        return None if self.in_batch else "its loss is not computed from the vectors embed returns"

    def total(self, terms: Mapping[str, torch.Tensor]) -> torch.Tensor:
        """This objective's loss from its terms (before ``weight``); an
        [`ObjectiveOutput`][unisent.objectives.ObjectiveOutput]'s metrics never count."""
        weighted = [self.term_weights.get(k, 1.0) * v for k, v in terms.items()]
        if not weighted:
            raise ValueError(f"objective {self.name!r} returned no loss terms")
        return sum(weighted[1:], weighted[0])

    def inference_model(self, encoder: Encoder) -> nn.Module | None:
        """The model ``fit`` saves and ``unisent.load`` returns when this objective trains an inference
        head (a wrapper of ``encoder``; at most one objective per model). Default: ``None`` (the encoder)."""
        return None

    # -------------------------------------------------------------------------------- run record
    @property
    def citations(self) -> tuple[str, ...]:
        """The papers behind this instance, for model cards."""
        return (self.citation,) if self.citation else ()

    def config(self) -> dict[str, Any]:
        """``{"class_path": ..., "init_args": ...}``: enough to rebuild this objective."""
        cls = type(self)
        return {"class_path": f"{cls.__module__}.{cls.__qualname__}", "init_args": dict(self._init_args)}

    def extra_repr(self) -> str:
        return ", ".join(f"{k}={v!r}" for k, v in self._init_args.items())


def encode_views(
    encode: EncodeFn,
    batch: dict[str, Any],
    keys: Sequence[str],
    repeat: int = 1,
    pooler: str | None = None,
    top_layers: torch.nn.ModuleList | None = None,
) -> list[torch.Tensor]:
    """Encode the text fields ``keys`` of a collated batch in ONE forward pass over the stacked views, stacked
    ``repeat`` times (2: SimCSE's dropout views); one (batch, hidden) tensor per view, keys in order, repeated.
    ``pooler``: the vectors of another built-in pooler than the encoder's (``Encoder.named_pooler``);
    ``top_layers``: a head's own top layers over the encoder's lower ones (``Encoder.forward``)."""
    ids = torch.cat([batch[k]["input_ids"] for k in keys] * repeat)  # (views * batch, seq)
    mask = torch.cat([batch[k]["attention_mask"] for k in keys] * repeat)
    options: dict[str, object] = {k: v for k, v in (("pooler", pooler), ("top_layers", top_layers)) if v is not None}
    pooled = encode(ids, mask, **options)  # (views * batch, hidden)
    return list(pooled.chunk(len(keys) * repeat))


def objective_class(name: Any, *, source: str, field: str) -> type[Objective]:
    """The [`Objective`][unisent.objectives.Objective] subclass a record names, from the registry (subclasses defined in
    this process); never imported.

    Raises:
        RegistryError: ``name`` is not a registered objective; the message names ``source`` and ``field``.
    """
    return resolve(name, subclasses(Objective), source=source, field=field, what="objective")


def objective_from_record(spec: Any, *, source: str, field: str) -> Objective:
    """Build an objective from a record's ``{"class_path", "init_args"}`` (class from the registry).

    Raises:
        RegistryError: the class is not registered (nothing was imported or called).
        ValueError: the spec is no such mapping, or the constructor refused its arguments (one line).
    """
    if not isinstance(spec, Mapping):
        raise ValueError(f"{source}: {field} must be a {{class_path, init_args}} mapping, got {spec!r:.80}")
    cls = objective_class(cast(Mapping[str, Any], spec).get("class_path"), source=source, field=f"{field}.class_path")
    init_args: object = cast(Mapping[str, Any], spec).get("init_args") or {}
    if not isinstance(init_args, Mapping):
        raise ValueError(f"{source}: {field}.init_args must be a mapping, got {init_args!r:.80}")
    try:
        return cls(**cast(Mapping[str, Any], init_args))
    except (TypeError, ValueError) as err:
        raise ValueError(f"{source}: {field}: {cls.__name__}: {err}") from None
