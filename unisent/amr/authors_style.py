"""The authors' linearisation style (``style="authors"`` of ``unisent.amr.linearize.linearize``): the
exact strings of MSE-AMR's ``amr/IO.py`` (``load(dereify=True, remove_wiki=True)`` then
``linearize(graph, use_pointer_tokens=True, drop_parentheses=False)``), and their token set
(``authors_vocabulary``). How it differs from the clean style is in ``unisent.amr.linearize``.
"""

from __future__ import annotations

import re
from functools import lru_cache

import penman
from penman.layout import interpret
from penman.model import Model

from ..resources import AMR_ADDITIONS, AMR_PREDICATES
from .penman_blocks import as_tree
from .symbols import read_counts, read_symbols, select_symbols

__all__ = ["authors_tokens", "authors_vocabulary"]

_AUTHORS_MIN_COUNT = 5  # AMRTokens.pred_min
# amr/IO.py's AMRTokens also holds these (none occurs in a parsed graph; kept for the same membership test)
_SPECIAL_TOKENS = ("<pointer>", "<stop>", "<lit>", "</lit>", "<backr:src:XXX>", "<backr:trg:XXX>")
_QUOTED = re.compile(r'(".+?")')
_BRACKET_OR_SLASH = re.compile(r"([()/])")
_SENSE = re.compile(r".+-\d\d")


@lru_cache(maxsize=1)
def authors_vocabulary() -> frozenset[str]:
    """The token set of MSE-AMR's linearisation (``AMRTokens.tokens`` of their ``amr/IO.py``): the frames
    of their ``predicates.txt`` counted at least 5 times, their ``additions.txt`` and their special tokens
    (``<pointer:0>`` ... ``<pointer:511>``, ``<lit>``, ...). Both lists ship unchanged in
    ``unisent/resources`` (licence in its ``LICENSE.md``), so the authors' style needs no download.
    """
    tokens = set(select_symbols(read_counts(AMR_PREDICATES), _AUTHORS_MIN_COUNT)) | set(read_symbols(AMR_ADDITIONS))
    tokens.update(_SPECIAL_TOKENS)
    tokens.update(f"<pointer:{i}>" for i in range(512))
    return frozenset(tokens)


def _authors_graph(graph: str | penman.Tree | penman.Graph, *, drop_wiki: bool) -> penman.Graph:
    """The graph as the authors' ``load(dereify=True, remove_wiki=drop_wiki)`` returns it: triples from penman's base
    ``Model``; their ``:wiki`` removal builds a new graph without the original's layout (epidata), so ``penman.encode``
    lays it out anew (difference (b) of ``unisent.amr.linearize``)."""
    decoded = graph if isinstance(graph, penman.Graph) else interpret(as_tree(graph), Model())
    if not drop_wiki:  # their linearize() encodes a copy without metadata (no comment lines)
        return penman.Graph(list(decoded.triples), top=decoded.top, epidata=dict(decoded.epidata))
    return penman.Graph([triple for triple in decoded.triples if triple[1] != ":wiki"])


def _authors_pieces(encoded: str) -> list[str]:
    """Split penman's one-line encoding as the authors' ``_tokenize_encoded_graph`` does (a quoted string
    with inner whitespace falls apart into pieces that keep their quote characters)."""
    pieces: list[str] = []
    for piece in _QUOTED.sub(r" \1 ", encoded).split():
        if piece.startswith('"') and piece.endswith('"'):
            pieces.append(piece)
        else:
            pieces.extend(_BRACKET_OR_SLASH.sub(r" \1 ", piece).replace(":", " :").split())
    return pieces


def _authors_nodes(pieces: list[str]) -> list[str]:
    """Variables -> concepts (the authors' ``use_pointer_tokens=True`` path): ``( x / concept`` becomes
    ``( concept``; a variable right after a role (a re-entrancy) becomes its concept."""
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


def authors_tokens(graph: str | penman.Tree | penman.Graph, *, drop_wiki: bool) -> list[str]:
    """The authors' linearisation of one graph as tokens (with parentheses)."""
    encoded = penman.encode(_authors_graph(graph, drop_wiki=drop_wiki), indent=-1)
    vocabulary = authors_vocabulary()
    return [out for token in _authors_nodes(_authors_pieces(encoded)) for out in _authors_split(token, vocabulary)]
