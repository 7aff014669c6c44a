"""Readers for semantic textual similarity benchmarks: STS-B, STS12-16, STS17, SICK and stsb-multi-mt."""

from __future__ import annotations

from pathlib import Path

from ...data.file_checks import require_file
from ...data.records import iter_records
from .benchmark_records import (
    DataFormatError,
    LabeledPairs,
    ScoredPairs,
    iter_tsv_rows,
    parse_float,
    read_lines,
)

__all__ = [
    "read_sick_entailment",
    "read_sick_relatedness",
    "read_sts17",
    "read_stsb_multi",
    "read_stsb_multi_cross",
    "read_stsbenchmark",
    "read_senteval_sts",
]


def read_stsbenchmark(path: str | Path) -> ScoredPairs:
    """Read an STS Benchmark file in the SentEval layout (``sts-{train,dev,test}.csv``; scores 0-5): at least 7
    tab-separated fields per line (genre, source, year, id, score, sentence 1, sentence 2), quotes literal;
    fields after the seventh (source notes in some releases) are ignored."""
    data = ScoredPairs()
    for line, row in iter_tsv_rows(path):
        if len(row) < 7:
            raise DataFormatError(path, line, f"expected at least 7 tab-separated fields, got {len(row)}")
        data.add(row[5], row[6], parse_float(row[4], path, line, "score (field 5)"))
    return data


def read_senteval_sts(input_path: str | Path, gold_path: str | Path) -> ScoredPairs:
    """Read one STS12-16 (or original STS17) subset: ``STS.input.<name>.txt`` (a tab-separated pair per
    line) and the line-aligned ``STS.gs.<name>.txt`` (a score per line). A pair whose gold line is blank is
    skipped, as SentEval does, and counted in ``unscored``."""
    inputs = list(iter_tsv_rows(input_path))
    gold = read_lines(gold_path)
    if len(inputs) != len(gold):
        raise DataFormatError(
            gold_path, 0, f"has {len(gold)} lines but {input_path} has {len(inputs)}: files are not aligned"
        )
    data = ScoredPairs()
    for (line, row), score in zip(inputs, gold):
        if not score.strip():
            data.unscored += 1
            continue
        if len(row) < 2:
            raise DataFormatError(input_path, line, f"expected 2 tab-separated sentences, got {len(row)} fields")
        data.add(row[0], row[1], parse_float(score.strip(), gold_path, line, "gold score"))
    return data


def read_sts17(path: str | Path) -> ScoredPairs:
    """Read an STS17 ``STS.input.*`` file: ``sentence1<TAB>sentence2<TAB>score`` per line (the extended
    release: ``STS.input.extended.de-en.txt``, ``STS.input.track5.en-en.txt``). A two-column original
    SemEval file is read with its ``STS.gs.*`` twin in the same folder.

    A row whose score field is empty (or absent) is skipped and counted in ``unscored``, as SentEval's
    STS loader and MTEB's STS17 do: the public ``track6.tr-en`` file has 500 rows of which the last 250
    are such rows, so tr-en is scored on its 250 annotated pairs. A row with fewer than two sentences, a
    score that is not a number, or a file without a scored row is a ``DataFormatError``.
    """
    path = require_file(path)
    rows = list(iter_tsv_rows(path))
    if rows and all(len(row) == 2 for _, row in rows if row):
        gold = path.with_name(path.name.replace("STS.input.", "STS.gs.", 1))
        if not gold.is_file():
            raise FileNotFoundError(f"missing data file: {gold} (scores for the two-column file {path})")
        return read_senteval_sts(path, gold)
    data = ScoredPairs()
    for line, row in rows:
        if len(row) < 2:
            raise DataFormatError(path, line, f"expected sentence1, sentence2 and score, got {len(row)} fields")
        if len(row) == 2 or not row[2].strip():
            data.unscored += 1
            continue
        data.add(row[0], row[1], parse_float(row[2], path, line, "score (field 3)"))
    if not data.scores:
        raise DataFormatError(path, 0, f"no row has a gold score ({data.unscored} rows without one)")
    return data


def read_stsb_multi(path: str | Path) -> ScoredPairs:
    """Read a stsb-multi-mt file (``stsb-<lang>-<split>.csv``): ``sentence1,sentence2,score`` rows,
    comma-separated, quoted, no header; scores 0-5."""
    data = ScoredPairs()
    for record in iter_records(path, "csv", header=False, blank_lines="keep", encoding="utf-8-sig"):
        line, row = record.line, record.data or []
        if len(row) != 3:
            raise DataFormatError(path, line, f"expected 3 comma-separated fields, got {len(row)}")
        data.add(row[0], row[1], parse_float(row[2], path, line, "score (field 3)"))
    return data


def read_stsb_multi_cross(english: str | Path, other: str | Path) -> ScoredPairs:
    """Read two aligned stsb-multi-mt files (``stsb-en-<split>.csv``, ``stsb-<lang>-<split>.csv``) as cross-lingual
    STS, as Reimers & Gurevych (2020) do: row i pairs the English sentence 1 with the other file's sentence 2,
    under their shared score. Files of different lengths, or a row whose scores differ, are a ``DataFormatError``."""
    en, xx = read_stsb_multi(english), read_stsb_multi(other)
    if len(en) != len(xx):
        raise DataFormatError(other, 0, f"has {len(xx)} rows but {english} has {len(en)}: files are not aligned")
    for row, (a, b) in enumerate(zip(en.scores, xx.scores), 1):
        if a != b:
            records = iter_records(other, "csv", header=False, blank_lines="keep", encoding="utf-8-sig")
            line = next(r.line for i, r in enumerate(records, 1) if i == row)  # a quoted field may span lines
            raise DataFormatError(other, line, f"score {b:g} differs from {a:g} in row {row} of {english}: not aligned")
    return ScoredPairs(en.sentences1, xx.sentences2, en.scores)


def _sick_rows(path: str | Path) -> list[tuple[int, list[str]]]:
    rows = list(iter_tsv_rows(path))
    if rows and rows[0][1] and rows[0][1][0] == "pair_ID":
        rows = rows[1:]
    for line, row in rows:
        if len(row) < 5:
            raise DataFormatError(
                path,
                line,
                "expected pair_ID, sentence_A, sentence_B, relatedness_score, entailment_judgment; "
                f"got {len(row)} fields",
            )
    return rows


def read_sick_relatedness(path: str | Path) -> ScoredPairs:
    """Read SICK's 1-5 relatedness scores (``SICK_train.txt``, ``SICK_trial.txt``, ``SICK_test_annotated.txt``):
    tab-separated with a header pair_ID, sentence_A, sentence_B, relatedness_score, entailment_judgment."""
    data = ScoredPairs()
    for line, row in _sick_rows(path):
        data.add(row[1], row[2], parse_float(row[3], path, line, "relatedness_score"))
    return data


SICK_LABELS = ("ENTAILMENT", "NEUTRAL", "CONTRADICTION")


def read_sick_entailment(path: str | Path) -> LabeledPairs:
    """Read SICK entailment labels (the SICK-E task: ``ENTAILMENT``, ``NEUTRAL`` or ``CONTRADICTION``)
    from the same files as ``read_sick_relatedness``."""
    data = LabeledPairs()
    for line, row in _sick_rows(path):
        label = row[4].strip()
        if label not in SICK_LABELS:
            raise DataFormatError(
                path, line, f"field 'entailment_judgment' is {label!r}, expected one of {SICK_LABELS}"
            )
        data.add(row[1], row[2], label)
    return data
