"""EASE training data: (sentence, hyperlinked entity, hard-negative entity) records.

Two sources:

* ``unisent data ease-wikipedia``: a MediaWiki XML dump (``.xml.bz2`` or ``.xml``), streamed, in three
  resumable steps under ``--output DIR``:

  1. ``extract``: articles -> plain-text sentences with their hyperlinks -> ``sentences.jsonl`` (one line
     per article: ``{"page", "sentences": [{"text", "links": [[start, end, title], ...]}], "page_links"}``)
     and ``redirects.tsv``. Appends per page; ``extract.json`` records the pages done, so a killed run
     resumes after the last completed page.
  2. ``count``: link counts per (redirect-resolved) title -> ``counts.tsv``.
  3. ``records``: entities linked more than ``--min-link-count`` times, optionally mapped to Wikidata ids,
     hard negatives from a type table -> ``records.jsonl``, ``entities.tsv``, ``stats.json``.

* ``unisent data ease-fewrel``: FewRel JSON (Wikipedia sentences with head/tail Wikidata entities); the
  type proxy for hard negatives is the relation slot an entity fills (``P17:tail``).

Record format (one per sentence and linked entity, as in the paper)::

    {"text": "...", "entity": "Q42", "hard_negative": "Q1" | null, "language": "en", "page": "..." | null}

``entities.tsv``: ``id<TAB>title<TAB>count`` with a header line; ``count`` is the entity's link count.

Modules: :mod:`.dump` (streaming the XML dump, on mwxml), :mod:`.wikitext` (wikitext -> text lines
with link offsets, on mwparserfromhell), :mod:`.sentences` (pysbd sentences of an article, the
worker-process task), :mod:`.tables` (Wikidata map, type table, redirects, counts, hard-negative
sampling), :mod:`.steps` (the resumable extract/count/records steps), :mod:`.fewrel` (FewRel reader,
detokenizer and builder), :mod:`.ease_commands` (the ``unisent data ease-*`` commands: :data:`COMMANDS`).
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
