"""Reading PENMAN text: graphs as blocks with their ``# ::key value`` metadata, one graph as a penman
tree, its nesting depth checked before parsing, and the record of a graph that cannot be read."""

from __future__ import annotations

import itertools
import re
from collections.abc import Iterator
from dataclasses import dataclass, field

import penman

__all__ = ["MAX_DEPTH", "AMRError", "PenmanBlock", "as_tree", "block_error", "check_depth", "iter_penman_blocks"]

# ``::key value`` in a comment line; a value runs to the next `` ::key`` or the end of the line
_METADATA = re.compile(r"(?:^|\s)::(\S+)(?:[ \t]+(.*?))?(?=\s+::\S|\s*$)")
# a quoted string (its parentheses are text) or a parenthesis
_NESTING = re.compile(r'"(?:[^"\\]|\\.)*"|[()]')
#: the deepest nesting a graph may have (real ones nest a few tens of levels): penman parses recursively,
#: so a deeper graph is refused before parsing rather than exhausting Python's stack
MAX_DEPTH = 200


@dataclass(frozen=True)
class PenmanBlock:
    """One graph of a PENMAN file, not yet parsed: ``id`` is ``# ::id`` or ``#N`` (its 1-based position),
    ``metadata`` its ``# ::key value`` pairs, ``graph`` the text without comments, starting at ``line``."""

    id: str
    metadata: dict[str, str]
    graph: str
    source: str
    line: int


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


def parse_metadata(lines: list[str]) -> dict[str, str]:
    """``# ::id a.1 ::date 2012`` -> ``{"id": "a.1", "date": "2012"}`` (a key without value: ``""``; a
    later key overrides an earlier one)."""
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
    A block of comments only is skipped unless it carries ``::id`` or ``::snt`` (then its ``graph`` is
    empty, an error for the linearisers)."""
    n = 0
    runs = itertools.groupby(enumerate(text.splitlines()), key=lambda numbered: bool(numbered[1].strip()))
    for nonblank, run in runs:
        if not nonblank:
            continue
        numbered = list(run)
        start, block = numbered[0][0], [line for _, line in numbered]
        k = next((j for j, line in enumerate(block) if not line.lstrip().startswith("#")), len(block))
        metadata = parse_metadata(block[:k])
        graph = "\n".join(block[k:])
        if not graph and not ({"id", "snt"} & metadata.keys()):
            continue
        n += 1
        yield PenmanBlock(metadata.get("id") or f"#{n}", metadata, graph, source, start + k + 1)


def check_depth(graph: str) -> None:
    """``ValueError`` for PENMAN text nesting deeper than ``MAX_DEPTH`` (parentheses outside strings)."""
    depth = deepest = 0
    for match in _NESTING.finditer(graph):
        token = match.group(0)
        if token == "(":
            depth += 1
            if depth > deepest:
                deepest = depth
                if deepest > MAX_DEPTH:
                    levels = graph.count("(")
                    raise ValueError(
                        f"the graph nests deeper than {MAX_DEPTH} levels (up to {levels} opening parentheses), "
                        "the limit of an AMR graph"
                    )
        elif token == ")":
            depth -= 1


def as_tree(graph: str | penman.Tree | penman.Graph) -> penman.Tree:
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


def block_error(block: PenmanBlock, err: Exception) -> AMRError:
    if isinstance(err, penman.DecodeError):
        line = block.line + (err.lineno - 1 if err.lineno else 0)
        where = f" (character {err.offset} of line {line})" if err.offset is not None else ""
        message = f"DecodeError: {err.message}{where}"
    else:
        line = block.line
        message = f"{type(err).__name__}: {err}"
    return AMRError(block.id, block.source, line, message, dict(block.metadata))
