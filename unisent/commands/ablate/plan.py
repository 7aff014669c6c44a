"""Which runs an ablation trains, each run's recipe (cut down to its objectives), and the recipe's settings
checked, each mistake one line (``UsageError``)."""

from __future__ import annotations

import copy
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ...io import closest_hint
from ..function_commands import UsageError

__all__ = [
    "KINDS",
    "MERGES",
    "PER_OBJECTIVE_DATA",
    "UNTRAINED",
    "Run",
    "balancer_spec",
    "groups",
    "merged_units",
    "objective_names",
    "panel_columns",
    "panel_targets",
    "plan",
    "run_recipe",
    "run_steps",
]

#: short names of ``--balancers`` (a class path works too)
BALANCERS: dict[str, dict[str, Any]] = {
    "static": {"class_path": "unisent.balancers.Static"},
    "uncertainty": {"class_path": "unisent.balancers.Uncertainty"},
    "dwa": {"class_path": "unisent.balancers.DWA"},
    "pcgrad": {"class_path": "unisent.balancers.PCGrad"},
    "upgrad": {"class_path": "unisent.balancers.JacobianAggregator", "init_args": {"aggregator": "UPGrad"}},
    "mgda": {"class_path": "unisent.balancers.JacobianAggregator", "init_args": {"aggregator": "MGDA"}},
    "imtlg": {"class_path": "unisent.balancers.JacobianAggregator", "init_args": {"aggregator": "IMTLG"}},
    "anchored": {"class_path": "unisent.balancers.Anchored"},  # Distill against the UPGrad of the others
}
KINDS = ("unified", "single", "leave-one-out", "merge")
#: ``--merges`` when none is given: every method of ``unisent merge``
MERGES = ("linear", "task_arithmetic", "ties", "dare_ties")
#: the reference row: the recipe's starting encoder, not trained (one evaluation, no seed)
UNTRAINED = "untrained"
#: the ``data:`` settings of ``UnisentDataModule`` that a recipe may give per objective
#: (``{objective: value}``); a run keeps its objectives' entries (tests/test_ablate.py checks the signature)
PER_OBJECTIVE_DATA = ("batch_size", "length_grouped")


@dataclass(frozen=True)
class Run:
    """One training run of the ablation: its row name, the objectives it trains, balancer and seed."""

    row: str  # "unified (pcgrad)", "only ease", "without ease", "merge (ties)"
    kind: str  # unified | single | leave-one-out | merge
    objectives: tuple[str, ...]
    balancer: str
    seed: int

    @property
    def slug(self) -> str:
        if self.kind == UNTRAINED:
            return UNTRAINED
        if self.kind == "merge":  # "merge (ties)" -> merge-ties
            return "merge-" + self.row[len("merge (") : -1]
        base = {"unified": f"unified-{self.balancer}", "single": "only-", "leave-one-out": "without-"}[self.kind]
        if self.kind != "unified":
            base += self.row.split(" ", 1)[1].replace(" ", "")
        return base.replace("/", "_")

    @property
    def key(self) -> str:
        return f"{self.slug}/seed{self.seed}"


def objective_names(config: dict[str, Any]) -> list[str]:
    """The names of the recipe's objectives (``init_args.name``, else the class's default name), in order."""
    from ...io import import_object

    names = []
    for spec in config.get("model", {}).get("objectives") or []:
        names.append(import_object(spec["class_path"]).name_in_recipe(spec.get("init_args")))
    return names


def groups(names: list[str], group: Sequence[str]) -> dict[str, tuple[str, ...]]:
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
    config: dict[str, Any],
    seeds: Sequence[int],
    balancers: Sequence[str],
    kinds: Sequence[str],
    group: Sequence[str],
    leave_out: Sequence[str] = (),
    merges: Sequence[str] = MERGES,
) -> list[Run]:
    """Every run of the ablation, unified runs first, then single, leave-one-out and merge, seed-major; the
    leave-one-out rows only of the units ``leave_out`` names, when it names any. A merge row merges the
    seed's single runs of the units ``merged_units`` names (``unisent merge``, weights 1)."""
    names = objective_names(config)
    if len(names) < 2:
        raise UsageError(f"the recipe trains {len(names)} objective(s); an ablation needs at least two")
    units = groups(names, group)
    unknown = [u for u in leave_out if u not in units]
    if unknown:
        hints = [u + closest_hint(u, units) for u in unknown]
        raise UsageError(f"--leave_out: {', '.join(hints)} not a unit of the study ({', '.join(units)})")
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
                if not leave_out or u in leave_out
            ]
        if "merge" in kinds:
            merged = tuple(n for u in merged_units(config, units) for n in units[u])
            runs += [Run(f"merge ({m})", "merge", merged, balancers[0], seed) for m in merges]
    return runs


def merged_units(config: dict[str, Any], units: dict[str, tuple[str, ...]]) -> list[str]:
    """The units whose single runs a merge row merges: those with an own column (the recipe's
    ``model.evaluation.panel_own``: an objective without one, such as Distill, has no ability of its own to
    bring, and alone it stays at the start), or every unit when the recipe names no own columns."""
    own = ((config.get("model") or {}).get("evaluation") or {}).get("panel_own") or {}
    chosen = [u for u, members in units.items() if any(m in own for m in members)]
    return chosen or list(units)


def balancer_spec(name: str) -> dict[str, Any]:
    """The recipe's ``model.balancer`` for a ``--balancers`` name or class path."""
    if name in BALANCERS:
        return copy.deepcopy(BALANCERS[name])
    if "." in name:
        return {"class_path": name}
    hint = closest_hint(name, BALANCERS)
    raise UsageError(f"--balancers: unknown balancer {name!r}{hint}; one of {', '.join(BALANCERS)} or a class path")


def _without_missing_anchor(spec: dict[str, Any], kept: set[str]) -> dict[str, Any]:
    """``Anchored`` in a run without its anchor (``only ease``, ``without distill``) is its tasks' aggregator."""
    if spec.get("class_path") != BALANCERS["anchored"]["class_path"]:
        return spec
    from ...balancers import Anchored

    return Anchored.without_anchor(spec.get("init_args") or {}, kept) or spec


def run_recipe(config: dict[str, Any], run: Run, steps: int, out: Path, conflict_every: int) -> dict[str, Any]:
    """The recipe of one run: ``config`` with only ``run.objectives`` (their data, batch sizes and
    schedules), its balancer and seed, ``steps`` optimiser steps, logged to ``out/runs/<slug>/seed<S>``."""
    config = copy.deepcopy(config)
    kept = set(run.objectives)
    names = objective_names(config)
    model = config.setdefault("model", {})
    model["objectives"] = [o for o, n in zip(model.get("objectives") or [], names) if n in kept]
    data = config.setdefault("data", {})
    data["train"] = {k: v for k, v in (data.get("train") or {}).items() if k in kept}
    for key in PER_OBJECTIVE_DATA:
        if isinstance(data.get(key), dict):
            data[key] = {k: v for k, v in data[key].items() if k in kept}
    train = model["train"] = dict(model.get("train") or {})
    train["weight_schedule"] = {k: v for k, v in (train.get("weight_schedule") or {}).items() if k in kept}
    evaluation = model.get("evaluation")
    if isinstance(evaluation, dict) and isinstance(evaluation.get("panel_own"), dict):  # names the run's objectives
        evaluation["panel_own"] = {k: v for k, v in evaluation["panel_own"].items() if k in kept}
    model["balancer"] = _without_missing_anchor(balancer_spec(run.balancer), kept)
    train["conflict_every"] = conflict_every if len(kept) > 1 else 0
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


def run_steps(config: dict[str, Any], steps: int | None) -> int:
    """The optimiser steps of every run: ``--steps``, else the recipe's ``trainer.max_steps``."""
    if steps:
        return steps
    max_steps = (config.get("trainer") or {}).get("max_steps") or -1
    if max_steps > 0:
        return int(max_steps)
    raise UsageError(
        "the recipe sets no trainer.max_steps: give --steps N (every run trains N optimiser steps, since an "
        "objective alone has a shorter epoch than the combination)"
    )


def panel_columns(config: dict[str, Any], columns: Sequence[str] | None) -> list[str]:
    """The panel columns every run is scored on: ``--columns``, else the recipe's ``model.evaluation.panel``."""
    from ...evaluation.panel import PANEL_COLUMNS

    evaluation = (config.get("model") or {}).get("evaluation") or {}
    chosen = list(columns or evaluation.get("panel") or evaluation.get("test_tasks") or [])
    if not chosen:
        raise UsageError("no panel: set model.evaluation.panel in the recipe or give --columns")
    unknown = [c for c in chosen if c not in PANEL_COLUMNS]
    if unknown:
        hints = [c + closest_hint(c, PANEL_COLUMNS) for c in unknown]
        raise UsageError(f"unknown panel column(s): {', '.join(hints)}; the panel has {', '.join(PANEL_COLUMNS)}")
    return chosen


def panel_targets(config: dict[str, Any], columns: Sequence[str]) -> dict[str, float]:
    """``model.evaluation.panel_targets`` of the scored columns (each a panel column and a number)."""
    from ...evaluation.panel import PANEL_COLUMNS

    evaluation = (config.get("model") or {}).get("evaluation") or {}
    targets = evaluation.get("panel_targets") or {}
    if not isinstance(targets, dict):
        raise UsageError("model.evaluation.panel_targets: write {panel column: minimum}, e.g. {stsb-test: 82.0}")
    for column, value in targets.items():
        if column not in PANEL_COLUMNS:
            hint = closest_hint(column, PANEL_COLUMNS)
            raise UsageError(f"model.evaluation.panel_targets: {column!r} is not a panel column{hint}")
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise UsageError(f"model.evaluation.panel_targets.{column}: {value!r} is not a number")
    return {c: float(v) for c, v in targets.items() if c in columns}
