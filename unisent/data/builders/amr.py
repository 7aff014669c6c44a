"""AMR graphs (PENMAN files) -> linearised records: ``unisent data amr-linearize``."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterable, Iterator
from pathlib import Path

from .nli import write_jsonl

__all__ = ["amr_records", "register"]


def amr_records(
    paths: Iterable[str | Path],
    *,
    errors: list | None = None,
    parentheses: bool = True,
    drop_wiki: bool = True,
    quote_strings: bool = False,
) -> Iterator[dict]:
    """One record per well-formed graph of the PENMAN files, in file order.

    Record: ``{"id", "text", "graph", "penman", "metadata"}``: the ``# ::id``, the ``# ::snt`` sentence
    (``# ::tok`` when there is no ``snt``; ``None`` without either), the linearisation
    (:func:`unisent.amr.linearize`), the graph's PENMAN text (without comments; what
    :class:`unisent.amr.PreParsedAMR` reads back) and every ``# ::`` field. Malformed graphs are
    skipped and appended to ``errors`` (see :func:`unisent.amr.linearize_string`).
    """
    from ...amr.linearize import iter_penman_blocks, linearize_blocks

    for path in paths:
        path = Path(path)
        if not path.is_file():
            raise FileNotFoundError(f"AMR file {str(path)!r} does not exist")
        blocks = iter_penman_blocks(path.read_text(encoding="utf-8"), str(path))
        for block, graph in linearize_blocks(
            blocks, errors=errors, parentheses=parentheses, drop_wiki=drop_wiki, quote_strings=quote_strings
        ):
            metadata = block.metadata
            yield {
                "id": block.id,
                "text": metadata.get("snt", metadata.get("tok")),
                "graph": graph,
                "penman": block.graph,
                "metadata": metadata,
            }


def _run(args: argparse.Namespace) -> None:
    errors: list = []
    records = amr_records(
        args.input,
        errors=errors,
        parentheses=not args.no_parentheses,
        drop_wiki=not args.keep_wiki,
        quote_strings=args.quote_strings,
    )
    n = write_jsonl(records, args.output)
    for error in errors:
        print(f"malformed AMR graph skipped: {error}", file=sys.stderr)
    print(f"{n} linearised AMR graphs -> {args.output}" + (f"; {len(errors)} malformed graphs skipped" if errors else ""))
    if errors and args.strict:
        raise ValueError(f"{len(errors)} malformed AMR graph(s) (--strict); the others were written to {args.output}")


def register(sub) -> None:
    """Add ``unisent data amr-linearize``."""
    p = sub.add_parser(
        "amr-linearize",
        help="AMR graphs (PENMAN with # ::snt) -> jsonl of {id, text, graph (linearised), penman, metadata}",
        description="Linearise AMR graphs (depth-first, no variables, :wiki dropped). Malformed graphs are "
        "reported on stderr with their id and the parse error and skipped; the exit status is non-zero "
        "for them only with --strict.",
    )
    p.add_argument("--input", nargs="+", required=True, help="PENMAN file(s)")
    p.add_argument("--output", required=True, help="jsonl to write")
    p.add_argument("--no-parentheses", action="store_true", help="leave out the ( ) depth markers")
    p.add_argument("--keep-wiki", action="store_true", help="keep :wiki branches (dropped by default)")
    p.add_argument("--quote-strings", action="store_true", help="keep the quotes of string literals")
    p.add_argument("--strict", action="store_true", help="exit non-zero when a graph is malformed")
    p.set_defaults(run=_run)
