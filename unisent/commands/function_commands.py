"""A typed function is the command: ``command_parser`` turns its signature and Google-style docstring
into a jsonargparse parser with ``--help``, ``--config FILE.yaml`` and ``--print_config``.

- a parameter before ``*`` without a default is positional; every other is ``--name`` (required without a
  default), also spelled with dashes (``--batch-size``); ``bool``: ``--verify`` / ``--no-verify``;
  ``list[str]``: ``--input A B --input C``; ``Literal[...]``: its choices.
- a bad option or value: one line, status 2; the command's own ``OSError``/``ValueError``/``ImportError``:
  ``PROG: error: MESSAGE``, status 1.

Not ``jsonargparse.CLI``: it gives ``bool`` a value, takes a list only as ``[a, b]`` and makes required
parameters positional, which would change the documented invocations.

A Lightning command's errors are one line that names what to change too: jsonargparse's (``did_you_mean``)
and the user's mistakes (``user_error_in_chain``); anything else is a bug and keeps its traceback."""

from __future__ import annotations

import argparse
import difflib
import importlib
import inspect
import os
import re
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
    "config_error",
    "describe_user_error",
    "did_you_mean",
    "fail",
    "one_line",
    "parse",
    "quiet_transformers",
    "run_command",
    "summary",
    "user_error_in_chain",
    "user_errors",
]

#: the end of every command's --help: ``unisent`` (``unisent.plugins``) reads ``--import`` before the parser
IMPORT_HELP = (
    "--import MODULE: import MODULE first (repeatable), so that the objectives, poolers, balancers, tasks and "
    "export formats it registers can be named; installed plugins (entry points of the group unisent.plugins) "
    "load always. See docs/plugins.md."
)


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


def command_parser(function: Callable, prog: str) -> ArgumentParser:
    """A jsonargparse parser for ``function`` (``prog``: e.g. ``unisent encode``) with ``--config`` and
    ``--print_config``; its docstring is the ``--help`` text."""
    text, _ = _docstring(function)
    parser = ArgumentParser(
        prog=prog,
        description=text,
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
    text = one_line(message)
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
    except (OSError, ValueError, ImportError, CommandFailed) as err:  # a command's own work: one line, status 1
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


def one_line(text: str) -> str:
    return " ".join(line.strip() for line in str(text).strip().splitlines() if line.strip())


def _option_names(parser) -> set[str]:
    """Every ``--option`` of ``parser`` and of its subcommands' parsers."""
    names: set[str] = set()
    for action in parser._actions:
        names.update(o for o in action.option_strings if o.startswith("--"))
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                names |= _option_names(sub)
    return names


def _close(word: str, candidates: Sequence[str]) -> list[str]:
    return difflib.get_close_matches(word, list(candidates), n=3, cutoff=0.7)


def did_you_mean(message: str, parser) -> str | None:
    """jsonargparse's message naming the closest valid ones (else ``None``) for an unknown option or key
    (``--trainer.max_step``), ``class_path`` argument (``init_args.temprature``: a ~450-character union
    error), choice (``--trainer.precision=atuo``) or class (``unisent.balancers.PCgrad``)."""
    nested = re.search(
        r'Parser key "([\w.]+)".*?Problem with given class_path \'([\w.]+)\':\s*unrecognized arguments:\s*'
        r"--([\w.\-]+)",
        message,
        re.S,
    )
    if nested:
        key, class_path, rest = nested.groups()
        from ..io import import_object

        try:
            params = [
                p
                for p in inspect.signature(import_object(class_path).__init__).parameters
                if p not in ("self", "args", "kwargs")
            ]
        except (ImportError, AttributeError, TypeError, ValueError):
            return None
        name = rest.rsplit(".", 1)[-1]
        close = _close(name, params)
        hint = f"did you mean {' or '.join(repr(c) for c in close)}?" if close else "no argument is close"
        return f"{key}.{rest}: {class_path} has no argument {name!r} ({hint}); its arguments: {', '.join(params)}"
    missing = re.search(
        r'Parser key "([\w.]+)".*?class_path \'[\w.]+\':\s*module \'([\w.]+)\' has no attribute \'(\w+)\'',
        message,
        re.S,
    )
    if missing:  # a mistyped class (--model.balancer=unisent.balancers.PCgrad): the module's classes
        key, module_name, name = missing.groups()
        try:
            module = importlib.import_module(module_name)
        except ImportError:
            return None
        public = getattr(module, "__all__", None) or dir(module)
        names = sorted(n for n in public if isinstance(getattr(module, n, None), type) and n[:1] != "_")
        close = _close(name, names) or [n for n in names if n.lower() == name.lower()]
        hint = f" (did you mean {module_name}.{close[0]}?)" if close else f"; its classes: {', '.join(names)}"
        return f"{key}: {module_name} has no class {name!r}{hint}"
    value = re.search(r'Parser key "([\w.]+)":.*?Given value: ([^\s(]+)', message, re.S)
    literals = re.findall(r"Literal\[([^\]]*)\]", message)
    if value and literals:  # a value outside the choices (--trainer.precision=atuo): name them, not the union
        key, given = value.groups()
        choices = list(dict.fromkeys(c.strip().strip("'\"") for group in literals for c in group.split(",")))
        close = _close(given, choices)
        hint = f" (did you mean {' or '.join(repr(c) for c in close)}?)" if close else ""
        return f"{key}: {given!r} is not one of {', '.join(choices)}{hint}"
    unknown = re.findall(r"unrecognized arguments: ((?:--[\w.\-]+(?:=\S*)?\s*)+)", message)
    unknown = [w.split("=", 1)[0] for group in unknown for w in group.split() if w.startswith("--")]
    for group, key in re.findall(r"(?:Group '([\w.]+)' )?does not accept (?:option|key) '([\w.\-]+)'", message):
        unknown.append(f"--{group}.{key}" if group else f"--{key}")
    if not unknown:
        return None
    from ..training_config import MOVED

    for word in unknown:  # a key of before model.train: its new place, in one line
        section, _, key = word.removeprefix("--").rpartition(".")
        if section == "model" and key in MOVED:
            return f"model.{key} moved to model.{MOVED[key]}"
    options = sorted(_option_names(parser))
    hints = []
    for word in unknown:
        prefix = word.rsplit(".", 1)[0] + "." if "." in word else "--"
        close = _close(word, [o for o in options if o.startswith(prefix)] or options)
        if close:
            hints.append(f"{word}: did you mean {' or '.join(close)}?")
    return f"{message.rstrip('.')} ({'; '.join(hints)})" if hints else None


def config_error(message: str, words: Sequence[str]) -> str:
    """jsonargparse's parse error in one line; a YAML syntax error names the ``--config`` file and line."""
    if "<unicode string>" in message or "Problems parsing config" in message:
        import yaml

        configs = [words[i + 1] for i, word in enumerate(words[:-1]) if word in ("-c", "--config")]
        configs += [word.split("=", 1)[1] for word in words if word.startswith("--config=")]
        for config in configs:
            try:
                with open(config, encoding="utf-8") as handle:
                    yaml.safe_load(handle)
            except yaml.MarkedYAMLError as err:
                mark = err.problem_mark or err.context_mark
                where = f"{config}:{mark.line + 1}:{mark.column + 1}" if mark else config
                return (
                    f"{where}: YAML syntax error: {err.problem or err.context}; fix that line "
                    "(indentation, an unclosed bracket or quote, a missing ': ')"
                )
            except (OSError, yaml.YAMLError, RecursionError):  # RecursionError: nested thousands of levels
                continue
    return one_line(message)


def user_errors() -> tuple[type[BaseException], ...]:
    """The errors of a Lightning command that are the user's data, config or checkpoint (one line each)."""
    import yaml
    from lightning.fabric.utilities.exceptions import MisconfigurationException

    from ..data.record_errors import DataConfigError, RecordError
    from ..encoders.poolers import PoolingModeError
    from ..io import CheckpointError
    from ..io.model_files import ModelFileError
    from ..training_config import ModelConfigError

    return (
        RecordError,
        CheckpointError,
        ModelFileError,
        DataConfigError,
        ModelConfigError,
        PoolingModeError,
        OSError,
        yaml.YAMLError,
        MisconfigurationException,
    )


def _refused_by_a_constructor(err: BaseException) -> bool:
    """A ``ValueError``/``TypeError`` raised by the constructor of a recipe's class (an objective, a
    balancer) while jsonargparse built it: the recipe's value, refused in the class's own words."""
    if not isinstance(err, (ValueError, TypeError)):
        return False
    frames, tb = [], err.__traceback__
    while tb is not None:
        frames.append(tb.tb_frame.f_code.co_filename.replace("\\", "/"))
        tb = tb.tb_next
    built = any(f.endswith("jsonargparse/_instantiation.py") for f in frames)
    return built and bool(frames) and "/jsonargparse/" not in frames[-1]


def user_error_in_chain(err: BaseException) -> BaseException | None:
    """``err`` or the first of its causes that is a user error: a balancer's missing package or a value a
    constructor refused reaches the CLI wrapped in jsonargparse's "Does not validate against ... Union"."""
    from ..balancers import MissingDependencyError

    errors = (*user_errors(), MissingDependencyError)
    seen: set[int] = set()
    current: BaseException | None = err
    while current is not None and id(current) not in seen:
        if isinstance(current, errors) or _refused_by_a_constructor(current):
            return current
        seen.add(id(current))
        current = current.__cause__ or current.__context__
    return None


def describe_user_error(err: BaseException) -> str:
    """A user error in one line; a missing or unreadable file: what, which file, what to do."""
    if isinstance(err, FileNotFoundError) and err.filename and str(err).startswith("[Errno"):
        return (
            f"no such file: {err.filename}; check the path in the recipe (e.g. data.train.<name>.path) "
            "or on the command line (paths are relative to the current directory)"
        )
    if isinstance(err, PermissionError) and err.filename and str(err).startswith("[Errno"):
        return f"permission denied: {err.filename}"
    return one_line(str(err) or type(err).__name__)
