"""Record types and the file dialects shared by the benchmark readers.

Every reader returns plain Python lists inside a small dataclass, raises :class:`FileNotFoundError`
naming the missing path, and raises :class:`DataFormatError` naming the file, the line and the field of a
malformed record. The files are read by :func:`unisent.data.records.iter_records`; this module only names the
benchmark layouts (one text per line; tab-separated fields without a header, quotes taken literally).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from ...data.file_checks import require_file
from ...data.record_errors import RecordError
from ...data.records import iter_records

__all__ = [
    "BuccCorpus",
    "DataFormatError",
    "LabeledPairs",
    "LabeledTexts",
    "ParallelSentences",
    "ScoredPairs",
    "iter_tsv_rows",
    "parse_float",
    "read_lines",
    "require_file",
]


#: A record of a benchmark file does not have the expected layout: ``DataFormatError(path, line,
#: message)``, line 0 for a problem of the whole file (the I/O layer's :class:`unisent.data.records.RecordError`).
DataFormatError = RecordError


@dataclass
class ScoredPairs:
    """Sentence pairs with a graded similarity score (STS).

    Attributes:
        sentences1: first sentence of each pair.
        sentences2: second sentence of each pair.
        scores: gold similarity of each pair.
        unscored: rows of the file that have no gold score and were skipped (STS16's and STS17
            tr-en's unannotated pairs), as the benchmarks' own loaders skip them.
    """

    sentences1: list[str] = field(default_factory=list)
    sentences2: list[str] = field(default_factory=list)
    scores: list[float] = field(default_factory=list)
    unscored: int = 0

    def __len__(self) -> int:
        return len(self.scores)


@dataclass
class LabeledPairs:
    """Sentence pairs with a class label (NLI, paraphrase identification).

    Attributes:
        sentences1: first sentence (premise) of each pair.
        sentences2: second sentence (hypothesis) of each pair.
        labels: gold label of each pair, as written in the file.
    """

    sentences1: list[str] = field(default_factory=list)
    sentences2: list[str] = field(default_factory=list)
    labels: list[str] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.labels)


@dataclass
class LabeledTexts:
    """Single texts with a class label (clustering, SentEval single-sentence tasks).

    Attributes:
        texts: the texts.
        labels: gold label of each text, as written in the file.
    """

    texts: list[str] = field(default_factory=list)
    labels: list[str] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.labels)


@dataclass
class ParallelSentences:
    """Line-aligned translations (Tatoeba): ``source[i]`` translates ``target[i]``."""

    source: list[str] = field(default_factory=list)
    target: list[str] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.source)


@dataclass
class BuccCorpus:
    """A BUCC 2018 mining corpus: two monolingual corpora with ids and the gold translation pairs.

    Attributes:
        source_ids: id of each source-language sentence.
        source: source-language sentences.
        target_ids: id of each English sentence.
        target: English sentences.
        gold: ``(source_id, target_id)`` pairs that are translations of each other.
    """

    source_ids: list[str] = field(default_factory=list)
    source: list[str] = field(default_factory=list)
    target_ids: list[str] = field(default_factory=list)
    target: list[str] = field(default_factory=list)
    gold: list[tuple[str, str]] = field(default_factory=list)


def read_lines(path: str | Path, encoding: str = "utf-8-sig") -> list[str]:
    """Read a text file into lines without their line terminators.

    Lines are split on ``\\n`` only (``\\r\\n`` is handled), never on the Unicode separators that
    :meth:`str.splitlines` also honours: some Latin-1 SentEval files contain byte ``0x85`` inside a line.
    A final newline adds no empty line; blank lines inside the file are kept so that line-aligned files
    stay aligned.

    Args:
        path: the file.
        encoding: text encoding; a UTF-8 byte-order mark is dropped.

    Returns:
        The lines of the file.

    Raises:
        FileNotFoundError: the file does not exist.
        DataFormatError: a line cannot be decoded (named).
    """
    return [record.data["text"] for record in iter_records(path, "txt", encoding=encoding)]


def iter_tsv_rows(path: str | Path, encoding: str = "utf-8-sig") -> Iterator[tuple[int, list[str]]]:
    """Yield ``(line_number, fields)`` for each line of a tab-separated file without a header, quotes
    taken literally (so that a ``"`` inside a sentence is kept as text); a blank line gives ``[]``.

    Args:
        path: the file.
        encoding: text encoding.
    """
    for record in iter_records(path, "tsv", header=False, quoting=False, blank_lines="keep", encoding=encoding):
        yield record.line, record.data or []


def parse_float(value: str, path: str | Path, line: int, field_name: str) -> float:
    """Parse a number, raising :class:`DataFormatError` naming the file, line and field on failure."""
    try:
        return float(value)
    except ValueError:
        raise DataFormatError(path, line, f"field {field_name!r} is not a number: {value!r}") from None
