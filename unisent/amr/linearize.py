"""AMR graphs in PENMAN notation -> variable-free token sequences for a text encoder.

The linearisation of Cai et al. (2022), "Retrofitting Multilingual Sentence Embeddings with Abstract
Meaning Representation", Section 4.1, and the authors' code (jcyk/MSE-AMR, ``amr/IO.py``); the full
rules, with examples, are in docs/methods/amr.md:

* depth-first from the root, branches in the order of the PENMAN text; every node is
  ``( concept role target ... )`` (``parentheses=False`` leaves ``(`` / ``)`` out);
* no variables: a re-entrant node is written as its bare concept, without its subtree (re-entrancy
  information is deliberately lost, as the authors do);
* ``:wiki`` branches are dropped; strings lose their quotes (``quote_strings=True`` keeps them);
  alignment markers (``~e.3``) are removed; tokens are separated by single spaces.

``style="authors"`` gives the exact strings of MSE-AMR's ``amr/IO.py`` (``unisent.amr.authors_style``), which differ in
three ways: (a) tokens are split against the authors' vocabulary (``:ARG1-of`` -> ``:ARG1 -of``, ``tame-01`` ->
``tame -01``, ``:foo`` -> ``: foo``); (b) their ``:wiki`` removal rebuilds every graph from its triples, so penman lays
it out anew and an edge back to a re-entrant node can move inside it, flipped to ``-of`` (218 of the 2,979 Little Prince
graphs); (c) ``_`` in a quoted string becomes a space. It relies on penman's layout: the references were made with
penman 1.3.1 (``tests/test_amr_linearize_authors.py``).
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, Literal, NamedTuple, TypedDict

import penman
from penman.exceptions import PenmanError

from ..data.file_checks import require_file
from .authors_style import authors_tokens
from .penman_blocks import MAX_DEPTH, AMRError, PenmanBlock, as_tree, block_error, check_depth, iter_penman_blocks

if TYPE_CHECKING:
    from typing_extensions import Unpack  # typing's from Python 3.11

__all__ = ["LinearizedAMR", "linearize", "linearize_blocks", "linearize_file", "linearize_string", "linearize_tokens"]

logger = logging.getLogger(__name__)

#: ``"clean"`` (default) or ``"authors"`` (MSE-AMR's ``amr/IO.py``).
Style = Literal["clean", "authors"]
STYLES: tuple[str, ...] = ("clean", "authors")

# ``~e.3``, ``~3,4``: surface alignments at the end of a concept, role or literal
_ALIGNMENT = re.compile(r"~(?:[A-Za-z]\.?)?\d+(?:,\d+)*$")


class LinearizeOptions(TypedDict, total=False):
    """The options every lineariser passes on to [`linearize_tokens`][unisent.amr.linearize_tokens] (its defaults)."""

    style: Style
    parentheses: bool
    drop_wiki: bool
    quote_strings: bool


class LinearizedAMR(NamedTuple):
    """``(id, metadata, graph)``: a graph's id, its ``# ::`` metadata and its linearisation."""

    id: str
    metadata: dict[str, str]
    graph: str


def _strip_alignment(text: str) -> str:
    return _ALIGNMENT.sub("", text)


def _unquote(literal: str) -> str:
    inner = literal[1:-1] if len(literal) >= 2 and literal.endswith('"') else literal[1:]
    return re.sub(r"\\(.)", r"\1", inner)


def _concepts(tree: penman.Tree) -> dict[str, str]:
    """variable -> concept for every node of the tree (the first definition wins)."""
    concepts: dict[str, str] = {}
    for var, branches in tree.nodes():
        concept = next((target for role, target in branches if role == "/"), None)
        if concept is None or not isinstance(concept, str) or not concept.strip():
            raise ValueError(f"node {var!r} has no concept")
        concepts.setdefault(var, _strip_alignment(concept))
    return concepts


def _walk(tree: penman.Tree, *, drop_wiki: bool, quote_strings: bool) -> list[tuple[str, str]]:
    """``(kind, text)`` pairs; kinds: open, close, concept, role, reentrancy, string, constant."""
    concepts = _concepts(tree)
    out: list[tuple[str, str]] = []

    def visit(node) -> None:
        var, branches = node
        own = next(target for role, target in branches if role == "/")  # _concepts checked it exists
        out.append(("open", "("))
        out.append(("concept", _strip_alignment(own)))
        for role, target in branches:
            if role == "/":
                continue
            role = _strip_alignment(role)
            if drop_wiki and role == ":wiki":
                continue
            out.append(("role", role))
            if isinstance(target, tuple):
                visit(target)
                continue
            atom = _strip_alignment(target)
            if atom.startswith('"'):
                text = _unquote(atom)
                out.append(("string", atom if quote_strings or not text.strip() else text))
            elif atom in concepts:
                out.append(("reentrancy", concepts[atom]))
            else:
                out.append(("constant", atom))
        out.append(("close", ")"))

    visit(tree.node)
    return out


def _check_style(style: str = "clean", quote_strings: bool = False, **_: object) -> None:
    if style not in STYLES:
        raise ValueError(f"style must be one of {', '.join(map(repr, STYLES))}, got {style!r}")
    if style == "authors" and quote_strings:
        raise ValueError(
            "quote_strings=True is an option of the clean style; the authors' style always "
            "removes the quotes of strings (as their amr/IO.py does)"
        )


def linearize_tokens(
    graph: str | penman.Tree | penman.Graph,
    *,
    style: Style = "clean",
    parentheses: bool = True,
    drop_wiki: bool = True,
    quote_strings: bool = False,
) -> list[str]:
    """The linearisation of one graph (PENMAN text of exactly one graph, a ``penman.Tree`` or a
    ``penman.Graph``) as a token list (rules in the module docstring). ``parentheses=False`` is the
    authors' ``drop_parentheses``; ``quote_strings`` is for the clean style only; an authors' token may
    hold spaces (a string whose ``_`` became spaces).

    Raises:
        penman.DecodeError: the text is not valid PENMAN.
        ValueError: an unknown style, the text holds no or several graphs, a node has no concept, or the
            nodes nest deeper than ``MAX_DEPTH``.
    """
    _check_style(style, quote_strings)
    if isinstance(graph, str):
        check_depth(graph)
    if style == "authors":
        tokens = authors_tokens(graph, drop_wiki=drop_wiki)
        return tokens if parentheses else [t for t in tokens if t not in ("(", ")")]
    pairs = _walk(as_tree(graph), drop_wiki=drop_wiki, quote_strings=quote_strings)
    return [text for kind, text in pairs if parentheses or kind not in ("open", "close")]


def linearize(graph: str | penman.Tree | penman.Graph, **options: Unpack[LinearizeOptions]) -> str:
    """The linearisation of one graph: [`linearize_tokens`][unisent.amr.linearize_tokens] joined by single spaces.

    ``linearize("(w / want-01 :ARG0 (b / boy) :ARG1 (g / go-02 :ARG0 b))")`` is
    ``"( want-01 :ARG0 ( boy ) :ARG1 ( go-02 :ARG0 boy ) )"``.
    """
    return " ".join(linearize_tokens(graph, **options))


def linearize_blocks(
    blocks: Iterable[PenmanBlock], *, errors: list[AMRError] | None = None, **options: Unpack[LinearizeOptions]
) -> Iterator[tuple[PenmanBlock, str]]:
    """Linearise each block of [`iter_penman_blocks`][unisent.amr.iter_penman_blocks]; yields
    ``(block, linearisation)``. A malformed graph is skipped: its [`AMRError`][unisent.amr.AMRError] is appended to
    ``errors`` if given, else logged as a warning."""
    _check_style(**options)
    for block in blocks:
        try:
            if not block.graph.strip():
                raise ValueError("metadata without a graph")
            graph = linearize(block.graph, **options)
        except (PenmanError, ValueError, RecursionError) as err:
            if isinstance(err, RecursionError):  # nested deeply enough to exhaust the stack despite the depth check
                err = ValueError(f"the graph nests too deeply to be read (the limit is {MAX_DEPTH} levels)")
            error = block_error(block, err)
            if errors is None:
                logger.warning("skipping malformed AMR graph: %s", error)
            else:
                errors.append(error)
            continue
        yield block, graph


def linearize_string(
    text: str, *, source: str = "<string>", errors: list[AMRError] | None = None, **options: Unpack[LinearizeOptions]
) -> Iterator[LinearizedAMR]:
    """Linearise every graph of PENMAN ``text``; yields ``(id, metadata, graph)`` in file order
    (malformed graphs: as in [`linearize_blocks`][unisent.amr.linearize_blocks])."""
    for block, graph in linearize_blocks(iter_penman_blocks(text, source), errors=errors, **options):
        yield LinearizedAMR(block.id, block.metadata, graph)


def linearize_file(
    path: str | os.PathLike, *, errors: list[AMRError] | None = None, **options: Unpack[LinearizeOptions]
) -> Iterator[LinearizedAMR]:
    """[`linearize_string`][unisent.amr.linearize_string] over a PENMAN file (UTF-8); errors name the file and line. A
    missing file or a bad ``style`` raises at once, not on the first iteration."""
    path = require_file(path, "AMR file")
    _check_style(**options)
    return linearize_string(path.read_text(encoding="utf-8"), source=str(path), errors=errors, **options)
