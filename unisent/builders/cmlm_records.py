"""CMLM's training records: consecutive sentence pairs, translation pairs and (cross-lingual) NLI pairs."""

from __future__ import annotations

import itertools
import re
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Literal

from ..data.benchmark_readers import NLI_LABELS, read_tatoeba
from ..data.records import iter_records
from .nli_records import read_nli_pairs, write_jsonl

__all__ = [
    "bitext_pairs",
    "consecutive_pairs",
    "nli_pairs",
    "read_documents",
    "tatoeba_languages",
    "build_cmlm_pairs",
    "build_bitext",
    "build_nli_pairs",
    "COMMANDS",
]

_TATOEBA = re.compile(r"^tatoeba\.([^.]+)-eng\.\1$")


def read_documents(path: str | Path, fmt: Literal["auto", "txt", "jsonl"] = "auto") -> Iterator[list[str]]:
    """Stream documents (lists of sentences): ``txt``, one sentence per line and a blank line between
    documents; ``jsonl``, ``{"sentences": [...]}`` per line; ``auto``: ``.jsonl``/``.json`` or text."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path} does not exist")
    if fmt == "auto":
        fmt = "jsonl" if path.suffix.lower() in (".jsonl", ".json") else "txt"
    if fmt == "txt":
        with path.open(encoding="utf-8") as fh:
            for nonblank, sentences in itertools.groupby((line.strip() for line in fh), key=bool):
                if nonblank:
                    yield list(sentences)
        return
    for rec in iter_records(path, "jsonl", blank_lines="skip"):
        lineno, record = rec.line, rec.data
        sentences = record.get("sentences") if isinstance(record, dict) else None
        if not isinstance(sentences, list) or not all(isinstance(s, str) for s in sentences):
            raise ValueError(f"{path}: line {lineno}: expected an object with 'sentences': a list of strings")
        yield [s.strip() for s in sentences if s.strip()]


def consecutive_pairs(documents: Iterable[list[str]], max_pairs: int = 0) -> Iterator[dict[str, str]]:
    """``{"s1": sentence i, "s2": sentence i + 1}`` per document (CMLM swaps them at training time, not
    here); ``max_pairs`` > 0 stops after that many."""
    pairs = ({"s1": first, "s2": second} for document in documents for first, second in zip(document, document[1:]))
    return itertools.islice(pairs, max_pairs or None)


def tatoeba_languages(directory: str | Path) -> list[str]:
    """Languages with a ``tatoeba.<lang>-eng.<lang>`` file in ``directory``."""
    return sorted(m.group(1) for p in Path(directory).iterdir() if (m := _TATOEBA.match(p.name)))


def bitext_pairs(
    path: str | Path,
    languages: Iterable[str] | None = None,
    *,
    english_source: bool = True,
    language: str | None = None,
) -> Iterator[dict[str, str]]:
    """Stream translation pairs ``{"source", "target"[, "language"]}`` (an empty side skipped) from a
    ``source<TAB>target`` ``.tsv`` (``language``: its pairs' field), a ``tatoeba.<lang>-eng.<lang>`` file
    (``.eng`` partner beside it) or a directory of them (``languages``: which; default all). Tatoeba:
    ``english_source`` (as in the paper), else the other language is the source."""
    path = Path(path)
    if path.is_dir():
        found = tatoeba_languages(path)
        chosen = list(languages) if languages else found
        missing = sorted(set(chosen) - set(found))
        if missing:
            raise FileNotFoundError(f"{path} has no tatoeba.<lang>-eng.<lang> file for {', '.join(missing)}")
        files = [path / f"tatoeba.{lang}-eng.{lang}" for lang in chosen]
    elif _TATOEBA.match(path.name):
        files = [path]
    else:
        if not path.is_file():
            raise FileNotFoundError(f"{path} does not exist")
        with path.open(encoding="utf-8") as fh:
            for lineno, line in enumerate(fh, 1):
                if not line.strip():
                    continue
                fields = line.rstrip("\r\n").split("\t")
                if len(fields) != 2:
                    raise ValueError(f"{path}: line {lineno}: expected source<TAB>target, got {len(fields)} field(s)")
                source, target = fields[0].strip(), fields[1].strip()
                if source and target:
                    yield {"source": source, "target": target} | ({"language": language} if language else {})
        return
    for other in files:
        lang = other.suffix[1:]  # tatoeba.<lang>-eng.<lang>
        pairs = read_tatoeba(other.parent, lang)  # stripped; files of different lengths: a DataFormatError
        for text, eng in zip(pairs.source, pairs.target):
            if text and eng:
                source, target = (eng, text) if english_source else (text, eng)
                yield {"source": source, "target": target, "language": lang}


def nli_pairs(
    fmt: Literal["snli", "xnli", "sick"],
    path: str,
    split: str = "dev",
    hypothesis_path: str | None = None,
) -> list[dict[str, str]]:
    """Labelled NLI pairs ``{"premise", "hypothesis", "label"}`` (entailment/neutral/contradiction; SNLI's
    ``-`` dropped). With ``hypothesis_path`` (same format, line-aligned, e.g. XNLI's German file for an
    English ``path``) the hypotheses come from there: cross-lingual pairs (CMLM Sec. 4.3)."""
    premises, hypotheses, labels = read_nli_pairs(fmt, path, split)
    if hypothesis_path:
        _, other, other_labels = read_nli_pairs(fmt, hypothesis_path, split)
        if len(other) != len(hypotheses):
            raise ValueError(f"{hypothesis_path} has {len(other)} pairs, {path} has {len(hypotheses)}: not aligned")
        for i, (a, b) in enumerate(zip(labels, other_labels), 1):
            if a != b:
                raise ValueError(f"pair {i}: label {a!r} in {path} but {b!r} in {hypothesis_path}: not aligned")
        hypotheses = other
    labels = ["contradiction" if label == "contradictory" else label for label in labels]
    return [
        {"premise": p.strip(), "hypothesis": h.strip(), "label": label}
        for p, h, label in zip(premises, hypotheses, labels)
        if label in NLI_LABELS and p.strip() and h.strip()
    ]


def build_cmlm_pairs(
    *, input: str, format: Literal["auto", "txt", "jsonl"] = "auto", max_pairs: int = 0, output: str
) -> None:
    """Documents -> consecutive sentence pairs (s1, s2) jsonl, for CMLM.

    Args:
        input: a txt (one sentence per line, a blank line between documents) or a jsonl ('sentences' lists)
        format: txt or jsonl; auto: by the suffix
        max_pairs: stop after N pairs (0 = all)
        output: jsonl to write
    """
    n = write_jsonl(consecutive_pairs(read_documents(input, format), max_pairs), output)
    print(f"{n} consecutive sentence pairs (s1, s2) -> {output}")


def build_bitext(
    *,
    input: str,
    languages: str = "",
    source: Literal["eng", "other"] = "eng",
    language: str | None = None,
    output: str,
) -> None:
    """Translation pairs (tsv or Tatoeba layout) -> (source, target) jsonl.

    Args:
        input: a source<TAB>target .tsv, a tatoeba.<lang>-eng.<lang> file, or a directory of them
        languages: directory input: comma-separated languages (default: all)
        source: Tatoeba: which side is the source (default English, as in the paper)
        language: tsv input: language tag written to every pair
        output: jsonl to write
    """
    chosen = [x for x in languages.split(",") if x] or None
    pairs = bitext_pairs(input, chosen, english_source=source != "other", language=language)
    n = write_jsonl(pairs, output)
    print(f"{n} translation pairs (source, target) -> {output}")


def build_nli_pairs(
    *,
    format: Literal["snli", "xnli", "sick"],
    input: str,
    split: str = "dev",
    hypothesis_input: str | None = None,
    output: str,
) -> None:
    """NLI pairs -> (premise, hypothesis, label) jsonl, for NLIClassifier.

    Args:
        format: layout of the input (snli, xnli or sick)
        input: snli: the directory with s1/s2/labels.<split>; else the file
        split: snli only: dev, test or train
        hypothesis_input: same format, line-aligned translation: take the hypotheses from it (cross-lingual pairs)
        output: jsonl to write
    """
    pairs = nli_pairs(format, input, split, hypothesis_input)
    n = write_jsonl(pairs, output)
    print(f"{n} labelled pairs (premise, hypothesis, label) -> {output}")


#: ``unisent data <name>`` commands of this module (see ``unisent.commands.data``)
COMMANDS = {"cmlm-pairs": build_cmlm_pairs, "bitext": build_bitext, "nli-pairs": build_nli_pairs}
