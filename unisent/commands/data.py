"""``unisent data BUILDER ...``: build training records from public data layouts.

Each module of ``builder_modules`` maps sub-commands to typed functions in ``COMMANDS``."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from types import ModuleType

from jsonargparse import ArgumentParser

from .function_commands import IMPORT_HELP, call, command_parser, parse, run_command, summary

__all__ = ["build_parser", "builder_modules", "builders", "main"]

PROG = "unisent data"


def builder_modules() -> tuple[ModuleType, ...]:
    """The modules of ``unisent.builders`` that declare ``COMMANDS``, imported only when asked for."""
    from ..builders import amr_nli, amr_records, cmlm_records, ease, nli_records

    return (nli_records, ease, amr_records, amr_nli, cmlm_records)


def builders() -> dict[str, Callable]:
    """Sub-command name -> builder function, over every module of ``builder_modules``."""
    out: dict[str, Callable] = {}
    for module in builder_modules():
        for command, function in module.COMMANDS.items():
            if command in out:
                raise ValueError(f"unisent data {command} is defined twice ({module.__name__})")
            out[command] = function
    return out


def build_parser() -> ArgumentParser:
    parser = ArgumentParser(
        prog=PROG, description=(__doc__ or "").split("\n")[0], epilog=IMPORT_HELP, exit_on_error=False, env_prefix=False
    )
    sub = parser.add_subcommands(dest="builder", required=True)
    for command, function in builders().items():
        sub.add_subcommand(command, command_parser(function, f"{PROG} {command}"), help=summary(function))
    return parser


def main(argv: Sequence[str]) -> None:
    functions = builders()
    words = list(argv)
    if words and words[0] in functions:  # parse the builder's own options: its errors name it
        run_command(functions[words[0]], words[1:], f"{PROG} {words[0]}")
        return
    values = parse(build_parser(), words)  # --help, or an unknown builder (listed in the error)
    command = values["builder"]
    call(functions[command], values[command], f"{PROG} {command}")
