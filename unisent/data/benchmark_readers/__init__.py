"""Readers for the public layouts of the evaluation benchmarks. Every reader raises ``FileNotFoundError`` naming a
missing path and ``DataFormatError`` naming the file, line and field of a malformed record."""

from __future__ import annotations

from .benchmark_records import (
    BuccCorpus,
    DataFormatError,
    LabeledPairs,
    LabeledTexts,
    ParallelSentences,
    ScoredPairs,
    read_lines,
)
from .classification_readers import read_binary_files, read_mrpc, read_sst, read_trec
from .clustering_readers import read_labeled_jsonl, read_labeled_tsv, read_text_and_labels
from .nli_readers import NLI_LABELS, PAWSX_LABELS, read_aligned_nli, read_pair_tsv, read_snli
from .retrieval_readers import read_bucc_files, read_parallel, read_tatoeba
from .sts_readers import (
    read_senteval_sts,
    read_sick_entailment,
    read_sick_relatedness,
    read_sts17,
    read_stsb_multi,
    read_stsb_multi_cross,
    read_stsbenchmark,
)

__all__ = [
    "NLI_LABELS",
    "PAWSX_LABELS",
    "BuccCorpus",
    "DataFormatError",
    "LabeledPairs",
    "LabeledTexts",
    "ParallelSentences",
    "ScoredPairs",
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
