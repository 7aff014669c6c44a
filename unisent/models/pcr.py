"""An encoder followed by per-language principal component removal (CMLM, Yang et al. 2021, Sec. 5.1).

Removing a language's top principal components is affine: ``y = P (x - m)`` with
``P = I - C^T C`` (``C``: the language's components, ``m``: its mean, zero unless ``center``). So one
language's post-processor is a ``Dense`` module (weight ``P``, bias ``-P m``, identity activation)
after the encoder's modules. Sentence Transformers has no language argument: the export is for one
language (the model's ``default_language``, or its only fitted language). ``pcr.json`` is written
beside the Sentence Transformers files, so ``unisent.load(DIR)`` returns the full ``PCREncoder`` with
every fitted language.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import cast

import torch
import torch.nn.functional as F
from torch import nn

from ..inference.base import InferenceModel, STModule
from ..inference.model_types import load_saved, register_model
from ..io.model_files import read_model_json
from .components import PrincipalComponentRemoval
from .wrapper import EncoderWrapper

__all__ = ["INNER_DIR", "PCR_FILE", "PCREncoder", "fit_pcr"]

PCR_FILE = "pcr.json"
INNER_DIR = "model"  # the wrapped model, saved by its own save_pretrained


@register_model("pcr")
class PCREncoder(EncoderWrapper[InferenceModel]):
    """A sentence encoder whose embeddings go through a per-language
    [`PrincipalComponentRemoval`][unisent.models.PrincipalComponentRemoval].

    ``encode(sentences, language="de")`` embeds with the wrapped model, then removes German's components. ``language``
    may also be a list (one per sentence); when it is omitted, ``default_language`` is used, or the only fitted
    language; otherwise it is an error. ``unisent.load(DIR)`` returns this model for a directory written by
    [`save_pretrained`][unisent.models.PCREncoder.save_pretrained].

    Args:
        encoder: any model with ``encode(sentences, batch_size, ...)`` and ``save_pretrained``
            (an [`Encoder`][unisent.encoders.Encoder] or an objective's inference model).
        pcr: the fitted post-processor.
        default_language: language used when ``encode`` is called without one (e.g. by ``unisent
            evaluate``).
    """

    card_tags = ("principal-component-removal",)

    def __init__(
        self, encoder: InferenceModel, pcr: PrincipalComponentRemoval, default_language: str | None = None
    ) -> None:
        super().__init__()
        if default_language is not None and default_language not in pcr.components:
            raise ValueError(f"default_language {default_language!r} is not fitted; fitted: {', '.join(pcr.languages)}")
        self.encoder = encoder
        self.pcr = pcr
        self.default_language = default_language

    def _language(self, language: str | Sequence[str] | None, missing: str = "") -> str | Sequence[str]:
        """``language``, else ``default_language``, else the only fitted language; else a ``ValueError`` (``missing``
        or that ``encode`` needs one)."""
        if language is not None:
            return language
        if self.default_language is not None:
            return self.default_language
        if len(self.pcr.languages) == 1:
            return self.pcr.languages[0]
        fitted = ", ".join(self.pcr.languages)
        raise ValueError(
            missing.format(fitted) or f"encode needs language=... (fitted: {fitted}) or a default_language"
        )

    def forward(
        self, input_ids: torch.Tensor, attention_mask: torch.Tensor, language: str | None = None
    ) -> torch.Tensor:
        """Token ids (batch, seq) -> post-processed embeddings (batch, dim)."""
        comps, mean = self.pcr._fitted(cast(str, self._language(language)))  # one language: a str in, a str out
        x = self.encoder(input_ids, attention_mask).float() - mean.to(input_ids.device)
        comps = comps.to(x.device)
        return x - (x @ comps.T) @ comps

    def encode(
        self,
        sentences: Sequence[str],
        batch_size: int = 64,
        *,
        normalize: bool = False,
        precision: str = "auto",
        show_progress_bar: bool = False,
        language: str | Sequence[str] | None = None,
    ) -> torch.Tensor:
        """Embed, remove the language's components, then (optionally) L2-normalise: float32 (n, dim)."""
        language = self._language(language)
        options = {"precision": precision, "show_progress_bar": show_progress_bar}
        out = self.pcr.transform(self.encoder.encode(sentences, batch_size, **options), language)
        return F.normalize(out, dim=-1) if normalize else out

    # ------------------------------------------------------------------------------ save / load
    def save_pretrained(self, directory: str | os.PathLike) -> Path:
        """``pcr.json`` (components and the default language) and the wrapped model in ``model/``
        (written by its own ``save_pretrained``, so any model ``unisent.load`` reads can be wrapped)."""
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        self.encoder.save_pretrained(directory / INNER_DIR)
        self.pcr.save(directory / PCR_FILE, default_language=self.default_language)
        self.write_model_record(directory)
        return directory

    @classmethod
    def from_pretrained(cls, directory: str | os.PathLike) -> PCREncoder:
        directory = Path(directory)
        state = read_model_json(directory / PCR_FILE, dict)  # size and depth bounded, one line if malformed
        if state.get("inner") == ".":  # a sentence-transformers export: the encoder's files sit beside pcr.json
            from ..encoders.encoder import Encoder

            inner = Encoder.from_pretrained(directory)
        else:
            inner = load_saved(directory / INNER_DIR)
        return cls(inner, PrincipalComponentRemoval.from_state(state), state.get("default_language"))

    @classmethod
    def is_saved_in(cls, directory: str | os.PathLike) -> bool:
        return Path(directory, PCR_FILE).is_file()

    # ------------------------------------------------------------------------------ exports
    def export_language(self) -> str:
        """The one language a Sentence Transformers export removes the components of."""
        missing = "a Sentence Transformers model takes no language: set the PCREncoder's default_language to the one "
        return cast(str, self._language(None, missing + "to export (fitted: {})"))

    def head_facts(self) -> list[tuple[str, str]]:
        return [
            (
                "principal component removal",
                f"k = {self.pcr.k}, centre: {self.pcr.center}; exported language "
                f"`{self.export_language()}` (fitted: {', '.join(self.pcr.languages)})",
            )
        ]

    def head_sentence_transformers_modules(self) -> list[STModule]:
        comps, mean = self.pcr._fitted(self.export_language())
        dim = comps.shape[1]
        linear = nn.Linear(dim, dim)
        with torch.no_grad():
            projection = torch.eye(dim) - comps.T @ comps  # (dim, dim), symmetric
            linear.weight.copy_(projection)
            linear.bias.copy_(-(projection @ mean))
        return [STModule.dense(linear, label="Dense (PCR)")]

    def sentence_transformers_modules(self) -> list[STModule]:
        from ..encoders.encoder import Encoder

        if not isinstance(self.encoder, Encoder):
            raise TypeError(f"PCR export needs a plain unisent Encoder inside, got {type(self.encoder).__name__}")
        # PCR is fitted on the wrapped model's embeddings (``encode``, normalised when it normalises)
        return self.encoder.sentence_transformers_modules() + self.head_sentence_transformers_modules()

    def save_sentence_transformers_root(self, out: Path) -> None:
        """The encoder's files at the root (the ``Transformer``), ``pcr.json`` pointing at them."""
        language = self.export_language()
        self.encoder.save_pretrained(out)
        self.pcr.save(out / PCR_FILE, default_language=language, inner=".")
        self.write_model_record(out)

    def sentence_transformers_usage(self) -> str:
        return f"""The embeddings have the top principal component(s) of language `{self.export_language()}` removed
(CMLM's post-processing), as a `Dense` module after the pooling:

```python
from sentence_transformers import SentenceTransformer

model = SentenceTransformer("path/to/this/directory")
embeddings = model.encode(["A man is playing a guitar."])
```

Every fitted language ({", ".join(self.pcr.languages)}) is available through unisent:

```python
import unisent

model = unisent.load("path/to/this/directory")          # PCREncoder
embeddings = model.encode(["Ein Mann spielt Gitarre."], language="{self.pcr.languages[0]}")
```
"""


def fit_pcr(
    model: InferenceModel,
    sentences_by_language: Mapping[str, Sequence[str]],
    k: int = 1,
    *,
    center: bool = False,
    batch_size: int = 64,
    default_language: str | None = None,
) -> PCREncoder:
    """Embed each language's sentences with ``model`` and fit PCR on them.

    Args:
        model: any model with ``encode`` (e.g. ``unisent.load(DIR)``).
        sentences_by_language: ``{language: [sentences]}``, a few hundred or more per language.
        k: components removed per language (the paper: 1).
        center: see [`PrincipalComponentRemoval`][unisent.models.PrincipalComponentRemoval].
        batch_size: encoding batch size.
        default_language: see [`PCREncoder`][unisent.models.PCREncoder].

    Returns:
        A [`PCREncoder`][unisent.models.PCREncoder]; ``save_pretrained(DIR)`` it and load it back with
        ``unisent.load(DIR)``.
    """
    embeddings = {lang: model.encode(list(sents), batch_size) for lang, sents in sentences_by_language.items()}
    pcr = PrincipalComponentRemoval(k=k, center=center).fit(embeddings)
    return PCREncoder(model, pcr, default_language)
