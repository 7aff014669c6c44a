"""Running an ablation: each run trained by ``unisent.commands.fitting.fit`` and scored on the panel, in
this process, ``--jobs N`` processes or W&B sweep trials; finished work is never redone."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import yaml

from ...io import atomic_write
from ..function_commands import CommandFailed, UsageError, config_error, describe_user_error, user_error_in_chain
from .plan import UNTRAINED, Run, run_recipe

MERGE = "merge"

__all__ = ["Study", "StudyInterrupted", "fit_run", "log_to_wandb", "run_all", "sweep_file", "trained", "write"]


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
    #: the units whose single runs the merge rows merge (``merged_units``; empty: no merge rows)
    merged_units: tuple[str, ...] = ()

    def result_path(self, run: Run) -> Path:
        return self.out / "results" / run.slug / f"seed{run.seed}.json"

    def write_recipe(self, run: Run) -> Path:
        """``OUT/recipes/<run>-seed<S>.yaml``, runnable with ``unisent fit -c``."""
        path = self.out / "recipes" / f"{run.slug}-seed{run.seed}.yaml"
        recipe = run_recipe(self.config, run, self.steps, self.out, self.conflict_every)
        write(path, yaml.safe_dump(recipe, sort_keys=False))
        return path

    def needs(self, run: Run) -> bool:
        """Whether ``run`` has no result yet, or one without some of the study's columns."""
        path = self.result_path(run)
        if not path.exists():
            return True
        scores = json.loads(path.read_text(encoding="utf-8")).get("scores", {})
        return any(c not in scores for c in self.columns)

    def execute(self, run: Run) -> dict[str, Any]:
        """Train (or continue, or merge) one run, score it on the panel and write its result file; a run
        scored before on fewer columns is scored on the missing ones only (nothing is trained again)."""
        result_path = self.result_path(run)
        if result_path.exists():
            result = json.loads(result_path.read_text(encoding="utf-8"))
            missing = [c for c in self.columns if c not in result["scores"]]
            if not missing:
                return result
            model, ckpt = result.get("model") or str(Path(result["folder"]) / "encoder"), None
            if result.get("folder"):
                ckpt = Path(result["folder"]) / "checkpoints" / "last.ckpt"
            return self._score(run, result, model, ckpt, missing)
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
            folder = self.out / "runs" / run.slug / f"seed{run.seed}"
            start = time.perf_counter()
            if run.kind == MERGE:
                result["merged"] = self._merge(run, folder)
            else:
                recipe_path = self.write_recipe(run)
                result["recipe"] = str(recipe_path)
                if not trained(folder, self.steps):  # trained to the end before: do not train again
                    result["precision"] = fit_run(recipe_path, run.key)  # what it trained in
            ckpt = folder / "checkpoints" / "last.ckpt"
            model = str(folder / "encoder") if (folder / "encoder").exists() else str(ckpt)  # stopped in its last step
            result |= {"steps": self.steps if run.kind != MERGE else 0, "folder": str(folder)}
            result["train_seconds"] = round(time.perf_counter() - start, 1)
        result = self._score(run, result, model, ckpt, self.columns)
        # scored (the entity column read them): not needed, unless a merge of this seed reads a single run's
        if not self.keep_checkpoints and run.kind != UNTRAINED and not (run.kind == "single" and self.merged_units):
            for path in (self.out / "runs" / run.slug / f"seed{run.seed}").rglob("*.ckpt"):
                path.unlink()
        return result

    def _score(
        self, run: Run, result: dict[str, Any], model: str, ckpt: Path | None, columns: list[str]
    ) -> dict[str, Any]:
        from ...evaluation.panel import evaluate_panel

        start = time.perf_counter()
        scores = evaluate_panel(
            model,
            columns,
            self.data_dir,
            ckpt=str(ckpt) if ckpt is not None and ckpt.exists() else None,
            entity_records=self.entity_records,
        )
        result["eval_seconds"] = round(result.get("eval_seconds", 0.0) + time.perf_counter() - start, 1)
        result["scores"] = {**result.get("scores", {}), **{c: scores[c].get("score") for c in columns}}
        result["details"] = {**result.get("details", {}), **scores}
        write(self.result_path(run), json.dumps(result, indent=1, default=str) + "\n")
        return result

    def merge_inputs(self, run: Run) -> list[Path]:
        """The run folders a merge row merges: the seed's single runs of ``merged_units``."""
        singles = [Run(f"only {u}", "single", (), run.balancer, run.seed) for u in self.merged_units]
        return [self.out / "runs" / r.slug / f"seed{run.seed}" for r in singles]

    def _merge(self, run: Run, folder: Path) -> dict[str, Any]:
        """``unisent merge`` of the seed's single runs into ``folder`` (weights 1, DARE seeded by the run's
        seed); a folder left by an interrupted merge is merged again."""
        from ...merging import merge_runs

        record = folder / "merge.json"
        if (folder / "encoder").exists() and record.exists():
            return json.loads(record.read_text(encoding="utf-8"))
        if folder.exists():
            shutil.rmtree(folder)
        inputs = self.merge_inputs(run)
        lost = [p for p in inputs if not (p / "checkpoints" / "last.ckpt").is_file()]
        if lost:
            raise CommandFailed(
                f"{run.key}: the single run {lost[0]} has no checkpoints/last.ckpt to merge (--runs single trains it)"
            )
        return merge_runs(inputs, folder, method=run.slug[len("merge-") :], seed=run.seed)


def trained(folder: Path, steps: int) -> bool:
    """Whether the run in ``folder`` is done: its ``encoder/`` saved, or its last checkpoint at ``steps`` (a signal
    in the last step stops the run after that checkpoint, before ``encoder/``; the checkpoint is then the model)."""
    from ...run_progress import checkpoint_progress

    if (folder / "encoder").is_dir():
        return True
    progress = checkpoint_progress(folder / "checkpoints" / "last.ckpt")
    return progress is not None and progress.global_step >= steps


def fit_run(recipe_path: Path, key: str) -> str | int | None:
    """``unisent fit -c RECIPE --ckpt_path last`` in this process, and the precision it trained in: user errors
    as ``CommandFailed``, Ctrl-C or SIGTERM as ``StudyInterrupted``."""
    from jsonargparse import ArgumentError

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
            f"interrupted ({stopped.signal}) in {key}; {left}; the same command continues (finished runs are kept, "
            "this one goes on from its last checkpoint)",
            outcome.status,
        )
    return outcome.precision


def log_to_wandb(result: dict[str, Any]) -> None:
    """Inside a W&B sweep trial, report the panel as the trial's metrics."""
    if not os.environ.get("WANDB_SWEEP_ID"):
        return
    import wandb

    active = wandb.run or wandb.init()
    active.log({f"panel/{k}": v for k, v in result["scores"].items() if v is not None})


def run_all(study: Study, planned: list[Run], jobs: int) -> list[dict[str, Any]]:
    """Every run of ``planned`` that has no result file yet (``jobs`` at a time); every run's result."""
    todo = [r for r in planned if study.needs(r)]
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
            r = _next_ready(waiting, [a[0] for a in active])
            if r is None:  # only merges wait, on single runs still training
                break
            waiting.remove(r)
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


def _next_ready(waiting: list[Run], active: list[Run]) -> Run | None:
    """The first waiting run whose inputs are done: a merge waits for its seed's single runs."""
    for r in waiting:
        pending = [o for o in (*waiting, *active) if o.kind == "single" and o.seed == r.seed]
        if r.kind != MERGE or not pending:
            return r
    return None


def sweep_file(recipe: str, out: Path, runs: list[Run], args: list[str], columns: list[str]) -> Path:
    """A W&B sweep (grid over run and seed) whose trials are ``unisent ablate ... --run X --seed S``."""
    sweep = {
        "method": "grid",
        "metric": {"name": f"panel/{columns[0]}", "goal": "maximize"},
        "parameters": {
            # the untrained row is evaluated and the merges made when tabulating (a merge needs its single runs)
            "run": {"values": sorted({r.slug for r in runs if r.kind not in (UNTRAINED, MERGE)})},
            "seed": {"values": sorted({r.seed for r in runs})},
        },
        "command": ["${env}", "unisent", "ablate", recipe, *args, "${args}"],
    }
    path = out / "sweep.yaml"
    write(path, yaml.safe_dump(sweep, sort_keys=False))
    return path
