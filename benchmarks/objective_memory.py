"""Peak memory of a multi-objective training step, and what each objective adds to it.

Runs the balanced unified recipe (``recipes/unified/minilm-cpu-balanced.yaml``: GaussCSE, EASE, AMR, CMLM
and bitext on one MiniLM, UPGrad) for a few optimiser steps with every objective on from step 0 (the
recipe's ``model.train.weight_schedule`` is dropped: bitext too), then once with each objective removed in
turn, each configuration in a fresh process (``unisent fit`` in that process, sequentially), and reads
each process's peak resident memory (``VmHWM`` from ``/proc/self/status``). The "sum-of-objectives
table": the peak of every configuration and what removing each objective saves.

    python benchmarks/objective_memory.py                       # the real MiniLM (minutes per configuration)
    python benchmarks/objective_memory.py --only all            # just the full recipe
    python benchmarks/objective_memory.py --out table.md        # also write the markdown table to a file

``--model`` swaps the backbone (a local model directory: the smoke test's tiny BERT) and
``--max-records`` reads only the first records of each training file. Validation, the encoder save and
the recipe's evaluation panel are off: this measures training steps only.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RECIPE = ROOT / "recipes" / "unified" / "minilm-cpu-balanced.yaml"

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def peak_rss_gb() -> float:
    """This process's peak resident set (``VmHWM``), in GB (10^9 bytes)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024 / 1e9
    raise RuntimeError("no VmHWM in /proc/self/status (Linux only)")


def _default_name(cls: str) -> str:
    return {"GaussCSE": "gausscse", "EASE": "ease", "AMRSimCSE": "amr", "CMLM": "cmlm"}.get(cls, cls.lower())


def configuration(
    recipe: dict,
    without: str | None,
    steps: int,
    workdir: Path,
    model: str | None = None,
    max_records: int = 0,
    batch_size: dict | None = None,
) -> dict:
    """``recipe`` (a loaded YAML) for a measurement: every objective from step 0, ``without`` removed (with
    its data), ``steps`` optimiser steps, no validation, no encoder save, logs under ``workdir``."""
    import copy

    config = copy.deepcopy(recipe)
    m, data, trainer = config["model"], config["data"], config["trainer"]
    m["objectives"] = [o for o in m["objectives"] if _name(o) != without]
    names = [_name(o) for o in m["objectives"]]
    data["train"] = {k: v for k, v in data["train"].items() if k in names}
    sizes = batch_size or data.get("batch_size")
    if isinstance(sizes, dict):
        data["batch_size"] = {k: v for k, v in sizes.items() if k in names}
    if isinstance(data.get("length_grouped"), dict):
        data["length_grouped"] = {k: v for k, v in data["length_grouped"].items() if k in names}
    data["cache_dir"] = str(workdir / "cache")
    if max_records:
        data["train"] = {
            k: ({"path": v} if isinstance(v, str) else dict(v)) | {"max_records": max_records}
            for k, v in data["train"].items()
        }
    if model:
        m["encoder"]["model"] = model
    # every objective from step 0 (the recipe's bitext starts later)
    m["train"] = {**(m.get("train") or {}), "weight_schedule": {}, "save_encoder": False}
    m["evaluation"] = {"val_tasks": [], "test_tasks": []}
    trainer.update(max_steps=steps, val_check_interval=None, limit_val_batches=0, enable_progress_bar=False)
    trainer["logger"] = {
        "class_path": "lightning.pytorch.loggers.CSVLogger",
        "init_args": {"save_dir": str(workdir / "runs"), "name": without or "all"},
    }
    return config


def _name(objective: dict) -> str:
    return (objective.get("init_args") or {}).get("name") or _default_name(objective["class_path"].rsplit(".", 1)[1])


def child(config_path: str, threads: int) -> None:
    """Runs in a fresh process: ``unisent fit -c config_path``, then print the peak, the seconds and the torch
    threads as JSON (``benchmarks/cached_batch.py`` runs its configurations with it too)."""
    import torch

    if threads:
        torch.set_num_threads(threads)
    from unisent.cli import main

    start = time.perf_counter()
    try:
        main(["fit", "-c", config_path])
    except SystemExit as done:
        if done.code not in (0, None):
            raise
    print(
        json.dumps(
            {"peak_gb": peak_rss_gb(), "seconds": time.perf_counter() - start, "threads": torch.get_num_threads()}
        )
    )


def measure(config: dict, path: Path, threads: int = 0) -> dict:
    """Write ``config`` to ``path`` and run it in a fresh process (from the repository root: the recipe's
    relative paths); its peak RSS and seconds."""
    import yaml

    path.write_text(yaml.safe_dump(config, sort_keys=False), encoding="utf-8")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (os.environ.get("PYTHONPATH"), str(ROOT)) if p)}
    command = [sys.executable, str(Path(__file__).resolve()), "--child", str(path), "--threads", str(threads)]
    done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} failed:\n{done.stderr[-4000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def table(results: dict[str, dict]) -> str:
    """The markdown table: peak per configuration and, for each removed objective, what it saves."""
    full = results.get("all")
    lines = ["| configuration | peak RSS (GB) | saved vs all (GB) | seconds |", "|---|---:|---:|---:|"]
    for key, row in results.items():
        label = "all objectives" if key == "all" else f"without {key}"
        saved = "" if key == "all" or full is None else f"{full['peak_gb'] - row['peak_gb']:.2f}"
        lines.append(f"| {label} | {row['peak_gb']:.2f} | {saved} | {row['seconds']:.0f} |")
    return "\n".join(lines) + "\n"


def run(
    recipe_path: Path = RECIPE,
    steps: int = 4,
    only: list[str] | None = None,
    model: str | None = None,
    max_records: int = 0,
    batch_size: dict | None = None,
    workdir: Path | None = None,
    threads: int = 0,
) -> dict[str, dict]:
    """Measure every configuration (``all`` and each objective removed; ``only``: these keys), in order."""
    import yaml

    recipe = yaml.safe_load(Path(recipe_path).read_text(encoding="utf-8"))
    keys = ["all", *(_name(o) for o in recipe["model"]["objectives"])]
    results: dict[str, dict] = {}
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(workdir or tmp)
        work.mkdir(parents=True, exist_ok=True)
        for key in keys:
            if only and key not in only:
                continue
            without = None if key == "all" else key
            config = configuration(recipe, without, steps, work, model, max_records, batch_size)
            results[key] = measure(config, work / f"{key}.yaml", threads)
            print(f"{key}: {results[key]['peak_gb']:.2f} GB, {results[key]['seconds']:.0f} s", file=sys.stderr)
    return results


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--recipe", type=Path, default=RECIPE)
    p.add_argument("--steps", type=int, default=4)
    p.add_argument("--only", nargs="*", help="configurations: all and/or objective names (default: every one)")
    p.add_argument("--model", help="another backbone (a preset or a model directory)")
    p.add_argument("--max-records", type=int, default=0, help="read only the first records of each training file")
    p.add_argument("--workdir", type=Path, help="where configs, logs and caches go (default: a temporary directory)")
    p.add_argument("--threads", type=int, default=0, help="torch threads of each run (0: torch's default)")
    p.add_argument("--out", type=Path, help="also write the markdown table here")
    p.add_argument("--child", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.child:
        child(args.child, args.threads)
        return 0
    results = run(args.recipe, args.steps, args.only, args.model, args.max_records, None, args.workdir, args.threads)
    text = table(results)
    print(text)
    if args.out:
        args.out.write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
