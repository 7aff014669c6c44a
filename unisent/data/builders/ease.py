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
"""

from __future__ import annotations

import argparse
import bz2
import html
import json
import multiprocessing
import os
import random
import re
import xml.etree.ElementTree as ET
from collections import Counter
from collections.abc import Iterable, Iterator
from pathlib import Path

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
    "register",
]

_INSTALL_HINT = "the EASE data builders need pysbd and mwparserfromhell: pip install 'unisent[ease]'"

#: Namespace keys whose links are not shown in the text (files, media, categories).
_HIDDEN_NS = {-2, 6, 14}
#: English aliases that every wiki accepts besides its localised namespace names.
_NS_ALIASES = {"image": 6, "image talk": 7, "media": -2, "file": 6, "category": 14, "project": 4, "wp": 4}
#: Interwiki prefixes of the Wikimedia projects; such links keep their text but name no article.
_INTERWIKI = {
    "w", "wikipedia", "wikt", "wiktionary", "s", "wikisource", "q", "wikiquote", "b", "wikibooks", "n",
    "wikinews", "v", "wikiversity", "voy", "wikivoyage", "species", "wikispecies", "d", "wikidata", "c",
    "commons", "m", "meta", "metawikipedia", "mw", "mediawikiwiki", "foundation", "wmf", "phab", "outreach",
}
_LANG_PREFIX = re.compile(r"^[a-z]{2,3}(-[a-z]+)*$|^simple$")
#: Tags whose content is not running text.
_DROP_TAGS = {
    "ref", "references", "table", "gallery", "math", "chem", "ce", "score", "timeline", "imagemap",
    "syntaxhighlight", "source", "pre", "graph", "mapframe", "maplink", "templatedata", "templatestyles",
    "hiero", "inputbox", "categorytree", "includeonly", "noinclude", "indicator", "section", "img", "style",
    "script",
}
_CLEAN_DELETE = re.compile(r"'{2,}|__[A-Z]+__|\(\s*[,;:]?\s*\)|\[\s*\]")
_NO_SPACE_BEFORE = set(",.;:!?)]")
_NO_SPACE_AFTER = set("([")

EXTRACT_FILES = ("sentences.jsonl", "redirects.tsv", "extract.json")
COUNT_FILES = ("counts.tsv",)
RECORD_FILES = ("records.jsonl", "entities.tsv", "stats.json")


def _require(module: str):
    try:
        return __import__(module)
    except ImportError as err:  # pragma: no cover - exercised only without the extra
        raise ImportError(_INSTALL_HINT) from err


# --------------------------------------------------------------------------- small helpers


def normalize_title(title: str) -> str:
    """A link target as a Wikipedia title: entities decoded, anchor dropped, underscores -> spaces,
    whitespace collapsed, first letter upper-cased (``"computer_mouse#Usage"`` -> ``"Computer mouse"``)."""
    title = html.unescape(title).split("#", 1)[0].replace("_", " ")
    title = " ".join(title.split()).lstrip(":").strip()
    return title[:1].upper() + title[1:]


def _atomic_write_text(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


class _AtomicWriter:
    """Write ``path`` through ``path.tmp``; ``commit()`` renames it into place."""

    def __init__(self, path: Path):
        self.path = Path(path)
        self.tmp = self.path.with_name(self.path.name + ".tmp")
        self.fh = self.tmp.open("w", encoding="utf-8")

    def write(self, text: str) -> None:
        self.fh.write(text)

    def commit(self) -> None:
        self.fh.close()
        os.replace(self.tmp, self.path)


def _remove(out: Path, names: Iterable[str]) -> list[str]:
    removed = []
    for name in names:
        for p in (out / name, out / (name + ".part"), out / (name + ".tmp")):
            if p.exists():
                p.unlink()
                removed.append(p.name)
    return removed


def _tsv_rows(path: str | Path, what: str, header: set[tuple[str, ...]]) -> Iterator[tuple[int, list[str]]]:
    """Yield ``(line number, [field1, field2])`` of a two-column tsv; blank lines and ``#`` comments are
    skipped, a first line in ``header`` too; any other line without exactly two non-empty fields raises."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{what} not found: {path}")
    with path.open(encoding="utf-8") as fh:
        for lineno, line in enumerate(fh, 1):
            line = line.rstrip("\n").rstrip("\r")
            if not line.strip() or line.startswith("#"):
                continue
            fields = line.split("\t")
            if lineno == 1 and tuple(f.strip().lower() for f in fields) in header:
                continue
            if len(fields) != 2 or not fields[0].strip() or not fields[1].strip():
                raise ValueError(
                    f"{what} {path}, line {lineno}: expected two tab-separated non-empty fields, got {line[:200]!r}"
                )
            yield lineno, [fields[0].strip(), fields[1].strip()]


def read_title_map(path: str | Path) -> dict[str, str]:
    """``title<TAB>QID`` lines (optional header ``title<TAB>qid``) -> ``{normalised title: QID}``."""
    mapping: dict[str, str] = {}
    header = {("title", "qid"), ("title", "id"), ("title", "wikidata")}
    for lineno, (title, qid) in _tsv_rows(path, "wikidata map", header):
        if not re.fullmatch(r"Q[1-9][0-9]*", qid):
            raise ValueError(f"wikidata map {path}, line {lineno}: field 2 (QID) is {qid!r}, expected e.g. 'Q42'")
        mapping.setdefault(normalize_title(title), qid)
    return mapping


def read_types(path: str | Path, normalize: bool = False) -> dict[str, list[str]]:
    """``entity<TAB>type`` lines (optional header ``entity<TAB>type``; an entity may have several lines)
    -> ``{entity: [types in file order]}``. ``normalize``: entities are Wikipedia titles (normalised)."""
    types: dict[str, list[str]] = {}
    for _, (entity, typ) in _tsv_rows(path, "types file", {("entity", "type"), ("id", "type")}):
        entity = normalize_title(entity) if normalize else entity
        lst = types.setdefault(entity, [])
        if typ not in lst:
            lst.append(typ)
    return types


def pick_candidate(rng: random.Random, pool: list[str], entity: str, excluded: set[str]) -> str | None:
    """A uniformly drawn member of ``pool`` that is neither ``entity`` nor in ``excluded``; ``None`` if none.
    Rejection sampling first (fast for big pools), then an exact draw over the valid members."""
    for _ in range(16):
        c = pool[rng.randrange(len(pool))]
        if c != entity and c not in excluded:
            return c
    valid = [c for c in pool if c != entity and c not in excluded]
    return valid[rng.randrange(len(valid))] if valid else None


class HardNegativeSampler:
    """One hard negative per example: an entity of the same type as the positive (a type chosen at
    random when it has several; types without any candidate are passed over) that is neither the
    positive nor in ``excluded`` (the entities of the same page or sentence); ``None`` when none."""

    def __init__(self, types: dict[str, list[str]], allowed: Iterable[str] | None, seed: int):
        allowed_set = None if allowed is None else set(allowed)
        self.types = {e: ts for e, ts in types.items() if allowed_set is None or e in allowed_set}
        members: dict[str, list[str]] = {}
        for entity, ts in self.types.items():
            for t in ts:
                members.setdefault(t, []).append(entity)
        self.members = members
        self.rng = random.Random(seed)

    def __call__(self, entity: str, excluded: set[str]) -> str | None:
        ts = self.types.get(entity)
        if not ts:
            return None
        order = ts if len(ts) == 1 else self.rng.sample(ts, len(ts))
        for t in order:
            c = pick_candidate(self.rng, self.members[t], entity, excluded)
            if c is not None:
                return c
        return None


# --------------------------------------------------------------------------- wikitext -> text + links


class _Namespaces:
    def __init__(self, names: dict[str, int] | None = None):
        self.names = dict(_NS_ALIASES)
        for name, key in (names or {}).items():
            self.names[name.lower()] = key

    def classify(self, target: str) -> str:
        """``drop`` (file/category/interlanguage link: no text), ``text`` (shows text, names no article)
        or ``entity``."""
        visible = target.startswith(":")
        t = target.lstrip(":").strip()
        if not normalize_title(t):
            return "text"  # [[#Section]]: a link inside the page
        if ":" in t:
            prefix = t.split(":", 1)[0].strip().replace("_", " ")
            key = self.names.get(prefix.lower())
            if key is not None:
                return "drop" if key in _HIDDEN_NS and not visible else "text"
            if prefix.lower() in _INTERWIKI:
                return "text"
            if _LANG_PREFIX.match(prefix):
                return "text" if visible else "drop"
        return "entity"


def _link_trail(text: str) -> int:
    """Length of the lower-case letters that MediaWiki pulls into a preceding link (``[[icon]]s``)."""
    n = 0
    while n < len(text) and text[n].isalpha() and text[n].islower():
        n += 1
    return n


def _walk(nodes, out: list[str], links: list | None, ns: _Namespaces, stats: Counter) -> None:
    mw = _require("mwparserfromhell")
    N = mw.nodes
    pos = sum(len(s) for s in out)
    pending = None  # index of a link that a following link trail may extend
    for node in nodes:
        if isinstance(node, N.Text):
            value = node.value
            if pending is not None:
                n = _link_trail(value)
                if n:
                    links[pending][1] += n
            out.append(value)
            pos += len(value)
            pending = None
            continue
        pending = None
        if isinstance(node, N.Wikilink):
            target = str(node.title).strip()
            kind = ns.classify(target)
            if kind == "drop":
                continue
            if node.text is None:
                display = target.lstrip(":")
            elif not str(node.text).strip():  # pipe trick [[Foo (bar)|]]
                display = re.sub(r"\s*\([^)]*\)\s*$", "", target.lstrip(":").split(":", 1)[-1])
            else:
                sub: list[str] = []
                _walk(node.text.nodes, sub, None, ns, stats)
                display = "".join(sub)
            out.append(display)
            if kind == "entity" and links is not None and display.strip():
                links.append([pos, pos + len(display), normalize_title(target)])
                pending = len(links) - 1
            elif kind == "text":
                stats["links_dropped_non_article_target"] += 1
            pos += len(display)
        elif isinstance(node, N.Tag):
            tag = str(node.tag).strip().lower()
            if tag in _DROP_TAGS or node.wiki_markup == "{|":
                continue
            if tag == "br":
                out.append(" ")
                pos += 1
            elif node.contents is not None and not node.self_closing:
                sub = []
                sub_links: list = []
                _walk(node.contents.nodes, sub, sub_links if links is not None else None, ns, stats)
                for link in sub_links:
                    links.append([link[0] + pos, link[1] + pos, link[2]])
                text = "".join(sub)
                out.append(text)
                pos += len(text)
        elif isinstance(node, N.HTMLEntity):
            value = node.normalize()
            out.append(value)
            pos += len(value)
        elif isinstance(node, N.ExternalLink):
            if node.title is not None and str(node.title).strip():
                sub = []
                _walk(node.title.nodes, sub, None, ns, stats)
                text = "".join(sub)
                out.append(text)
                pos += len(text)
        # Template, Comment, Heading, Argument: dropped


def _clean_line(line: str, links: list) -> tuple[str, list]:
    """Delete leftovers (``''``, ``__TOC__``, empty brackets), collapse whitespace, drop spaces before
    closing punctuation and after opening brackets; link offsets follow the edits."""
    keep = [True] * len(line)
    for m in _CLEAN_DELETE.finditer(line):
        for i in range(m.start(), m.end()):
            keep[i] = False
    chars = [(c, i) for i, c in enumerate(line) if keep[i]]
    out: list[str] = []
    newpos = [-1] * len(line)
    pending_space = False
    for c, i in chars:
        if c.isspace():
            pending_space = True
            continue
        if pending_space and out and c not in _NO_SPACE_BEFORE and out[-1] not in _NO_SPACE_AFTER:
            out.append(" ")
        pending_space = False
        newpos[i] = len(out)
        out.append(c)
    text = "".join(out)
    new_links = []
    for start, end, title in links:
        ps = [newpos[i] for i in range(start, min(end, len(line))) if newpos[i] >= 0]
        if ps:
            new_links.append([min(ps), max(ps) + 1, title])
    return text, new_links


def wikitext_to_lines(wikitext: str, namespaces: dict[str, int] | None = None, stats: Counter | None = None):
    """Wikitext -> ``[(line text, [[start, end, title], ...]), ...]``: plain text with the display text of
    links kept (templates, refs, tables, files, categories, headings and comments dropped); one entry
    per non-empty line (paragraph or list item). Also returns every article link target of the page
    (templates and tables included): ``(lines, page_links)``."""
    mw = _require("mwparserfromhell")
    stats = Counter() if stats is None else stats
    ns = _Namespaces(namespaces)
    code = mw.parse(wikitext)
    out: list[str] = []
    links: list = []
    _walk(code.nodes, out, links, ns, stats)
    text = "".join(out)
    page_links = set()
    for link in code.filter_wikilinks():
        target = str(link.title).strip()
        if ns.classify(target) == "entity":
            page_links.add(normalize_title(target))
    lines = []
    start = 0
    li = 0
    links.sort(key=lambda x: x[0])
    for raw in text.split("\n"):
        end = start + len(raw)
        in_line = []
        while li < len(links) and links[li][0] < end + 1:
            s, e, t = links[li]
            if s >= start and e <= end:
                in_line.append([s - start, e - start, t])
            else:
                stats["links_dropped_crosses_sentence_boundary"] += 1
            li += 1
        clean, clean_links = _clean_line(raw, in_line)
        if clean:
            lines.append((clean, clean_links))
        else:
            stats["links_dropped_in_dropped_sentence"] += len(in_line)
        start = end + 1
    return lines, sorted(page_links)


class _Splitter:
    def __init__(self, language: str):
        pysbd = _require("pysbd")
        from pysbd.languages import LANGUAGE_CODES

        if language not in LANGUAGE_CODES:
            raise ValueError(
                f"pysbd has no sentence rules for {language!r}; pass --splitter-language with one of "
                f"{', '.join(sorted(LANGUAGE_CODES))} (the closest language, or en)"
            )
        self.segmenter = pysbd.Segmenter(language=language, clean=False)

    def spans(self, text: str) -> list[tuple[int, int]]:
        """Sentence spans, whitespace-stripped, aligned on ``text`` (pysbd's own alignment silently drops
        a sentence it cannot find; a sentence that cannot be aligned here is skipped)."""
        spans = []
        pos = 0
        for sent in self.segmenter.processor(text).process():
            sent = sent.strip()
            if not sent:
                continue
            i = text.find(sent, pos)
            if i < 0:
                continue
            spans.append((i, i + len(sent)))
            pos = i + len(sent)
        return spans


def page_sentences(wikitext: str, splitter: _Splitter, min_chars: int, namespaces=None, stats: Counter | None = None):
    """One article's wikitext -> ``([{"text", "links"}, ...], page_links)``."""
    stats = Counter() if stats is None else stats
    lines, page_links = wikitext_to_lines(wikitext, namespaces, stats)
    sentences = []
    for text, links in lines:
        spans = splitter.spans(text) if len(text) >= min_chars else []
        used = [False] * len(links)
        for a, b in spans:
            if b - a < min_chars:
                continue
            sent_links = []
            for k, (s, e, t) in enumerate(links):
                if s >= a and e <= b:
                    sent_links.append([s - a, e - a, t])
                    used[k] = True
            sentences.append({"text": text[a:b], "links": sent_links})
            stats["links_in_sentences"] += len(sent_links)
        n_unused = used.count(False)
        if n_unused:
            # a link is dropped when its sentence is too short or when the splitter cut through it
            inside_kept = 0
            for k, (s, e, _) in enumerate(links):
                if not used[k] and any(a < e and s < b and b - a >= min_chars for a, b in spans):
                    inside_kept += 1
            stats["links_dropped_crosses_sentence_boundary"] += inside_kept
            stats["links_dropped_in_dropped_sentence"] += n_unused - inside_kept
    stats["sentences"] += len(sentences)
    return sentences, page_links


_WORKER: dict = {}


def _init_worker(splitter_language: str, min_chars: int, namespaces: dict[str, int]) -> None:
    _WORKER.update(splitter=_Splitter(splitter_language), min_chars=min_chars, namespaces=namespaces)


def _process_article(text: str):
    stats: Counter = Counter()
    sentences, page_links = page_sentences(text, _WORKER["splitter"], _WORKER["min_chars"], _WORKER["namespaces"], stats)
    return sentences, page_links, dict(stats)


# --------------------------------------------------------------------------- dump reading


def _open_dump(path: Path):
    return bz2.open(path, "rb") if path.suffix == ".bz2" else path.open("rb")


def iter_dump(path: str | Path) -> Iterator[tuple[str, object]]:
    """Stream a MediaWiki XML dump: yields ``("namespaces", {name: key})`` once, then
    ``("page", (title, ns, redirect target or None, wikitext))`` per ``<page>`` (memory stays flat)."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"dump not found: {path}")
    with _open_dump(path) as fh:
        context = ET.iterparse(fh, events=("start", "end"))
        root = None
        try:
            for event, elem in context:
                if root is None:
                    root = elem
                    continue
                if event != "end":
                    continue
                tag = elem.tag.rsplit("}", 1)[-1]
                if tag == "siteinfo":
                    names = {}
                    for n in elem.iter():
                        if n.tag.rsplit("}", 1)[-1] == "namespace" and n.text:
                            names[n.text.strip()] = int(n.get("key", "0"))
                    yield "namespaces", names
                    root.clear()
                elif tag == "page":
                    title = ns = text = redirect = None
                    for child in elem.iter():
                        ctag = child.tag.rsplit("}", 1)[-1]
                        if ctag == "title" and title is None:
                            title = child.text or ""
                        elif ctag == "ns" and ns is None:
                            ns = int(child.text or 0)
                        elif ctag == "redirect":
                            redirect = child.get("title") or ""
                        elif ctag == "text":
                            text = child.text or ""
                    yield "page", (title or "", ns or 0, redirect, text or "")
                    elem.clear()
                    root.clear()
        except ET.ParseError as err:
            line, col = err.position
            raise ValueError(f"dump {path}, line {line}, column {col}: malformed XML ({err})") from None


# --------------------------------------------------------------------------- step 1: extract


def extract_step(dump: str | Path, out: str | Path, language: str = "en", splitter_language: str | None = None,
                 min_sentence_chars: int = 20, max_pages: int | None = None, workers: int = 1, log=print,
                 _page_hook=None) -> dict:
    """Dump -> ``sentences.jsonl`` + ``redirects.tsv`` (+ ``extract.json``: parameters, pages done,
    counts). Resumable: appends per page to ``*.part`` files, and ``extract.json`` records the pages
    done and the part sizes after each page; a re-run truncates the parts to those sizes and continues
    after the last completed page. When the dump is exhausted (or ``max_pages`` articles are done) the
    parts are renamed into place. A finished extraction is reused unless it stopped at a smaller
    ``max_pages`` than asked, in which case it is extended. ``workers`` > 1 parses pages in that many
    processes (in batches, written in dump order: the output does not depend on ``workers``).

    Returns ``{"ran": bool, **progress}``.
    """
    dump = Path(dump)
    out = Path(out)
    if not dump.is_file():
        raise FileNotFoundError(f"dump not found: {dump}")
    splitter_language = splitter_language or language
    _Splitter(splitter_language)  # fail early on a language without rules
    out.mkdir(parents=True, exist_ok=True)
    params = {"input_name": dump.name, "input_bytes": dump.stat().st_size, "language": language,
              "splitter_language": splitter_language, "min_sentence_chars": min_sentence_chars}
    prog_path = out / "extract.json"
    final = {"sentences": out / "sentences.jsonl", "redirects": out / "redirects.tsv"}
    part = {k: p.with_name(p.name + ".part") for k, p in final.items()}

    progress = None
    if prog_path.exists():
        progress = json.loads(prog_path.read_text(encoding="utf-8"))
        if progress.get("params") != params:
            raise ValueError(
                f"{prog_path}: the existing extraction was made with {progress.get('params')}, "
                f"not {params}; re-run with the same options or with --overwrite"
            )
        complete = all(p.exists() for p in final.values())
        if complete and (progress["exhausted"] or (max_pages is not None and progress["articles"] >= max_pages)):
            log(f"extract: {final['sentences']} exists ({progress['articles']} articles, "
                f"{progress['stats'].get('sentences', 0)} sentences); skipping (--overwrite to redo)")
            return {"ran": False, **progress}
        if complete:  # stopped at a smaller --max-pages: extend it
            for k in final:
                os.replace(final[k], part[k])
        elif not all(p.exists() for p in part.values()):
            progress = None  # parts lost: start over
    if progress is None:
        progress = {"params": params, "pages_seen": 0, "articles": 0, "exhausted": False,
                    "bytes": {"sentences": 0, "redirects": 0}, "stats": {}}
        for p in part.values():
            p.write_bytes(b"")
    else:
        log(f"extract: resuming after {progress['pages_seen']} pages ({progress['articles']} articles)")
    removed = _remove(out, COUNT_FILES + RECORD_FILES)
    if removed:
        log(f"extract: removed outputs of later steps that it invalidates: {', '.join(removed)}")
    for k, p in part.items():  # drop whatever a killed run wrote after its last completed page
        with p.open("r+b") as fh:
            fh.truncate(progress["bytes"][k])

    stats = Counter(progress["stats"])
    fhs = {k: p.open("ab") for k, p in part.items()}
    pool = None
    exhausted = True
    planned = progress["articles"]  # articles handed out, for --max-pages

    def write(batch: list, results: Iterator) -> None:
        for k, (index, title, kind, redirect) in enumerate(batch):
            if _page_hook is not None:
                _page_hook(title)
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
                _atomic_write_text(prog_path, json.dumps(progress))

    def flush(batch: list, texts: list) -> None:
        if pool is None:
            results = (_process_article(t) for t in texts)
        else:
            results = iter(pool.map(_process_article, texts, chunksize=max(1, len(texts) // (4 * workers))))
        write(batch, results)
        batch.clear()
        texts.clear()

    try:
        index = 0
        batch: list = []
        texts: list = []
        batch_articles = 1 if workers <= 1 else 32 * workers
        namespaces: dict[str, int] = {}
        _init_worker(splitter_language, min_sentence_chars, namespaces)
        for kind, value in iter_dump(dump):
            if kind == "namespaces":  # the dump's <siteinfo>, before its pages
                namespaces = value
                _init_worker(splitter_language, min_sentence_chars, namespaces)
                continue
            if pool is None and workers > 1:
                pool = multiprocessing.Pool(workers, _init_worker, (splitter_language, min_sentence_chars, namespaces))
            index += 1
            if index <= progress["pages_seen"]:
                continue
            if max_pages is not None and planned >= max_pages:
                exhausted = False
                break
            title, ns, redirect, text = value
            if redirect is not None or text.lstrip()[:9].upper() == "#REDIRECT":
                batch.append((index, title, "redirect", redirect if ns == 0 else None))
            elif ns != 0:
                batch.append((index, title, "other", None))
            else:
                batch.append((index, title, "article", None))
                texts.append(text)
                planned += 1
            if len(texts) >= batch_articles or len(batch) >= 64 * batch_articles:
                flush(batch, texts)
        flush(batch, texts)
    finally:
        if pool is not None:
            pool.terminate()
        for fh in fhs.values():
            fh.close()
    progress["exhausted"] = exhausted
    progress["stats"] = dict(stats)
    for k in final:
        os.replace(part[k], final[k])
    _atomic_write_text(prog_path, json.dumps(progress, indent=1))
    log(f"extract: {progress['articles']} articles, {stats['sentences']} sentences -> {final['sentences']}"
        + ("" if exhausted else f" (stopped at --max-pages {max_pages})"))
    return {"ran": True, **progress}


def _file_id(path: str | Path | None) -> dict | None:
    """Path, size and modification time: a changed table makes the records step run again."""
    if path is None:
        return None
    st = Path(path).stat()
    return {"path": str(path), "bytes": st.st_size, "mtime_ns": st.st_mtime_ns}


def _iter_pages(path: Path) -> Iterator[dict]:
    with path.open(encoding="utf-8") as fh:
        for line in fh:
            yield json.loads(line)


def read_redirects(path: str | Path) -> dict[str, str]:
    redirects = {}
    with Path(path).open(encoding="utf-8") as fh:
        for line in fh:
            src, _, dst = line.rstrip("\n").partition("\t")
            if src and dst and src != dst:
                redirects[src] = dst
    return redirects


def _resolver(redirects: dict[str, str]):
    def resolve(title: str) -> str:
        seen = {title}
        while title in redirects and len(seen) < 8:
            title = redirects[title]
            if title in seen:
                break
            seen.add(title)
        return title

    return resolve


# --------------------------------------------------------------------------- step 2: count


def count_step(out: str | Path, log=print) -> dict[str, int]:
    """``sentences.jsonl`` -> ``counts.tsv`` (``title<TAB>count``, header, most linked first): how often
    each (redirect-resolved) title is linked from a kept sentence."""
    out = Path(out)
    path = out / "counts.tsv"
    if path.exists():
        log(f"count: {path} exists; skipping (--overwrite to redo)")
        return read_counts(path)
    _remove(out, RECORD_FILES)
    resolve = _resolver(read_redirects(out / "redirects.tsv"))
    counts: Counter = Counter()
    for page in _iter_pages(out / "sentences.jsonl"):
        for sent in page["sentences"]:
            counts.update(resolve(t) for _, _, t in sent["links"])
    writer = _AtomicWriter(path)
    writer.write("title\tcount\n")
    for title, n in sorted(counts.items(), key=lambda x: (-x[1], x[0])):
        writer.write(f"{title}\t{n}\n")
    writer.commit()
    log(f"count: {len(counts)} linked titles, {sum(counts.values())} links -> {path}")
    return dict(counts)


def read_counts(path: str | Path) -> dict[str, int]:
    counts = {}
    with Path(path).open(encoding="utf-8") as fh:
        next(fh)
        for line in fh:
            title, _, n = line.rstrip("\n").rpartition("\t")
            counts[title] = int(n)
    return counts


# --------------------------------------------------------------------------- step 3: records


def records_step(out: str | Path, min_link_count: int = 10, wikidata_map: str | None = None,
                 types: str | None = None, seed: int = 0, language: str = "en", log=print) -> dict:
    """``sentences.jsonl`` + ``counts.tsv`` -> ``records.jsonl``, ``entities.tsv``, ``stats.json``.

    Entities: titles linked more than ``min_link_count`` times; with ``wikidata_map`` their Wikidata
    ids (links to titles without one are dropped). Hard negatives (``types``: ``entity<TAB>type`` in
    the output id space): an entity of the positive's type, not linked from the same page (nor the
    page itself), drawn with ``seed``; candidates are the entities of the output."""
    out = Path(out)
    params = {"min_link_count": min_link_count, "wikidata_map": _file_id(wikidata_map), "types": _file_id(types),
              "seed": seed, "language": language}
    paths = {name: out / name for name in RECORD_FILES}
    if all(p.exists() for p in paths.values()):
        old = json.loads(paths["stats.json"].read_text(encoding="utf-8"))
        if old.get("params") == params:
            log(f"records: {paths['records.jsonl']} exists; skipping (--overwrite to redo)")
            return old
        changed = [k for k in params if (old.get("params") or {}).get(k) != params[k]]
        log(f"records: {paths['records.jsonl']} was built with other options ({', '.join(changed)}); rebuilding")
    title_to_qid = read_title_map(wikidata_map) if wikidata_map else None
    type_table = read_types(types, normalize=title_to_qid is None) if types else None
    counts = read_counts(out / "counts.tsv")
    resolve = _resolver(read_redirects(out / "redirects.tsv"))

    # entity ids of the kept titles; an id's title is its most linked title
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

    sampler = HardNegativeSampler(type_table, id_of.values(), seed) if type_table else None
    stats: Counter = Counter()
    used: set[str] = set()
    writer = _AtomicWriter(paths["records.jsonl"])
    for page in _iter_pages(out / "sentences.jsonl"):
        excluded = {id_of[t] for t in map(resolve, page["page_links"] + [normalize_title(page["page"])]) if t in id_of}
        for sent in page["sentences"]:
            entities: list[str] = []
            for _, _, title in sent["links"]:
                title = resolve(title)
                if counts.get(title, 0) <= min_link_count:
                    stats["links_dropped_below_min_link_count"] += 1
                elif title not in id_of:
                    stats["links_dropped_no_wikidata_id"] += 1
                elif id_of[title] in entities:
                    stats["links_dropped_duplicate_in_sentence"] += 1
                else:
                    entities.append(id_of[title])
            stats["links_kept"] += len(entities)
            if entities:
                stats["sentences_with_entities"] += 1
            for eid in entities:
                negative = sampler(eid, excluded) if sampler else None
                record = {"text": sent["text"], "entity": eid, "hard_negative": negative,
                          "language": language, "page": page["page"]}
                writer.write(json.dumps(record, ensure_ascii=False) + "\n")
                stats["records"] += 1
                stats["records_with_hard_negative"] += negative is not None
                used.add(eid)
                if negative is not None:
                    used.add(negative)
    ents = _AtomicWriter(paths["entities.tsv"])
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
        summary["typed_entities"] = len(sampler.types)
    ents.commit()
    _atomic_write_text(paths["stats.json"], json.dumps(summary, indent=1) + "\n")
    writer.commit()  # records.jsonl last: its presence means the step finished
    log(f"records: {summary['records']} records ({summary['records_with_hard_negative']} with a hard negative), "
        f"{summary['entities']} entities -> {paths['records.jsonl']}")
    return summary


def ease_wikipedia(dump: str | Path, out: str | Path, language: str = "en", splitter_language: str | None = None,
                   min_sentence_chars: int = 20, max_pages: int | None = None, min_link_count: int = 10,
                   wikidata_map: str | None = None, types: str | None = None, seed: int = 0,
                   overwrite: bool = False, workers: int = 1, log=print) -> dict:
    """The three steps; returns the contents of ``stats.json``."""
    out = Path(out)
    if not Path(dump).is_file():
        raise FileNotFoundError(f"dump not found: {dump}")
    for path, what in ((wikidata_map, "wikidata map"), (types, "types file")):
        if path is not None and not Path(path).is_file():
            raise FileNotFoundError(f"{what} not found: {path}")
    if overwrite:
        _remove(out, EXTRACT_FILES + COUNT_FILES + RECORD_FILES)
    extract_step(dump, out, language, splitter_language, min_sentence_chars, max_pages, workers=workers, log=log)
    count_step(out, log=log)
    return records_step(out, min_link_count, wikidata_map, types, seed, language, log=log)


# --------------------------------------------------------------------------- FewRel

_CLOSERS = {",", ".", ";", ":", "!", "?", ")", "]", "}", "%", "”", "»", "...", "..", "'s", "'S", "n't", "'re",
            "'ve", "'ll", "'d", "'m"}
_OPENERS = {"(", "[", "{", "$", "£", "€", "“", "«", "#"}
_JOINERS = {"-", "–", "—", "/"}


def detokenize(tokens: list[str]) -> str:
    """Join FewRel tokens: whitespace tokens dropped; no space before ``, . ; : ! ? ) ] %`` and clitics
    (``'s``, ``n't``); none after ``( [ $``; ``- – — /`` joined on both sides; straight double quotes
    alternate opening/closing; ``'`` after a word ending in s is a possessive, else a quote; an empty
    ``( )`` is dropped."""
    toks = [t.strip() for t in tokens if t.strip()]
    toks = [t for i, t in enumerate(toks)  # drop "( )" left behind by FewRel's removed markup
            if not (t == "(" and i + 1 < len(toks) and toks[i + 1] == ")")
            and not (t == ")" and i > 0 and toks[i - 1] == "(")]
    out: list[str] = []
    no_space_next = True
    dq = sq = 0
    for tok in toks:
        space = not no_space_next
        no_space_next = False
        if tok in _CLOSERS:
            space = False
        elif tok in _OPENERS or (tok.startswith("(") and not any(c.isalnum() for c in tok)):
            no_space_next = True
        elif tok in _JOINERS:
            space = False
            no_space_next = True
        elif tok == '"':
            if dq % 2 == 0:
                no_space_next = True
            else:
                space = False
            dq += 1
        elif tok == "'":
            if out and out[-1][-1:] in ("s", "S") and sq % 2 == 0:
                space = False
            else:
                if sq % 2 == 0:
                    no_space_next = True
                else:
                    space = False
                sq += 1
        if space and out:
            out.append(" ")
        out.append(tok)
    return "".join(out)


def _read_json(path: Path, what: str):
    if not path.is_file():
        raise FileNotFoundError(f"{what} not found: {path}")
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as err:
        raise ValueError(f"{what} {path}, line {err.lineno}: malformed JSON ({err.msg})") from None


def read_fewrel(path: str | Path) -> Iterator[tuple[str, int, str, list[tuple[str, str, str]]]]:
    """FewRel ``{relation: [instance, ...]}`` -> ``(relation, index, sentence, [(slot, QID, surface),
    (slot, QID, surface)])`` with slots ``"<relation>:head"`` and ``"<relation>:tail"``."""
    path = Path(path)
    data = _read_json(path, "FewRel file")
    if not isinstance(data, dict):
        raise ValueError(f"FewRel file {path}: expected a JSON object {{relation id: [instances]}}")
    for rel, instances in data.items():
        if not isinstance(instances, list):
            raise ValueError(f"FewRel file {path}, relation {rel}: expected a list of instances")
        for i, inst in enumerate(instances):
            where = f"FewRel file {path}, relation {rel}, instance {i}"
            tokens = inst.get("tokens") if isinstance(inst, dict) else None
            if not isinstance(tokens, list) or not all(isinstance(t, str) for t in tokens):
                raise ValueError(f"{where}: field 'tokens' must be a list of strings")
            ents = []
            for role in ("head", "tail"):
                ent = inst.get(role[0])
                if not (isinstance(ent, list) and len(ent) >= 3 and isinstance(ent[1], str) and ent[1]
                        and isinstance(ent[2], list) and ent[2] and isinstance(ent[2][0], list)):
                    raise ValueError(f"{where}: field {role[0]!r} must be [name, QID, [[token positions]]]")
                positions = ent[2][0]
                if not all(isinstance(p, int) and 0 <= p < len(tokens) for p in positions):
                    raise ValueError(f"{where}: field {role[0]!r} has token positions outside the sentence")
                surface = detokenize([tokens[p] for p in positions]) or str(ent[0])
                ents.append((f"{rel}:{role}", ent[1], surface))
            yield rel, i, detokenize(tokens), ents


def ease_fewrel(input: str | Path, out: str | Path, seed: int = 0, max_records: int | None = None,
                min_count: int = 1, language: str = "en", log=print) -> dict:
    """FewRel -> ``records.jsonl``, ``entities.tsv``, ``stats.json`` under ``out``.

    One record per (sentence, head or tail entity). Entities kept when they occur at least
    ``min_count`` times. Hard negative: an entity filling the same relation slot elsewhere (``P17:tail``:
    countries), not the entity itself nor the other entity of the sentence, drawn with ``seed``.
    ``max_records``: a seeded random subset of that size, in shuffled order (else file order)."""
    input = Path(input)
    out = Path(out)
    instances = list(read_fewrel(input))
    occurrences: Counter = Counter()
    surfaces: dict[str, Counter] = {}
    slot_members: dict[str, list[str]] = {}
    for _, _, _, ents in instances:
        for _, qid, surface in ents:
            occurrences[qid] += 1
            surfaces.setdefault(qid, Counter())[surface] += 1
    kept = {q for q, n in occurrences.items() if n >= min_count}
    for _, _, _, ents in instances:
        for slot, qid, _ in ents:
            if qid in kept:
                slot_members.setdefault(slot, []).append(qid)
    for slot, members in slot_members.items():
        slot_members[slot] = list(dict.fromkeys(members))  # distinct, in order of first occurrence
    rng = random.Random(seed)
    records = []
    dropped = 0
    for _, _, text, ents in instances:
        for k, (slot, qid, _) in enumerate(ents):
            if qid not in kept:
                dropped += 1
                continue
            other = ents[1 - k][1]
            negative = pick_candidate(rng, slot_members[slot], qid, {other})
            records.append({"text": text, "entity": qid, "hard_negative": negative, "language": language,
                            "page": None})
    total = len(records)
    if max_records is not None and max_records < len(records):
        order = list(range(len(records)))
        random.Random(seed).shuffle(order)
        records = [records[i] for i in order[:max_records]]
    out.mkdir(parents=True, exist_ok=True)
    writer = _AtomicWriter(out / "records.jsonl")
    used: set[str] = set()
    for r in records:
        writer.write(json.dumps(r, ensure_ascii=False) + "\n")
        used.add(r["entity"])
        if r["hard_negative"] is not None:
            used.add(r["hard_negative"])
    ents_writer = _AtomicWriter(out / "entities.tsv")
    ents_writer.write("id\ttitle\tcount\n")
    for qid in sorted(used, key=lambda q: (-occurrences[q], q)):
        surface = surfaces[qid].most_common(1)[0][0]  # ties: the first seen
        title = surface[:1].upper() + surface[1:]  # as a Wikipedia title: first letter upper-cased
        ents_writer.write(f"{qid}\t{title}\t{occurrences[qid]}\n")
    summary = {
        "params": {"input_name": input.name, "seed": seed, "max_records": max_records, "min_count": min_count,
                   "language": language},
        "sentences": len(instances),
        "records_before_subset": total,
        "records": len(records),
        "records_with_hard_negative": sum(r["hard_negative"] is not None for r in records),
        "entities": len(used),
        "links_dropped_below_min_count": dropped,
        "slots": {slot: len(m) for slot, m in sorted(slot_members.items())},
    }
    pid2name = input.with_name("pid2name.json")
    if pid2name.is_file():
        names = _read_json(pid2name, "pid2name file")
        summary["relations"] = {rel: names[rel][0] for rel in sorted({s.split(":")[0] for s in slot_members})
                                if rel in names and names[rel]}
    ents_writer.commit()
    _atomic_write_text(out / "stats.json", json.dumps(summary, indent=1, ensure_ascii=False) + "\n")
    writer.commit()
    log(f"{len(records)} records ({summary['records_with_hard_negative']} with a hard negative) from "
        f"{len(instances)} sentences, {len(used)} entities -> {out / 'records.jsonl'}")
    return summary


# --------------------------------------------------------------------------- command line


def _run_wikipedia(args: argparse.Namespace) -> None:
    ease_wikipedia(args.input, args.output, language=args.language, splitter_language=args.splitter_language,
                   min_sentence_chars=args.min_sentence_chars, max_pages=args.max_pages,
                   min_link_count=args.min_link_count, wikidata_map=args.wikidata_map, types=args.types,
                   seed=args.seed, overwrite=args.overwrite, workers=args.workers)


def _run_fewrel(args: argparse.Namespace) -> None:
    ease_fewrel(args.input, args.output, seed=args.seed, max_records=args.max_records, min_count=args.min_count)


def register(sub) -> None:
    """Add ``unisent data ease-wikipedia`` and ``unisent data ease-fewrel``."""
    p = sub.add_parser("ease-wikipedia", help="Wikipedia XML dump -> EASE (sentence, entity, hard negative) jsonl",
                       description="Wikipedia dump -> sentences with hyperlinks -> EASE records; resumable "
                                   "(see docs/methods/ease-data.md)")
    p.add_argument("--input", required=True, help="MediaWiki XML dump, .xml.bz2 or .xml")
    p.add_argument("--output", required=True, help="directory for the step files and records.jsonl")
    p.add_argument("--language", default="en",
                   help="the dump's language: written into the records; the splitter's rules by default (en)")
    p.add_argument("--splitter-language", default=None,
                   help="pysbd rules to split sentences with (default: --language)")
    p.add_argument("--min-sentence-chars", type=int, default=20, help="drop shorter sentences (default 20)")
    p.add_argument("--max-pages", type=int, default=None, help="stop after this many articles")
    p.add_argument("--min-link-count", type=int, default=10,
                   help="keep entities linked more than this many times (default 10, as in the paper)")
    p.add_argument("--wikidata-map", default=None, help="tsv title<TAB>QID: entity ids become Wikidata ids")
    p.add_argument("--types", default=None, help="tsv entity<TAB>type for hard negatives (entity in output ids)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--workers", type=int, default=1, help="processes that parse pages (default 1)")
    p.add_argument("--overwrite", action="store_true", help="redo every step")
    p.set_defaults(run=_run_wikipedia)

    f = sub.add_parser("ease-fewrel", help="FewRel JSON -> EASE (sentence, entity, hard negative) jsonl",
                       description="FewRel sentences with Wikidata head/tail entities -> EASE records; "
                                   "hard negatives fill the same relation slot")
    f.add_argument("--input", required=True, help="FewRel json, e.g. val_wiki.json")
    f.add_argument("--output", required=True, help="directory for records.jsonl, entities.tsv, stats.json")
    f.add_argument("--seed", type=int, default=0)
    f.add_argument("--max-records", type=int, default=None, help="a seeded random subset of this size")
    f.add_argument("--min-count", type=int, default=1, help="keep entities occurring at least this often")
    f.set_defaults(run=_run_fewrel)
