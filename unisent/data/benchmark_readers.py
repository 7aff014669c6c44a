"""Readers for the public layouts of the evaluation benchmarks. Every reader raises ``FileNotFoundError`` naming a
missing path and ``DataFormatError`` naming the file, line and field of a malformed record."""

from __future__ import annotations

from collections.abc import Collection
from pathlib import Path

from .benchmark_records import (
    BuccCorpus,
    DataFormatError,
    LabeledPairs,
    LabeledTexts,
    ParallelSentences,
    ScoredPairs,
    iter_tsv_rows,
    parse_float,
    read_lines,
)
from .file_checks import require_file
from .records import iter_records

__all__ = [
    "NLI_LABELS",
    "PAWSX_LABELS",
    "BuccCorpus",
    "DataFormatError",
    "LabeledPairs",
    "LabeledTexts",
    "ParallelSentences",
    "ScoredPairs",
    "iter_tsv_rows",
    "parse_float",
    "read_aligned_nli",
    "read_binary_files",
    "read_bucc_files",
    "read_labeled_jsonl",
    "read_labeled_tsv",
    "read_lines",
    "read_mrpc",
    "read_pair_tsv",
    "read_parallel",
    "read_senteval_sts",
    "read_sick_entailment",
    "read_sick_relatedness",
    "read_snli",
    "read_sst",
    "read_sts17",
    "read_stsb_multi",
    "read_stsb_multi_cross",
    "read_stsbenchmark",
    "read_tatoeba",
    "read_text_and_labels",
    "read_trec",
]


# --- Readers for semantic textual similarity benchmarks: STS-B, STS12-16, STS17, SICK and stsb-multi-mt.
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


# --- Readers for natural language inference and paraphrase pairs: SNLI, XNLI and PAWS-X.
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


# --- Readers for the SentEval transfer tasks: MR, CR, SUBJ, MPQA, SST-2, TREC and MRPC (SICK-E:
# ``read_sick_entailment``). The raw MR, SUBJ and TREC files
# are Latin-1, as SentEval reads them; the others are UTF-8.
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


# --- Readers for short-text clustering sets (the EASE benchmark layouts) and MewsC-16.
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


# --- Readers for bitext retrieval and mining: Tatoeba (LASER layout) and BUCC 2018.
def read_tatoeba(directory: str | Path, lang: str) -> ParallelSentences:
    """Read one Tatoeba test set from the LASER files ``tatoeba.{lang}-eng.{lang}`` (``source``) and
    ``tatoeba.{lang}-eng.eng`` (``target``); ``lang``: ISO 639-3 as in the file names (``deu``, ``cmn``)."""
    directory = Path(directory)
    return read_parallel(directory / f"tatoeba.{lang}-eng.{lang}", directory / f"tatoeba.{lang}-eng.eng")


def read_parallel(source_path: str | Path, target_path: str | Path) -> ParallelSentences:
    """Read two line-aligned files of translations (one sentence per line)."""
    source = read_lines(source_path)
    target = read_lines(target_path)
    if len(source) != len(target):
        raise DataFormatError(
            target_path, 0, f"has {len(target)} lines but {source_path} has {len(source)}: not aligned"
        )
    return ParallelSentences([s.strip() for s in source], [t.strip() for t in target])


def _read_id_sentences(path: Path) -> tuple[list[str], list[str]]:
    ids: list[str] = []
    sentences: list[str] = []
    for line, text in enumerate(read_lines(path), start=1):
        sentence_id, sep, sentence = text.partition("\t")
        if not sep or not sentence_id:
            raise DataFormatError(path, line, "expected 'id<TAB>sentence'; the id field is missing")
        ids.append(sentence_id)
        sentences.append(sentence.strip())
    return ids, sentences


def read_bucc_files(source_path: str | Path, target_path: str | Path, gold_path: str | Path) -> BuccCorpus:
    """Read the three files of a BUCC 2018 corpus (``lang``: ``de``, ``fr``, ``ru`` or ``zh``), as in the
    ``{lang}-en`` folder of the release: ``{lang}-en.{split}.{lang}`` and ``{lang}-en.{split}.en``
    (``id<TAB>sentence`` lines) and ``.gold`` (``source_id<TAB>english_id``, public for the ``sample`` and
    ``training`` splits only)."""
    source_ids, source = _read_id_sentences(Path(source_path))
    target_ids, target = _read_id_sentences(Path(target_path))
    gold: list[tuple[str, str]] = []
    for line, text in enumerate(read_lines(gold_path), start=1):
        fields = text.split("\t")
        if len(fields) != 2 or not all(fields):
            raise DataFormatError(gold_path, line, "expected 'source_id<TAB>english_id'")
        gold.append((fields[0], fields[1]))
    return BuccCorpus(source_ids, source, target_ids, target, gold)
