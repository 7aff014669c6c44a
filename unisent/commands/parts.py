"""``unisent fit -c RECIPE`` of a recipe with a top-level ``parts:`` (docs/merging.md, "One command"): train each
part of a recipe from the same start (objectives jointly, or alone in their own parameters), then merge the parts
into one run folder whose ``encoder/`` is the model.

A part is one run of ``unisent ablate`` (``leave_out:`` is its leave-one-out row, ``only:`` its single row: the
same recipe cut by ``plan.run_recipe``), so on the same seeds the merged model is the three-command route's.
Each part is a ``unisent fit --ckpt_path last`` run in ``OUT/seed<S>/parts/<part>/``; the same command continues
after Ctrl-C, SIGTERM or a SLURM requeue: finished parts are kept, an interrupted one goes on from its last
checkpoint, and an interrupted merge is done again.
"""

from __future__ import annotations

import copy
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from ..io import closest_hint
from .function_commands import CommandFailed, UsageError

__all__ = ["KEYS", "Part", "fit_parts", "main", "parts_recipe", "read_parts", "split_words"]

#: the keys of ``parts:`` (``--parts.KEY VALUE`` overrides one; ``--seed_everything N`` is ``--parts.seed N``)
KEYS = ("recipe", "out", "seed", "precision", "conflict_every", "jobs", "train", "merge")
#: the exit statuses of a ``unisent fit`` that a signal stopped after saving (SIGINT, SIGUSR1, SIGTERM)
INTERRUPTED = (130, 138, 143)
#: seconds between the progress lines of parts trained as processes
PROGRESS_SECONDS = 30.0
#: the keys of one entry of ``parts.train``
PART_KEYS = ("name", "leave_out", "only", "steps", "balancer")
#: the keys of ``parts.merge`` (``unisent.merging.merge_runs``' settings)
MERGE_KEYS = ("method", "weights", "density", "scale")


@dataclass(frozen=True)
class Part:
    """One part: an ablation run (``run``), its optimiser steps, and where it trains."""

    name: str
    run: Any  # unisent.commands.ablate.plan.Run
    steps: int
    folder: Path


def split_words(words: Sequence[str]) -> tuple[list[str], list[str]]:
    """``unisent fit`` words: the ``-c``/``--config`` files, and the other words (``fit`` and ``--verbose`` dropped)."""
    configs: list[str] = []
    rest: list[str] = []
    items = iter(words)
    for word in items:
        if word in ("-c", "--config"):
            configs.append(next(items, ""))
        elif word.startswith("--config="):
            configs.append(word.partition("=")[2])
        elif word not in ("fit", "--verbose"):
            rest.append(word)
    return configs, rest


def parts_recipe(config_files: Sequence[str | os.PathLike[str]]) -> Path | None:
    """The config file among ``config_files`` that declares ``parts:`` (``None``: a plain recipe)."""
    for path in map(Path, config_files):
        if path.suffix in (".yaml", ".yml") and path.is_file():
            try:
                config = yaml.safe_load(path.read_text(encoding="utf-8"))
            except yaml.YAMLError:
                return None  # Lightning's parser reports it
            if isinstance(config, dict) and "parts" in config:
                return path
    return None


def read_parts(path: Path, overrides: Sequence[str] = ()) -> tuple[dict[str, Any], dict[str, Any], list[Part]]:
    """The ``parts:`` settings of ``path`` with ``overrides``, the recipe they cut, and the parts; each
    mistake one line naming the file and the key (``UsageError``)."""
    from .ablate import _read_recipe
    from .ablate.plan import Run, balancer_spec, objective_names

    settings = dict(yaml.safe_load(path.read_text(encoding="utf-8"))["parts"] or {})
    settings = _override(settings, overrides, path)
    where = f"{path}: parts"
    unknown = [k for k in settings if k not in KEYS]
    if unknown or "recipe" not in settings or not settings.get("train"):
        what = f"unknown key {unknown[0]!r}{closest_hint(unknown[0], KEYS)}" if unknown else "needs recipe: and train:"
        raise UsageError(f"{where}: {what} (keys: {', '.join(KEYS)})")
    config = _read_recipe(path.parent / str(settings["recipe"]), settings.get("precision"))
    names = objective_names(config)
    seed = int(settings.get("seed", config.get("seed_everything", 42)))
    folder = Path(str(settings.get("out", f"runs/{path.stem}"))) / f"seed{seed}"
    parts: list[Part] = []
    for i, spec in enumerate(settings["train"]):
        at = f"{where}.train[{i}]"
        if not isinstance(spec, dict) or [k for k in spec if k not in PART_KEYS]:
            raise UsageError(f"{at}: write a mapping of {', '.join(PART_KEYS)}, got {spec!r}")
        if ("leave_out" in spec) == ("only" in spec):
            raise UsageError(f"{at}: give leave_out: (train the others jointly) or only: (train these alone)")
        members = [str(n) for n in spec.get("leave_out") or spec.get("only") or []]
        bad = [n for n in members if n not in names]
        if bad or not members:
            hint = closest_hint(bad[0], names) if bad else ""
            raise UsageError(f"{at}: {bad or members!r}{hint}: name objectives of the recipe ({', '.join(names)})")
        balancer = str(spec.get("balancer", "static"))
        balancer_spec(balancer)
        steps = int(spec.get("steps") or (config.get("trainer") or {}).get("max_steps") or 0)
        if steps <= 0:
            raise UsageError(f"{at}: steps: the optimiser steps of the part (the recipe sets no trainer.max_steps)")
        label = "+".join(members)
        if "only" in spec:
            run = Run(f"only {label}", "single", tuple(members), balancer, seed)
        else:
            kept = tuple(n for n in names if n not in members)
            run = Run(f"without {label}", "leave-one-out", kept, balancer, seed)
        name = str(spec.get("name") or run.slug)
        if name in [p.name for p in parts]:
            raise UsageError(f"{at}: a second part named {name!r} would train in the first one's folder: name: it")
        parts.append(Part(name, run, steps, folder / "parts" / name))
    merge = dict(settings.get("merge") or {})
    if [k for k in merge if k not in MERGE_KEYS]:
        raise UsageError(f"{where}.merge: keys are {', '.join(MERGE_KEYS)}, got {', '.join(merge)}")
    settings |= {"seed": seed, "folder": str(folder), "merge": {"method": "task_arithmetic", **merge}}
    return settings, config, parts


def _override(settings: dict[str, Any], overrides: Sequence[str], path: Path) -> dict[str, Any]:
    """``--parts.KEY VALUE`` / ``--parts.KEY=VALUE`` and ``--seed_everything N``; ``--ckpt_path last`` is what the
    command does anyway; anything else is one line."""
    words = list(overrides)
    while words:
        word = words.pop(0)
        key, sep, value = word.partition("=")
        if not sep:
            value = words.pop(0) if words else ""
        if key == "--ckpt_path" and value == "last":
            continue
        field = {"--seed_everything": "seed"}.get(key, key.removeprefix("--parts."))
        if field not in KEYS or not key.startswith("--") or field in ("train", "merge"):
            raise UsageError(
                f"{word}: a parts recipe ({path}) takes --parts.KEY VALUE for KEY in "
                "recipe, out, seed, precision, conflict_every, jobs, --seed_everything N and --ckpt_path last; "
                "the recipe's other settings are its own"
            )
        settings[field] = yaml.safe_load(value)
    return settings


def fit_parts(path: str | os.PathLike[str], overrides: Sequence[str] = ()) -> dict[str, Any]:
    """Train the parts of ``path`` (``jobs`` at a time) and merge them into ``OUT/seed<S>``: its ``encoder/``,
    ``checkpoints/last.ckpt``, ``merge.json`` (provenance: each part's checkpoint and SHA-256) and
    ``parts.json`` (each part's recipe, objectives, steps and training time; the model's parameters per part and
    its files, ``unisent.inference.cost``). Returns ``parts.json``'s record."""
    from .._loader import load
    from ..inference.cost import model_cost
    from ..merging import merge_runs
    from .ablate.plan import run_recipe
    from .ablate.run import trained, write

    recipe = Path(path)
    settings, config, parts = read_parts(recipe, overrides)
    folder = Path(settings["folder"])
    record_path = folder / "parts.json"
    if (folder / "encoder").is_dir() and record_path.is_file():
        print(f"unisent fit: {folder} is merged already (its encoder/ is the model)", file=sys.stderr)
        return json.loads(record_path.read_text(encoding="utf-8"))
    conflict_every = int(settings.get("conflict_every", 10))
    recipes = []
    for part in parts:
        part_config = run_recipe(config, part.run, part.steps, folder, conflict_every)
        part_config["trainer"]["logger"]["init_args"] |= {
            "save_dir": str(part.folder.parent.parent),
            "name": part.folder.parent.name,
            "version": part.folder.name,
        }
        part_path = part.folder.parent / f"{part.name}.yaml"
        write(part_path, yaml.safe_dump(part_config, sort_keys=False))  # its folder made too
        recipes.append(part_path)
    todo = [(p, r) for p, r in zip(parts, recipes) if not trained(p.folder, p.steps)]
    print(f"unisent fit: {len(parts)} parts of {recipe} in {folder}; {len(todo)} to train", file=sys.stderr)
    seconds = _train(todo, int(settings.get("jobs", 1)))
    merged = folder / "merge.partial"
    if merged.exists():  # a merge interrupted before: done again
        shutil.rmtree(merged)
    merge = copy.deepcopy(settings["merge"])
    merge_record = merge_runs([p.folder for p in parts], merged, seed=settings["seed"], **merge)
    for name in ("checkpoints", "merge.json", "encoder"):  # encoder/ last: its presence means merged
        if (folder / name).exists():
            shutil.rmtree(folder / name) if (folder / name).is_dir() else (folder / name).unlink()
        os.replace(merged / name, folder / name)
    merged.rmdir()
    record = {
        "recipe": str(recipe),
        "cut_from": str(recipe.parent / str(settings["recipe"])),
        "seed": settings["seed"],
        "parts": [
            {
                "name": p.name,
                "kind": p.run.kind,
                "objectives": list(p.run.objectives),
                "balancer": p.run.balancer,
                "steps": p.steps,
                "recipe": str(r),
                "folder": str(p.folder),
                "train_seconds": seconds.get(p.name),
            }
            for p, r in zip(parts, recipes)
        ],
        "merge": {k: merge_record[k] for k in ("method", "weights", "density", "scale", "seed")},
        "cost": model_cost(load(str(folder / "encoder")), folder / "encoder"),  # `unisent evaluate --cost`: times
    }
    write(record_path, json.dumps(record, indent=1) + "\n")
    print(f"unisent fit: merged {len(parts)} parts; the model is {folder / 'encoder'}", file=sys.stderr)
    return record


def _step(part: Part) -> int:
    """The last optimiser step ``part`` logged (its ``metrics.csv``; 0 before the first)."""
    import csv

    try:
        with (part.folder / "metrics.csv").open(encoding="utf-8") as f:
            return max((int(row["step"]) for row in csv.DictReader(f) if row.get("step")), default=0)
    except (OSError, ValueError, KeyError):
        return 0


def _train(todo: list[tuple[Part, Path]], jobs: int) -> dict[str, float]:
    """Train ``todo`` in this process (``jobs`` 1) or as ``jobs`` ``unisent fit`` processes with their share of
    the CPUs; each part's training seconds. Raises ``StudyInterrupted`` when a signal stopped a part."""
    from .ablate.run import StudyInterrupted, fit_run

    seconds: dict[str, float] = {}
    if jobs <= 1:
        for i, (part, path) in enumerate(todo, 1):
            print(f"unisent fit: [part {i}/{len(todo)}] {part.name}: {part.steps} steps ({path})", file=sys.stderr)
            start = time.perf_counter()
            fit_run(path, part.name)
            seconds[part.name] = round(time.perf_counter() - start, 1)
        return seconds
    threads = str(max(1, (os.cpu_count() or 1) // jobs))
    env = dict(os.environ, OMP_NUM_THREADS=threads, MKL_NUM_THREADS=threads)
    waiting, active, failed = list(todo), [], []
    stop: list[int] = []
    forwarded, shown = False, time.perf_counter()
    caught = (signal.SIGINT, signal.SIGTERM, signal.SIGUSR1)  # Ctrl-C, and a scheduler's stop and warning
    previous = {s: signal.signal(s, lambda signum, frame: stop.append(signum)) for s in caught}
    try:
        while waiting or active:
            while waiting and len(active) < jobs and not stop:
                part, path = waiting.pop(0)
                log = part.folder.parent / f"{part.name}.log"
                cmd = [sys.executable, "-m", "unisent.cli", "fit", "-c", str(path), "--ckpt_path", "last"]
                handle = log.open("a", encoding="utf-8")
                print(f"unisent fit: started part {part.name}: {part.steps} steps (log: {log})", file=sys.stderr)
                proc = subprocess.Popen(cmd, stdout=handle, stderr=subprocess.STDOUT, env=env)
                active.append((part, proc, handle, time.perf_counter(), log))
            if stop and not forwarded:  # once: each part saves its checkpoint and stops
                for _, proc, *_ in active:
                    proc.send_signal(stop[0])
                forwarded = True
            time.sleep(1)
            if time.perf_counter() - shown > PROGRESS_SECONDS and active:  # one line for every part at work
                shown = time.perf_counter()
                steps = ", ".join(f"{p.name} step {_step(p)}/{p.steps}" for p, *_ in active)
                print(f"unisent fit: {steps}", file=sys.stderr)
            for item in [a for a in active if a[1].poll() is not None]:
                part, proc, handle, start, log = item
                handle.close()
                active.remove(item)
                seconds[part.name] = round(time.perf_counter() - start, 1)
                print(f"unisent fit: finished part {part.name} (status {proc.returncode})", file=sys.stderr)
                if proc.returncode in INTERRUPTED and not stop:  # the part itself was signalled (a scheduler)
                    stop.append(proc.returncode - 128)
                elif proc.returncode != 0 and not stop:
                    failed.append(f"{part.name} (status {proc.returncode}, log {log})")
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
    if stop:
        name = signal.Signals(stop[0]).name
        raise StudyInterrupted(
            f"interrupted ({name}); each part saved its last checkpoint; the same command continues", 128 + stop[0]
        )
    if failed:
        raise CommandFailed(f"{len(failed)} part(s) failed: {'; '.join(failed)}; the same command retries")
    return seconds


def main(path: Path, words: Sequence[str]) -> None:
    """``unisent fit -c PATH WORDS`` for a parts recipe: mistakes one line (status 2; a failed part: 1), a signal
    the status ``unisent fit`` gives (130, 143) with the command that continues."""
    from ..merging import MergeError
    from .ablate.run import StudyInterrupted
    from .function_commands import fail

    try:
        fit_parts(path, words)
    except UsageError as err:
        fail("unisent fit", str(err))
    except (CommandFailed, FileNotFoundError, MergeError) as err:  # a merge's refusal names the part's run
        sys.exit(f"unisent fit: error: {err}")
    except StudyInterrupted as err:  # a preempted SLURM job is requeued as a plain fit is: the parts continue
        print(f"unisent fit: {err}", file=sys.stderr)
        from ..resume import Interrupt
        from .fitting import FitOutcome, requeue_if_preempted, requeue_lines

        stopped = Interrupt(signal=signal.Signals(err.status - 128).name)
        outcome = requeue_if_preempted(FitOutcome("fit", interrupted=stopped))
        for line in requeue_lines("unisent fit", ["--ckpt_path", "last"], outcome):
            print(line, file=sys.stderr)
        sys.exit(outcome.status)
