"""A Lightning command's errors as one line that names what to change: jsonargparse's (``did_you_mean``)
and the user's mistakes (``user_error_in_chain``); anything else is a bug and keeps its traceback."""

from __future__ import annotations

import argparse
import difflib
import importlib
import inspect
import re
from collections.abc import Sequence

__all__ = ["config_error", "describe_user_error", "did_you_mean", "one_line", "user_error_in_chain", "user_errors"]


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
