"""``EncoderWrapper``: the base of inference models that put a head on top of an encoder."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Generic, TypeVar, cast

import torch
from torch import nn

from ..inference.base import InferenceModel, NotExportableError, STModule
from ..io import atomic_write, write_json
from ..io.model_files import ModelFileError, check_fits, load_state, read_model_json, read_state, weight_shapes

if TYPE_CHECKING:
    from ..encoders.export_declarations import EncoderModel

__all__ = ["EncoderWrapper"]

#: the wrapped model's type: an ``Encoder`` under GaussCSE's and CMLM's heads, any inference model under PCR
E = TypeVar("E", bound=InferenceModel)


class EncoderWrapper(InferenceModel, Generic[E]):
    """Base of inference models that put a head on top of an encoder (GaussCSE's ``GaussianEncoder``, CMLM's
    ``ProjectionEncoder``, ``PCREncoder``, a user's own): exposes the wrapped encoder's ``config`` and ``tokenizer`` and
    runs the head over pooled vectors ([`map_head`][unisent.models.EncoderWrapper.map_head]).

    A subclass whose head is an ``nn.Module`` with a ``settings`` dict (its constructor arguments) sets ``head_attr``,
    ``head_class`` and ``head_stem``, and gets saving and loading: the encoder's files, plus ``<head_stem>.pt`` (the
    head's weights) and ``<head_stem>.json`` (its settings) beside them, and the model record. Its constructor takes
    ``(encoder, head)``. Other layouts override ``save_pretrained`` / ``from_pretrained`` / ``is_saved_in``.

    Exports: the card lists the encoder's rows and [`head_facts`][unisent.models.EncoderWrapper.head_facts]; a Sentence
        Transformers
    export is the encoder's modules followed by
    [`head_sentence_transformers_modules`][unisent.models.EncoderWrapper.head_sentence_transformers_modules] (a head
    that cannot be written as Sentence Transformers modules sets ``export_formats = ()``).
    """

    encoder: E
    #: attribute holding the head, the head's class, and the name of its files (without suffix)
    head_attr: ClassVar[str] = "head"
    head_class: ClassVar[type[nn.Module]]
    head_stem: ClassVar[str]

    # ------------------------------------------------------------------------------ save / load
    def save_pretrained(self, directory: str | os.PathLike) -> Path:
        directory = Path(self.encoder.save_pretrained(directory))
        head = getattr(self, self.head_attr)
        with atomic_write(directory / f"{self.head_stem}.pt", "wb") as fh:
            torch.save(head.state_dict(), fh)
        write_json(directory / f"{self.head_stem}.json", head.settings)
        self.write_model_record(directory)
        return directory

    @classmethod
    def from_pretrained(cls, directory: str | os.PathLike) -> EncoderWrapper:
        from ..encoders.encoder import Encoder

        directory = Path(directory)
        settings_file, weights_file = directory / f"{cls.head_stem}.json", directory / f"{cls.head_stem}.pt"
        settings = read_model_json(settings_file, dict)
        encoder = Encoder.from_pretrained(directory)
        # the head's sizes against its weights, built on the meta device first: nothing allocated for a wrong size
        check_fits(
            lambda: cls.build_head(settings, encoder),
            weight_shapes(weights_file),
            config_file=settings_file,
            settings=settings,
            weights_file=weights_file,
        )
        try:
            head = cls.build_head(settings, encoder)
        except (TypeError, ValueError) as err:
            raise ModelFileError(f"{settings_file}: {str(err).splitlines()[0] if str(err) else err!r}") from None
        load_state(head, read_state(weights_file), source=weights_file)
        return cls(encoder, head)

    @classmethod
    def build_head(cls, settings: dict, encoder: nn.Module) -> nn.Module:
        """The head ``settings`` describe, before its weights are loaded (``encoder``: for a head shaped by it)."""
        return cls.head_class(**settings)

    @classmethod
    def is_saved_in(cls, directory: str | os.PathLike) -> bool:
        stem = getattr(cls, "head_stem", None)
        return bool(stem) and Path(directory, f"{stem}.pt").is_file()

    # ------------------------------------------------------------------------------ the wrapped encoder
    @property
    def config(self):
        return self.encoder.config

    @property
    def tokenizer(self):
        return self.encoder.tokenizer

    def position_limit(self) -> int | None:
        """The wrapped encoder's positions (the panel caps its texts there; tiny backbones have fewer than 256)."""
        inner: Callable[[], int | None] | None = getattr(self.encoder, "position_limit", None)
        return inner() if callable(inner) else None

    @staticmethod
    @torch.inference_mode()
    def map_head(head: nn.Module, pooled: torch.Tensor, fn, chunk: int = 4096) -> list:
        """``[fn(c) for c in pooled.split(chunk)]`` with each chunk on ``head``'s device and ``head`` in
        eval mode (its mode is restored afterwards)."""
        was_training = head.training
        head.eval()
        device = next(head.parameters(), pooled).device
        try:
            return [fn(c.to(device)) for c in pooled.split(chunk)]
        finally:
            head.train(was_training)

    # ------------------------------------------------------------------------------ exports
    def head_facts(self) -> list[tuple[str, str]]:
        """The model card's rows about the head (none by default)."""
        return []

    def card_facts(self) -> list[tuple[str, str]]:
        return self.encoder.card_facts() + self.head_facts()

    def head_sentence_transformers_modules(self) -> list[STModule]:
        """The Sentence Transformers modules of the head, after the encoder's."""
        raise NotExportableError(f"{type(self).__name__} declares no Sentence Transformers modules for its head")

    def sentence_transformers_modules(self) -> list[STModule]:
        # the head runs on the pooled vectors (``encoder.encode_pooled``), before any normalisation
        pooled = cast("EncoderModel", self.encoder).pooled_sentence_transformers_modules()  # an Encoder's
        return pooled + self.head_sentence_transformers_modules()

    def sentence_transformers_config(self) -> dict[str, Any]:
        return self.encoder.sentence_transformers_config()

    @property
    def similarity_fn_name(self) -> str:
        """The wrapped encoder's (a head that changes the geometry overrides it)."""
        return getattr(self.encoder, "similarity_fn_name", "cosine")

    def sentence_transformers_model_config(self) -> dict[str, Any]:
        inner = getattr(self.encoder, "sentence_transformers_model_config", None)
        config = inner() if inner is not None else super().sentence_transformers_model_config()
        return {**config, "similarity_fn_name": self.similarity_fn_name}

    @contextmanager
    def export_max_length(
        self, max_length: int | None = None, base_model: str | None = None
    ) -> Iterator[tuple[int, int] | None]:
        """The wrapped encoder's (see
        [`InferenceModel.export_max_length`][unisent.inference.InferenceModel.export_max_length])."""
        inner = getattr(self.encoder, "export_max_length", None)
        with (inner or super().export_max_length)(max_length, base_model) as lengths:
            yield lengths
