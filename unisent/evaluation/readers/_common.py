"""Record types and file helpers shared by the benchmark readers.

Every reader returns plain Python lists inside a small dataclass, raises :class:`FileNotFoundError`
naming the missing path, and raises :class:`DataFormatError` naming the file, the line and the field of a
malformed record.
"""

from __future__ import annotations

import csv
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

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


class DataFormatError(ValueError):
    """A record of a benchmark file does not have the expected layout.

    Args:
        path: the file being read.
        line: 1-based line number of the bad record (0 when the problem concerns the whole file).
        message: what is wrong, naming the field.
    """

    def __init__(self, path: str | Path, line: int, message: str) -> None:
        self.path = Path(path)
        self.line = line
        where = f"{self.path}, line {line}" if line else str(self.path)
        super().__init__(f"{where}: {message}")


@dataclass
class ScoredPairs:
    """Sentence pairs with a graded similarity score (STS).

    Attributes:
        sentences1: first sentence of each pair.
        sentences2: second sentence of each pair.
        scores: gold similarity of each pair.
    """

    sentences1: list[str] = field(default_factory=list)
    sentences2: list[str] = field(default_factory=list)
    scores: list[float] = field(default_factory=list)

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


def require_file(path: str | Path) -> Path:
    """Return ``path`` as a :class:`Path`, raising :class:`FileNotFoundError` naming it if it is no file."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"missing data file: {path}")
    return path


def read_lines(path: str | Path, encoding: str = "utf-8-sig") -> list[str]:
    """Read a text file into lines without their line terminators.

    Lines are split on ``\\n`` only (``\\r\\n`` is handled), never on the Unicode separators that
    :meth:`str.splitlines` also honours: some Latin-1 SentEval files contain byte ``0x85`` inside a line.
    One trailing empty line (a final newline) is dropped; blank lines inside the file are kept so that
    line-aligned files stay aligned.

    Args:
        path: the file.
        encoding: text encoding; the default ``utf-8-sig`` also strips a byte-order mark.

    Returns:
        The lines of the file.
    """
    path = require_file(path)
    try:
        text = path.read_bytes().decode(encoding)
    except UnicodeDecodeError as err:
        line = path.read_bytes()[: err.start].count(b"\n") + 1
        raise DataFormatError(path, line, f"not valid {encoding}: {err.reason}") from err
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    return [line[:-1] if line.endswith("\r") else line for line in lines]


def iter_tsv_rows(path: str | Path, encoding: str = "utf-8-sig") -> Iterator[tuple[int, list[str]]]:
    """Yield ``(line_number, fields)`` for each line of a tab-separated file, quotes taken literally.

    Uses :mod:`csv` with ``QUOTE_NONE`` so that a ``"`` inside a sentence is kept as text.

    Args:
        path: the file.
        encoding: text encoding.
    """
    lines = read_lines(path, encoding)
    yield from enumerate(csv.reader(lines, delimiter="\t", quoting=csv.QUOTE_NONE), start=1)


def parse_float(value: str, path: str | Path, line: int, field_name: str) -> float:
    """Parse a number, raising :class:`DataFormatError` naming the file, line and field on failure."""
    try:
        return float(value)
    except ValueError:
        raise DataFormatError(path, line, f"field {field_name!r} is not a number: {value!r}") from None
