"""``unisent data BUILDER ...``: build training records from public data layouts."""

from __future__ import annotations

import argparse
import sys

__all__ = ["main"]


def _nli_triples(args: argparse.Namespace) -> None:
    from ..data.builders.nli import nli_triples, read_nli_pairs, write_jsonl

    premises, hypotheses, labels = read_nli_pairs(args.format, args.input, args.split)
    triples = nli_triples(premises, hypotheses, labels)
    n = write_jsonl(triples, args.output)
    print(f"{n} triples (premise, entailment, contradiction) from {len(labels)} pairs -> {args.output}")


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(prog="unisent data", description=__doc__)
    sub = parser.add_subparsers(dest="builder", required=True)
    p = sub.add_parser("nli-triples", help="NLI pairs -> (anchor, positive, negative) jsonl")
    p.add_argument("--format", choices=("snli", "xnli", "sick"), required=True)
    p.add_argument("--input", required=True, help="snli: the directory with s1/s2/labels.<split>; else the file")
    p.add_argument("--split", default="dev", help="snli only: dev, test or train")
    p.add_argument("--output", required=True, help="jsonl to write")
    p.set_defaults(run=_nli_triples)
    args = parser.parse_args(argv)
    try:
        args.run(args)
    except (FileNotFoundError, ValueError) as err:
        sys.exit(f"unisent data {args.builder}: error: {err}")
