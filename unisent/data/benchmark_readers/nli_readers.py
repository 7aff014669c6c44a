"""Readers for natural language inference and paraphrase pairs: SNLI, XNLI and PAWS-X."""

from __future__ import annotations

from collections.abc import Collection
from pathlib import Path

from .benchmark_records import DataFormatError, LabeledPairs, iter_tsv_rows, read_lines

__all__ = ["NLI_LABELS", "PAWSX_LABELS", "read_aligned_nli", "read_pair_tsv", "read_snli"]

NLI_LABELS = ("entailment", "neutral", "contradiction")
PAWSX_LABELS = ("0", "1")


def read_snli(directory: str | Path, split: str) -> LabeledPairs:
    """Read SNLI as line-aligned ``s1.{split}``, ``s2.{split}`` and ``labels.{split}`` files (e-SNLI layout);
    ``split``: ``dev`` or ``test`` (or ``train`` if you hold it)."""
    directory = Path(directory)
    return read_aligned_nli(*(directory / f"{name}.{split}" for name in ("s1", "s2", "labels")))


def read_aligned_nli(premise_path: str | Path, hypothesis_path: str | Path, label_path: str | Path) -> LabeledPairs:
    """Read NLI pairs from three line-aligned files: premises, hypotheses and labels (one of
    ``NLI_LABELS`` per line)."""
    paths = [Path(premise_path), Path(hypothesis_path), Path(label_path)]
    premises, hypotheses, labels = (read_lines(path) for path in paths)
    if not len(premises) == len(hypotheses) == len(labels):
        raise DataFormatError(
            paths[2],
            0,
            f"line counts differ: s1 {len(premises)}, s2 {len(hypotheses)}, labels {len(labels)}",
        )
    data = LabeledPairs()
    for line, (premise, hypothesis, label) in enumerate(zip(premises, hypotheses, labels), start=1):
        label = label.strip()
        if label not in NLI_LABELS:
            raise DataFormatError(paths[2], line, f"label is {label!r}, expected one of {NLI_LABELS}")
        data.add(premise, hypothesis, label)
    return data


def read_pair_tsv(path: str | Path, labels: Collection[str] | None = None) -> LabeledPairs:
    """Read ``sentence1<TAB>sentence2<TAB>label`` lines (XNLI and PAWS-X in the SentEval ml_transfer layout:
    ``dev-de.tsv``, ``test-zh.tsv``, ...); a label outside ``labels`` (when given) is a ``DataFormatError``."""
    data = LabeledPairs()
    for line, row in iter_tsv_rows(path):
        if not row:
            continue
        if len(row) != 3:
            raise DataFormatError(path, line, f"expected sentence1, sentence2 and label, got {len(row)} fields")
        label = row[2].strip()
        if labels is not None and label not in labels:
            raise DataFormatError(path, line, f"label field is {label!r}, expected one of {tuple(labels)}")
        data.add(row[0], row[1], label)
    return data
