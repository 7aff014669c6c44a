"""AMR graphs (PENMAN files) -> linearised records: ``unisent data amr-linearize``."""

from __future__ import annotations

import sys
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Literal

from .nli_records import write_jsonl

__all__ = ["COMMANDS", "amr_records", "build_amr_linearize"]


def amr_records(
    paths: Iterable[str | Path],
    *,
    errors: list | None = None,
    style: Literal["clean", "authors"] = "clean",
    parentheses: bool = True,
    drop_wiki: bool = True,
    quote_strings: bool = False,
) -> Iterator[dict]:
    """One record per well-formed graph of the PENMAN files, in file order; malformed ones go to ``errors``.

    ``{"id", "text", "graph", "penman", "metadata"}``: ``# ::id``, ``# ::snt`` (else ``# ::tok``), the
    linearisation, the PENMAN text without comments (what ``PreParsedAMR`` reads) and every ``# ::`` field."""
    from ..amr.linearize import linearize_blocks
    from ..amr.penman_blocks import iter_penman_blocks
    from ..data.file_checks import require_file

    for path in paths:
        path = require_file(path, "AMR file")  # missing, a directory, a FIFO: one line, nothing read
        blocks = iter_penman_blocks(path.read_text(encoding="utf-8"), str(path))
        for block, graph in linearize_blocks(
            blocks,
            errors=errors,
            style=style,
            parentheses=parentheses,
            drop_wiki=drop_wiki,
            quote_strings=quote_strings,
        ):
            metadata = block.metadata
            yield {
                "id": block.id,
                "text": metadata.get("snt", metadata.get("tok")),
                "graph": graph,
                "penman": block.graph,
                "metadata": metadata,
            }


def build_amr_linearize(
    *,
    input: list[str],
    output: str,
    style: Literal["clean", "authors"] = "clean",
    parentheses: bool = True,
    keep_wiki: bool = False,
    quote_strings: bool = False,
    strict: bool = False,
) -> None:
    """AMR graphs (PENMAN with # ::snt) -> jsonl of {id, text, graph (linearised), penman, metadata}.

    Depth-first, without variables or :wiki. Malformed graphs are reported on stderr and skipped (exit
    status non-zero with --strict, or when no graph could be read: then nothing is written).

    Args:
        input: PENMAN file(s)
        output: jsonl to write
        style: clean (default) or authors: the exact strings of MSE-AMR's amr/IO.py (:ARG1 -of, tame -01,
            the layout rebuilt by their :wiki removal, _ -> space in strings; see docs/methods/amr.md)
        parentheses: keep the ( ) depth markers (--no-parentheses: leave them out)
        keep_wiki: keep :wiki branches (dropped by default)
        quote_strings: keep the quotes of string literals
        strict: exit non-zero when a graph is malformed
    """
    errors: list = []
    records = amr_records(
        input, errors=errors, style=style, parentheses=parentheses, drop_wiki=not keep_wiki, quote_strings=quote_strings
    )

    def some_graph() -> Iterator[dict]:
        """The records; none while graphs were malformed is an error (nothing written)."""
        n = 0
        for record in records:
            n += 1
            yield record
        if n == 0 and errors:
            more = f" (and {len(errors) - 1} more malformed)" if len(errors) > 1 else ""
            raise ValueError(f"no AMR graph could be read, nothing was written to {output}: {errors[0]}{more}")

    n = write_jsonl(some_graph(), output)
    for error in errors:
        print(f"malformed AMR graph skipped: {error}", file=sys.stderr)
    print(f"{n} linearised AMR graphs -> {output}" + (f"; {len(errors)} malformed graphs skipped" if errors else ""))
    if errors and strict:
        raise ValueError(f"{len(errors)} malformed AMR graph(s) (--strict); the others were written to {output}")


#: ``unisent data <name>`` commands of this module (see ``unisent.commands.data``)
COMMANDS = {"amr-linearize": build_amr_linearize}
