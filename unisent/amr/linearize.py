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
metadata, one graph per blank-line separated block, and yield :class:`LinearizedAMR` tuples
``(id, metadata, graph)``. A malformed graph does not stop the iteration: it is recorded as an
:class:`AMRError` (its id, file, line and the penman error), appended to ``errors`` when a list is
given or logged as a warning otherwise, and the next graph is processed.
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Literal, NamedTuple

import penman
from penman.exceptions import PenmanError
from penman.model import Model

from ..resources import AMR_ADDITIONS, AMR_PREDICATES
from .symbols import read_counts, read_symbols, select_symbols

__all__ = [
    "AMRError",
    "LinearizedAMR",
    "PenmanBlock",
    "STYLES",
    "Style",
    "authors_vocabulary",
    "iter_penman_blocks",
    "linearize",
    "linearize_blocks",
    "linearize_file",
    "linearize_string",
    "linearize_tokens",
    "parse_metadata",
]

logger = logging.getLogger(__name__)

#: ``"clean"`` (default) or ``"authors"`` (MSE-AMR's ``amr/IO.py``); see the module docstring.
Style = Literal["clean", "authors"]
STYLES: tuple[str, ...] = ("clean", "authors")

# ``~e.3``, ``~3,4``: surface alignments at the end of a concept, role or literal
_ALIGNMENT = re.compile(r"~(?:[A-Za-z]\.?)?\d+(?:,\d+)*$")
# ``::key value`` in a comment line; a value runs to the next `` ::key`` or the end of the line
_METADATA = re.compile(r"(?:^|\s)::(\S+)(?:[ \t]+(.*?))?(?=\s+::\S|\s*$)")


@dataclass(frozen=True)
class PenmanBlock:
    """One graph of a PENMAN file, not yet parsed.

    Attributes:
        id: ``# ::id`` or, without one, ``#N`` (N: 1-based position of the graph in its source).
        metadata: the ``# ::key value`` pairs of the comment lines before the graph.
        graph: the graph text (comment lines removed).
        source: file name (or ``<string>``).
        line: 1-based line where the graph text starts.
    """

    id: str
    metadata: dict[str, str]
    graph: str
    source: str
    line: int


class LinearizedAMR(NamedTuple):
    """``(id, metadata, graph)``: a graph's id, its ``# ::`` metadata and its linearisation."""

    id: str
    metadata: dict[str, str]
    graph: str


@dataclass(frozen=True)
class AMRError:
    """A graph that could not be read: where it is and why (penman's error message)."""

    id: str
    source: str
    line: int
    message: str
    metadata: dict[str, str] = field(default_factory=dict, compare=False, repr=False)

    def __str__(self) -> str:
        return f"{self.source}:{self.line}: graph {self.id}: {self.message}"


def parse_metadata(lines: list[str] | str) -> dict[str, str]:
    """``# ::id a.1 ::date 2012`` -> ``{"id": "a.1", "date": "2012"}``; a key without value maps to ``""``.

    Comment lines without ``::key`` are ignored; a later key overrides an earlier one.
    """
    if isinstance(lines, str):
        lines = lines.splitlines()
    metadata: dict[str, str] = {}
    for line in lines:
        text = line.strip()
        if not text.startswith("#"):
            continue
        for match in _METADATA.finditer(text.lstrip("#")):
            metadata[match.group(1)] = (match.group(2) or "").strip()
    return metadata


def iter_penman_blocks(text: str, source: str = "<string>") -> Iterator[PenmanBlock]:
    """Split PENMAN text into graphs: blocks separated by blank lines; leading ``#`` lines are metadata.

    A block of comments only (a file header) is skipped unless it carries ``::id`` or ``::snt``, in
    which case it is yielded with an empty ``graph`` (reported as an error by the linearisers).
    """
    lines = text.splitlines()
    n = 0
    i = 0
    while i < len(lines):
        if not lines[i].strip():
            i += 1
            continue
        start = i
        while i < len(lines) and lines[i].strip():
            i += 1
        block = lines[start:i]
        k = 0
        while k < len(block) and block[k].lstrip().startswith("#"):
            k += 1
        metadata = parse_metadata(block[:k])
        graph = "\n".join(block[k:])
        if not graph and not ({"id", "snt"} & metadata.keys()):
            continue
        n += 1
        yield PenmanBlock(metadata.get("id") or f"#{n}", metadata, graph, source, start + k + 1)


# --------------------------------------------------------------------------------------- one graph
def _strip_alignment(text: str) -> str:
    return _ALIGNMENT.sub("", text)


def _as_tree(graph: str | penman.Tree | penman.Graph) -> penman.Tree:
    if isinstance(graph, penman.Tree):
        return graph
    if isinstance(graph, penman.Graph):
        return penman.configure(graph)
    trees = list(penman.iterparse(graph))
    if len(trees) != 1:
        raise ValueError(
            f"expected one graph, found {len(trees)}"
            + ("; separate graphs with a blank line" if len(trees) > 1 else "")
        )
    return trees[0]


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


# ------------------------------------------------------------------------------ the authors' style
_AUTHORS_MIN_COUNT = 5  # AMRTokens.pred_min
# amr/IO.py's AMRTokens also holds these special tokens (none occurs in a parsed graph; kept so that
# the membership test is the same)
_SPECIAL_TOKENS = ("<pointer>", "<stop>", "<lit>", "</lit>", "<backr:src:XXX>", "<backr:trg:XXX>")
_QUOTED = re.compile(r'(".+?")')
_BRACKET_OR_SLASH = re.compile(r"([()/])")
_SENSE = re.compile(r".+-\d\d")


@lru_cache(maxsize=1)
def authors_vocabulary() -> frozenset[str]:
    """The token set of MSE-AMR's linearisation (``AMRTokens.tokens`` of their ``amr/IO.py``).

    The frames of their ``predicates.txt`` counted at least 5 times, their ``additions.txt`` (relations,
    ``-of``, sense suffixes ``-00`` ... ``-98``, special concepts) and their special tokens
    (``<pointer:0>`` ... ``<pointer:511>``, ``<lit>``, ...). Both lists ship with unisent, unchanged
    (``unisent/resources/amr_predicates.tsv`` and ``amr_additions.txt``; source and licence in that
    folder's ``LICENSE.md``), so the authors' style needs no download.
    """
    tokens = set(select_symbols(read_counts(AMR_PREDICATES), _AUTHORS_MIN_COUNT)) | set(read_symbols(AMR_ADDITIONS))
    tokens.update(_SPECIAL_TOKENS)
    tokens.update(f"<pointer:{i}>" for i in range(512))
    return frozenset(tokens)


def _authors_graph(graph: str | penman.Tree | penman.Graph, *, drop_wiki: bool) -> penman.Graph:
    """The graph as the authors' ``load(dereify=True, remove_wiki=drop_wiki)`` returns it.

    Triples come from penman's base :class:`~penman.model.Model` (inverse roles de-inverted). Their
    ``:wiki`` removal keeps the other triples in order and builds a new ``penman.Graph`` from them,
    without the layout information (epidata) of the original and with the first triple's source as
    top; :func:`penman.encode` then lays the graph out anew (difference (b) of the module docstring).
    Without ``:wiki`` removal the graph keeps its layout, as theirs does.
    """
    if isinstance(graph, penman.Graph):
        decoded = graph
    else:
        decoded = penman.layout.interpret(_as_tree(graph), Model())
    if not drop_wiki:  # their linearize() encodes a copy without metadata (no comment lines)
        return penman.Graph(list(decoded.triples), top=decoded.top, epidata=dict(decoded.epidata))
    return penman.Graph([triple for triple in decoded.triples if triple[1] != ":wiki"])


def _authors_pieces(encoded: str) -> list[str]:
    """Split penman's one-line encoding as the authors do (``_tokenize_encoded_graph``).

    A quoted string without whitespace stays one piece, quotes included; everything else is split on
    whitespace and then around ``(``, ``)``, ``/`` and before ``:``, so a quoted string with inner
    whitespace falls apart into pieces that keep their quote characters.
    """
    pieces: list[str] = []
    for piece in _QUOTED.sub(r" \1 ", encoded).split():
        if piece.startswith('"') and piece.endswith('"'):
            pieces.append(piece)
        else:
            pieces.extend(_BRACKET_OR_SLASH.sub(r" \1 ", piece).replace(":", " :").split())
    return pieces


def _authors_nodes(pieces: list[str]) -> list[str]:
    """Variables -> concepts (the authors' ``use_pointer_tokens=True`` path).

    ``( x / concept`` becomes ``( concept``; a variable right after a role (a re-entrancy) becomes its
    concept. Variables are the pieces just before a ``/``, each mapped to the piece after it.
    """
    concept_of = {pieces[i - 1]: pieces[i + 1] for i in range(1, len(pieces) - 1) if pieces[i] == "/"}
    out = pieces[:1]
    i = 1
    while i < len(pieces):
        piece = pieces[i]
        if piece in concept_of:
            if out[-1] == "(" and i + 1 < len(pieces) and pieces[i + 1] == "/":
                piece = concept_of[piece]
                i += 2
            elif out[-1].startswith(":"):
                piece = concept_of[piece]
        out.append(piece)
        i += 1
    return out


def _authors_split(token: str, vocabulary: frozenset[str]) -> list[str]:
    """One node token -> its output tokens (the authors' ``linearize``; difference (a) and (c))."""
    if token.startswith('"') and token.endswith('"'):
        return [token[1:-1].replace("_", " ")]
    is_relation = token.startswith(":") and len(token) > 1
    is_special = token.startswith("<") and token.endswith(">")
    is_inverse = token.startswith(":") and token.endswith("-of")
    is_frame = _SENSE.match(token) is not None
    if not (is_relation or is_special or is_frame or is_inverse) or token in vocabulary:
        return [token]
    if is_frame:  # the last three characters, as theirs (``tame-01`` -> ``tame -01``)
        return [token[:-3], token[-3:]]
    if is_inverse:
        relation = token[:-3]
        return [relation, "-of"] if relation in vocabulary else [":", relation[1:], "-of"]
    if is_relation:
        return [":", token[1:]]
    raise ValueError(
        f"token {token!r} looks like a special token <...> outside the authors' vocabulary; "
        "their linearize() fails on it (a bare `raise`)"
    )


def _authors_tokens(graph: str | penman.Tree | penman.Graph, *, drop_wiki: bool) -> list[str]:
    """The authors' linearisation of one graph as tokens (with parentheses)."""
    encoded = penman.encode(_authors_graph(graph, drop_wiki=drop_wiki), indent=-1)
    vocabulary = authors_vocabulary()
    return [out for token in _authors_nodes(_authors_pieces(encoded)) for out in _authors_split(token, vocabulary)]


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
        ValueError: an unknown style, the text holds no or several graphs, or a node has no concept.
    """
    _check_style(style, quote_strings)
    if style == "authors":
        tokens = _authors_tokens(graph, drop_wiki=drop_wiki)
        return tokens if parentheses else [t for t in tokens if t not in ("(", ")")]
    pairs = _walk(_as_tree(graph), drop_wiki=drop_wiki, quote_strings=quote_strings)
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
def _error(block: PenmanBlock, err: Exception) -> AMRError:
    if isinstance(err, penman.DecodeError):
        line = block.line + (err.lineno - 1 if err.lineno else 0)
        where = f" (character {err.offset} of line {line})" if err.offset is not None else ""
        message = f"DecodeError: {err.message}{where}"
    else:
        line = block.line
        message = f"{type(err).__name__}: {err}"
    return AMRError(block.id, block.source, line, message, dict(block.metadata))


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
        except (PenmanError, ValueError) as err:
            error = _error(block, err)
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
