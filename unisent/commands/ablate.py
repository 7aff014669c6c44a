"""``unisent ablate RECIPE``: what each objective of a multi-objective recipe brings, over seeds.

From one recipe with several objectives it generates and runs

- ``unified``: the recipe as it is, once per balancer of ``--balancers`` (:mod:`unisent.balancers`);
- ``only-<o>``: each objective (or ``--group``) alone;
- ``without-<o>``: the recipe without it (leave-one-out);

each over every seed of ``--seeds``, with the same data, batch sizes, settings and number of optimiser
steps (``--steps``; the single-objective and leave-one-out runs use the first balancer listed). Every
run is scored on the panel columns the recipe declares (``model.evaluation.panel``, columns of
:mod:`unisent.evaluation.panel`), and the command writes ``ablation.md`` (a table: mean and 95%
interval over seeds per cell, Student's t), ``ablation.json`` and ``ablation.png`` in ``--out``.
Where the recipe names each objective's own column (``model.evaluation.panel_own``), the table also
compares each objective's own column inside the combination (best balancer) with the objective alone;
where it names targets (``model.evaluation.panel_targets: {column: minimum}``), a second table says for
every balancer which targets its mean over seeds meets, by how much each is met or missed, and whether
every own column is within the single-objective interval.

Runs go one after another (``--jobs N``: N at a time), or as a W&B sweep (``--sweep``: writes a sweep
file for ``unisent sweep`` whose trials are ``unisent ablate ... --run NAME --seed S``). The command
resumes where it stopped: a run with its result file is not run again, a finished fit is not trained
again, and an interrupted fit continues from its ``last.ckpt``.

    unisent ablate recipes/unified/minilm-cpu-balanced.yaml --group cmlm=cmlm,bitext \\
        --balancers static uncertainty pcgrad --seeds 42 43 44 --data-dir ../shared/data --out runs/ablate
"""

from __future__ import annotations

import copy
import json
import math
import os
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import yaml

from ..io import atomic_write
from ._cli import UsageError, call, command_parser, parse

__all__ = ["BALANCERS", "Run", "ablate", "interval", "main", "plan", "run_recipe", "summarize"]

#: short names of ``--balancers`` (a class path works too)
BALANCERS: dict[str, dict[str, Any]] = {
    "static": {"class_path": "unisent.balancers.Static"},
    "uncertainty": {"class_path": "unisent.balancers.Uncertainty"},
    "dwa": {"class_path": "unisent.balancers.DWA"},
    "pcgrad": {"class_path": "unisent.balancers.PCGrad"},
    "upgrad": {"class_path": "unisent.balancers.JacobianAggregator", "init_args": {"aggregator": "UPGrad"}},
    "mgda": {"class_path": "unisent.balancers.JacobianAggregator", "init_args": {"aggregator": "MGDA"}},
    "imtlg": {"class_path": "unisent.balancers.JacobianAggregator", "init_args": {"aggregator": "IMTLG"}},
}
KINDS = ("unified", "single", "leave-one-out")
#: the reference row: the recipe's starting encoder, not trained (one evaluation, no seed)
UNTRAINED = "untrained"


@dataclass(frozen=True)
class Run:
    """One training run of the ablation: its row name, the objectives it trains, balancer and seed."""

    row: str  # "unified (pcgrad)", "only ease", "without ease"
    kind: str  # unified | single | leave-one-out
    objectives: tuple[str, ...]
    balancer: str
    seed: int

    @property
    def slug(self) -> str:
        if self.kind == UNTRAINED:
            return UNTRAINED
        base = {"unified": f"unified-{self.balancer}", "single": "only-", "leave-one-out": "without-"}[self.kind]
        if self.kind != "unified":
            base += self.row.split(" ", 1)[1].replace(" ", "")
        return base.replace("/", "_")

    @property
    def key(self) -> str:
        return f"{self.slug}/seed{self.seed}"


def _objective_names(config: dict[str, Any]) -> list[str]:
    from ..io import import_object

    names = []
    for spec in config.get("model", {}).get("objectives") or []:
        name = (spec.get("init_args") or {}).get("name")
        names.append(name or import_object(spec["class_path"]).default_name())
    return names


def _groups(names: list[str], group: Sequence[str]) -> dict[str, tuple[str, ...]]:
    """The units of the ablation: every objective alone, except those ``--group NAME=a,b`` joins."""
    units: dict[str, tuple[str, ...]] = {}
    grouped: set[str] = set()
    for spec in group:
        label, sep, members = spec.partition("=")
        parts = tuple(m.strip() for m in members.split(",") if m.strip())
        if not sep or not label or not parts:
            raise UsageError(f"--group {spec!r}: write NAME=a,b (objectives of the recipe: {', '.join(names)})")
        unknown = [m for m in parts if m not in names]
        if unknown:
            raise UsageError(
                f"--group {spec!r}: {', '.join(unknown)} not objectives of the recipe ({', '.join(names)})"
            )
        units[label] = parts
        grouped |= set(parts)
    for name in names:
        if name not in grouped:
            units[name] = (name,)
    return {k: units[k] for k in sorted(units, key=lambda k: names.index(units[k][0]))}


def plan(
    config: dict[str, Any], seeds: Sequence[int], balancers: Sequence[str], kinds: Sequence[str], group: Sequence[str]
) -> list[Run]:
    """Every run of the ablation, unified runs first, then single and leave-one-out, seed-major."""
    names = _objective_names(config)
    if len(names) < 2:
        raise UsageError(f"the recipe trains {len(names)} objective(s); an ablation needs at least two")
    units = _groups(names, group)
    runs: list[Run] = [Run(UNTRAINED, UNTRAINED, (), "-", seeds[0])] if UNTRAINED in kinds else []
    for seed in seeds:
        if "unified" in kinds:
            runs += [Run(f"unified ({b})", "unified", tuple(names), b, seed) for b in balancers]
        if "single" in kinds:
            runs += [Run(f"only {u}", "single", members, balancers[0], seed) for u, members in units.items()]
        if "leave-one-out" in kinds and len(units) > 2:
            runs += [
                Run(f"without {u}", "leave-one-out", tuple(n for n in names if n not in members), balancers[0], seed)
                for u, members in units.items()
            ]
    return runs


def _balancer_spec(name: str) -> dict[str, Any]:
    if name in BALANCERS:
        return copy.deepcopy(BALANCERS[name])
    if "." in name:
        return {"class_path": name}
    hint = _did_you_mean(name, BALANCERS)
    raise UsageError(f"--balancers: unknown balancer {name!r}{hint}; one of {', '.join(BALANCERS)} or a class path")


def _did_you_mean(name: str, choices: Sequence[str]) -> str:
    """`` (did you mean 'x'?)`` with the closest of ``choices``, or nothing."""
    import difflib

    close = difflib.get_close_matches(str(name), list(choices), n=1)
    return f" (did you mean {close[0]!r}?)" if close else ""


def run_recipe(config: dict[str, Any], run: Run, steps: int, out: Path, conflict_every: int) -> dict[str, Any]:
    """The recipe of one run: ``config`` with only ``run.objectives`` (their data, batch sizes and
    schedules), its balancer and seed, ``steps`` optimiser steps, logged to ``out/runs/<slug>/seed<S>``."""
    config = copy.deepcopy(config)
    kept = set(run.objectives)
    names = _objective_names(config)
    model = config.setdefault("model", {})
    model["objectives"] = [o for o, n in zip(model.get("objectives") or [], names) if n in kept]
    data = config.setdefault("data", {})
    data["train"] = {k: v for k, v in (data.get("train") or {}).items() if k in kept}
    for key in ("batch_size", "length_grouped", "sampling", "max_records"):
        if isinstance(data.get(key), dict):
            data[key] = {k: v for k, v in data[key].items() if k in kept}
    model["weight_schedule"] = {k: v for k, v in (model.get("weight_schedule") or {}).items() if k in kept}
    model["balancer"] = _balancer_spec(run.balancer)
    model["conflict_every"] = conflict_every if len(kept) > 1 else 0
    config["seed_everything"] = run.seed
    trainer = config.setdefault("trainer", {})
    trainer.update(max_steps=steps, max_epochs=-1)
    if isinstance(trainer.get("val_check_interval"), int):
        # every N optimiser steps whatever the epoch length (an objective alone has shorter epochs)
        trainer["val_check_interval"] = min(trainer["val_check_interval"], steps)
        trainer["check_val_every_n_epoch"] = None
    trainer["logger"] = {
        "class_path": "lightning.pytorch.loggers.CSVLogger",
        "init_args": {"save_dir": str(out / "runs"), "name": run.slug, "version": f"seed{run.seed}"},
    }
    return config


def _steps(config: dict[str, Any], steps: int | None) -> int:
    if steps:
        return steps
    max_steps = (config.get("trainer") or {}).get("max_steps") or -1
    if max_steps > 0:
        return int(max_steps)
    raise UsageError(
        "the recipe sets no trainer.max_steps: give --steps N (every run trains N optimiser steps, since an "
        "objective alone has a shorter epoch than the combination)"
    )


def _columns(config: dict[str, Any], columns: Sequence[str] | None) -> list[str]:
    from ..evaluation.panel import PANEL_COLUMNS

    evaluation = (config.get("model") or {}).get("evaluation") or {}
    chosen = list(columns or evaluation.get("panel") or evaluation.get("test_tasks") or [])
    if not chosen:
        raise UsageError("no panel: set model.evaluation.panel in the recipe or give --columns")
    unknown = [c for c in chosen if c not in PANEL_COLUMNS]
    if unknown:
        hints = [c + _did_you_mean(c, PANEL_COLUMNS) for c in unknown]
        raise UsageError(f"unknown panel column(s): {', '.join(hints)}; the panel has {', '.join(PANEL_COLUMNS)}")
    return chosen


def _targets(config: dict[str, Any], columns: Sequence[str]) -> dict[str, float]:
    """``model.evaluation.panel_targets`` restricted to the scored columns; a name the panel does not know
    or a value that is not a number is refused in one line."""
    from ..evaluation.panel import PANEL_COLUMNS

    evaluation = (config.get("model") or {}).get("evaluation") or {}
    targets = evaluation.get("panel_targets") or {}
    if not isinstance(targets, dict):
        raise UsageError("model.evaluation.panel_targets: write {panel column: minimum}, e.g. {stsb-test: 82.0}")
    for column, value in targets.items():
        if column not in PANEL_COLUMNS:
            hint = _did_you_mean(column, PANEL_COLUMNS)
            raise UsageError(f"model.evaluation.panel_targets: {column!r} is not a panel column{hint}")
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise UsageError(f"model.evaluation.panel_targets.{column}: {value!r} is not a number")
    return {c: float(v) for c, v in targets.items() if c in columns}


def _write(path: Path, text: str) -> None:
    with atomic_write(path) as f:
        f.write(text)


# ------------------------------------------------------------------------------------------ one run
@dataclass(frozen=True)
class Study:
    """What every run of one ablation shares: the recipe, the output folder, the run length, the panel and
    the options a ``--run``/``--seed`` process is started with (``passed``)."""

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
        _write(path, yaml.safe_dump(recipe, sort_keys=False))
        return path

    def execute(self, run: Run) -> dict[str, Any]:
        """Train (or continue) one run, score it on the panel and write its result file; the untrained row
        scores the recipe's starting encoder."""
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
                _fit(recipe_path)
            model, ckpt = str(folder / "encoder"), folder / "checkpoints" / "last.ckpt"
            result |= {"steps": self.steps, "recipe": str(recipe_path), "folder": str(folder)}
            result["train_seconds"] = round(time.perf_counter() - start, 1)
        from ..evaluation.panel import evaluate_panel

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
        _write(result_path, json.dumps(result, indent=1, default=str) + "\n")
        if not self.keep_checkpoints and run.kind != UNTRAINED:  # scored (the entity column read them): not needed
            for path in (self.out / "runs" / run.slug / f"seed{run.seed}").rglob("*.ckpt"):
                path.unlink()
        return result


def _fit(recipe_path: Path) -> None:
    """``unisent fit -c RECIPE --ckpt_path last`` in this process (continues an interrupted run)."""
    from ..cli import main as cli_main

    argv, sys.argv = sys.argv, sys.argv[:1]  # Lightning's CLI reads sys.argv too: it is this fit's alone
    try:
        cli_main(["fit", "-c", str(recipe_path), "--ckpt_path", "last"])
    except SystemExit as done:
        if done.code not in (0, None):
            raise RuntimeError(f"unisent fit -c {recipe_path} failed with status {done.code}") from None
    finally:
        sys.argv = argv


# ------------------------------------------------------------------------------------------ summary
def interval(values: Sequence[float], confidence: float = 0.95) -> tuple[float, float | None]:
    """Mean and the half-width of its Student-t interval (``None`` for one value)."""
    n = len(values)
    mean = sum(values) / n
    if n < 2:
        return mean, None
    from scipy.stats import t

    sd = math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1))
    return mean, float(t.ppf(0.5 + confidence / 2, n - 1) * sd / math.sqrt(n))


def summarize(results: list[dict[str, Any]], columns: list[str]) -> list[dict[str, Any]]:
    """One row per run name: each column's mean, interval and seeds."""
    rows: dict[str, dict[str, Any]] = {}
    for result in results:
        run = Run(**result["run"])
        row = rows.setdefault(run.row, {"row": run.row, "kind": run.kind, "slug": run.slug, "cells": {}})
        row.setdefault("seeds", []).append(result["run"]["seed"])
        row.setdefault("train_minutes", []).append(result["train_seconds"] / 60)
        for c in columns:
            value = result["scores"].get(c)
            if value is not None:
                row["cells"].setdefault(c, []).append(value)
    for row in rows.values():
        row["cells"] = {c: dict(zip(("mean", "ci"), interval(v)), values=v) for c, v in row["cells"].items()}
    return list(rows.values())


def _cell(cell: dict[str, Any] | None) -> str:
    if not cell:
        return "n/a"
    if cell["ci"] is None:
        return f"{cell['mean']:.2f}"
    return f"{cell['mean']:.2f} ± {cell['ci']:.2f}"


def best_balancer(rows: list[dict[str, Any]], own: dict[str, str]) -> str | None:
    """The unified row with the highest mean over the objectives' own columns (every panel column when
    the recipe names none)."""
    unified = [r for r in rows if r["kind"] == "unified"]
    if not unified:
        return None
    wanted = sorted(set(own.values())) or sorted({c for r in unified for c in r["cells"]})

    def score(row):
        values = [row["cells"][c]["mean"] for c in wanted if c in row["cells"]]
        return sum(values) / len(values) if values else float("-inf")

    return max(unified, key=score)["row"]


def own_columns(
    row: dict[str, Any], rows: list[dict[str, Any]], own: dict[str, str], units: dict[str, tuple]
) -> list[dict[str, Any]]:
    """Each objective's own column in ``row`` against the objective alone: the difference of the means,
    and whether it lies within the single-objective row's interval (below it by at most the half-width).
    Objectives without an own column or a single-objective row are left out."""
    by_name = {r["row"]: r for r in rows}
    out = []
    for unit, members in units.items():
        column = next((own[m] for m in members if m in own), None)
        alone = by_name.get(f"only {unit}")
        if column is None or alone is None:
            continue
        a, b = row["cells"].get(column), alone["cells"].get(column)
        if not a or not b:
            continue
        diff = a["mean"] - b["mean"]
        width = b["ci"] if b["ci"] is not None else 0.0
        out.append(
            {
                "objective": unit,
                "column": column,
                "unified": a,
                "alone": b,
                "diff": diff,
                "width": width,
                "within": diff >= -width,
            }
        )
    return out


def target_verdicts(
    rows: list[dict[str, Any]], targets: dict[str, float], own: dict[str, str], units: dict[str, tuple]
) -> dict[str, dict[str, Any]]:
    """For every unified row: each target's mean, margin (mean - target) and whether it is met, and the
    own columns below their single-objective interval."""
    verdicts = {}
    for row in (r for r in rows if r["kind"] == "unified"):
        cells = {}
        for column, target in targets.items():
            cell = row["cells"].get(column)
            if cell:
                margin = cell["mean"] - target
                cells[column] = {"mean": cell["mean"], "target": target, "margin": margin, "met": margin >= 0}
        below = [o for o in own_columns(row, rows, own, units) if not o["within"]]
        verdicts[row["row"]] = {
            "targets": cells,
            "own_below": {o["objective"]: -o["diff"] - o["width"] for o in below},
            "all_met": all(c["met"] for c in cells.values()) and not below,
        }
    return verdicts


def _target_table(verdicts: dict[str, dict[str, Any]], targets: dict[str, float], check_own: bool) -> list[str]:
    head = [f"{c} (>= {t:g})" for c, t in targets.items()] + (["own columns"] if check_own else [])
    lines = ["| run | " + " | ".join(head) + " | every line |", "|---|" + "---|" * (len(head) + 1)]
    for name, v in verdicts.items():
        cells = []
        for column in targets:
            c = v["targets"].get(column)
            if c is None:
                cells.append("n/a")
            else:
                verdict = f"met by {c['margin']:.2f}" if c["met"] else f"**missed by {-c['margin']:.2f}**"
                cells.append(f"{c['mean']:.2f}, {verdict}")
        if check_own:
            below = v["own_below"]
            cells.append(
                "all within" if not below else ", ".join(f"**{o} {gap:.2f} below**" for o, gap in below.items())
            )
        lines.append(f"| {name} | " + " | ".join(cells) + f" | {'yes' if v['all_met'] else 'no'} |")
    return lines


def table(
    rows: list[dict[str, Any]],
    columns: list[str],
    own: dict[str, str],
    units: dict[str, tuple],
    targets: dict[str, float] | None = None,
) -> str:
    lines = [
        "| run | seeds | " + " | ".join(columns) + " | train min |",
        "|---|---:|" + "---:|" * (len(columns) + 1),
    ]
    for row in rows:
        minutes = sum(row["train_minutes"]) / len(row["train_minutes"])
        cells = " | ".join(_cell(row["cells"].get(c)) for c in columns)
        lines.append(f"| {row['row']} | {len(row['seeds'])} | {cells} | {minutes:.1f} |")
    best = best_balancer(rows, own)
    own_lines = []
    if best and own:
        by_name = {r["row"]: r for r in rows}
        for o in own_columns(by_name[best], rows, own, units):
            verdict = "yes" if o["within"] else f"no, below by {-o['diff'] - o['width']:.2f} beyond it"
            own_lines.append(
                f"| {o['objective']} | {o['column']} | {_cell(o['unified'])} | {_cell(o['alone'])} "
                f"| {o['diff']:+.2f} | {verdict} |"
            )
        if own_lines:  # only where the objectives also ran alone
            lines += [
                "",
                f"Each objective's own column, inside the combination ({best}) and alone:",
                "",
                "| objective | column | unified | alone | difference | within the interval |",
                "|---|---|---:|---:|---:|---|",
                *own_lines,
            ]
    verdicts = target_verdicts(rows, targets or {}, own, units) if targets else {}
    if verdicts:
        lines += [
            "",
            "Targets (`model.evaluation.panel_targets`), each balancer's mean over seeds"
            + (", and its objectives' own columns against each objective alone:" if own_lines else ":"),
            "",
            *_target_table(verdicts, targets, bool(own_lines)),
        ]
    return "\n".join(lines) + "\n"


def plot(rows: list[dict[str, Any]], columns: list[str], path: Path, targets: dict[str, float] | None = None) -> Path:
    """One panel per column: each run's mean with its interval; a column's target (``panel_targets``) is in
    its title, and a dashed line where it falls inside the plotted range."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cols = min(3, len(columns))
    lines = math.ceil(len(columns) / cols)
    fig, axes = plt.subplots(lines, cols, figsize=(5 * cols, 0.35 * len(rows) * lines + 1.5 * lines), squeeze=False)
    for ax, column in zip(axes.flat, columns):
        names = [r["row"] for r in rows if column in r["cells"]]
        means = [r["cells"][column]["mean"] for r in rows if column in r["cells"]]
        errors = [r["cells"][column]["ci"] or 0.0 for r in rows if column in r["cells"]]
        ax.barh(range(len(names)), means, xerr=errors, color="#4878a8", capsize=3)
        ax.set_yticks(range(len(names)), names, fontsize=8)
        ax.invert_yaxis()
        if means:
            low = min(m - e for m, e in zip(means, errors))
            high = max(m + e for m, e in zip(means, errors))
            pad = max(1.0, 0.1 * (high - low))
            ax.set_xlim(low - pad, high + pad)
            target = (targets or {}).get(column)
            if target is not None and low - pad <= target <= high + pad:
                ax.axvline(target, color="#c03030", linestyle="--", linewidth=1)
        title = column if column not in (targets or {}) else f"{column} (target >= {targets[column]:g})"
        ax.set_title(title, fontsize=10)
    for ax in list(axes.flat)[len(columns) :]:
        ax.axis("off")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def _sweep_file(recipe: str, out: Path, runs: list[Run], args: list[str], columns: list[str]) -> Path:
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
    _write(path, yaml.safe_dump(sweep, sort_keys=False))
    return path


# --------------------------------------------------------------------------------------------- CLI
def ablate(
    recipe: str,
    *,
    out: str = "runs/ablate",
    seeds: list[int] | None = None,
    balancers: list[str] | None = None,
    runs: list[str] | None = None,
    group: list[str] | None = None,
    steps: int | None = None,
    columns: list[str] | None = None,
    data_dir: str | None = None,
    conflict_every: int = 10,
    entity_records: str | None = None,
    page: str | None = None,
    jobs: int = 1,
    sweep: bool = False,
    run: str | None = None,
    seed: int | None = None,
    dry_run: bool = False,
    keep_checkpoints: bool = True,
) -> dict[str, Any]:
    """Train a multi-objective recipe unified, each objective alone and leave-one-out, over seeds, and tabulate.

    Writes OUT/ablation.md (mean and 95% interval over seeds per cell), OUT/ablation.json and
    OUT/ablation.png. The same command resumes: finished runs are kept, an interrupted one continues.

    Args:
        recipe: a recipe YAML with at least two objectives
        out: folder of the generated recipes, runs, results and the table
        seeds: seeds of every run (default: 42 43 44)
        balancers: balancers of the unified runs (static, uncertainty, dwa, pcgrad, upgrad, mgda, imtlg or a class
            path; default static); the single and leave-one-out runs use the first
        runs: which runs: untrained (the starting encoder, evaluated once), unified, single, leave-one-out
            (default: all four)
        group: objectives that count as one, NAME=a,b (e.g. cmlm=cmlm,bitext); repeatable
        steps: optimiser steps of every run (default: the recipe's trainer.max_steps)
        columns: panel columns (default: the recipe's model.evaluation.panel)
        data_dir: root of the evaluation data (../shared/data layout)
        conflict_every: log gradient conflicts every N steps in the multi-objective runs (0: never)
        entity_records: held-out sentence-entity records of the entity columns (default: the bundled FewRel ones)
        page: also write the table into this markdown page, between the lines <!-- unisent ablate --> and
            <!-- /unisent ablate --> (appended if absent), with the plots copied beside it
        jobs: runs at a time (each gets CPUs / jobs threads)
        sweep: write OUT/sweep.yaml for `unisent sweep` (W&B) instead of running
        run: only this run (its folder name, e.g. unified-pcgrad or only-ease); with --seed
        seed: only this seed (with --run)
        dry_run: write every run's recipe to OUT/recipes and list the runs (done or to run); train nothing
        keep_checkpoints: keep each run's Lightning checkpoints after it is scored; --no-keep-checkpoints
            deletes them once its result file is written (its encoder/ and logs stay; about 0.8 GB per run of
            the unified recipe)
    """
    recipe_path = Path(recipe)
    if not recipe_path.is_file():
        raise FileNotFoundError(f"no recipe {recipe}")
    config = yaml.safe_load(recipe_path.read_text(encoding="utf-8"))
    if not isinstance(config, dict):
        raise UsageError(f"{recipe} is not a recipe (a YAML mapping with model:, data:, trainer:)")
    # one run (--run/--seed: a --jobs worker or a sweep trial, started without --seeds): its seed is the plan's
    seeds = [seed] if seed is not None else list(seeds or [42, 43, 44])
    balancers = list(balancers or ["static"])
    for name in balancers:
        _balancer_spec(name)
    kinds = list(runs or (UNTRAINED, *KINDS))
    bad = [k for k in kinds if k not in (UNTRAINED, *KINDS)]
    if bad:
        raise UsageError(f"--runs: {', '.join(bad)} not one of {UNTRAINED}, {', '.join(KINDS)}")
    if jobs < 1:
        raise UsageError("--jobs must be >= 1")
    folder = Path(out)
    planned = plan(config, seeds, balancers, kinds, group or [])
    steps = _steps(config, steps)
    chosen = _columns(config, columns)
    targets = _targets(config, chosen)
    evaluation = (config.get("model") or {}).get("evaluation") or {}
    own = dict(evaluation.get("panel_own") or {})
    units = _groups(_objective_names(config), group or [])
    passed = [f"--out={out}", f"--steps={steps}", f"--conflict_every={conflict_every}"]
    passed += [f"--group={g}" for g in group or []] + [f"--balancers={b}" for b in balancers]
    passed += [f"--columns={c}" for c in chosen] + ([f"--data_dir={data_dir}"] if data_dir else [])
    passed += [f"--entity_records={entity_records}"] if entity_records else []
    passed += [] if keep_checkpoints else ["--no_keep_checkpoints"]
    study = Study(
        recipe_path, config, folder, steps, chosen, data_dir, conflict_every, entity_records, passed, keep_checkpoints
    )
    if sweep:
        path = _sweep_file(str(recipe_path), folder, planned, passed, chosen)
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
        result = study.execute(match[0])
        _log_to_wandb(result)
        return result
    if dry_run:
        for r in planned:
            state = "done" if study.result_path(r).exists() else "to run"
            recipe_file = "" if r.kind == UNTRAINED else str(study.write_recipe(r))
            print(f"{r.key:36s} {r.row:26s} {state:7s} {recipe_file}")
        return {"runs": [r.key for r in planned]}
    results = _run_all(study, planned, jobs)
    rows = summarize(results, chosen)
    text = table(rows, chosen, own, units, targets)
    _write(folder / "ablation.md", text)
    summary = {"recipe": str(recipe_path), "steps": steps, "seeds": seeds, "columns": chosen, "rows": rows}
    summary["best_balancer"] = best_balancer(rows, own)
    if targets:
        summary["targets"] = target_verdicts(rows, targets, own, units)
    _write(folder / "ablation.json", json.dumps(summary, indent=1) + "\n")
    try:
        plot(rows, chosen, folder / "ablation.png", targets)
    except ImportError:  # pragma: no cover - matplotlib is a dependency
        print("unisent ablate: pip install matplotlib for ablation.png", file=sys.stderr)
    if page:
        words = ["unisent", "ablate", str(recipe_path), *passed, "--seeds", *map(str, seeds), "--runs", *kinds]
        update_page(Path(page), text, folder, summary, " ".join(words))
    print(text)
    print(f"unisent ablate: {len(results)} runs; table in {folder / 'ablation.md'}", file=sys.stderr)
    return summary


PAGE_START, PAGE_END = "<!-- unisent ablate -->", "<!-- /unisent ablate -->"


def update_page(page: Path, text: str, folder: Path, summary: dict[str, Any], command: str) -> None:
    """Put the table (and the command that made it) between the page's markers; copy ``ablation.png`` and
    the best balancer's first-seed ``conflicts.png`` beside the page as ``<page>-ablation.png`` and
    ``<page>-conflicts.png``."""
    import shutil

    lines = [PAGE_START, "", f"Written by `{command}`.", "", text.rstrip(), ""]
    if (folder / "ablation.png").exists():
        shutil.copyfile(folder / "ablation.png", page.parent / f"{page.stem}-ablation.png")
        lines += [f"![every run, mean and 95% interval over seeds]({page.stem}-ablation.png)", ""]
    best = summary.get("best_balancer")
    if best:
        row = next(r for r in summary["rows"] if r["row"] == best)
        seed = min(row["seeds"])
        plot_path = folder / "runs" / row["slug"] / f"seed{seed}" / "conflicts.png"
        if plot_path.exists():
            shutil.copyfile(plot_path, page.parent / f"{page.stem}-conflicts.png")
            lines += [f"![gradient conflicts of {best}, seed {seed}]({page.stem}-conflicts.png)", ""]
    block = "\n".join(lines) + PAGE_END
    current = page.read_text(encoding="utf-8") if page.exists() else ""
    if PAGE_START in current and PAGE_END in current:
        head, rest = current.split(PAGE_START, 1)
        current = head + block + rest.split(PAGE_END, 1)[1]
    else:
        current = current.rstrip() + ("\n\n" if current else "") + block + "\n"
    _write(page, current)


def _log_to_wandb(result: dict[str, Any]) -> None:
    """Inside a W&B sweep trial, report the panel as the trial's metrics."""
    if not os.environ.get("WANDB_SWEEP_ID"):
        return
    import wandb

    active = wandb.run or wandb.init()
    active.log({f"panel/{k}": v for k, v in result["scores"].items() if v is not None})


def _run_all(study: Study, planned: list[Run], jobs: int) -> list[dict[str, Any]]:
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


def main(argv: Sequence[str]) -> None:
    values = parse(command_parser(ablate, "unisent ablate"), list(argv))
    call(ablate, values, "unisent ablate")
