"""Training as a function: :func:`run_lightning` runs ``unisent fit|validate|test|predict`` (and ``ablate``'s
fits) on the words given; an interrupted run is not an error, its :class:`FitOutcome` says what it left."""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from ..resume import Interrupt

__all__ = ["SUBCOMMANDS", "FitOutcome", "fit", "interrupt_message", "run_lightning"]

#: Lightning's commands
SUBCOMMANDS = ("fit", "validate", "test", "predict")


@dataclass(frozen=True)
class FitOutcome:
    """What a Lightning command left: its first logger's run directory, its ``last.ckpt`` (each ``None``
    when there is none) and, when a signal stopped it, what the interruption left."""

    command: str | None
    run_dir: Path | None = None
    checkpoint: Path | None = None
    interrupted: Interrupt | None = None

    @property
    def status(self) -> int:
        """The exit status of ``unisent fit``: 0, or 130 after SIGINT and 143 after SIGTERM (128 + signal)."""
        if self.interrupted is None:
            return 0
        return 143 if self.interrupted.signal == "SIGTERM" else 130


def fit(config_files: Sequence[str | Path], overrides: Sequence[str] = (), *, verbose: bool = False) -> FitOutcome:
    """``unisent fit -c FILE ... OVERRIDES`` (later files, then ``overrides``, win): the run's
    :class:`FitOutcome`. Raises jsonargparse's ``ArgumentError`` for a bad option or key, ``NothingToTrain``
    for a finished run, and the recipe's, data's or checkpoint's own errors as they are."""
    words = ["fit"] + [word for path in config_files for word in ("-c", str(path))] + [str(o) for o in overrides]
    return run_lightning(words, verbose=verbose)


def run_lightning(argv: Sequence[str], *, verbose: bool = False) -> FitOutcome:
    """``unisent fit|validate|test|predict ...`` (``argv`` includes the command word), quiet unless
    ``verbose``; Ctrl-C or SIGTERM returns with ``interrupted`` set instead of raising."""
    from .train import FitInterrupted, quiet, run_dir_of

    words = [str(word) for word in argv]
    command = next((word for word in words if word in SUBCOMMANDS), None)
    received: dict[str, str] = {}
    previous = _terminate_as_interrupt(received) if command == "fit" else None
    try:
        with contextlib.nullcontext() if verbose else quiet():
            cli = _cli(words, verbose)
    except KeyboardInterrupt as err:
        found = err.interrupt if isinstance(err, FitInterrupted) else Interrupt()
        run_dir = err.run_dir if isinstance(err, FitInterrupted) else None
        name = found.signal or received.get("signal") or "SIGINT"
        checkpoint = Path(found.checkpoint) if found.checkpoint else None
        return FitOutcome(command, run_dir, checkpoint, replace(found, signal=name))
    finally:
        if previous is not None:
            import signal

            signal.signal(signal.SIGTERM, previous)
    return FitOutcome(command, run_dir_of(cli.trainer), _last_checkpoint(cli.trainer))


def _cli(words: list[str], verbose: bool):
    from ..data import UnisentDataModule
    from ..lightning_module import UnisentModule
    from .train import TRAINER_DEFAULTS, UnisentCLI, UnisentSaveConfig

    return UnisentCLI(
        UnisentModule,
        UnisentDataModule,
        save_config_callback=UnisentSaveConfig,
        trainer_defaults=TRAINER_DEFAULTS if verbose else {**TRAINER_DEFAULTS, "enable_model_summary": False},
        save_config_kwargs={"overwrite": True},
        auto_configure_optimizers=False,
        args=words,
        verbose=verbose,
        # errors raise (one line in unisent.cli, not the usage block); no abbreviation: `--trainer.max_step`
        parser_kwargs={
            "exit_on_error": False,
            "allow_abbrev": False,
            **{name: {"exit_on_error": False, "allow_abbrev": False} for name in SUBCOMMANDS},
        },
    )


def _last_checkpoint(trainer: Any) -> Path | None:
    path = getattr(getattr(trainer, "checkpoint_callback", None), "last_model_path", None)
    return Path(path) if path and Path(path).is_file() else None


def _terminate_as_interrupt(received: dict[str, str]) -> Any:
    """Until training starts, SIGTERM stops ``fit`` as Ctrl-C does; during training the checkpoint callback
    takes both over (:class:`unisent.resume.InterruptRequest`: finish the step, save, stop)."""
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread() or signal.getsignal(signal.SIGTERM) is signal.SIG_IGN:
        return None

    def handler(signum, frame):
        received["signal"] = signal.Signals(signum).name
        raise KeyboardInterrupt

    return signal.signal(signal.SIGTERM, handler)  # the previous handler, restored when fit returns


def interrupt_message(prog: str, words: Sequence[str], interrupt: Interrupt) -> str:
    """One line: what an interrupted ``fit`` (run with ``words``) left and the command that continues it."""
    import shlex

    name = interrupt.signal or "SIGINT"
    rest = [
        w for i, w in enumerate(words) if not (w.startswith("--ckpt_path") or (i and words[i - 1] == "--ckpt_path"))
    ]
    if interrupt.checkpoint is None:
        return (
            f"{prog}: interrupted ({name}) before a checkpoint was saved; nothing to resume. Start again with: "
            f"{shlex.join(['unisent', *rest])}"
        )
    saved = (
        f"saved {interrupt.checkpoint} at step {interrupt.step}"
        if interrupt.step is not None and not interrupt.now
        else f"its last checkpoint is {interrupt.checkpoint}"
    )
    pin = [f"--trainer.logger.init_args.version={interrupt.version}"] if interrupt.version else []
    return (
        f"{prog}: interrupted ({name}); {saved}; continue this run with: "
        f"{shlex.join(['unisent', *rest, *pin, '--ckpt_path', 'last'])}"
    )
