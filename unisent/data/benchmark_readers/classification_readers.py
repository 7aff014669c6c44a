"""Readers for the SentEval transfer tasks: MR, CR, SUBJ, MPQA, SST-2, TREC and MRPC (SICK-E:
``read_sick_entailment``). The raw MR, SUBJ and TREC files
are Latin-1, as SentEval reads them; the others are UTF-8."""

from __future__ import annotations

from pathlib import Path

from .benchmark_records import DataFormatError, LabeledPairs, LabeledTexts, iter_tsv_rows, read_lines

__all__ = ["read_binary_files", "read_mrpc", "read_sst", "read_trec"]


def read_binary_files(
    positive_path: str | Path, negative_path: str | Path, encoding: str = "utf-8-sig"
) -> LabeledTexts:
    """Read a two-file binary task (``rt-polarity.pos/neg``, ``custrev.pos/neg``, ``subj.*``, ``mpqa.*``): one
    text per line, blank lines skipped; the texts of ``positive_path`` (label ``"1"``) come first, then
    those of ``negative_path`` (``"0"``). ``encoding``: ``latin-1`` for MR and SUBJ."""
    data = LabeledTexts()
    for path, label in ((positive_path, "1"), (negative_path, "0")):
        for text in read_lines(path, encoding):
            if text.strip():
                data.add(text, label)
    return data


def read_sst(path: str | Path) -> LabeledTexts:
    """Read SentEval's SST-2 files (``sentiment-{train,dev,test}``): ``text<TAB>label`` per line, label
    ``0`` or ``1``."""
    data = LabeledTexts()
    for line, row in iter_tsv_rows(path):
        if not row:
            continue
        if len(row) != 2 or row[1].strip() not in ("0", "1"):
            raise DataFormatError(path, line, "expected 'text<TAB>label' with label 0 or 1")
        data.add(row[0], row[1].strip())
    return data


def read_trec(path: str | Path, encoding: str = "latin-1") -> LabeledTexts:
    """Read TREC question classification (``TREC.train``, ``TREC.test``): ``COARSE:fine question`` lines,
    labelled by the 6 coarse classes (``NUM``)."""
    data = LabeledTexts()
    for line, text in enumerate(read_lines(path, encoding), start=1):
        if not text.strip():
            continue
        label, sep, question = text.strip().partition(" ")
        coarse, colon, _ = label.partition(":")
        if not sep or not colon or not coarse:
            raise DataFormatError(path, line, f"expected 'COARSE:fine question', label field is {label!r}")
        data.add(question, coarse)
    return data


def read_mrpc(path: str | Path) -> LabeledPairs:
    """Read the MSR paraphrase corpus (``msr_paraphrase_{train,test}.txt``), labels ``"1"`` (paraphrase) or
    ``"0"``: tab-separated with a header Quality, #1 ID, #2 ID, #1 String, #2 String; quotes are literal."""
    data = LabeledPairs()
    for line, row in iter_tsv_rows(path):
        if line == 1 and row and row[0] == "Quality":
            continue
        if not row:
            continue
        if len(row) != 5:
            raise DataFormatError(path, line, f"expected 5 tab-separated fields, got {len(row)}")
        if row[0] not in ("0", "1"):
            raise DataFormatError(path, line, f"field 'Quality' is {row[0]!r}, expected 0 or 1")
        data.add(row[3], row[4], row[0])
    return data
