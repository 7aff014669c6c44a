"""The ``unisent`` command: Lightning's CLI (fit/validate/test/predict) plus unisent's own commands."""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence

from lightning.pytorch.cli import LightningCLI

from .data import UnisentDataModule
from .module import UnisentModule

__all__ = ["UnisentCLI", "main"]

TRAINER_DEFAULTS = {
    "max_epochs": 1,
    "num_sanity_val_steps": 0,
    "log_every_n_steps": 10,
    "logger": {"class_path": "lightning.pytorch.loggers.CSVLogger", "init_args": {"save_dir": "runs", "name": "unisent"}},
}


class UnisentCLI(LightningCLI):
    """LightningCLI over :class:`UnisentModule` and :class:`UnisentDataModule`.

    Adds a ``checkpoint:`` section (Lightning's ModelCheckpoint) that by default keeps the best
    checkpoint by ``val/score`` (the mean main score of ``model.evaluation.val_tasks``) as
    ``checkpoints/best.ckpt`` and the last one as ``checkpoints/last.ckpt``.
    """

    def add_arguments_to_parser(self, parser) -> None:
        from lightning.pytorch.callbacks import ModelCheckpoint

        parser.add_lightning_class_args(ModelCheckpoint, "checkpoint")
        parser.set_defaults(
            {"checkpoint.monitor": "val/score", "checkpoint.mode": "max", "checkpoint.filename": "best",
             "checkpoint.save_last": True, "checkpoint.save_top_k": 1}
        )


def _lightning(argv: Sequence[str] | None) -> None:
    UnisentCLI(
        UnisentModule,
        UnisentDataModule,
        trainer_defaults=TRAINER_DEFAULTS,
        save_config_kwargs={"overwrite": True},
        auto_configure_optimizers=False,
        args=None if argv is None else list(argv),
    )


# Commands that are not Lightning's: name -> (module, function). Each function takes argv.
EXTRA_COMMANDS: dict[str, tuple[str, str]] = {
    "evaluate": ("unisent.commands.evaluate", "main"),
    "data": ("unisent.commands.data", "main"),
    "export": ("unisent.commands.export", "main"),
    "encode": ("unisent.commands.encode", "main"),
}


def main(argv: Sequence[str] | None = None) -> None:
    words = list(sys.argv[1:] if argv is None else argv)
    if words and words[0] in EXTRA_COMMANDS:
        import importlib

        module_name, func = EXTRA_COMMANDS[words[0]]
        command: Callable[[list[str]], None] = getattr(importlib.import_module(module_name), func)
        command(words[1:])
        return
    _lightning(argv)


if __name__ == "__main__":
    main()
