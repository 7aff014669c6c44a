"""Training as a function: ``run_lightning`` runs ``unisent fit|validate|test|predict`` (and ``ablate``'s
fits) on the words given; an interrupted run is not an error, its ``FitOutcome`` says what it left."""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from ..resume import Interrupt

__all__ = [
    "SUBCOMMANDS",
    "FitOutcome",
    "fit",
    "interrupt_message",
    "requeue_if_preempted",
    "requeue_lines",
    "run_lightning",
]

#: the signals a scheduler stops a job with: SLURM's time-limit warning and preemption, Kubernetes' eviction
PREEMPTION_SIGNALS = ("SIGUSR1", "SIGTERM")

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
    #: a SLURM job stopped by SIGTERM/SIGUSR1: the job (requeued by rank 0, see ``requeue_if_preempted``)
    requeued: str | None = None
    #: why ``scontrol requeue`` failed (``None``: it worked, or was not tried)
    requeue_failed: str | None = None
    #: the precision the Trainer trained in (``auto`` resolved for this machine; ``None`` when interrupted)
    precision: str | int | None = None

    @property
    def status(self) -> int:
        """The exit status of ``unisent fit``: 0, or 128 + the signal (SIGINT 130, SIGUSR1 138, SIGTERM 143).
        A preempted SLURM job exits 0 on every process (the requeued job goes on; a failing task could make
        ``srun`` kill the others before rank 0 requeues), 1 when ``scontrol requeue`` failed."""
        if self.interrupted is None:
            return 0
        if self.requeued is not None:
            return 1 if self.requeue_failed else 0
        import signal

        return 128 + int(getattr(signal, self.interrupted.signal or "SIGINT", signal.SIGINT))


def fit(config_files: Sequence[str | Path], overrides: Sequence[str] = (), *, verbose: bool = False) -> FitOutcome:
    """``unisent fit -c FILE ... OVERRIDES`` (later files, then ``overrides``, win): the run's
    ``FitOutcome``. Raises jsonargparse's ``ArgumentError`` for a bad option or key, ``NothingToTrain``
    for a finished run, and the recipe's, data's or checkpoint's own errors as they are."""
    words = ["fit"] + [word for path in config_files for word in ("-c", str(path))] + [str(o) for o in overrides]
    return run_lightning(words, verbose=verbose)


def run_lightning(argv: Sequence[str], *, verbose: bool = False) -> FitOutcome:
    """``unisent fit|validate|test|predict ...`` (``argv`` includes the command word), quiet unless
    ``verbose``; Ctrl-C or SIGTERM returns with ``interrupted`` set instead of raising."""
    from .train import TRAINER_DEFAULTS, FitInterrupted, UnisentCLI, UnisentSaveConfig, quiet, run_dir_of

    words = [str(word) for word in argv]
    command = next((word for word in words if word in SUBCOMMANDS), None)
    received: dict[str, str] = {}
    previous = _terminate_as_interrupt(received) if command == "fit" else {}
    try:
        with contextlib.nullcontext() if verbose else quiet():
            from ..data import UnisentDataModule
            from ..lightning_module import UnisentModule

            cli = UnisentCLI(
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
    except KeyboardInterrupt as err:
        found = err.interrupt if isinstance(err, FitInterrupted) else Interrupt()
        run_dir = err.run_dir if isinstance(err, FitInterrupted) else None
        name = found.signal or received.get("signal") or "SIGINT"
        checkpoint = Path(found.checkpoint) if found.checkpoint else None
        return FitOutcome(command, run_dir, checkpoint, replace(found, signal=name))
    finally:
        import signal

        for signum, handler in previous.items():
            signal.signal(signum, handler if handler is not None else signal.SIG_DFL)
    precision = getattr(cli.trainer, "precision_choice", None)
    last = getattr(getattr(cli.trainer, "checkpoint_callback", None), "last_model_path", None)
    checkpoint = Path(last) if last and Path(last).is_file() else None
    return FitOutcome(command, run_dir_of(cli.trainer), checkpoint, precision=precision)


def _terminate_as_interrupt(received: dict[str, str]) -> dict[int, Any]:
    """Until training starts, SIGTERM and SIGUSR1 stop ``fit`` as Ctrl-C does; during training the checkpoint
    callback takes them over (``unisent.resume.InterruptRequest``: finish the step, save, stop)."""
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread():
        return {}

    def handler(signum, frame):
        received["signal"] = signal.Signals(signum).name
        raise KeyboardInterrupt

    previous = {}
    for name in PREEMPTION_SIGNALS:
        signum = getattr(signal, name, None)
        if signum is not None and signal.getsignal(signum) is not signal.SIG_IGN:
            previous[signum] = signal.signal(signum, handler)  # restored when fit returns
    return previous


def requeue_if_preempted(outcome: FitOutcome) -> FitOutcome:
    """A ``fit`` that SIGTERM or SIGUSR1 stopped inside a SLURM batch job: rank 0 runs ``scontrol requeue``
    (every process has saved and stopped by then), so that the job's script runs again and its
    ``--ckpt_path last`` continues the run. Anywhere else: ``outcome`` unchanged."""
    from dataclasses import replace

    from ..resume import is_rank_zero, requeue_slurm_job, slurm_job_id

    job = slurm_job_id()
    if outcome.interrupted is None or outcome.interrupted.signal not in PREEMPTION_SIGNALS or job is None:
        return outcome
    failed = requeue_slurm_job(job) if is_rank_zero() else None
    return replace(outcome, requeued=job, requeue_failed=failed)


def requeue_lines(prog: str, words: Sequence[str], outcome: FitOutcome) -> list[str]:
    """What rank 0 says after ``requeue_if_preempted``: the requeue or why it failed, and a warning when
    the command would not continue the run (the requeued job runs the same command: it needs
    ``--ckpt_path last``, else it starts again from step 0)."""
    from ..resume import is_rank_zero

    if outcome.requeued is None or not is_rank_zero():
        return []
    if outcome.requeue_failed:
        return [f"{prog}: could not requeue SLURM job {outcome.requeued}: {outcome.requeue_failed}"]
    lines = [f"{prog}: requeued SLURM job {outcome.requeued}: its script runs again and continues this run"]
    ckpt = [w.split("=", 1)[1] for w in words if w.startswith("--ckpt_path=")]
    ckpt += [words[i + 1] for i, w in enumerate(words[:-1]) if w == "--ckpt_path"]
    if "last" not in ckpt:
        lines = [
            f"{prog}: warning: requeued SLURM job {outcome.requeued}, but this command has no --ckpt_path last: "
            "the requeued job will start the run again from step 0. Add --ckpt_path last to the job's command"
        ]
    return lines


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
