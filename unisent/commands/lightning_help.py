"""``unisent fit|validate|test|predict --help``: the options users change, in about 50 lines and without
importing torch or Lightning (so it answers at once); ``--help-all`` prints Lightning's full tree of every
option with its type and default (~800 lines, several seconds).

The options come from :data:`OPTIONS`, each with an example value: ``tests/test_cli.py`` passes every
option with its example to the real parser (``--print_config``) and checks that the value lands under
that key, so this list cannot name an option that does not exist.
"""

from __future__ import annotations

__all__ = ["FULL_HELP", "HELP_WORDS", "OPTIONS", "own_options", "short_help"]

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

#: ``(section, [(option, metavar, example value, help)])``; an example of ``None``: a flag, or an option
#: that is not a key of the config (``--config``, ``--print_config``, ``--verbose``, ``--import``, ``--help-all``)
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
            ("--model.warmup_ratio", "X", "0.05", "linear warm-up over this fraction of the steps"),
            ("--model.balancer", "CLASS", "unisent.balancers.PCGrad", "how several objectives' gradients combine"),
            ("--model.cache_chunk", "N", "64", "GradCache: in-batch objectives encode N rows at a time (any batch)"),
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

_SUMMARY = {
    "fit": "Train a model from a recipe: unisent fit -c recipes/quickstart.yaml",
    "validate": "Run the validation loop (model.evaluation.val_tasks) on a checkpoint.",
    "test": "Run the test loop (model.evaluation.test_tasks) on a checkpoint.",
    "predict": "Write the embeddings of data.predict.",
}


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
        _SUMMARY[command],
        "",
        "Every key of the recipe is an option (--trainer.max_steps=400, --trainer.max_steps 400); these are the",
        f"ones changed most ({NAME}: a key of the recipe's data.train). Every option with its type and default:",
        f"{prog} {FULL_HELP}; the values a recipe gives them: {prog} -c RECIPE.yaml --print_config.",
    ]
    for left, text in rows:
        lines.append(f"{left:<{width}}  {text}" if text else f"\n{left}")
    return "\n".join(lines) + "\n"


def own_options() -> str:
    """unisent's own options of a Lightning command, which are no keys of the config and so are not in
    Lightning's full help: printed before it by ``--help-all``."""
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
