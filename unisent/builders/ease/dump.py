"""Streaming a MediaWiki XML dump (``.xml.bz2`` or ``.xml``) page by page on `mwxml
<https://pythonhosted.org/mwxml/>`_, clearing the root after every page (mwxml leaves each emptied
``<page>`` under it: 2 GB over English Wikipedia; mwxml issue #23). Not Wikipedia2Vec's ``DumpDB``: it
converts the whole dump first, cannot resume, and its text and link offsets differ from ``wikitext``."""

from __future__ import annotations

import bz2
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from pathlib import Path
from typing import NamedTuple

from ._extra import require

__all__ = ["DumpPage", "iter_dump"]


class DumpPage(NamedTuple):
    """One ``<page>``: title, namespace key, redirect target (or ``None``), wikitext of its last revision."""

    title: str
    ns: int
    redirect: str | None
    text: str


def iter_dump(path: str | Path, skip: int = 0) -> Iterator[tuple[str, object]]:
    """Yield ``("namespaces", {name: key})`` once, then ``("page", DumpPage)`` per ``<page>``; the first
    ``skip`` pages are read past without their text as ``("skipped", None)`` (page numbers stay the dump's)."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"dump not found: {path}")
    mwxml = require("mwxml")
    from mwxml.element_iterator import ElementIterator
    from mwxml.errors import MalformedXML

    with bz2.open(path, "rb") if path.suffix == ".bz2" else path.open("rb") as fh:
        try:
            root = ElementIterator.from_file(fh)
            if root.tag != "mediawiki":
                raise ValueError(
                    f"dump {path}: the root element is <{root.tag}>, not <mediawiki>; is it a "
                    "MediaWiki XML dump (pages-articles.xml.bz2)?"
                )
            dump = mwxml.Dump.from_element(root)
            names = {
                ns.name.strip(): int(ns.id) for ns in dump.site_info.namespaces or () if ns.name and ns.name.strip()
            }
            yield "namespaces", names
            for index, page in enumerate(dump.pages):
                if index < skip:
                    yield "skipped", None
                else:
                    text = None
                    for revision in page:  # the last revision (pages-articles dumps have one)
                        text = revision.text
                    yield "page", DumpPage(page.title or "", int(page.namespace or 0), page.redirect, text or "")
                root.element.clear()  # mwxml keeps the cleared <page> elements under the root
        except ET.ParseError as err:
            # mwxml re-raises an error in the first element without its position
            line, col = getattr(err, "position", (1, 0))
            raise ValueError(f"dump {path}, line {line}, column {col}: malformed XML ({str(err)[:300]})") from None
        except MalformedXML as err:
            raise ValueError(f"dump {path}: not a MediaWiki XML dump ({err})") from None
