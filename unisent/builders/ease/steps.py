"""The resumable steps of ``unisent data ease-wikipedia``: extract, count, records (see ``unisent.builders.ease``).

A step whose outputs exist (same options) is skipped; one that runs removes the later steps' outputs. The ``*.part``
files grow over hours, so only they bypass [`unisent.io.atomic_write`][unisent.io.atomic_write]; ``records.jsonl`` is
replaced last, so its presence means the records step finished."""

from __future__ import annotations

import json
import multiprocessing
import os
from collections import Counter
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import cast

from ...data.records import iter_records
from ...io import atomic_write
from .dump import DumpPage, iter_dump
from .sentences import SentenceSplitter, init_worker, process_article
from .tables import HardNegativeSampler, read_counts, read_redirects, read_title_map, read_types, resolver
from .wikitext import normalize_title

__all__ = [
    "EXTRACT_FILES",
    "COUNT_FILES",
    "RECORD_FILES",
    "extract_step",
    "count_step",
    "records_step",
    "ease_wikipedia",
]

EXTRACT_FILES = ("sentences.jsonl", "redirects.tsv", "extract.json")
COUNT_FILES = ("counts.tsv",)
RECORD_FILES = ("records.jsonl", "entities.tsv", "stats.json")


def _write_text(path: Path, text: str) -> None:
    with atomic_write(path) as fh:
        fh.write(text)


def remove_outputs(out: Path, names: Iterable[str]) -> list[str]:
    """Delete the step files ``names`` under ``out`` with their ``*.part`` and the temporary files of a
    killed write (``.<name>.*.tmp``, older ``<name>.tmp``); returns the names removed."""
    removed = []
    for name in names:
        for p in (out / name, out / (name + ".part"), out / (name + ".tmp"), *out.glob(f".{name}.*.tmp")):
            if p.exists():
                p.unlink()
                removed.append(p.name)
    return removed


def extract_step(
    dump: str | Path,
    out: str | Path,
    language: str = "en",
    splitter_language: str | None = None,
    min_sentence_chars: int = 20,
    max_pages: int | None = None,
    workers: int = 1,
    log=print,
) -> dict:
    """Dump -> ``sentences.jsonl`` + ``redirects.tsv`` (+ ``extract.json``); returns ``{"ran", **progress}``.

    ``extract.json`` records the pages done and ``*.part`` sizes after each article, so a re-run truncates
    the parts and goes on; a finished extraction is reused, or extended for a larger ``max_pages``.
    ``workers`` > 1 parses in processes, written in dump order (the output does not depend on it)."""
    dump = Path(dump)
    out = Path(out)
    if not dump.is_file():
        raise FileNotFoundError(f"dump not found: {dump}")
    splitter_language = splitter_language or language
    SentenceSplitter(splitter_language)  # fail early on a language without rules
    out.mkdir(parents=True, exist_ok=True)
    params = {
        "input_name": dump.name,
        "input_bytes": dump.stat().st_size,
        "language": language,
        "splitter_language": splitter_language,
        "min_sentence_chars": min_sentence_chars,
    }
    prog_path = out / "extract.json"
    final = {"sentences": out / "sentences.jsonl", "redirects": out / "redirects.tsv"}
    part = {k: p.with_name(p.name + ".part") for k, p in final.items()}
    progress, finished = _previous_extraction(prog_path, params, final, part, max_pages, log)
    if finished and progress is not None:  # finished: an earlier run's progress
        return {"ran": False, **progress}
    progress = _prepare_parts(out, part, progress, params, log)
    stats, exhausted = _extract_pages(
        dump, part, progress, prog_path, splitter_language, min_sentence_chars, max_pages, workers
    )
    progress["exhausted"] = exhausted
    progress["stats"] = dict(stats)
    for k in final:  # the parts are complete: rename them into place (written, so not atomic_write)
        os.replace(part[k], final[k])
    _write_text(prog_path, json.dumps(progress, indent=1))
    log(
        f"extract: {progress['articles']} articles, {stats['sentences']} sentences -> {final['sentences']}"
        + ("" if exhausted else f" (stopped at --max-pages {max_pages})")
    )
    return {"ran": True, **progress}


def _previous_extraction(prog_path: Path, params: dict, final: dict, part: dict, max_pages, log):
    """``(progress, finished)`` of an earlier run with the same ``params``; ``(None, False)``: none to continue."""
    if not prog_path.exists():
        return None, False
    progress = json.loads(prog_path.read_text(encoding="utf-8"))
    if progress.get("params") != params:
        raise ValueError(
            f"{prog_path}: the existing extraction was made with {progress.get('params')}, "
            f"not {params}; re-run with the same options or with --overwrite"
        )
    complete = all(p.exists() for p in final.values())
    if complete and (progress["exhausted"] or (max_pages is not None and progress["articles"] >= max_pages)):
        log(
            f"extract: {final['sentences']} exists ({progress['articles']} articles, "
            f"{progress['stats'].get('sentences', 0)} sentences); skipping (--overwrite to redo)"
        )
        return progress, True
    if complete:  # stopped at a smaller --max-pages: extend it (the finished files become parts again)
        for k in final:
            os.replace(final[k], part[k])
    elif not all(p.exists() for p in part.values()):
        return None, False  # parts lost: start over
    return progress, False


def _prepare_parts(out: Path, part: dict, progress: dict | None, params: dict, log) -> dict:
    """Start or resume ``progress``: remove the later steps' outputs, truncate the parts to the last page."""
    if progress is None:
        progress = {
            "params": params,
            "pages_seen": 0,
            "articles": 0,
            "exhausted": False,
            "bytes": {"sentences": 0, "redirects": 0},
            "stats": {},
        }
        for p in part.values():
            p.write_bytes(b"")
    else:
        log(f"extract: resuming after {progress['pages_seen']} pages ({progress['articles']} articles)")
    removed = remove_outputs(out, COUNT_FILES + RECORD_FILES)
    if removed:
        log(f"extract: removed outputs of later steps that it invalidates: {', '.join(removed)}")
    for k, p in part.items():  # drop whatever a killed run wrote after its last completed page
        with p.open("r+b") as fh:
            fh.truncate(progress["bytes"][k])
    return progress


def _extract_pages(
    dump, part, progress, prog_path, splitter_language, min_sentence_chars, max_pages, workers
) -> tuple[Counter, bool]:
    """Parse the dump's articles after the pages done into the parts: ``(stats, whether it was exhausted)``."""
    stats = Counter(progress["stats"])
    fhs = {k: p.open("ab") for k, p in part.items()}
    pool = None
    exhausted = True
    planned = progress["articles"]  # articles handed out, for --max-pages
    try:
        index = 0
        batch, texts = [], []
        batch_articles = 1 if workers <= 1 else 32 * workers
        namespaces: dict[str, int] = {}
        init_worker(splitter_language, min_sentence_chars, namespaces)
        for kind, value in iter_dump(dump, skip=progress["pages_seen"]):
            if kind == "namespaces":  # the dump's <siteinfo>, before its pages
                namespaces = cast("dict[str, int]", value)  # see iter_dump
                init_worker(splitter_language, min_sentence_chars, namespaces)
                continue
            index += 1
            if kind == "skipped":  # done by the run that is resumed
                continue
            if pool is None and workers > 1:
                pool = multiprocessing.Pool(workers, init_worker, (splitter_language, min_sentence_chars, namespaces))
            if max_pages is not None and planned >= max_pages:
                exhausted = False
                break
            title, ns, redirect, text = cast(DumpPage, value)
            if redirect is not None or text.lstrip()[:9].upper() == "#REDIRECT":
                batch.append((index, title, "redirect", redirect if ns == 0 else None))
            elif ns != 0:
                batch.append((index, title, "other", None))
            else:
                batch.append((index, title, "article", None))
                texts.append(text)
                planned += 1
            if len(texts) >= batch_articles or len(batch) >= 64 * batch_articles:
                _write_batch(batch, _parse(pool, texts, workers), fhs, stats, progress, prog_path)
                batch, texts = [], []
        _write_batch(batch, _parse(pool, texts, workers), fhs, stats, progress, prog_path)
    finally:
        if pool is not None:
            pool.terminate()
        for fh in fhs.values():
            fh.close()
    return stats, exhausted


def _parse(pool, texts: list, workers: int) -> Iterator:
    """The parsed articles of ``texts``, in order: in the processes of ``pool`` when there is one."""
    if pool is None:
        return (process_article(t) for t in texts)
    return iter(pool.map(process_article, texts, chunksize=max(1, len(texts) // (4 * workers))))


def _write_batch(batch: list, results: Iterator, fhs: dict, stats: Counter, progress: dict, prog_path):
    """Append ``batch`` to the parts in dump order, recording the progress after every article."""
    for k, (index, title, kind, redirect) in enumerate(batch):
        if kind == "redirect":
            stats["redirects"] += 1
            if redirect:
                fhs["redirects"].write(f"{normalize_title(title)}\t{normalize_title(redirect)}\n".encode())
        elif kind == "other":
            stats["non_article_pages"] += 1
        else:
            sentences, page_links, page_stats = next(results)
            stats.update(page_stats)
            progress["articles"] += 1
            if sentences:
                line = {"page": title, "sentences": sentences, "page_links": page_links}
                fhs["sentences"].write((json.dumps(line, ensure_ascii=False) + "\n").encode("utf-8"))
            else:
                stats["articles_without_sentences"] += 1
        progress["pages_seen"] = index
        if kind == "article" or k == len(batch) - 1:  # the progress file follows every article
            for key, fh in fhs.items():
                fh.flush()
                progress["bytes"][key] = fh.tell()
            progress["stats"] = dict(stats)
            _write_text(prog_path, json.dumps(progress))


def _file_id(path: str | Path | None) -> dict | None:
    """Path, size and modification time: a changed table makes the records step run again."""
    if path is None:
        return None
    st = Path(path).stat()
    return {"path": str(path), "bytes": st.st_size, "mtime_ns": st.st_mtime_ns}


def count_step(out: str | Path, log=print) -> dict[str, int]:
    """``sentences.jsonl`` -> ``counts.tsv``: links per (redirect-resolved) title, most linked first."""
    out = Path(out)
    path = out / "counts.tsv"
    if path.exists():
        log(f"count: {path} exists; skipping (--overwrite to redo)")
        return read_counts(path)
    remove_outputs(out, RECORD_FILES)
    resolve = resolver(read_redirects(out / "redirects.tsv"))
    counts: Counter = Counter()
    # the pages of sentences.jsonl, one {"page", "sentences", "page_links"} at a time
    for page in (record.data for record in iter_records(out / "sentences.jsonl", "jsonl")):
        for sent in page["sentences"]:
            counts.update(resolve(t) for _, _, t in sent["links"])
    with atomic_write(path) as writer:
        writer.write("title\tcount\n")
        for title, n in sorted(counts.items(), key=lambda x: (-x[1], x[0])):
            writer.write(f"{title}\t{n}\n")
    log(f"count: {len(counts)} linked titles, {sum(counts.values())} links -> {path}")
    return dict(counts)


def records_step(
    out: str | Path,
    min_link_count: int = 10,
    wikidata_map: str | None = None,
    types: str | None = None,
    seed: int = 0,
    language: str = "en",
    log=print,
) -> dict:
    """``sentences.jsonl`` + ``counts.tsv`` -> ``records.jsonl``, ``entities.tsv``, ``stats.json``.

    Entities: titles linked more than ``min_link_count`` times, as Wikidata ids with ``wikidata_map``
    (other links dropped). Hard negative: an output entity of the positive's type (``types``, in output
    ids), not linked from the same page nor the page itself, drawn with ``seed``."""
    out = Path(out)
    params = {
        "min_link_count": min_link_count,
        "wikidata_map": _file_id(wikidata_map),
        "types": _file_id(types),
        "seed": seed,
        "language": language,
    }
    paths = {name: out / name for name in RECORD_FILES}
    old = _reusable_records(paths, params, log)
    if old is not None:
        return old
    title_to_qid = read_title_map(wikidata_map) if wikidata_map else None
    type_table = read_types(types, normalize=title_to_qid is None) if types else None
    counts = read_counts(out / "counts.tsv")
    resolve = resolver(read_redirects(out / "redirects.tsv"))
    id_of, entity_count, entity_title = _entity_ids(counts, min_link_count, title_to_qid)
    sampler = HardNegativeSampler(type_table, id_of.values(), seed) if type_table else None
    stats: Counter = Counter()
    used: set[str] = set()
    with atomic_write(paths["records.jsonl"]) as writer:
        for page in (record.data for record in iter_records(out / "sentences.jsonl", "jsonl")):
            excluded = {
                id_of[t] for t in map(resolve, page["page_links"] + [normalize_title(page["page"])]) if t in id_of
            }
            for sent in page["sentences"]:
                entities = _sentence_entities(sent["links"], resolve, counts, id_of, min_link_count, stats)
                stats["links_kept"] += len(entities)
                if entities:
                    stats["sentences_with_entities"] += 1
                for eid in entities:
                    negative = sampler(eid, excluded) if sampler else None
                    record = {
                        "text": sent["text"],
                        "entity": eid,
                        "hard_negative": negative,
                        "language": language,
                        "page": page["page"],
                    }
                    writer.write(json.dumps(record, ensure_ascii=False) + "\n")
                    stats["records"] += 1
                    stats["records_with_hard_negative"] += negative is not None
                    used.update(e for e in (eid, negative) if e is not None)
        with atomic_write(paths["entities.tsv"]) as ents:
            ents.write("id\ttitle\tcount\n")
            for eid, n in sorted(entity_count.items(), key=lambda x: (-x[1], x[0])):
                if eid in used:
                    ents.write(f"{eid}\t{entity_title[eid]}\t{n}\n")
        extract = json.loads((out / "extract.json").read_text(encoding="utf-8"))
        ex = extract["stats"]
        summary = {
            "params": params,
            "extract_params": extract["params"],
            "pages": extract["pages_seen"],
            "articles": extract["articles"],
            "redirects": ex.get("redirects", 0),
            "non_article_pages": ex.get("non_article_pages", 0),
            "sentences": ex.get("sentences", 0),
            "sentences_with_entities": stats["sentences_with_entities"],
            "records": stats["records"],
            "records_with_hard_negative": stats["records_with_hard_negative"],
            "entities": len(used),
            "linked_titles": len(counts),
            "links_in_sentences": ex.get("links_in_sentences", 0),
            "links_kept": stats["links_kept"],
            "links_dropped": {
                "below_min_link_count": stats["links_dropped_below_min_link_count"],
                "no_wikidata_id": stats["links_dropped_no_wikidata_id"],
                "duplicate_in_sentence": stats["links_dropped_duplicate_in_sentence"],
                "in_dropped_sentence": ex.get("links_dropped_in_dropped_sentence", 0),
                "crosses_sentence_boundary": ex.get("links_dropped_crosses_sentence_boundary", 0),
                "non_article_target": ex.get("links_dropped_non_article_target", 0),
            },
        }
        if type_table is not None:
            summary["typed_entities"] = len(sampler.types) if sampler else 0  # a types file without rows: none
        _write_text(paths["stats.json"], json.dumps(summary, indent=1) + "\n")
    log(
        f"records: {summary['records']} records ({summary['records_with_hard_negative']} with a hard negative), "
        f"{summary['entities']} entities -> {paths['records.jsonl']}"
    )
    return summary


def _reusable_records(paths: dict, params: dict, log) -> dict | None:
    """The stats of finished records made with ``params`` (the step is skipped), else ``None``."""
    if not all(p.exists() for p in paths.values()):
        return None
    old = json.loads(paths["stats.json"].read_text(encoding="utf-8"))
    if old.get("params") == params:
        log(f"records: {paths['records.jsonl']} exists; skipping (--overwrite to redo)")
        return old
    changed = [k for k in params if (old.get("params") or {}).get(k) != params[k]]
    log(f"records: {paths['records.jsonl']} was built with other options ({', '.join(changed)}); rebuilding")
    return None


def _entity_ids(counts: dict[str, int], min_link_count: int, title_to_qid: dict | None):
    """``(id_of, entity_count, entity_title)`` of the titles linked over ``min_link_count`` times with an id."""
    id_of: dict[str, str] = {}
    entity_count: Counter = Counter()
    entity_title: dict[str, str] = {}
    for title, n in counts.items():  # most linked first
        if n <= min_link_count:
            continue
        eid = title if title_to_qid is None else title_to_qid.get(title)
        if eid is None:
            continue
        id_of[title] = eid
        entity_count[eid] += n
        entity_title.setdefault(eid, title)
    return id_of, entity_count, entity_title


def _sentence_entities(links: list, resolve, counts: dict, id_of: dict, min_link_count: int, stats: Counter):
    """The distinct entity ids a sentence links to, in order; ``stats`` counts the links dropped, and why."""
    entities: list[str] = []
    for _, _, title in links:
        title = resolve(title)
        if counts.get(title, 0) <= min_link_count:
            stats["links_dropped_below_min_link_count"] += 1
        elif title not in id_of:
            stats["links_dropped_no_wikidata_id"] += 1
        elif id_of[title] in entities:
            stats["links_dropped_duplicate_in_sentence"] += 1
        else:
            entities.append(id_of[title])
    return entities


def ease_wikipedia(
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
) -> dict:
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

    Returns:
        the contents of ``stats.json``
    """
    out = Path(output)
    if not Path(input).is_file():
        raise FileNotFoundError(f"dump not found: {input}")
    for path, what in ((wikidata_map, "wikidata map"), (types, "types file")):
        if path is not None and not Path(path).is_file():
            raise FileNotFoundError(f"{what} not found: {path}")
    if overwrite:
        remove_outputs(out, EXTRACT_FILES + COUNT_FILES + RECORD_FILES)
    extract_step(input, out, language, splitter_language, min_sentence_chars, max_pages, workers=workers)
    count_step(out)
    return records_step(out, min_link_count, wikidata_map, types, seed, language)
