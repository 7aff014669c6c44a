"""Record types (plain lists in small dataclasses) and the file dialects shared by the benchmark
readers: one text per line, or tab-separated fields without a header, quotes taken literally. Files are
read by [`unisent.data.records.iter_records`][unisent.data.iter_records]. Its names are exported by
``unisent.data.benchmark_readers``.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from .record_errors import RecordError
from .records import iter_records

#: A record of a benchmark file does not have the expected layout: ``DataFormatError(path, line,
#: message)``, line 0 for a problem of the whole file (the I/O layer's ``unisent.data.records.RecordError``).
DataFormatError = RecordError


@dataclass
class ScoredPairs:
    """Sentence pairs with a graded gold similarity score (STS); ``unscored`` counts the rows without a
    gold score that were skipped (STS16's and STS17 tr-en's), as the benchmarks' own loaders skip them."""

    sentences1: list[str] = field(default_factory=list)
    sentences2: list[str] = field(default_factory=list)
    scores: list[float] = field(default_factory=list)
    unscored: int = 0

    def __len__(self) -> int:
        return len(self.scores)

    def add(self, sentence1: str, sentence2: str, score: float) -> None:
        """Append a pair, its sentences stripped of surrounding whitespace."""
        self.sentences1.append(sentence1.strip())
        self.sentences2.append(sentence2.strip())
        self.scores.append(score)


@dataclass
class LabeledPairs:
    """Sentence pairs (premise, hypothesis) with a gold class label as written in the file (NLI,
    paraphrase identification)."""

    sentences1: list[str] = field(default_factory=list)
    sentences2: list[str] = field(default_factory=list)
    labels: list[str] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.labels)

    def add(self, sentence1: str, sentence2: str, label: str) -> None:
        """Append a pair, its sentences stripped of surrounding whitespace."""
        self.sentences1.append(sentence1.strip())
        self.sentences2.append(sentence2.strip())
        self.labels.append(label)


@dataclass
class LabeledTexts:
    """Single texts with a gold class label as written in the file (clustering, SentEval
    single-sentence tasks)."""

    texts: list[str] = field(default_factory=list)
    labels: list[str] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.labels)

    def add(self, text: str, label: str) -> None:
        """Append a text, stripped of surrounding whitespace."""
        self.texts.append(text.strip())
        self.labels.append(label)


@dataclass
class ParallelSentences:
    """Line-aligned translations (Tatoeba): ``source[i]`` translates ``target[i]``."""

    source: list[str] = field(default_factory=list)
    target: list[str] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.source)


@dataclass
class BuccCorpus:
    """A BUCC 2018 mining corpus: source-language and English (``target``) sentences with their ids, and
    the gold ``(source_id, target_id)`` translation pairs."""

    source_ids: list[str] = field(default_factory=list)
    source: list[str] = field(default_factory=list)
    target_ids: list[str] = field(default_factory=list)
    target: list[str] = field(default_factory=list)
    gold: list[tuple[str, str]] = field(default_factory=list)


def read_lines(path: str | Path, encoding: str = "utf-8-sig") -> list[str]:
    """The lines of a text file without their terminators (a UTF-8 byte-order mark dropped), split on
    ``\\n`` only (``\\r\\n`` is handled), never on the Unicode separators ``str.splitlines`` honours:
    some Latin-1 SentEval files hold byte ``0x85`` inside a line. A final newline adds no empty line; blank
    lines are kept so that line-aligned files stay aligned. An undecodable line is a ``DataFormatError``."""
    return [record.data["text"] for record in iter_records(path, "txt", encoding=encoding)]


def iter_tsv_rows(path: str | Path, encoding: str = "utf-8-sig") -> Iterator[tuple[int, list[str]]]:
    """Yield ``(line_number, fields)`` for each line of a tab-separated file without a header, quotes
    taken literally (so that a ``"`` inside a sentence is kept as text); a blank line gives ``[]``."""
    for record in iter_records(path, "tsv", header=False, quoting=False, blank_lines="keep", encoding=encoding):
        yield record.line, record.data or []


def parse_float(value: str, path: str | Path, line: int, field_name: str) -> float:
    """Parse a number, raising ``DataFormatError`` naming the file, line and field on failure."""
    try:
        return float(value)
    except ValueError:
        raise DataFormatError(path, line, f"field {field_name!r} is not a number: {value!r}") from None
