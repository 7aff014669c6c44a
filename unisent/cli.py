"""The ``unisent`` command: one table of every command, each imported only when it runs.

``unisent --help``, ``--version`` and ``unisent fit --help`` (the options of ``OPTIONS``, each of which
``tests/test_cli.py`` passes to the real parser) import neither torch nor Lightning; ``--help-all`` prints
Lightning's full tree (~800 lines, several seconds)."""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence

__all__ = ["COMMAND_HELP", "EXTRA_COMMANDS", "LIGHTNING_COMMANDS", "main", "usage", "version"]

#: set to 1 for the full traceback of a data, config or checkpoint error instead of its one line
TRACEBACK_ENV = "UNISENT_TRACEBACK"

#: the flag that prints Lightning's full ``--help`` (every option of the trainer, model, data and checkpoint)
FULL_HELP = "--help-all"

#: the words that ask for the short help
HELP_WORDS = ("-h", "--help")

#: a source name in the options of one training source (``data.train.<name>``); the test uses the recipe's
NAME = "<name>"

#: ``--ckpt_path``: (metavar, help) by command
_CKPT_PATH = {
    "fit": ("last|FILE", "continue a run: last (the newest run in the logger's folder) or a .ckpt"),
    "validate": ("FILE", "the checkpoint (.ckpt) to validate"),
    "test": ("FILE", "the checkpoint (.ckpt) to test"),
    "predict": ("FILE", "the checkpoint (.ckpt) whose encoder embeds data.predict"),
}

#: ``(section, [(option, metavar, example value, help)])``; example ``None``: a flag or not a config key
OPTIONS: tuple[tuple[str, tuple[tuple[str, str, str | None, str], ...]], ...] = (
    (
        "run",
        (
            ("-c, --config", "RECIPE.yaml", None, "the recipe (repeatable: later files override earlier ones)"),
            ("--ckpt_path", "FILE", None, "(by command: _CKPT_PATH)"),
            ("--seed_everything", "N", "7", "the random seed"),
            ("--print_config", "", None, "print the whole config (recipe + options) as YAML and exit"),
            ("--verbose", "", None, "also Lightning's and transformers' notices and the model summary"),
            ("--import", "MODULE", None, "import MODULE first: its objectives, poolers, tasks register (repeatable)"),
            (FULL_HELP, "", None, "every option with its type and default (~800 lines)"),
        ),
    ),
    (
        "trainer",
        (
            ("--trainer.max_steps", "N", "400", "stop after N optimiser steps (-1: no step limit)"),
            ("--trainer.max_epochs", "N", "3", "stop after N epochs; with max_steps, whichever comes first"),
            ("--trainer.accelerator", "auto|cpu|gpu", "cpu", "where to train"),
            ("--trainer.devices", "auto|N", "1", "how many devices (processes) to train on"),
            ("--trainer.precision", "P", "32-true", "auto (bf16 where it is fast), 32-true, bf16-mixed ..."),
            ("--trainer.accumulate_grad_batches", "N", "2", "one optimiser step every N batches"),
            ("--trainer.gradient_clip_val", "X", "1.0", "clip the gradient norm to X"),
            ("--trainer.val_check_interval", "N|X", "50", "validate every N steps (or fraction X of an epoch)"),
            ("--trainer.limit_train_batches", "N|X", "10", "train on N batches (or fraction X) of each epoch"),
            ("--trainer.log_every_n_steps", "N", "5", "log the losses every N steps"),
            ("--trainer.logger.init_args.save_dir", "DIR", "my-runs", "the runs' folder (runs/)"),
            ("--trainer.logger.init_args.name", "NAME", "my-experiment", "the run's name (a folder in save_dir)"),
            ("--trainer.logger.init_args.version", "V", "v1", "the run's folder in name/ (default: version_N)"),
        ),
    ),
    (
        "model",
        (
            ("--model.encoder.model", "NAME|DIR", "bert-base-uncased", "the backbone: a Hub id or a local folder"),
            ("--model.encoder.pooler", "cls|mean|...", "cls", "how token vectors become a sentence vector"),
            ("--model.encoder.max_length", "N", "64", "truncate sentences to N tokens"),
            ("--model.optimizer.init_args.lr", "X", "3.0e-05", "the learning rate"),
            ("--model.train.schedule.warmup_ratio", "X", "0.05", "linear warm-up over this fraction of the steps"),
            ("--model.balancer", "CLASS", "unisent.balancers.PCGrad", "how several objectives' gradients combine"),
            ("--model.train.cache_chunk", "N", "64", "GradCache: in-batch objectives encode N rows at a time"),
        ),
    ),
    (
        "data",
        (
            ("--data.batch_size", "N", "16", "sentences (records) per batch"),
            ("--data.num_workers", "N", "2", "data loader processes"),
            (f"--data.train.{NAME}.path", "FILE", "samples/nli_triples.jsonl", "an objective's training data"),
            (f"--data.train.{NAME}.max_records", "N", "100", "read only its first N records (0: all)"),
            (f"--data.train.{NAME}.on_error", "raise|skip", "skip", "skip: drop malformed records, say how many"),
            ("--data.cache_dir", "DIR", "my-cache", "where tokenised data is cached"),
            ("--data.predict.path", "FILE", "samples/sentences.txt", "the sentences `unisent predict` embeds"),
        ),
    ),
    (
        "checkpoint",
        (
            ("--checkpoint.every_n_train_steps", "N", "100", "write last.ckpt (a resume point) every N steps"),
            ("--checkpoint.dirpath", "DIR", "my-checkpoints", "where checkpoints go (default: the run's folder)"),
        ),
    ),
)


def short_help(command: str) -> str:
    """The ``--help`` of ``unisent COMMAND`` (one of fit, validate, test, predict)."""
    prog = f"unisent {command}"
    rows = []
    for section, options in OPTIONS:
        rows.append((f"{section}:", ""))
        for option, metavar, _, text in options:
            if option == "--ckpt_path":
                metavar, text = _CKPT_PATH[command]
            rows.append((f"  {option} {metavar}".rstrip(), text))
    width = max(len(left) for left, text in rows if text)
    lines = [
        f"usage: {prog} [-c RECIPE.yaml] [--KEY VALUE ...] [--ckpt_path {_CKPT_PATH[command][0]}] [--print_config] "
        f"[{FULL_HELP}]",
        "",
        LIGHTNING_COMMANDS[command][:1].upper() + LIGHTNING_COMMANDS[command][1:],
        "",
        "Every key of the recipe is an option (--trainer.max_steps=400, --trainer.max_steps 400); these are the",
        f"ones changed most ({NAME}: a key of the recipe's data.train). Every option with its type and default:",
        f"{prog} {FULL_HELP}; the values a recipe gives them: {prog} -c RECIPE.yaml --print_config.",
    ]
    for left, text in rows:
        lines.append(f"{left:<{width}}  {text}" if text else f"\n{left}")
    return "\n".join(lines) + "\n"


def own_options() -> str:
    """unisent's own options of a Lightning command (no config keys), printed before ``--help-all``."""
    rows = [
        (f"  {o} {m}".rstrip(), t) for o, m, e, t in OPTIONS[0][1] if e is None and o.startswith("--") and "." not in o
    ]
    rows = [(left, text) for left, text in rows if "_" not in left]  # not Lightning's --ckpt_path, --print_config
    width = max(len(left) for left, _ in rows)
    return (
        "unisent's own options (besides Lightning's, below):\n"
        + "".join(f"{left:<{width}}  {text}\n" for left, text in rows)
        + "\n"
    )


def _lightning(argv: Sequence[str]) -> None:
    """``unisent fit|validate|test|predict``: user errors in one line (status 1; bad option or key: 2),
    Ctrl-C with how to resume (status 130; SIGTERM: 143; SIGUSR1: 138; a SLURM job stopped by either is
    requeued by rank 0 and exits 0); ``UNISENT_TRACEBACK=1``: the traceback."""
    import os

    words = list(argv)
    verbose = "--verbose" in words  # unisent's own option: everything Lightning and transformers print

    if verbose or FULL_HELP in words:  # --help-all: Lightning's own --help, every option
        if FULL_HELP in words:
            sys.stdout.write(own_options())
        words = ["--help" if w == FULL_HELP else w for w in words if w != "--verbose"]
    command = next((w for w in words if w in LIGHTNING_COMMANDS), None)
    prog = f"unisent {command}" if command else "unisent"
    traceback = os.environ.get(TRACEBACK_ENV, "").lower() not in ("", "0", "false", "no")
    from jsonargparse import ArgumentError

    from .commands.fitting import interrupt_message, requeue_if_preempted, requeue_lines, run_lightning
    from .commands.function_commands import config_error, describe_user_error, fail, user_error_in_chain
    from .commands.resume_discovery import NothingToTrain

    if command == "fit":
        from .commands import parts

        configs, rest = parts.split_words(words)
        if (found := parts.parts_recipe(configs)) is not None:  # a recipe of parts: trained, then merged
            return parts.main(found, rest)
    try:
        outcome = run_lightning(words, verbose=verbose)
    except ArgumentError as err:
        if traceback:
            raise
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
    if (interrupted := outcome.interrupted) is not None:
        if command == "fit":  # what the run left and the exact command that continues it
            outcome = requeue_if_preempted(outcome)  # (the same interrupt, with the requeue's result)
            print(f"\n{interrupt_message(prog, words, interrupted)}", file=sys.stderr)
            for line in requeue_lines(prog, words, outcome):
                print(line, file=sys.stderr)
        sys.exit(outcome.status)


#: Lightning's commands (LightningCLI over UnisentModule and UnisentDataModule): name -> one line of help (also
#: the summary of the command's own ``--help``)
LIGHTNING_COMMANDS: dict[str, str] = {
    "fit": "train a model from a recipe: unisent fit -c recipes/quickstart.yaml",
    "validate": "run the validation loop (model.evaluation.val_tasks) on a checkpoint",
    "test": "run the test loop (model.evaluation.test_tasks) on a checkpoint",
    "predict": "write the embeddings of data.predict",
}

#: the other commands: name -> (module, function taking argv)
EXTRA_COMMANDS: dict[str, tuple[str, str]] = {
    "evaluate": ("unisent.commands.evaluate", "main"),
    "data": ("unisent.commands.data", "main"),
    "export": ("unisent.commands.export", "main"),
    "encode": ("unisent.commands.encode", "main"),
    "sweep": ("unisent.commands.sweep", "main"),
    "retrofit": ("unisent.commands.retrofit", "main"),
    "ablate": ("unisent.commands.ablate", "main"),
    "convert-checkpoint": ("unisent.commands.convert", "main"),
    "merge": ("unisent.commands.merge", "main"),
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
    "merge": "merge runs that share a starting model into one (linear, task_arithmetic, ties, dare_ties)",
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
    return FULL_HELP not in words and any(word in HELP_WORDS for word in words)


def _load_plugins(words: list[str]) -> list[str]:
    """Take ``--import MODULE`` out of ``words`` and load the plugins (none for the short ``--help``); an
    error: one line, status 2 (a module of ``--import``) or 1 (an installed plugin)."""
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
