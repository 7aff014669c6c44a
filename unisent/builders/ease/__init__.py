"""EASE training data: (sentence, hyperlinked entity, hard-negative entity) records, from a Wikipedia
dump (``steps``) or FewRel (``fewrel``); step files and formats: docs/methods/ease-data.md.

Record (one per sentence and linked entity, as in the paper)::

    {"text": "...", "entity": "Q42", "hard_negative": "Q1" | null, "language": "en", "page": "..." | null}
"""

from .dump import DumpPage, iter_dump
from .ease_commands import COMMANDS
from .fewrel import detokenize, ease_fewrel, read_fewrel
from .sentences import SentenceSplitter, page_sentences
from .steps import (
    COUNT_FILES,
    EXTRACT_FILES,
    RECORD_FILES,
    count_step,
    ease_wikipedia,
    extract_step,
    records_step,
)
from .tables import (
    HardNegativeSampler,
    pick_candidate,
    read_counts,
    read_redirects,
    read_title_map,
    read_types,
)
from .wikitext import normalize_title, wikitext_to_lines

__all__ = [
    "ease_wikipedia",
    "ease_fewrel",
    "extract_step",
    "count_step",
    "records_step",
    "wikitext_to_lines",
    "normalize_title",
    "detokenize",
    "read_title_map",
    "read_types",
    "COMMANDS",
    "COUNT_FILES",
    "EXTRACT_FILES",
    "RECORD_FILES",
    "DumpPage",
    "HardNegativeSampler",
    "SentenceSplitter",
    "iter_dump",
    "page_sentences",
    "pick_candidate",
    "read_counts",
    "read_fewrel",
    "read_redirects",
]
