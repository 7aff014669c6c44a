"""The ``unisent`` command: one table of every command, each imported only when it runs.

``fit``/``validate``/``test``/``predict`` are Lightning's CLI (:mod:`unisent.commands.train`);
``evaluate``, ``export``, ``encode``, ``data`` and ``sweep`` are typed functions on jsonargparse
(:mod:`unisent.commands._cli`), so every command has ``--help``, ``--config`` and ``--print_config``.
``unisent --help`` and ``unisent --version`` import neither torch nor Lightning.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from typing import Any

__all__ = ["COMMAND_HELP", "EXTRA_COMMANDS", "LIGHTNING_COMMANDS", "UnisentCLI", "main", "usage", "version"]  # noqa: F822

# The Lightning commands (UnisentCLI, UnisentSaveConfig, TRAINER_DEFAULTS, RESUME_EVERY_N_STEPS and the
# resume helpers) live in unisent/commands/train.py, so that `unisent --help` and the other commands do
# not import Lightning; they stay importable from here (PEP 562).
_TRAIN_NAMES = ("UnisentCLI", "UnisentSaveConfig", "TRAINER_DEFAULTS", "RESUME_EVERY_N_STEPS", "_continue_last_run",
                "_keep_metrics", "_logger_class")


def __getattr__(name: str) -> Any:
    if name in _TRAIN_NAMES:
        from .commands import train

        return getattr(train, name)
    raise AttributeError(f"module 'unisent.cli' has no attribute {name!r}")


def _lightning(argv: Sequence[str] | None) -> None:
    from .commands.train import main as train_main

    train_main(argv)


#: Lightning's commands (LightningCLI over UnisentModule and UnisentDataModule): name -> one line of help
LIGHTNING_COMMANDS: dict[str, str] = {
    "fit": "train a model from a recipe: unisent fit -c recipes/quickstart.yaml",
    "validate": "run the validation loop (dev-set evaluation) on a checkpoint",
    "test": "run the test loop (test-set evaluation) on a checkpoint",
    "predict": "write the embeddings of a prediction set",
}

# Commands that are not Lightning's: name -> (module, function). Each function takes argv; each is a
# typed function on jsonargparse (unisent.commands._cli), so --help, --config and --print_config
# behave as in the Lightning commands.
EXTRA_COMMANDS: dict[str, tuple[str, str]] = {
    "evaluate": ("unisent.commands.evaluate", "main"),
    "data": ("unisent.commands.data", "main"),
    "export": ("unisent.commands.export", "main"),
    "encode": ("unisent.commands.encode", "main"),
    "sweep": ("unisent.commands.sweep", "main"),
}

#: one line of ``unisent --help`` per command (kept here so that the help imports no command)
COMMAND_HELP: dict[str, str] = {
    **LIGHTNING_COMMANDS,
    "evaluate": "the papers' evaluation protocols (STS, transfer, retrieval, NLI ...) on a model; --list",
    "export": "a checkpoint or saved model -> a Sentence Transformers / Hugging Face directory with a card",
    "encode": "embed a txt/jsonl/csv/tsv/parquet file into .npy or .parquet with bounded memory",
    "data": "build training records (nli-triples, ease-wikipedia, cmlm-pairs, amr-nli ...)",
    "sweep": "a hyperparameter sweep from a W&B sweep file, on W&B or locally (--local)",
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
    lines = ["usage: unisent [-h] [--version] COMMAND ...", "",
             "Sentence embeddings in one Lightning framework: train, evaluate, export, encode, build data, sweep.",
             "", "commands:"]
    lines += [f"  {name:<{width}}  {text}" for name, text in COMMAND_HELP.items()]
    lines += ["", "options:", f"  {'-h, --help':<{width}}  show this message and exit",
              f"  {'--version':<{width}}  print the unisent version and exit", "",
              "Each command has --help, --config FILE.yaml and --print_config: unisent COMMAND --help."]
    return "\n".join(lines) + "\n"


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
    if words[0] in EXTRA_COMMANDS:
        import importlib

        module_name, func = EXTRA_COMMANDS[words[0]]
        command: Callable[[list[str]], None] = getattr(importlib.import_module(module_name), func)
        command(words[1:])
        return
    if words[0] in LIGHTNING_COMMANDS or words[0].startswith("-"):  # -c/--config before the command: Lightning's
        _lightning(None if argv is None else words)  # None: LightningCLI reads sys.argv itself
        return
    print(f"unisent: error: unknown command {words[0]!r}; choose from {', '.join(COMMAND_HELP)} "
          "(unisent --help)", file=sys.stderr)
    sys.exit(2)


if __name__ == "__main__":
    main()
