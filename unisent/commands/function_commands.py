"""A typed function is the command: ``command_parser`` turns its signature and Google-style docstring
into a jsonargparse parser with ``--help``, ``--config FILE.yaml`` and ``--print_config``.

- a parameter before ``*`` without a default is positional; every other is ``--name`` (required without a
  default), also spelled with dashes (``--batch-size``); ``bool``: ``--verify`` / ``--no-verify``;
  ``list[str]``: ``--input A B --input C``; ``Literal[...]``: its choices.
- a bad option or value: one line, status 2; the command's own ``OSError``/``ValueError``/``ImportError``:
  ``PROG: error: MESSAGE``, status 1.

Not ``jsonargparse.CLI``: it gives ``bool`` a value, takes a list only as ``[a, b]`` and makes required
parameters positional, which would change the documented invocations."""

from __future__ import annotations

import inspect
import os
import sys
import typing
from collections.abc import Callable, Sequence
from typing import Any, NoReturn

from jsonargparse import ActionConfigFile, ActionYesNo, ArgumentError, ArgumentParser  # pyright: ignore[reportPrivateImportUsage]  # documented, not in __all__

__all__ = [
    "IMPORT_HELP",
    "CommandFailed",
    "UsageError",
    "require_positive",
    "call",
    "command_parser",
    "fail",
    "parse",
    "quiet_transformers",
    "run_command",
    "summary",
]

#: the end of every command's --help: ``unisent`` (``unisent.plugins``) reads ``--import`` before the parser
IMPORT_HELP = (
    "--import MODULE: import MODULE first (repeatable), so that the objectives, poolers, balancers, tasks and "
    "export formats it registers can be named; installed plugins (entry points of the group unisent.plugins) "
    "load always. See docs/plugins.md."
)

#: errors of a command's own work that are reported as one line with exit status 1
COMMAND_ERRORS: tuple[type[BaseException], ...] = (OSError, ValueError, ImportError)


class CommandFailed(Exception):
    """A command's failure of another type, reported in one line all the same (status 1)."""


class UsageError(Exception):
    """Options the signature cannot express (``evaluate`` without ``--model`` or ``--list``): status 2."""


def require_positive(value: int | None, option: str, unit: str) -> None:
    """A usage error (status 2) when an optional count (``--truncate-dim``) is given and not positive."""
    if value is not None and value <= 0:
        raise UsageError(f"{option} must be a positive number of {unit}, got {value}")


def summary(function: Callable) -> str:
    """The first line of ``function``'s docstring (the one-line help of a command)."""
    return (inspect.getdoc(function) or "").strip().split("\n")[0]


def _docstring(function: Callable) -> tuple[str, dict[str, str]]:
    from docstring_parser import parse as parse_docstring

    doc = parse_docstring(inspect.getdoc(function) or "")
    description = "\n\n".join(part for part in (doc.short_description, doc.long_description) if part)
    return description, {p.arg_name: (p.description or "").replace("\n", " ") for p in doc.params}


def _list_item(hint: Any) -> Any | None:
    """``list[X]`` or ``Optional[list[X]]`` -> ``X``, else ``None``."""
    args = [a for a in typing.get_args(hint) if a is not type(None)] if type(None) in typing.get_args(hint) else [hint]
    if len(args) == 1 and typing.get_origin(args[0]) is list:
        (item,) = typing.get_args(args[0]) or (str,)
        return item
    return None


class _Flag(ActionYesNo):
    """``ActionYesNo`` (``--x`` / ``--no_x``) that also reads the dashed ``--no-x`` as the no-form."""

    def __call__(self, *args, **kwargs):
        if len(args) >= 4 and isinstance(args[3], str) and args[3].startswith("--"):
            args = (*args[:3], "--" + args[3][2:].replace("-", "_"), *args[4:])
        return super().__call__(*args, **kwargs)


def _add_dashed_aliases(parser: ArgumentParser, action) -> None:
    """Accept ``--batch-size`` for ``--batch_size``; added after the fact because ``ActionYesNo``
    derives its ``--no_x`` from the first option string."""
    for option in list(action.option_strings):
        dashed = "--" + option[2:].replace("_", "-")
        if option.startswith("--") and dashed != option and dashed not in parser._option_string_actions:
            action.option_strings.append(dashed)
            parser._option_string_actions[dashed] = action


def add_function(parser: ArgumentParser, function: Callable) -> None:
    """Add one argument per parameter of ``function`` to ``parser`` (the rules in the module docstring)."""
    hints = typing.get_type_hints(function)
    _, helps = _docstring(function)
    for name, param in inspect.signature(function).parameters.items():
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
            raise TypeError(f"{function.__qualname__}: *{name} cannot be a command-line argument")
        hint = hints.get(name, str)
        required = param.default is inspect.Parameter.empty
        kwargs: dict[str, Any] = {"help": helps.get(name) or None}
        item = _list_item(hint)
        if required and param.kind is not param.KEYWORD_ONLY:
            if item is not None:
                kwargs.update(type=item, nargs="+")
            else:
                kwargs["type"] = hint
            parser.add_argument(name, **kwargs)
            continue
        if hint is bool:
            kwargs.update(action=_Flag, default=bool(param.default) if not required else False)
        elif item is not None:
            kwargs.update(type=item, nargs="+" if required else "*", action="extend")
        else:
            kwargs["type"] = hint
        if required:
            kwargs["required"] = True
        elif hint is not bool:
            kwargs["default"] = param.default
        action = parser.add_argument(f"--{name}", **kwargs)
        _add_dashed_aliases(parser, action)


def command_parser(function: Callable, prog: str, description: str | None = None) -> ArgumentParser:
    """A jsonargparse parser for ``function`` (``prog``: e.g. ``unisent encode``) with ``--config`` and
    ``--print_config``; its docstring is the ``--help`` text unless ``description`` is given."""
    text, _ = _docstring(function)
    parser = ArgumentParser(
        prog=prog,
        description=description or text,
        epilog=IMPORT_HELP,
        exit_on_error=False,
        env_prefix=False,
        allow_abbrev=False,
    )  # a prefix of an option is an error, not that option
    parser.add_argument(
        "-c",
        "--config",
        action=ActionConfigFile,
        help="a YAML file of these options (keys as --print_config writes them); repeatable",
    )
    add_function(parser, function)
    return parser


def fail(prog: str, message: str, argv: Sequence[str] = ()) -> NoReturn:
    """Print ``PROG: error: MESSAGE`` on one line (naming ``argv``'s config files) and exit with status 2,
    as argparse does but without the usage block."""
    text = " ".join(line.strip() for line in str(message).strip().splitlines() if line.strip())
    configs = [argv[i + 1] for i, word in enumerate(argv[:-1]) if word in ("-c", "--config")]
    configs += [word.split("=", 1)[1] for word in argv if word.startswith("--config=")]
    if configs:
        text += f" (config: {', '.join(configs)})"
    print(f"{prog}: error: {text}; see {prog} --help", file=sys.stderr)
    sys.exit(2)


def parse(parser: ArgumentParser, argv: Sequence[str]) -> dict[str, Any]:
    """Parse ``argv`` (``--help``/``--print_config`` print and exit 0); a bad option or value -> ``fail``."""
    argv = list(argv)
    try:
        config = parser.parse_args(argv)
    except ArgumentError as err:
        fail(parser.prog, str(err) + _value_as_option_hint(parser, str(err)), argv)
    values = config.as_dict()
    values.pop("config", None)
    return values


def _value_as_option_hint(parser: ArgumentParser, message: str) -> str:
    """An unrecognised ``--bf16`` that is a choice of another option: `` (did you mean --precision bf16?)``."""
    _, found, rest = message.partition("unrecognized arguments:")
    words = [word.split("=", 1)[0][2:] for word in rest.split() if word.startswith("--")] if found else []
    hints = []
    for word in words:
        for action in parser._actions:
            hint = getattr(action, "_typehint", None)
            if typing.get_origin(hint) is typing.Literal and word in typing.get_args(hint):
                hints.append(f"--{word}: did you mean {action.option_strings[-1]} {word}?")
    return f" ({'; '.join(hints)})" if hints else ""


def run_command(function: Callable, argv: Sequence[str], prog: str) -> Any:
    """Parse ``argv`` for ``function`` and ``call`` it."""
    values = parse(command_parser(function, prog), argv)
    return call(function, values, prog)


def call(function: Callable, values: dict[str, Any], prog: str) -> Any:
    """``function(**values)``, its expected errors reported by ``fail`` with status 1."""
    try:
        return function(**values)
    except UsageError as err:
        fail(prog, str(err))
    except (*COMMAND_ERRORS, CommandFailed) as err:
        sys.exit(f"{prog}: error: {err or type(err).__name__}")  # the message on stderr, status 1


def quiet_transformers() -> None:
    """``--quiet``: no weight-loading bars or info lines from transformers / huggingface_hub."""
    os.environ["HF_HUB_DISABLE_PROGRESS_BARS"] = "1"
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    os.environ.setdefault("TRANSFORMERS_NO_ADVISORY_WARNINGS", "1")
    from huggingface_hub.utils import disable_progress_bars
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    disable_progress_bars()
