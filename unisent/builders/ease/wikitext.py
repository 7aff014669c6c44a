"""Wikitext -> plain-text lines with the character offsets of their article links, on the node tree of
`mwparserfromhell <https://mwparserfromhell.readthedocs.io>`_. The walk is ours: its ``strip_code`` loses
the link offsets EASE needs, and does not apply MediaWiki's link trails (``[[icon]]s``)."""

from __future__ import annotations

import html
import itertools
import re
from collections import Counter

from ._extra import require

__all__ = ["normalize_title", "wikitext_to_lines", "Namespaces"]

#: Namespace keys whose links are not shown in the text (files, media, categories).
_HIDDEN_NS = {-2, 6, 14}
#: English aliases that every wiki accepts besides its localised namespace names.
_NS_ALIASES = {"image": 6, "image talk": 7, "media": -2, "file": 6, "category": 14, "project": 4, "wp": 4}
#: Interwiki prefixes of the Wikimedia projects; such links keep their text but name no article.
_INTERWIKI = set(
    "w wikipedia wikt wiktionary s wikisource q wikiquote b wikibooks n wikinews v wikiversity voy wikivoyage species "
    "wikispecies d wikidata c commons m meta metawikipedia mw mediawikiwiki foundation wmf phab outreach".split()
)
_LANG_PREFIX = re.compile(r"^[a-z]{2,3}(-[a-z]+)*$|^simple$")
#: Tags whose content is not running text.
_DROP_TAGS = set(
    "ref references table gallery math chem ce score timeline imagemap syntaxhighlight source pre graph mapframe "
    "maplink templatedata templatestyles hiero inputbox categorytree includeonly noinclude indicator section img style "
    "script".split()
)
_CLEAN_DELETE = re.compile(r"'{2,}|__[A-Z]+__|\(\s*[,;:]?\s*\)|\[\s*\]")
_NO_SPACE_BEFORE = set(",.;:!?)]")
_NO_SPACE_AFTER = set("([")


def normalize_title(title: str) -> str:
    """A link target as a Wikipedia title: entities decoded, anchor dropped, underscores -> spaces,
    whitespace collapsed, first letter upper-cased (``"computer_mouse#Usage"`` -> ``"Computer mouse"``)."""
    title = html.unescape(title).split("#", 1)[0].replace("_", " ")
    title = " ".join(title.split()).lstrip(":").strip()
    return title[:1].upper() + title[1:]


class Namespaces:
    """Classifies link targets by prefix: the dump's namespaces, English aliases, interwiki and languages."""

    def __init__(self, names: dict[str, int] | None = None):
        self.names = dict(_NS_ALIASES)
        for name, key in (names or {}).items():
            self.names[name.lower()] = key

    def classify(self, target: str) -> str:
        """``drop`` (file/category/interlanguage: no text), ``text`` (names no article) or ``entity``."""
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
    return sum(1 for _ in itertools.takewhile(lambda c: c.isalpha() and c.islower(), text))


def _walk(nodes, out: list[str], links: list | None, ns: Namespaces, stats: Counter) -> None:
    """Append the text of ``nodes`` to ``out`` and, unless ``links`` is ``None``, their article links to it."""
    N = require("mwparserfromhell").nodes
    pos = sum(len(s) for s in out)
    pending = None  # index of a link that a following link trail may extend
    for node in nodes:
        text, link = "", None  # Template, Comment, Heading, Argument: dropped
        if isinstance(node, N.Text):
            text = node.value
            if pending is not None and links is not None:  # pending: a link appended to links
                links[pending][1] += _link_trail(text)
        elif isinstance(node, N.Wikilink):
            text, link = _wikilink_text(node, pos, links, ns, stats)
        elif isinstance(node, N.Tag):
            text = _tag_text(node, pos, links, ns, stats)
        elif isinstance(node, N.HTMLEntity):
            text = node.normalize()
        elif isinstance(node, N.ExternalLink) and node.title is not None and str(node.title).strip():
            text = _text_of(node.title.nodes, ns, stats)
        pending = link
        out.append(text)
        pos += len(text)


def _text_of(nodes, ns: Namespaces, stats: Counter) -> str:
    """The text of ``nodes`` without their links (the display text of a link, an external link's title)."""
    sub: list[str] = []
    _walk(nodes, sub, None, ns, stats)
    return "".join(sub)


def _wikilink_text(node, pos: int, links: list | None, ns: Namespaces, stats: Counter) -> tuple[str, int | None]:
    """A wikilink's display text ("" if hidden) and the index in ``links`` of the article link added at ``pos``."""
    target = str(node.title).strip()
    kind = ns.classify(target)
    if kind == "drop":
        return "", None
    if node.text is None:
        display = target.lstrip(":")
    elif not str(node.text).strip():  # pipe trick [[Foo (bar)|]]
        display = re.sub(r"\s*\([^)]*\)\s*$", "", target.lstrip(":").split(":", 1)[-1])
    else:
        display = _text_of(node.text.nodes, ns, stats)
    if kind == "entity" and links is not None and display.strip():
        links.append([pos, pos + len(display), normalize_title(target)])
        return display, len(links) - 1
    if kind == "text":
        stats["links_dropped_non_article_target"] += 1
    return display, None


def _tag_text(node, pos: int, links: list | None, ns: Namespaces, stats: Counter) -> str:
    """A tag's text: "" for tags without running text, a space for ``<br>``; its links are added at ``pos``."""
    tag = str(node.tag).strip().lower()
    if tag in _DROP_TAGS or node.wiki_markup == "{|":
        return ""
    if tag == "br":
        return " "
    if node.contents is None or node.self_closing:
        return ""
    sub: list[str] = []
    sub_links: list = []
    _walk(node.contents.nodes, sub, sub_links if links is not None else None, ns, stats)
    if links is not None:
        links.extend([link[0] + pos, link[1] + pos, link[2]] for link in sub_links)
    return "".join(sub)


def _clean_line(line: str, links: list) -> tuple[str, list]:
    """Delete leftovers (``''``, ``__TOC__``, empty brackets), collapse whitespace, drop spaces before
    closing punctuation and after opening brackets; link offsets follow the edits."""
    keep = [True] * len(line)
    for m in _CLEAN_DELETE.finditer(line):
        keep[m.start() : m.end()] = [False] * (m.end() - m.start())
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
    """Wikitext -> ``(lines, page_links)``: ``[(text, [[start, end, title], ...]), ...]`` per non-empty line
    (templates, refs, tables, files, categories, headings, comments dropped; links' display text kept), and
    every article linked from the page, templates and tables included."""
    mw = require("mwparserfromhell")
    stats = Counter() if stats is None else stats
    ns = Namespaces(namespaces)
    code = mw.parse(wikitext)
    out: list[str] = []
    links: list = []
    _walk(code.nodes, out, links, ns, stats)
    text = "".join(out)
    targets = (str(link.title).strip() for link in code.filter_wikilinks())
    page_links = {normalize_title(target) for target in targets if ns.classify(target) == "entity"}
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
