"""Readers for short-text clustering sets (the EASE benchmark layouts) and MewsC-16."""

from __future__ import annotations

from pathlib import Path

from ...data.records import iter_records
from .benchmark_records import DataFormatError, LabeledTexts, read_lines

__all__ = ["read_labeled_jsonl", "read_labeled_tsv", "read_text_and_labels"]


def read_labeled_tsv(path: str | Path) -> LabeledTexts:
    """Read ``label<TAB>text`` lines (AgNews in the EASE layout)."""
    data = LabeledTexts()
    for line, text in enumerate(read_lines(path), start=1):
        label, sep, sentence = text.partition("\t")
        if not sep or not label.strip():
            raise DataFormatError(path, line, "expected 'label<TAB>text'; the label field is missing")
        data.add(sentence, label.strip())
    return data


def read_text_and_labels(text_path: str | Path, label_path: str | Path, drop_empty: bool = False) -> LabeledTexts:
    """Read a text file and its line-aligned label file (``biomedical.txt`` + ``biomedical_label.txt``);
    ``drop_empty``: drop empty texts together with their labels."""
    texts = read_lines(text_path)
    labels = read_lines(label_path)
    if len(texts) != len(labels):
        raise DataFormatError(
            label_path, 0, f"has {len(labels)} lines but {text_path} has {len(texts)}: files are not aligned"
        )
    data = LabeledTexts()
    for line, (text, label) in enumerate(zip(texts, labels), start=1):
        if drop_empty and not text.strip():
            continue
        if not label.strip():
            raise DataFormatError(label_path, line, "the label field is empty")
        data.add(text, label.strip())
    return data


def read_labeled_jsonl(path: str | Path, text_key: str = "text", label_key: str = "cluster") -> LabeledTexts:
    """Read one JSON object per line with a text and a label field (Tweet in the EASE layout); labels
    are converted to strings."""
    data = LabeledTexts()
    for record in iter_records(path, "jsonl", fields=[text_key, label_key], blank_lines="skip", encoding="utf-8-sig"):
        data.add(str(record.data[text_key]), str(record.data[label_key]))
    return data
