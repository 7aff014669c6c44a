"""The objective contract: a declared batch schema, a collator, named loss terms apart from metrics,
and hooks with documented defaults that the training module calls on every objective."""

from __future__ import annotations

import inspect
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

import torch
from torch import nn

from ..data.schema import PREDICT_SCHEMA, BatchSchema
from ..encoders import Encoder
from ..io.registry import resolve, subclasses

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


#: what :meth:`Objective.embed` calls: ``(input_ids, attention_mask) -> pooled vectors`` (one row per row)
EncodeFn = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]


def _snake(name: str) -> str:
    return re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", name).lower()


@dataclass
class ObjectiveOutput(Mapping):
    """What :meth:`Objective.forward` returns when it reports metrics as well as loss terms.

    ``terms`` are summed into the loss (:meth:`Objective.total`) and logged as
    ``train/<objective>/<term>``; ``metrics`` (e.g. a classifier's accuracy) are logged as
    ``train/<objective>/<metric>`` and never enter the loss. A ``forward`` that has no metrics may
    return the plain dict of terms instead. As a mapping it is its loss terms (``out["mlm"]``,
    ``set(out)``), so code written for a plain dict of terms keeps working.

    Attributes:
        terms: named scalar loss terms.
        metrics: named scalars for the logs (detached before logging).
    """

    terms: dict[str, torch.Tensor]
    metrics: dict[str, torch.Tensor | float] = field(default_factory=dict)

    def __getitem__(self, key: str) -> torch.Tensor:
        return self.terms[key]

    def __iter__(self):
        return iter(self.terms)

    def __len__(self) -> int:
        return len(self.terms)

    @classmethod
    def of(cls, output: ObjectiveOutput | Mapping[str, torch.Tensor]) -> ObjectiveOutput:
        """Normalise what ``forward`` returned: a plain mapping is a set of loss terms, no metrics."""
        if isinstance(output, ObjectiveOutput):
            clash = sorted(set(output.terms) & set(output.metrics))
            if clash:
                raise ValueError(f"{', '.join(clash)} is both a loss term and a metric; give them distinct names")
            return output
        if isinstance(output, Mapping):
            return cls(terms=dict(output))
        raise TypeError(
            f"Objective.forward must return a dict of loss terms or an ObjectiveOutput, got {type(output).__name__}"
        )


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
    computes named loss terms (a dict, or an :class:`ObjectiveOutput`: loss terms and, apart from them,
    metrics) in one of two ways: an in-batch objective implements :meth:`embed` (its views from the
    encoder) and :meth:`loss` (the terms from the views), and so trains cached and under Matryoshka;
    any other implements :meth:`forward` (encoder and batch to terms). The training module sums
    ``weight * sum(term_weights[k] * terms[k])`` over objectives and logs every term and metric as
    ``train/<name>/<term>``.

    The training module calls every hook below on every objective; each has a documented default,
    so a subclass overrides only what it needs:

    ============================  ==============================================================
    hook                          default
    ============================  ==============================================================
    :meth:`setup_for` (encoder)   nothing: no parameters sized by the encoder (objectives with
                                  ``extends_vocabulary = True`` are set up first)
    :meth:`setup_data` (dataset)  ``None``: no state from the data, the dataset is used as read
    :meth:`collate`               pads the schema's text fields to one length per batch
    :meth:`embed`, :meth:`loss`   (in-batch objectives) the views, the loss terms from them
    :meth:`forward`               ``loss(embed(encoder, batch), batch)``; others override it
    :meth:`total` (terms)         ``sum(term_weights.get(k, 1) * terms[k])``
    :meth:`inference_model`       ``None``: the plain encoder is the inference model
    ============================  ==============================================================

    A subclass may live in any package; it is used from YAML with ``class_path``. Constructor
    arguments are recorded automatically (see :meth:`config`) so that checkpoints can rebuild it.

    Args:
        weight: multiplier of this objective's loss in the total.
        name: the key of this objective's data in ``data.train`` and in the logs; defaults to the
            class's :attr:`name`, or, for a class that sets none, the class name in snake case with a
            trailing ``_objective`` removed (``AlignUniform`` -> ``align_uniform``).
        max_length: token limit for this objective's texts; default: the encoder's.
    """

    #: the class's default name (``SimCSE.name == "simcse"``); an instance's ``name=`` overrides it
    name: ClassVar[str] = ""
    batch_keys: tuple[str, ...] = ()
    text_keys: tuple[str, ...] = ()
    optional_keys: tuple[str, ...] = ()
    citation: str = ""
    #: ``True`` for an objective whose :meth:`setup_for` adds tokens to the shared encoder (AMR's
    #: vocabulary): the training module sets these up before the others, so that parameters sized by
    #: the vocabulary (CMLM's MLM head) see the final one, whatever the order of the objectives.
    extends_vocabulary: ClassVar[bool] = False
    #: learning rate of this objective's own parameters (a head, an entity table) when it should differ
    #: from the encoder's; ``None``: the optimiser's. The training module puts them in their own
    #: parameter groups (same schedule, same weight-decay split). GaussCSE sets it with ``head_lr``.
    param_lr: float | None = None

    def __init__(self, weight: float = 1.0, name: str | None = None, max_length: int | None = None) -> None:
        super().__init__()
        self.weight = float(weight)
        self.name = name or self.default_name()
        self.max_length = max_length
        self.term_weights: dict[str, float] = {}

    @classmethod
    def default_name(cls) -> str:
        """The class's :attr:`name`, else its snake-case class name without ``_objective``."""
        return cls.name or re.sub(r"_objective$", "", _snake(cls.__name__))

    @classmethod
    def name_in_recipe(cls, init_args: Mapping[str, Any] | None) -> str:
        """The name an instance built with ``init_args`` (a recipe's) will have, without building it:
        ``init_args["name"]``, else :meth:`default_name` (a wrapper overrides it: the wrapped one's)."""
        return (init_args or {}).get("name") or cls.default_name()

    # -------------------------------------------------------------------------------- data side
    @property
    def schema(self) -> BatchSchema:
        """This objective's :class:`BatchSchema`, from :attr:`batch_keys`, :attr:`text_keys`,
        :attr:`optional_keys` and ``max_length`` (instances may set the key tuples in ``__init__``); an
        objective that overrides :meth:`setup_data` needs all its records at once (no stream)."""
        return BatchSchema(
            tuple(self.batch_keys),
            tuple(self.text_keys),
            tuple(self.optional_keys),
            self.max_length,
            needs_all_records=type(self).setup_data is not Objective.setup_data,
        )

    def collate(self, features: Sequence[dict[str, Any]], pad_id: int) -> dict[str, Any]:
        """Batch tokenised records (:meth:`BatchSchema.collate`); override to convert fields further
        (e.g. label names to ids)."""
        return self.schema.collate(features, pad_id)

    def setup_data(self, dataset) -> Any:
        """Called once per ``fit`` with this objective's tokenised training set (a ``datasets.Dataset``)
        before the optimiser is built; may build state from the data (e.g. an entity vocabulary) and
        may return a filtered dataset to train on instead.

        Default: nothing; returns ``None`` (train on ``dataset`` as it is)."""
        return None

    # -------------------------------------------------------------------------------- model side
    def setup_for(self, encoder: Encoder) -> None:
        """Called by the training module with the shared encoder when the module is built, before the
        optimiser sees the parameters: build parameters sized by the encoder here (a classifier, a
        projection head). May be called again; it must then leave what exists unchanged.

        Default: nothing (an objective without parameters of its own)."""

    def forward(self, encoder: Encoder, batch: dict[str, Any]) -> dict[str, torch.Tensor] | ObjectiveOutput:
        """The loss terms of one batch (``{name: scalar tensor}``), or an :class:`ObjectiveOutput` with loss
        terms and metrics apart. Default: :meth:`loss` of :meth:`embed` (an in-batch objective); an objective
        that reaches into the backbone (CMLM's MLM, a classifier, a teacher) overrides ``forward`` instead."""
        return self.loss(self.embed(encoder, batch), batch)

    # ------------------------------------------------------------------------- the in-batch contract
    def embed(self, encode: EncodeFn, batch: dict[str, Any]) -> list[torch.Tensor]:
        """The tensors this objective needs from the encoder: its views, each with the batch's rows, from calls
        ``encode(input_ids, attention_mask) -> pooled`` (:func:`encode_views` stacks several fields into one
        call). ``encode`` is the encoder or, under GradCache, a function that encodes chunk by chunk; the
        objective reads nothing else of it. Implementing ``embed`` and :meth:`loss` (instead of ``forward``)
        is what makes an objective in-batch: it then trains cached (``model.cache_chunk``) and under
        :class:`~unisent.objectives.Matryoshka` with nothing else to set."""
        raise NotImplementedError(f"{type(self).__name__} implements forward, not embed and loss")

    def loss(self, views: list[torch.Tensor], batch: dict[str, Any]) -> dict[str, torch.Tensor] | ObjectiveOutput:
        """The loss terms from :meth:`embed`'s views (its own parameters: heads, tables, are used here)."""
        raise NotImplementedError(f"{type(self).__name__} implements forward, not embed and loss")

    def loss_at(
        self, views: list[torch.Tensor], batch: dict[str, Any], dim: int
    ) -> dict[str, torch.Tensor] | ObjectiveOutput:
        """The loss of the first ``dim`` coordinates of the sentence vectors (:class:`Matryoshka`). Default:
        :meth:`loss` of the views cut to ``[..., :dim]``; an objective with a head over the vectors cuts its
        head's outputs instead (GaussCSE)."""
        return self.loss([v[..., :dim] for v in views], batch)

    @property
    def in_batch(self) -> bool:
        """Whether this objective implements :meth:`embed` (and so :meth:`loss`)."""
        return type(self).embed is not Objective.embed

    def prefix_error(self) -> str | None:
        """Why this objective cannot be trained at prefixes of the sentence vector (:class:`Matryoshka`), or
        ``None``. Default: an objective without :meth:`embed` cannot."""
        return None if self.in_batch else "its loss is not computed from the vectors embed returns"

    def total(self, terms: Mapping[str, torch.Tensor]) -> torch.Tensor:
        """This objective's loss from its terms (before :attr:`weight`); an :class:`ObjectiveOutput`'s
        metrics never count."""
        return sum(self.term_weights.get(k, 1.0) * v for k, v in terms.items())

    def inference_model(self, encoder: Encoder) -> nn.Module | None:
        """The model that ``fit`` saves, validation evaluates and ``unisent.load`` returns, when this
        objective trains an inference head (GaussCSE's mean/variance model): a wrapper of ``encoder``.
        At most one objective of a model may return one (the training module says which clash).

        Default: ``None`` (the plain encoder is the inference model)."""
        return None

    # -------------------------------------------------------------------------------- run record
    @property
    def citations(self) -> tuple[str, ...]:
        """The papers behind this instance, for model cards: its class's :attr:`citation` (a wrapper adds the
        wrapped objective's)."""
        return (self.citation,) if self.citation else ()

    def config(self) -> dict[str, Any]:
        """``{"class_path": ..., "init_args": ...}``: enough to rebuild this objective."""
        cls = type(self)
        return {"class_path": f"{cls.__module__}.{cls.__qualname__}", "init_args": dict(self._init_args)}

    def extra_repr(self) -> str:
        return ", ".join(f"{k}={v!r}" for k, v in self._init_args.items())


def encode_views(encode: EncodeFn, batch: dict[str, Any], keys: Sequence[str], repeat: int = 1) -> list[torch.Tensor]:
    """Encode several text fields of a batch in ONE forward pass over the stacked views.

    Args:
        encode: the shared encoder, or what :meth:`Objective.embed` was given.
        batch: output of :meth:`Objective.collate` (text fields padded to one length).
        keys: text fields to stack, in order.
        repeat: how many times to stack the fields (2 for SimCSE's two dropout views).

    Returns:
        One (batch, hidden) tensor per stacked view: ``len(keys) * repeat`` tensors, the keys in
        order, repeated.
    """
    ids = torch.cat([batch[k]["input_ids"] for k in keys] * repeat)  # (views * batch, seq)
    mask = torch.cat([batch[k]["attention_mask"] for k in keys] * repeat)
    pooled = encode(ids, mask)  # (views * batch, hidden)
    return list(pooled.chunk(len(keys) * repeat))


def objective_class(name: Any, *, source: str, field: str) -> type[Objective]:
    """The :class:`Objective` subclass a record names, from the registry of objectives (every subclass
    defined in this process: unisent's, its plugins', the ``--import`` modules'); never imported.

    Raises:
        RegistryError: ``name`` is not a registered objective; the message names ``source`` and ``field``.
    """
    return resolve(name, subclasses(Objective), source=source, field=field, what="objective")


def objective_from_record(spec: Any, *, source: str, field: str) -> Objective:
    """Build an objective from a record's ``{"class_path", "init_args"}``: the class from the registry
    (:func:`objective_class`), then its own constructor with the record's arguments.

    Raises:
        RegistryError: the class is not registered (nothing was imported or called).
        ValueError: the spec is no such mapping, or the constructor refused its arguments (one line).
    """
    if not isinstance(spec, Mapping):
        raise ValueError(f"{source}: {field} must be a {{class_path, init_args}} mapping, got {spec!r:.80}")
    cls = objective_class(spec.get("class_path"), source=source, field=f"{field}.class_path")
    init_args = spec.get("init_args") or {}
    if not isinstance(init_args, Mapping):
        raise ValueError(f"{source}: {field}.init_args must be a mapping, got {init_args!r:.80}")
    try:
        return cls(**init_args)
    except (TypeError, ValueError) as err:
        raise ValueError(f"{source}: {field}: {cls.__name__}: {err}") from None
