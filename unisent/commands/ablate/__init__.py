"""``unisent ablate RECIPE`` (docs/training.md, "Ablations"): the options and modes; ``plan`` (the runs and their
recipes), ``run`` (training and scoring) and ``summarise`` (intervals, tables, verdicts, plot)."""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml

from ..function_commands import UsageError, call, command_parser, fail, parse
from .plan import (
    KINDS,
    MERGES,
    UNTRAINED,
    balancer_spec,
    groups,
    merged_units,
    objective_names,
    panel_columns,
    panel_targets,
    plan,
    run_steps,
)
from .run import Study, StudyInterrupted, log_to_wandb, run_all, sweep_file, write
from .summarise import best_balancer, publish, summarize, target_verdicts

__all__ = ["ablate", "main"]


def ablate(
    recipe: str,
    *,
    out: str = "runs/ablate",
    seeds: list[int] | None = None,
    balancers: list[str] | None = None,
    runs: list[str] | None = None,
    group: list[str] | None = None,
    leave_out: list[str] | None = None,
    merges: list[str] | None = None,
    steps: int | None = None,
    columns: list[str] | None = None,
    data_dir: str | None = None,
    conflict_every: int = 10,
    entity_records: str | None = None,
    jobs: int = 1,
    sweep: bool = False,
    run: str | None = None,
    seed: int | None = None,
    dry_run: bool = False,
    tabulate: bool = False,
    keep_checkpoints: bool = True,
    precision: str | None = None,
) -> dict[str, Any]:
    """Train a multi-objective recipe unified, each objective alone and leave-one-out, over seeds, and tabulate.

    Writes OUT/ablation.md (mean and 95% interval over seeds per cell), OUT/ablation.json and
    OUT/ablation.png. The same command resumes: finished runs are kept, an interrupted one continues.

    Args:
        recipe: a recipe YAML with at least two objectives
        out: folder of the generated recipes, runs, results and the table
        seeds: seeds of every run (default: 42 43 44)
        balancers: balancers of the unified runs (static, uncertainty, dwa, pcgrad, upgrad, mgda, imtlg, anchored
            or a class path; default static); the single and leave-one-out runs use the first
        runs: untrained (the starting encoder, evaluated once), unified, single, leave-one-out, merge (the
            seed's single runs merged by `unisent merge`, one row per --merges method; needs single)
            (default: all but merge)
        group: objectives that count as one, NAME=a,b (e.g. cmlm=cmlm,bitext); repeatable
        leave_out: the leave-one-out rows only of these objectives (or groups); default: every one
        merges: the merge rows' methods (linear, task_arithmetic, ties, dare_ties; default: all four), each with
            weights 1 and the method's default density; they merge the single runs of the objectives that have an
            own column (model.evaluation.panel_own), every objective when it names none
        steps: optimiser steps of every run (default: the recipe's trainer.max_steps)
        columns: panel columns (default: the recipe's model.evaluation.panel)
        data_dir: root of the evaluation data (../shared/data layout)
        conflict_every: log gradient conflicts every N steps in the multi-objective runs (0: never)
        entity_records: held-out sentence-entity records of the entity columns (default: the bundled FewRel ones)
        jobs: runs at a time (each gets CPUs / jobs threads)
        sweep: write OUT/sweep.yaml for `unisent sweep` (W&B) instead of running
        run: only this run (its folder name, e.g. unified-pcgrad or only-ease); with --seed
        seed: only this seed (with --run)
        dry_run: write every run's recipe to OUT/recipes and list the runs (done or to run); train nothing. With
            --run and --seed: that run only
        tabulate: the table of the runs that have a result file, training and merging nothing; the planned runs
            without one are named under the table (a study stopped early; a row's seeds column counts its runs)
        keep_checkpoints: keep each run's checkpoints (~0.8 GB per unified run) after it is scored;
            --no-keep-checkpoints deletes them once its result file is written (encoder/ and logs stay)
        precision: every run's training precision (fp32, bf16 or a Lightning name; default: the recipe's
            trainer.precision). A study whose seeds run on different machines pins it: ``auto`` picks bf16 on a
            CPU with AVX512-BF16 or AMX and fp32 elsewhere. Each result file records the precision it trained in
    """
    recipe_path = Path(recipe)
    config = _read_recipe(recipe_path, precision)
    # --run/--seed (a --jobs worker or a sweep trial): its seed is the plan's
    seeds = [seed] if seed is not None else list(seeds or [42, 43, 44])
    balancers = list(balancers or ["static"])
    kinds = list(runs or (UNTRAINED, "unified", "single", "leave-one-out"))
    merges = _check_options(balancers, kinds, jobs, list(merges or MERGES))
    folder = Path(out)
    options = {
        "out": out,
        "conflict_every": conflict_every,
        "group": group or [],
        "leave_out": leave_out or [],
        "balancers": balancers,
        "merges": merges if "merge" in kinds else [],
        "data_dir": data_dir,
        "entity_records": entity_records,
        "keep_checkpoints": keep_checkpoints,
        "precision": precision,
    }
    planned = plan(config, seeds, balancers, kinds, group or [], leave_out or [], merges)
    steps = run_steps(config, steps)
    chosen = panel_columns(config, columns)
    targets = panel_targets(config, chosen)
    own = dict(((config.get("model") or {}).get("evaluation") or {}).get("panel_own") or {})
    units = groups(objective_names(config), group or [])
    passed = _passed(steps, chosen, **options)
    merged = tuple(merged_units(config, units)) if "merge" in kinds else ()
    study = Study(
        recipe_path,
        config,
        folder,
        steps,
        chosen,
        data_dir,
        conflict_every,
        entity_records,
        passed,
        keep_checkpoints,
        merged,
    )
    if sweep:
        path = sweep_file(str(recipe_path), folder, planned, passed, chosen)
        print(f"unisent ablate: {len(planned)} runs as a W&B sweep: unisent sweep {path}", file=sys.stderr)
        return {"sweep": str(path), "runs": [r.key for r in planned]}
    if run is not None or seed is not None:
        if run is None or seed is None:
            raise UsageError("--run and --seed go together (one run of the ablation)")
        match = [r for r in planned if r.slug == run and r.seed == seed]
        if not match:
            raise UsageError(
                f"no run {run!r} with seed {seed}; the runs are {', '.join(sorted({r.slug for r in planned}))}"
            )
        if not dry_run:
            result = study.execute(match[0])
            log_to_wandb(result)
            return result
        planned = match  # --dry_run with --run: that run's recipe and state, nothing trained
    if dry_run:
        for r in planned:
            state = "to run" if study.needs(r) else "done"
            recipe_file = "" if r.kind in (UNTRAINED, "merge") else str(study.write_recipe(r))
            print(f"{r.key:36s} {r.row:26s} {state:7s} {recipe_file}")
        return {"runs": [r.key for r in planned]}
    missing = [r.key for r in planned if not study.result_path(r).exists()] if tabulate else []
    results = run_all(study, [r for r in planned if r.key not in missing], jobs)
    rows = summarize(results, chosen)
    summary = {"recipe": str(recipe_path), "steps": steps, "seeds": seeds, "columns": chosen, "rows": rows}
    # the summary's judgements of its rows: the best balancer, and each row against the panel's targets
    summary["best_balancer"] = best_balancer(rows, own)
    if targets:
        summary["targets"] = target_verdicts(rows, targets, own, units)
    # what the table is made of besides the rows, so that ablation.json alone writes it again
    summary |= {"own": own, "units": {u: list(m) for u, m in units.items()}, "panel_targets": targets}
    # the command line that ran the study
    command = ["unisent", "ablate", str(recipe_path), *passed, "--seeds", *map(str, seeds), "--runs", *kinds]
    summary["command"] = " ".join(command) + (" --tabulate" if tabulate else "")
    if missing:
        summary["missing"] = missing
    write(folder / "ablation.json", json.dumps(summary, indent=1) + "\n")
    text = publish(summary, folder)
    print(text)
    print(f"unisent ablate: {len(results)} runs; table in {folder / 'ablation.md'}", file=sys.stderr)
    return summary


def _read_recipe(path: Path, precision: str | None) -> dict[str, Any]:
    """The recipe, with ``--precision`` as every run's ``trainer.precision`` when given."""
    if not path.is_file():
        raise FileNotFoundError(f"no recipe {path}")
    config = yaml.safe_load(path.read_text(encoding="utf-8"))
    if not isinstance(config, dict):
        raise UsageError(f"{path} is not a recipe (a YAML mapping with model:, data:, trainer:)")
    if precision is not None:
        from ...hardware import LIGHTNING_PRECISIONS, PRECISIONS

        if precision not in PRECISIONS + LIGHTNING_PRECISIONS:  # before any run starts, not in each run's Trainer
            raise UsageError(
                f"--precision {precision!r}: one of {', '.join(PRECISIONS)}, "
                f"or Lightning's {', '.join(n for n in LIGHTNING_PRECISIONS if n not in PRECISIONS)}"
            )
        config.setdefault("trainer", {})["precision"] = precision
    return config


def _check_options(balancers: list[str], kinds: list[str], jobs: int, merges: list[str]) -> list[str]:
    """Each mistake in the run options one line (``UsageError``); the merge methods."""
    for name in balancers:
        balancer_spec(name)
    bad = [k for k in kinds if k not in (UNTRAINED, *KINDS)]
    if bad:
        raise UsageError(f"--runs: {', '.join(bad)} not one of {UNTRAINED}, {', '.join(KINDS)}")
    if jobs < 1:
        raise UsageError("--jobs must be >= 1")
    unknown = [m for m in merges if m not in MERGES]
    if unknown:
        raise UsageError(f"--merges: {', '.join(unknown)} not one of {', '.join(MERGES)}")
    if "merge" in kinds and "single" not in kinds:
        raise UsageError("--runs merge merges the single runs of each seed: add single to --runs")
    return merges


#: the options every run of the study is started with, in this order (``_passed``)
PASSED = ("out", "steps", "conflict_every", "group", "leave_out", "balancers", "merges", "columns", "data_dir")
PASSED += ("entity_records", "no_keep_checkpoints", "precision")


def _passed(steps: int, columns: Sequence[str], **options: Any) -> list[str]:
    """The options every run of the study is started with (``--jobs`` workers, sweep trials, the summary's command):
    ``--KEY=VALUE`` in the order of ``PASSED``, a list's once per item, ``None`` or empty left out, and
    ``--no_keep_checkpoints`` for ``keep_checkpoints`` false."""
    values = {**options, "steps": steps, "columns": columns, "no_keep_checkpoints": not options["keep_checkpoints"]}
    passed = []
    for key in PASSED:
        value = values.get(key)
        for v in value if isinstance(value, (list, tuple)) else [value]:
            if v is not None and v is not False and v != "":
                passed.append(f"--{key}" if v is True else f"--{key}={v}")
    return passed


#: options that wrote this project's results pages; they live in its studies/ folder now (not in the package)
MOVED_OPTIONS = ("--page", "--block", "--from_json", "--from-json")


def main(argv: Sequence[str]) -> None:
    for word in argv:
        option = word.split("=", 1)[0]
        if option in MOVED_OPTIONS:
            fail(
                "unisent ablate",
                f"{option} moved out of unisent ablate: this project's results pages are written from "
                "OUT/ablation.json by `python -m studies.ablation_pages` in the repository (its --help says how)",
            )
    values = parse(command_parser(ablate, "unisent ablate"), list(argv))
    try:
        call(ablate, values, "unisent ablate")
    except StudyInterrupted as stopped:
        print(f"\nunisent ablate: {stopped}", file=sys.stderr)
        sys.exit(stopped.status)
