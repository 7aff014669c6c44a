"""The ``unisent data ease-wikipedia`` and ``ease-fewrel`` commands over the CLI-free ``steps``, ``fewrel``."""

from __future__ import annotations

from .fewrel import ease_fewrel
from .steps import ease_wikipedia

__all__ = ["COMMANDS", "build_ease_fewrel", "build_ease_wikipedia"]


def build_ease_wikipedia(
    *,
    input: str,
    output: str,
    language: str = "en",
    splitter_language: str | None = None,
    min_sentence_chars: int = 20,
    max_pages: int | None = None,
    min_link_count: int = 10,
    wikidata_map: str | None = None,
    types: str | None = None,
    seed: int = 0,
    workers: int = 1,
    overwrite: bool = False,
) -> None:
    """Wikipedia XML dump -> EASE (sentence, entity, hard negative) jsonl.

    Three resumable steps (extract, count, records) under --output; see docs/methods/ease-data.md.

    Args:
        input: MediaWiki XML dump, .xml.bz2 or .xml
        output: directory for the step files and records.jsonl
        language: the dump's language: written into the records; the splitter's rules by default (en)
        splitter_language: pysbd rules to split sentences with (default: --language)
        min_sentence_chars: drop shorter sentences (default 20)
        max_pages: stop after this many articles
        min_link_count: keep entities linked more than this many times (default 10, as in the paper)
        wikidata_map: tsv title<TAB>QID: entity ids become Wikidata ids
        types: tsv entity<TAB>type for hard negatives (entity in output ids)
        seed: seed of the hard-negative draws
        workers: processes that parse pages (default 1)
        overwrite: redo every step
    """
    ease_wikipedia(
        input,
        output,
        language=language,
        splitter_language=splitter_language,
        min_sentence_chars=min_sentence_chars,
        max_pages=max_pages,
        min_link_count=min_link_count,
        wikidata_map=wikidata_map,
        types=types,
        seed=seed,
        overwrite=overwrite,
        workers=workers,
    )


def build_ease_fewrel(
    *, input: str, output: str, seed: int = 0, max_records: int | None = None, min_count: int = 1
) -> None:
    """FewRel JSON -> EASE (sentence, entity, hard negative) jsonl.

    Hard negatives fill the same relation slot as the entity (e.g. P17:tail).

    Args:
        input: FewRel json, e.g. val_wiki.json
        output: directory for records.jsonl, entities.tsv, stats.json
        seed: seed of the hard-negative draws and of the subset
        max_records: a seeded random subset of this size
        min_count: keep entities occurring at least this often
    """
    ease_fewrel(input, output, seed=seed, max_records=max_records, min_count=min_count)


#: ``unisent data <name>`` commands of this package (see ``unisent.commands.data``)
COMMANDS = {"ease-wikipedia": build_ease_wikipedia, "ease-fewrel": build_ease_fewrel}
