"""AMR graphs in PENMAN notation -> variable-free token sequences for a text encoder.

The linearisation follows Cai et al. (2022), "Retrofitting Multilingual Sentence Embeddings with
Abstract Meaning Representation", Section 4.1, and the authors' code (jcyk/MSE-AMR, ``amr/IO.py``):

* depth-first from the root, in the order the branches are written in the PENMAN text;
* every node opens ``(`` and closes ``)``, so parentheses mark depth; a node is written as its concept
  and then its ``role target`` pairs;
* no variables: a re-entrant node (a variable used again, before or after the node that defines it) is
  written as its bare concept, without parentheses and without its subtree ("simply repeat the nodes
  when re-visiting happens": re-entrancy information is deliberately lost);
* ``:wiki`` branches are dropped (as the authors' ``remove_wiki``);
* literals: numbers and symbols (``-`` polarity, ``imperative``, ``+``) are written as they are;
  strings lose their quotes (``"Nature"`` -> ``Nature``), as in the authors' code; a string with an
  inner space stays a run of words. ``quote_strings=True`` keeps the quotes instead;
* alignment markers (``~e.3``) are removed from concepts, roles and literals;
* tokens are separated by single spaces and ``(`` / ``)`` are tokens of their own, so the string splits
  on whitespace into parentheses, roles (``:ARG0``, ``:ARG0-of`` as written in the graph), concepts and
  literals. With ``parentheses=False`` the ``(`` / ``)`` tokens are left out.

Example (Little Prince ``lpp_1943.3``)::

    (p / picture :domain (i / it) :topic (b2 / boa :mod (c2 / constrictor)
                 :ARG0-of (s / swallow-01 :ARG1 (a / animal))))
    -> ( picture :domain ( it ) :topic ( boa :mod ( constrictor ) :ARG0-of ( swallow-01 :ARG1 ( animal ) ) ) )

Two styles (``style=``):

* ``"clean"`` (default): the rules above, on penman's tree as written in the file.
* ``"authors"``: the exact strings of MSE-AMR's ``amr/IO.py`` (``load(dereify=True, remove_wiki=True)``
  then ``linearize(graph, use_pointer_tokens=True, drop_parentheses=False)``), for users reproducing
  the authors' models. It differs from ``"clean"`` in three ways, each reproduced here:

  (a) tokens are split against the authors' vocabulary (their lists ship in ``unisent/resources``,
      see :func:`authors_vocabulary`): an inverse role ``:ARG1-of`` -> ``:ARG1 -of`` (``: foo -of`` when
      ``:foo`` is unknown), a frame outside the vocabulary ``tame-01`` -> ``tame -01``, an unknown
      relation ``:foo`` -> ``: foo``;
  (b) their ``:wiki`` removal rebuilds every graph from its triples, which loses penman's layout:
      penman lays the graph out again from the triple order, so a re-entrant node's subtree is
      written where the node first occurs and an edge that pointed back to it can move inside it,
      flipped to ``-of``: ``(s / say-01 :ARG0 (i / i) :ARG2 i)`` -> ``( say-01 :ARG0 ( i :ARG2 -of
      say-01 ) )`` (clean: ``( say-01 :ARG0 ( i ) :ARG2 i )``); 218 of the 2,979 Little Prince graphs;
  (c) inside a quoted string ``_`` becomes a space (``"New_York"`` -> ``New York``); a string with an
      inner space (``"New York"``) keeps its quote characters (``"New York"``), because their
      tokeniser splits it on the space first.

  The authors' style relies on penman's layout algorithm: the Little Prince references were made with
  penman 1.3.1 and are reproduced exactly with it (``tests/test_amr_linearize_authors.py``).

Corpora: :func:`linearize_file` / :func:`linearize_string` read PENMAN text with ``# ::key value``
metadata, one graph per blank-line separated block (:mod:`unisent.amr.penman_blocks`), and yield
:class:`LinearizedAMR` tuples ``(id, metadata, graph)``. A malformed graph does not stop the iteration:
it is recorded as an :class:`~unisent.amr.penman_blocks.AMRError` (its id, file, line and the penman
error), appended to ``errors`` when a list is given or logged as a warning otherwise, and the next
graph is processed. The authors' style is :mod:`unisent.amr.authors_style`.
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Literal, NamedTuple

import penman
from penman.exceptions import PenmanError

from .authors_style import authors_tokens
from .penman_blocks import MAX_DEPTH, AMRError, PenmanBlock, as_tree, block_error, check_depth, iter_penman_blocks

__all__ = [
    "STYLES",
    "LinearizedAMR",
    "Style",
    "linearize",
    "linearize_blocks",
    "linearize_file",
    "linearize_string",
    "linearize_tokens",
]

logger = logging.getLogger(__name__)

#: ``"clean"`` (default) or ``"authors"`` (MSE-AMR's ``amr/IO.py``); see the module docstring.
Style = Literal["clean", "authors"]
STYLES: tuple[str, ...] = ("clean", "authors")

# ``~e.3``, ``~3,4``: surface alignments at the end of a concept, role or literal
_ALIGNMENT = re.compile(r"~(?:[A-Za-z]\.?)?\d+(?:,\d+)*$")


class LinearizedAMR(NamedTuple):
    """``(id, metadata, graph)``: a graph's id, its ``# ::`` metadata and its linearisation."""

    id: str
    metadata: dict[str, str]
    graph: str


# --------------------------------------------------------------------------------------- one graph
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
    """The linearisation as ``(kind, text)`` pairs; kinds: open, close, concept, role, reentrancy,
    string, constant."""
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


def _check_style(style: str, quote_strings: bool) -> None:
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
    """The linearisation of one graph as a token list (see the module docstring for the rules).

    Args:
        graph: PENMAN text of exactly one graph (metadata comments allowed), a ``penman.Tree`` or a
            ``penman.Graph``.
        style: ``"clean"`` (default) or ``"authors"`` (MSE-AMR's ``amr/IO.py`` strings exactly; a token
            of that style may hold spaces: a quoted string whose ``_`` became spaces).
        parentheses: write ``(`` and ``)`` around every node (default) or leave them out (the
            authors' ``drop_parentheses``).
        drop_wiki: leave out ``:wiki`` branches (default).
        quote_strings: keep the double quotes of string literals (default: removed; clean style only).

    Raises:
        penman.DecodeError: the text is not valid PENMAN.
        ValueError: an unknown style, the text holds no or several graphs, a node has no concept, or the
            nodes nest deeper than :data:`MAX_DEPTH`.
    """
    _check_style(style, quote_strings)
    if isinstance(graph, str):
        check_depth(graph)
    if style == "authors":
        tokens = authors_tokens(graph, drop_wiki=drop_wiki)
        return tokens if parentheses else [t for t in tokens if t not in ("(", ")")]
    pairs = _walk(as_tree(graph), drop_wiki=drop_wiki, quote_strings=quote_strings)
    return [text for kind, text in pairs if parentheses or kind not in ("open", "close")]


def linearize(
    graph: str | penman.Tree | penman.Graph,
    *,
    style: Style = "clean",
    parentheses: bool = True,
    drop_wiki: bool = True,
    quote_strings: bool = False,
) -> str:
    """The linearisation of one graph: :func:`linearize_tokens` joined by single spaces.

    ``linearize("(w / want-01 :ARG0 (b / boy) :ARG1 (g / go-02 :ARG0 b))")`` is
    ``"( want-01 :ARG0 ( boy ) :ARG1 ( go-02 :ARG0 boy ) )"``; with ``style="authors"``, a graph with
    ``:ARG0-of`` or a rare frame gives ``:ARG0 -of`` and ``tame -01`` (see the module docstring).
    """
    return " ".join(
        linearize_tokens(graph, style=style, parentheses=parentheses, drop_wiki=drop_wiki, quote_strings=quote_strings)
    )


# ------------------------------------------------------------------------------------------ corpora
def linearize_blocks(
    blocks: Iterable[PenmanBlock],
    *,
    errors: list[AMRError] | None = None,
    style: Style = "clean",
    parentheses: bool = True,
    drop_wiki: bool = True,
    quote_strings: bool = False,
) -> Iterator[tuple[PenmanBlock, str]]:
    """Linearise each block of :func:`iter_penman_blocks`; yields ``(block, linearisation)``.

    A malformed graph (a penman parse error, several graphs without a blank line between them,
    metadata without a graph, a node without a concept) is skipped: its :class:`AMRError` is appended
    to ``errors`` when a list is given, otherwise logged as a warning. The other graphs are still
    yielded. ``style`` and the other settings: see :func:`linearize_tokens` (an unknown style raises
    ``ValueError`` on the first iteration).
    """
    _check_style(style, quote_strings)
    for block in blocks:
        try:
            if not block.graph.strip():
                raise ValueError("metadata without a graph")
            graph = linearize(
                block.graph, style=style, parentheses=parentheses, drop_wiki=drop_wiki, quote_strings=quote_strings
            )
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
    text: str,
    *,
    source: str = "<string>",
    errors: list[AMRError] | None = None,
    style: Style = "clean",
    parentheses: bool = True,
    drop_wiki: bool = True,
    quote_strings: bool = False,
) -> Iterator[LinearizedAMR]:
    """Linearise every graph of PENMAN ``text``; yields ``(id, metadata, graph)`` in file order.

    Malformed graphs are skipped and reported as in :func:`linearize_blocks`.
    """
    for block, graph in linearize_blocks(
        iter_penman_blocks(text, source),
        errors=errors,
        style=style,
        parentheses=parentheses,
        drop_wiki=drop_wiki,
        quote_strings=quote_strings,
    ):
        yield LinearizedAMR(block.id, block.metadata, graph)


def linearize_file(
    path: str | os.PathLike,
    *,
    errors: list[AMRError] | None = None,
    style: Style = "clean",
    parentheses: bool = True,
    drop_wiki: bool = True,
    quote_strings: bool = False,
) -> Iterator[LinearizedAMR]:
    """:func:`linearize_string` over a PENMAN file (UTF-8); errors name the file and line.

    Raises:
        FileNotFoundError: at once (not on the first iteration) when ``path`` is not a file.
        ValueError: at once for an unknown ``style`` (or ``quote_strings`` with the authors' style).
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"AMR file {str(path)!r} does not exist")
    _check_style(style, quote_strings)
    return linearize_string(
        path.read_text(encoding="utf-8"),
        source=str(path),
        errors=errors,
        style=style,
        parentheses=parentheses,
        drop_wiki=drop_wiki,
        quote_strings=quote_strings,
    )
