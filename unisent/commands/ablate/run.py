"""Running an ablation: each run trained by :func:`unisent.commands.fitting.fit` and scored on the panel, in
this process, ``--jobs N`` processes or W&B sweep trials; finished work is never redone."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import yaml

from ...io import atomic_write
from ..function_commands import CommandFailed, UsageError
from .plan import UNTRAINED, Run, run_recipe

__all__ = ["Study", "StudyInterrupted", "fit_run", "log_to_wandb", "run_all", "sweep_file", "write"]


class StudyInterrupted(Exception):
    """Ctrl-C or SIGTERM stopped a run's fit; ``status``: ``unisent fit``'s (130, or 143 after SIGTERM)."""

    def __init__(self, message: str, status: int) -> None:
        super().__init__(message)
        self.status = status


def write(path: Path, text: str) -> None:
    with atomic_write(path) as f:
        f.write(text)


@dataclass(frozen=True)
class Study:
    """What every run of one ablation shares (``passed``: the options of a ``--run``/``--seed`` process)."""

    recipe: Path
    config: dict[str, Any]
    out: Path
    steps: int
    columns: list[str]
    data_dir: str | None
    conflict_every: int
    entity_records: str | None
    passed: list[str]
    keep_checkpoints: bool = True

    def result_path(self, run: Run) -> Path:
        return self.out / "results" / run.slug / f"seed{run.seed}.json"

    def write_recipe(self, run: Run) -> Path:
        """``OUT/recipes/<run>-seed<S>.yaml``, runnable with ``unisent fit -c``."""
        path = self.out / "recipes" / f"{run.slug}-seed{run.seed}.yaml"
        recipe = run_recipe(self.config, run, self.steps, self.out, self.conflict_every)
        write(path, yaml.safe_dump(recipe, sort_keys=False))
        return path

    def execute(self, run: Run) -> dict[str, Any]:
        """Train (or continue) one run, score it on the panel and write its result file."""
        result_path = self.result_path(run)
        if result_path.exists():
            return json.loads(result_path.read_text(encoding="utf-8"))
        result: dict[str, Any] = {"run": asdict(run), "row": run.row, "train_seconds": 0.0}
        if run.kind == UNTRAINED:
            model = ((self.config.get("model") or {}).get("encoder") or {}).get("model")
            if not model:
                raise UsageError(
                    "the recipe names no model.encoder.model: no untrained row (leave out --runs untrained)"
                )
            result |= {"steps": 0, "model": model}
            ckpt = None
        else:
            recipe_path = self.write_recipe(run)
            folder = self.out / "runs" / run.slug / f"seed{run.seed}"
            start = time.perf_counter()
            if not (folder / "encoder").exists():  # trained to the end before: do not train again
                fit_run(recipe_path, run.key)
            model, ckpt = str(folder / "encoder"), folder / "checkpoints" / "last.ckpt"
            result |= {"steps": self.steps, "recipe": str(recipe_path), "folder": str(folder)}
            result["train_seconds"] = round(time.perf_counter() - start, 1)
        from ...evaluation.panel import evaluate_panel

        start = time.perf_counter()
        scores = evaluate_panel(
            model,
            self.columns,
            self.data_dir,
            ckpt=str(ckpt) if ckpt is not None and ckpt.exists() else None,
            entity_records=self.entity_records,
        )
        result["eval_seconds"] = round(time.perf_counter() - start, 1)
        result |= {"scores": {c: scores[c].get("score") for c in self.columns}, "details": scores}
        write(result_path, json.dumps(result, indent=1, default=str) + "\n")
        if not self.keep_checkpoints and run.kind != UNTRAINED:  # scored (the entity column read them): not needed
            for path in (self.out / "runs" / run.slug / f"seed{run.seed}").rglob("*.ckpt"):
                path.unlink()
        return result


def fit_run(recipe_path: Path, key: str) -> None:
    """``unisent fit -c RECIPE --ckpt_path last`` in this process: user errors as :class:`CommandFailed`,
    Ctrl-C or SIGTERM as :class:`StudyInterrupted`."""
    from jsonargparse import ArgumentError

    from ..config_errors import config_error, describe_user_error, user_error_in_chain
    from ..fitting import fit
    from ..resume_discovery import NothingToTrain

    try:
        outcome = fit([recipe_path], ["--ckpt_path", "last"])
    except ArgumentError as err:
        raise CommandFailed(f"{key}: {recipe_path}: {config_error(str(err), ['-c', str(recipe_path)])}") from err
    except NothingToTrain as err:
        raise CommandFailed(f"{key}: {err}") from err
    except Exception as err:
        cause = user_error_in_chain(err)
        if cause is None:
            raise
        raise CommandFailed(f"{key}: unisent fit -c {recipe_path}: {describe_user_error(cause)}") from err
    stopped = outcome.interrupted
    if stopped is not None:
        left = f"its last checkpoint is {stopped.checkpoint}" if stopped.checkpoint else "no checkpoint was saved"
        raise StudyInterrupted(
            f"interrupted ({stopped.signal}) in {key}; {left}; the same command continues the study (finished runs "
            "are kept, this one goes on from its last checkpoint)",
            outcome.status,
        )


def log_to_wandb(result: dict[str, Any]) -> None:
    """Inside a W&B sweep trial, report the panel as the trial's metrics."""
    if not os.environ.get("WANDB_SWEEP_ID"):
        return
    import wandb

    active = wandb.run or wandb.init()
    active.log({f"panel/{k}": v for k, v in result["scores"].items() if v is not None})


def run_all(study: Study, planned: list[Run], jobs: int) -> list[dict[str, Any]]:
    """Every run of ``planned`` that has no result file yet (``jobs`` at a time); every run's result."""
    todo = [r for r in planned if not study.result_path(r).exists()]
    done = len(planned) - len(todo)
    if done:
        print(f"unisent ablate: {done} of {len(planned)} runs already done, {len(todo)} to run", file=sys.stderr)
    if jobs == 1:
        for i, r in enumerate(todo, 1):
            print(f"unisent ablate: [{done + i}/{len(planned)}] {r.key}", file=sys.stderr)
            study.execute(r)
    else:
        _run_parallel(study, todo, jobs)
    return [json.loads(study.result_path(r).read_text(encoding="utf-8")) for r in planned]


def _run_parallel(study: Study, todo: list[Run], jobs: int) -> None:
    """``jobs`` runs at a time, each a ``unisent ablate --run --seed`` process with its share of the CPUs."""
    threads = max(1, (os.cpu_count() or 1) // jobs)
    env = dict(os.environ, OMP_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads))
    waiting = list(todo)
    active: list[tuple[Run, subprocess.Popen, Any]] = []
    failed = []
    while waiting or active:
        while waiting and len(active) < jobs:
            r = waiting.pop(0)
            log = study.out / "logs" / f"{r.slug}-seed{r.seed}.log"
            log.parent.mkdir(parents=True, exist_ok=True)
            cmd = [sys.executable, "-m", "unisent.cli", "ablate", str(study.recipe), *study.passed, f"--run={r.slug}"]
            cmd.append(f"--seed={r.seed}")
            handle = log.open("a", encoding="utf-8")
            print(f"unisent ablate: started {r.key} (log: {log})", file=sys.stderr)
            active.append((r, subprocess.Popen(cmd, stdout=handle, stderr=subprocess.STDOUT, env=env), handle))
        time.sleep(2)
        for item in list(active):
            r, proc, handle = item
            if proc.poll() is not None:
                handle.close()
                active.remove(item)
                if proc.returncode != 0:
                    failed.append(f"{r.key} (status {proc.returncode}, log {study.out / 'logs'})")
                print(f"unisent ablate: finished {r.key} (status {proc.returncode})", file=sys.stderr)
    if failed:
        raise RuntimeError(f"{len(failed)} run(s) failed: {'; '.join(failed)}; run the same command again to retry")


def sweep_file(recipe: str, out: Path, runs: list[Run], args: list[str], columns: list[str]) -> Path:
    """A W&B sweep (grid over run and seed) whose trials are ``unisent ablate ... --run X --seed S``."""
    sweep = {
        "method": "grid",
        "metric": {"name": f"panel/{columns[0]}", "goal": "maximize"},
        "parameters": {
            "run": {"values": sorted({r.slug for r in runs if r.kind != UNTRAINED})},  # evaluated when tabulating
            "seed": {"values": sorted({r.seed for r in runs})},
        },
        "command": ["${env}", "unisent", "ablate", recipe, *args, "${args}"],
    }
    path = out / "sweep.yaml"
    write(path, yaml.safe_dump(sweep, sort_keys=False))
    return path
