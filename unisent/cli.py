"""The ``unisent`` command: one table of every command, each imported only when it runs.

``fit``/``validate``/``test``/``predict`` are Lightning's CLI (:mod:`unisent.commands.train`, run by
:func:`unisent.commands.fitting.run_lightning`, the function ``unisent ablate`` trains with too);
``evaluate``, ``export``, ``encode``, ``data`` and ``sweep`` are typed functions on jsonargparse
(:mod:`unisent.commands.function_commands`), so every command has ``--help``, ``--config`` and ``--print_config``.
``unisent --help`` and ``unisent --version`` import neither torch nor Lightning.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence

__all__ = ["COMMAND_HELP", "EXTRA_COMMANDS", "LIGHTNING_COMMANDS", "main", "usage", "version"]

#: set to 1 for the full traceback of a data, config or checkpoint error instead of its one line
TRACEBACK_ENV = "UNISENT_TRACEBACK"


def _lightning(argv: Sequence[str]) -> None:
    """``unisent fit|validate|test|predict``: LightningCLI, its user errors in one line (status 1; a bad
    option or config key: status 2), Ctrl-C with how to resume (status 130; SIGTERM: 143).
    ``UNISENT_TRACEBACK=1`` shows the full traceback instead."""
    import os

    words = list(argv)
    verbose = "--verbose" in words  # unisent's own option: everything Lightning and transformers print
    from .commands.lightning_help import FULL_HELP

    if verbose or FULL_HELP in words:  # --help-all: Lightning's own --help, every option
        if FULL_HELP in words:
            from .commands.lightning_help import own_options

            sys.stdout.write(own_options())
        words = ["--help" if w == FULL_HELP else w for w in words if w != "--verbose"]
    command = next((w for w in words if w in LIGHTNING_COMMANDS), None)
    prog = f"unisent {command}" if command else "unisent"
    traceback = os.environ.get(TRACEBACK_ENV, "").lower() not in ("", "0", "false", "no")
    from jsonargparse import ArgumentError

    from .commands.config_errors import config_error, describe_user_error, user_error_in_chain
    from .commands.fitting import interrupt_message, run_lightning
    from .commands.resume_discovery import NothingToTrain

    try:
        outcome = run_lightning(words, verbose=verbose)
    except ArgumentError as err:
        if traceback:
            raise
        from .commands.function_commands import fail

        fail(prog, config_error(str(err), words), words)
    except NothingToTrain as err:
        sys.exit(f"{prog}: error: {err}")
    except Exception as err:
        cause = user_error_in_chain(err)
        if traceback or cause is None:
            raise
        print(
            f"{prog}: error: {describe_user_error(cause)} (full traceback: {TRACEBACK_ENV}=1 {prog} ...)",
            file=sys.stderr,
        )
        sys.exit(1)
    if outcome.interrupted is not None:
        if command == "fit":  # what the run left and the exact command that continues it
            print(f"\n{interrupt_message(prog, words, outcome.interrupted)}", file=sys.stderr)
        sys.exit(outcome.status)


#: Lightning's commands (LightningCLI over UnisentModule and UnisentDataModule): name -> one line of help
LIGHTNING_COMMANDS: dict[str, str] = {
    "fit": "train a model from a recipe: unisent fit -c recipes/quickstart.yaml",
    "validate": "run the validation loop (dev-set evaluation) on a checkpoint",
    "test": "run the test loop (test-set evaluation) on a checkpoint",
    "predict": "write the embeddings of a prediction set",
}

# Commands that are not Lightning's: name -> (module, function). Each function takes argv; each is a
# typed function on jsonargparse (unisent.commands.function_commands), so --help, --config and --print_config
# behave as in the Lightning commands.
EXTRA_COMMANDS: dict[str, tuple[str, str]] = {
    "evaluate": ("unisent.commands.evaluate", "main"),
    "data": ("unisent.commands.data", "main"),
    "export": ("unisent.commands.export", "main"),
    "encode": ("unisent.commands.encode", "main"),
    "sweep": ("unisent.commands.sweep", "main"),
    "retrofit": ("unisent.commands.retrofit", "main"),
    "ablate": ("unisent.commands.ablate", "main"),
    "convert-checkpoint": ("unisent.commands.convert", "main"),
}

#: one line of ``unisent --help`` per command (kept here so that the help imports no command)
COMMAND_HELP: dict[str, str] = {
    **LIGHTNING_COMMANDS,
    "evaluate": "the papers' evaluation protocols (STS, transfer, retrieval, NLI ...) on a model; --list",
    "export": "a checkpoint or saved model -> a Sentence Transformers / Hugging Face directory with a card",
    "encode": "embed a txt/jsonl/csv/tsv/parquet file into .npy or .parquet with bounded memory",
    "data": "build training records (nli-triples, ease-wikipedia, cmlm-pairs, amr-nli ...)",
    "sweep": "a hyperparameter sweep from a W&B sweep file, on W&B or locally (--local)",
    "retrofit": "combine a text encoder with an AMR encoder (Cai et al. 2022) and save the model",
    "ablate": "a multi-objective recipe unified, each objective alone and leave-one-out, over seeds: a table",
    "convert-checkpoint": "rewrite a checkpoint you trust as plain data (every command reads checkpoints as data only)",
}


def version() -> str:
    """The installed unisent version (``unisent --version``)."""
    from importlib.metadata import PackageNotFoundError
    from importlib.metadata import version as installed

    try:
        return installed("unisent")
    except PackageNotFoundError:  # a source tree that is not installed
        from ._version import __version__

        return __version__


def usage() -> str:
    """``unisent --help``: every command with one line each (imports nothing heavy)."""
    width = max(len(name) for name in [*COMMAND_HELP, "-h, --help"])
    lines = [
        "usage: unisent [-h] [--version] COMMAND ...",
        "",
        "Sentence embeddings in one Lightning framework: train, evaluate, export, encode, build data, sweep.",
        "",
        "commands:",
    ]
    lines += [f"  {name:<{width}}  {text}" for name, text in COMMAND_HELP.items()]
    lines += [
        "",
        "options:",
        f"  {'-h, --help':<{width}}  show this message and exit",
        f"  {'--version':<{width}}  print the unisent version and exit",
        "",
        "Each command has --help, --config FILE.yaml and --print_config: unisent COMMAND --help.",
        "Plugins: --import MODULE (any command, repeatable); entry points of group unisent.plugins (docs/plugins.md).",
    ]
    return "\n".join(lines) + "\n"


def _asks_short_help(words: Sequence[str]) -> bool:
    """``unisent fit ... --help`` (not ``--help-all``): answered without importing torch or Lightning."""
    from .commands.lightning_help import FULL_HELP, HELP_WORDS

    return FULL_HELP not in words and any(word in HELP_WORDS for word in words)


def _load_plugins(words: list[str]) -> list[str]:
    """Take ``--import MODULE`` out of ``words`` and load the plugins (:mod:`unisent.plugins`); an error:
    one line, status 2 (a module of ``--import``) or 1 (an installed plugin). The short ``--help`` of the
    Lightning commands loads nothing (it imports neither torch nor Lightning)."""
    import os

    from .plugins import PluginError, load_plugins, split_imports

    prog = f"unisent {words[0]}" if words[0] in COMMAND_HELP else "unisent"
    try:
        modules, words = split_imports(words)
        if not words:
            sys.stdout.write(usage())
            sys.exit(2)
        if not (words[0] in LIGHTNING_COMMANDS and _asks_short_help(words[1:])):
            load_plugins(modules)
    except PluginError as err:
        if os.environ.get(TRACEBACK_ENV, "").lower() not in ("", "0", "false", "no"):
            raise
        print(f"{prog}: error: {err}", file=sys.stderr)
        sys.exit(err.status)
    return words


def main(argv: Sequence[str] | None = None) -> None:
    """The ``unisent`` command: dispatch to a command's module, imported only when it runs."""
    words = list(sys.argv[1:] if argv is None else argv)
    if not words or words[0] in ("-h", "--help"):
        sys.stdout.write(usage())
        if not words:
            sys.exit(2)
        return
    if words[0] == "--version":
        print(f"unisent {version()}")
        return
    words = _load_plugins(words)
    if words[0] in EXTRA_COMMANDS:
        import importlib

        module_name, func = EXTRA_COMMANDS[words[0]]
        command: Callable[[list[str]], None] = getattr(importlib.import_module(module_name), func)
        command(words[1:])
        return
    if words[0] in LIGHTNING_COMMANDS and _asks_short_help(words[1:]):
        from .commands.lightning_help import short_help

        sys.stdout.write(short_help(words[0]))  # the options users change; --help-all: Lightning's full tree
        return
    if words[0] in LIGHTNING_COMMANDS or words[0].startswith("-"):  # -c/--config before the command: Lightning's
        _lightning(words)  # the words themselves: Lightning's CLI never reads sys.argv
        return
    print(
        f"unisent: error: unknown command {words[0]!r}; choose from {', '.join(COMMAND_HELP)} (unisent --help)",
        file=sys.stderr,
    )
    sys.exit(2)


if __name__ == "__main__":
    main()
