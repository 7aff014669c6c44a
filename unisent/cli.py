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

__all__ = ["COMMAND_HELP", "EXTRA_COMMANDS", "LIGHTNING_COMMANDS", "main", "usage", "version"]

#: set to 1 for the full traceback of a data, config or checkpoint error instead of its one line
TRACEBACK_ENV = "UNISENT_TRACEBACK"


def _one_line(text: str) -> str:
    return " ".join(line.strip() for line in str(text).strip().splitlines() if line.strip())


def _user_errors() -> tuple[type[BaseException], ...]:
    """The errors of a Lightning command that are the user's data, config or checkpoint, reported in one
    line: unisent's own (``RecordError``, ``CheckpointError``, ``DataConfigError``, ``ModelConfigError``,
    ``ModelNotAvailableError``), a missing or unreadable file (``OSError``), YAML that does not parse,
    and Lightning's ``MisconfigurationException``."""
    import yaml
    from lightning.fabric.utilities.exceptions import MisconfigurationException

    from .data.records import DataConfigError, RecordError
    from .io import CheckpointError
    from .module import ModelConfigError

    return (
        RecordError,
        CheckpointError,
        DataConfigError,
        ModelConfigError,
        OSError,
        yaml.YAMLError,
        MisconfigurationException,
    )


def _lightning(argv: Sequence[str] | None) -> None:
    """``unisent fit|validate|test|predict``: LightningCLI, its user errors in one line (status 1; a bad
    option or config key: status 2), Ctrl-C with how to resume (status 130). ``UNISENT_TRACEBACK=1``
    shows the full traceback instead."""
    import os

    words = list(sys.argv[1:] if argv is None else argv)
    verbose = "--verbose" in words  # unisent's own option: everything Lightning and transformers print
    if verbose:
        words = [w for w in words if w != "--verbose"]
        if argv is None:
            sys.argv = [sys.argv[0], *words]
        else:
            argv = words
    command = next((w for w in words if w in LIGHTNING_COMMANDS), None)
    prog = f"unisent {command}" if command else "unisent"
    traceback = os.environ.get(TRACEBACK_ENV, "").lower() not in ("", "0", "false", "no")
    from jsonargparse import ArgumentError

    from .commands.train import main as train_main

    received: dict[str, str] = {}
    previous = _terminate_as_interrupt(received) if command == "fit" else None
    try:
        train_main(argv, verbose=verbose)
    except KeyboardInterrupt:
        signal_name = _interrupt_message(prog, command, words, received)
        sys.exit(143 if signal_name == "SIGTERM" else 130)
    except ArgumentError as err:
        if traceback:
            raise
        from .commands._cli import fail

        fail(prog, _config_error(str(err), words), words)
    except Exception as err:
        if traceback or not isinstance(err, _user_errors()):
            raise
        print(f"{prog}: error: {_file_error(err)} (full traceback: {TRACEBACK_ENV}=1 {prog} ...)", file=sys.stderr)
        sys.exit(1)
    finally:
        if previous is not None:
            import signal

            signal.signal(signal.SIGTERM, previous)


def _terminate_as_interrupt(received: dict[str, str]) -> Any:
    """Until training starts (model, data, tokenisation), SIGTERM stops ``fit`` as Ctrl-C does (cleanup,
    one message) instead of killing it; during training the checkpoint callback takes both signals over
    (:class:`unisent.resume.InterruptRequest`: finish the step, save, stop)."""
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread() or signal.getsignal(signal.SIGTERM) is signal.SIG_IGN:
        return None

    def handler(signum, frame):
        received["signal"] = signal.Signals(signum).name
        raise KeyboardInterrupt

    return signal.signal(signal.SIGTERM, handler)  # the previous handler, restored when fit returns


def _interrupt_message(prog: str, command: str | None, words: Sequence[str], received: dict[str, str]) -> str:
    """Print what an interrupted ``fit`` left and the exact command that continues it; returns the signal's name."""
    import shlex

    interrupt: dict = {}
    if "unisent.resume" in sys.modules:
        interrupt = dict(sys.modules["unisent.resume"].INTERRUPT)
    name = interrupt.get("signal") or received.get("signal") or "SIGINT"
    if command != "fit":
        return name
    checkpoint = interrupt.get("checkpoint")
    rest = [
        w for i, w in enumerate(words) if not (w.startswith("--ckpt_path") or (i and words[i - 1] == "--ckpt_path"))
    ]
    if checkpoint is None:
        print(
            f"\n{prog}: interrupted ({name}) before a checkpoint was saved; nothing to resume. Start again with: "
            f"{shlex.join(['unisent', *rest])}",
            file=sys.stderr,
        )
        return name
    step = interrupt.get("step")
    saved = (
        f"saved {checkpoint} at step {step}"
        if step is not None and not interrupt.get("now")
        else f"its last checkpoint is {checkpoint}"
    )
    pin = [f"--trainer.logger.init_args.version={interrupt['version']}"] if interrupt.get("version") else []
    print(
        f"\n{prog}: interrupted ({name}); {saved}; continue this run with: "
        f"{shlex.join(['unisent', *rest, *pin, '--ckpt_path', 'last'])}",
        file=sys.stderr,
    )
    return name


def _config_error(message: str, words: Sequence[str]) -> str:
    """jsonargparse's parse error in one line; a YAML syntax error names the file and line (jsonargparse
    says ``"<unicode string>", line 3``), found by parsing each ``--config`` file again."""
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
            except (OSError, yaml.YAMLError):
                continue
    return _one_line(message)


def _file_error(err: Exception) -> str:
    """A missing or unreadable file: what, which file, what to do."""
    if isinstance(err, FileNotFoundError) and err.filename and str(err).startswith("[Errno"):
        return (
            f"no such file: {err.filename}; check the path in the recipe (e.g. data.train.<name>.path) "
            "or on the command line (paths are relative to the current directory)"
        )
    if isinstance(err, PermissionError) and err.filename and str(err).startswith("[Errno"):
        return f"permission denied: {err.filename}"
    return _one_line(str(err) or type(err).__name__)


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
    "retrofit": ("unisent.commands.retrofit", "main"),
    "ablate": ("unisent.commands.ablate", "main"),
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
    ]
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
    print(
        f"unisent: error: unknown command {words[0]!r}; choose from {', '.join(COMMAND_HELP)} (unisent --help)",
        file=sys.stderr,
    )
    sys.exit(2)


if __name__ == "__main__":
    main()
