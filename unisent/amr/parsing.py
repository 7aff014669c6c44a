"""AMR parsing and machine translation as pluggable steps.

Cai et al. (2022), Algorithm 1, builds AMR training data as ``parse(translate(x, l))``: an English NLI sentence is
translated into language ``l`` (OPUS-MT in the paper) and parsed by a multilingual AMR parser. Neither ships with
weights here, so both are steps behind two ``runtime_checkable`` protocols ([`AMRParser`][unisent.amr.AMRParser],
[`Translator`][unisent.amr.Translator]; any object with the method fits), and pre-computed data
([`PreParsedAMR`][unisent.amr.PreParsedAMR], [`PreTranslated`][unisent.amr.PreTranslated]) always works offline.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Protocol, runtime_checkable

from ..data.file_checks import require_file
from ..data.records import iter_records
from .penman_blocks import iter_penman_blocks

__all__ = [
    "AMRParser",
    "AmrlibParser",
    "MarianTranslator",
    "NotInLookupError",
    "PreParsedAMR",
    "PreTranslated",
    "Translator",
    "parser_classes",
]

PathLike = str | os.PathLike
TEXT_KEYS = ("text", "snt", "sentence")
GRAPH_KEYS = ("penman", "amr")


@runtime_checkable
class AMRParser(Protocol):
    """Parses sentences in language ``lang`` into AMR graphs (PENMAN text), one per sentence, in order."""

    def parse(self, sentences: Sequence[str], lang: str = "en") -> list[str]: ...


@runtime_checkable
class Translator(Protocol):
    """Translates English sentences into language ``lang`` (in input order)."""

    def translate(self, sentences: Sequence[str], lang: str) -> list[str]: ...


class NotInLookupError(LookupError):
    """A sentence has no pre-computed graph or translation."""


def _key(sentence: str) -> str:
    return " ".join(sentence.split())


def _as_paths(sources: PathLike | Sequence[PathLike]) -> list[Path]:
    if isinstance(sources, (str, os.PathLike)):
        sources = [sources]
    return [require_file(p, "pre-computed AMR data") for p in sources]


def string_field(record: object, keys: Sequence[str], path: Path, lineno: int) -> str:
    """The first of ``keys`` that holds a string in a jsonl record, else a ``ValueError`` naming the file and line."""
    if isinstance(record, dict):
        for key in keys:
            if isinstance(record.get(key), str):
                return record[key]
    found = sorted(record) if isinstance(record, dict) else type(record).__name__
    raise ValueError(f"{path}:{lineno}: no string field {' or '.join(map(repr, keys))} in {found}")


def _look_up(table: Mapping[str, str], sentences: Sequence[str], what: str, lang: str, origin: str) -> list[str]:
    """Each sentence's entry of ``table``; a sentence without one is a ``NotInLookupError`` naming it."""
    out = []
    for sentence in sentences:
        found = table.get(_key(sentence))
        if found is None:
            shown = sentence if len(sentence) <= 200 else sentence[:200] + "..."
            raise NotInLookupError(
                f"no {what} for sentence {shown!r} (lang {lang!r}) in {origin} ({len(table)} sentences known)"
            )
        out.append(found)
    return out


class PreParsedAMR:
    """Look up pre-parsed graphs by sentence (whitespace collapsed, first graph kept, ``lang`` ignored);
    a missing sentence raises [`NotInLookupError`][unisent.amr.NotInLookupError] naming it.

    Args:
        sources: a PENMAN file (``# ::snt`` gives the sentence; graphs without it are ignored), a jsonl
            file (``text``/``snt``/``sentence`` and ``penman``/``amr`` fields, e.g. the output of
            ``unisent data amr-linearize``), a list of such files, or a dict ``{sentence: PENMAN}``.
    """

    def __init__(self, sources: PathLike | Sequence[PathLike] | Mapping[str, str]) -> None:
        self.graphs: dict[str, str] = {}
        if isinstance(sources, Mapping):
            self.origin = "the given mapping"
            for sentence, graph in sources.items():
                self.graphs.setdefault(_key(sentence), graph)
            return
        paths = _as_paths(sources)
        self.origin = ", ".join(map(str, paths))
        for path in paths:
            if path.suffix == ".jsonl":
                for rec in iter_records(path, "jsonl", blank_lines="skip"):
                    lineno, record = rec.line, rec.data
                    text = string_field(record, TEXT_KEYS, path, lineno)
                    self.graphs.setdefault(_key(text), string_field(record, GRAPH_KEYS, path, lineno))
            else:
                for block in iter_penman_blocks(path.read_text(encoding="utf-8"), str(path)):
                    if block.metadata.get("snt") and block.graph.strip():
                        self.graphs.setdefault(_key(block.metadata["snt"]), block.graph)

    def __len__(self) -> int:
        return len(self.graphs)

    def __contains__(self, sentence: str) -> bool:
        return _key(sentence) in self.graphs

    def parse(self, sentences: Sequence[str], lang: str = "en") -> list[str]:
        if isinstance(sentences, str):
            raise TypeError("parse takes a list of sentences, not a single string")
        return _look_up(self.graphs, sentences, "pre-parsed AMR graph", lang, self.origin)


class PreTranslated:
    """Look up pre-computed translations of English sentences (matched as in
    [`PreParsedAMR`][unisent.amr.PreParsedAMR]).

    Args:
        sources: jsonl file(s) of ``{"text": English, "lang": "de", "translation": German}`` lines, or a
            dict ``{lang: {English: translation}}``.
        source_lang: the language of the input sentences; ``translate(x, source_lang)`` returns ``x``.
    """

    def __init__(
        self, sources: PathLike | Sequence[PathLike] | Mapping[str, Mapping[str, str]], source_lang: str = "en"
    ) -> None:
        self.source_lang = source_lang
        self.translations: dict[str, dict[str, str]] = {}
        if isinstance(sources, Mapping):
            self.origin = "the given mapping"
            for lang, table in sources.items():
                for text, translation in table.items():
                    self.translations.setdefault(lang, {}).setdefault(_key(text), translation)
            return
        paths = _as_paths(sources)
        self.origin = ", ".join(map(str, paths))
        for path in paths:
            for rec in iter_records(path, "jsonl", blank_lines="skip"):
                lineno, record = rec.line, rec.data
                text = string_field(record, ("text",), path, lineno)
                lang = string_field(record, ("lang",), path, lineno)
                translation = string_field(record, ("translation",), path, lineno)
                self.translations.setdefault(lang, {}).setdefault(_key(text), translation)

    @property
    def languages(self) -> list[str]:
        return sorted(self.translations)

    def translate(self, sentences: Sequence[str], lang: str) -> list[str]:
        if isinstance(sentences, str):
            raise TypeError("translate takes a list of sentences, not a single string")
        if lang == self.source_lang:
            return list(sentences)
        table = self.translations.get(lang)
        if table is None:
            raise NotInLookupError(
                f"no translations into {lang!r} in {self.origin}; languages: {', '.join(self.languages) or 'none'}"
            )
        return _look_up(table, sentences, "translation", lang, self.origin)


class AmrlibParser:
    """amrlib's sentence-to-graph (stog) models.

    Needs the ``amr`` extra (``pip install 'unisent[amr]'``) and a parse model downloaded as amrlib's
    documentation says (nothing is downloaded here); both are checked at once. A sentence amrlib fails
    to parse raises ``ValueError`` naming it.

    Args:
        model_dir: the unpacked parse model; unset for amrlib's default ``<amrlib>/data/model_stog``.
        languages: the languages the model parses (amrlib's models are English).
        device: ``cpu``, ``cuda``, ... (amrlib's default when unset).
    """

    def __init__(
        self,
        model_dir: PathLike | None = None,
        *,
        languages: Sequence[str] = ("en",),
        batch_size: int = 16,
        device: str | None = None,
    ) -> None:
        try:
            import amrlib  # pyright: ignore[reportMissingImports]  # the optional amr extra
        except ImportError as err:
            raise ImportError(
                "AmrlibParser needs amrlib, which is not installed: pip install 'unisent[amr]' "
                "(or give pre-parsed graphs with PreParsedAMR)"
            ) from err
        if model_dir is None:
            from amrlib import defaults  # pyright: ignore[reportMissingImports]

            model_dir = Path(defaults.data_dir) / "model_stog"
        model_dir = Path(model_dir)
        if not model_dir.is_dir():
            raise FileNotFoundError(
                f"no amrlib parse model at {str(model_dir)!r}: download a sentence-to-graph model as "
                "amrlib's installation instructions describe (releases of https://github.com/bjascob/amrlib-models), "
                "unpack it there (or link it as model_stog) or pass model_dir=; unisent does not download models"
            )
        kwargs = {"batch_size": batch_size} | ({"device": device} if device else {})
        try:
            self.model = amrlib.load_stog_model(model_dir=str(model_dir), **kwargs)
        except Exception as err:  # amrlib raises many kinds for a broken model directory
            raise RuntimeError(f"amrlib could not load the parse model in {str(model_dir)!r}: {err}") from err
        self.languages = tuple(languages)

    def parse(self, sentences: Sequence[str], lang: str = "en") -> list[str]:
        if isinstance(sentences, str):
            raise TypeError("parse takes a list of sentences, not a single string")
        if lang not in self.languages:
            raise ValueError(f"this amrlib model parses {', '.join(self.languages)}, not {lang!r}")
        graphs = self.model.parse_sents(list(sentences), add_metadata=False)
        for sentence, graph in zip(sentences, graphs):
            if graph is None:
                raise ValueError(f"amrlib could not parse sentence {sentence!r}")
        return list(graphs)


class MarianTranslator:
    """Hugging Face MarianMT (OPUS-MT) models from local directories, English -> ``lang``; directories
    are checked at once, models loaded on first use.

    Args:
        models: ``{lang: directory}`` of a saved ``MarianMTModel`` and tokenizer (e.g.
            ``{"de": "opus-mt-en-de"}``); several languages may share one directory.
        language_prefix: prepend ``>>lang<<`` to every sentence (for multi-target models such as
            ``opus-mt-en-ROMANCE``).
        source_lang: ``translate(x, source_lang)`` returns ``x``.
    """

    def __init__(
        self,
        models: Mapping[str, PathLike],
        *,
        language_prefix: bool = False,
        source_lang: str = "en",
        batch_size: int = 16,
        max_new_tokens: int = 256,
        num_beams: int = 1,
        device: str = "cpu",
    ) -> None:
        if isinstance(models, (str, os.PathLike)):
            raise TypeError("models maps target languages to directories, e.g. {'de': 'opus-mt-en-de'}")
        self.models = {lang: Path(path) for lang, path in models.items()}
        for lang, path in self.models.items():
            if not (path / "config.json").is_file():
                raise FileNotFoundError(
                    f"no MarianMT model for {lang!r} at {str(path)!r} (a directory with config.json, "
                    "tokenizer files and weights, e.g. from `huggingface-cli download Helsinki-NLP/opus-mt-en-de "
                    "--local-dir DIR` where there is internet)"
                )
        self.language_prefix = language_prefix
        self.source_lang = source_lang
        self.batch_size = batch_size
        self.max_new_tokens = max_new_tokens
        self.num_beams = num_beams
        self.device = device
        self._loaded: dict[Path, tuple] = {}

    def _load(self, path: Path):
        if path not in self._loaded:
            from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

            tokenizer = AutoTokenizer.from_pretrained(path, local_files_only=True, trust_remote_code=False)
            model = AutoModelForSeq2SeqLM.from_pretrained(path, local_files_only=True, trust_remote_code=False)
            model = model.to(self.device).eval()
            self._loaded[path] = (tokenizer, model)
        return self._loaded[path]

    def translate(self, sentences: Sequence[str], lang: str) -> list[str]:
        import torch

        if isinstance(sentences, str):
            raise TypeError("translate takes a list of sentences, not a single string")
        if lang == self.source_lang:
            return list(sentences)
        if lang not in self.models:
            raise ValueError(f"no MarianMT model for {lang!r}; models for: {', '.join(sorted(self.models))}")
        tokenizer, model = self._load(self.models[lang])
        texts = [f">>{lang}<< {s}" if self.language_prefix else s for s in sentences]
        out: list[str] = []
        for start in range(0, len(texts), self.batch_size):
            batch = tokenizer(
                texts[start : start + self.batch_size], return_tensors="pt", padding=True, truncation=True
            )
            with torch.inference_mode():
                generated = model.generate(
                    **batch.to(self.device),
                    max_new_tokens=self.max_new_tokens,
                    num_beams=self.num_beams,
                    do_sample=False,
                )
            out += tokenizer.batch_decode(generated, skip_special_tokens=True)
        return out


def parser_classes() -> dict[str, type]:
    """The parser classes a saved ``retrofit.json`` may name: unisent's and their subclasses."""
    from ..io.registry import subclasses

    return subclasses((PreParsedAMR, AmrlibParser), include_base=True)
