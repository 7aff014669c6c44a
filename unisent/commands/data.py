"""``unisent data BUILDER ...``: build training records from public data layouts.

Each builder module under :mod:`unisent.data.builders` that is listed in :data:`BUILDER_MODULES`
exposes ``register(subparsers)``, which adds its sub-command(s) with ``set_defaults(run=callable)``.
A builder's ``run(args)`` raises ``FileNotFoundError`` or ``ValueError`` with a message that names
the file, line and field; the command prints it and exits non-zero.
"""

from __future__ import annotations

import argparse
import importlib
import sys

__all__ = ["main", "BUILDER_MODULES"]

BUILDER_MODULES = ("nli", "ease", "amr", "amr_nli", "cmlm")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="unisent data", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="builder", required=True)
    for name in BUILDER_MODULES:
        importlib.import_module(f"unisent.data.builders.{name}").register(sub)
    return parser


def main(argv: list[str]) -> None:
    args = build_parser().parse_args(argv)
    try:
        args.run(args)
    except (FileNotFoundError, ValueError) as err:
        sys.exit(f"unisent data {args.builder}: error: {err}")
