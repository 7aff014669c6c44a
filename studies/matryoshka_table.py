"""Matryoshka against plain truncation: STS-B test and SICK-R test at 384/256/128/64 dimensions, over seeds.

Trains ``recipes/simcse/minilm-matryoshka.yaml`` (supervised SimCSE wrapped in ``unisent.objectives.Matryoshka``)
and ``recipes/simcse/minilm-nli.yaml`` (the same recipe unwrapped) once per seed, through the function ``unisent
fit`` runs, then scores each trained encoder, and the untrained MiniLM, on the first ``d`` coordinates of its
vectors (cosine, Spearman x100; the vectors are computed once per model and cut). Writes the markdown table
(mean ± the half-width of the 95% Student-t interval over seeds) and every score as JSON.

    python -m studies.matryoshka_table --data-dir ../shared/data --out runs/matryoshka --seeds 42 43 44

``--steps N`` caps each fit (a smoke run); ``--model`` swaps the backbone; ``--set=--key=value`` (repeatable)
overrides a setting of both recipes (``--set=--trainer.max_epochs=2``).
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
RECIPES = {
    "plain truncation": ROOT / "recipes/simcse/minilm-nli.yaml",
    "matryoshka": ROOT / "recipes/simcse/minilm-matryoshka.yaml",
}
TASKS = ("stsb-test", "sick-r")
#: two-sided 95% Student-t quantiles by degrees of freedom
T95 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776}


class Prefix:
    """A model whose ``encode`` returns the first ``dim`` coordinates of a full model's vectors, computed once."""

    def __init__(self, model, dim: int, cache: dict[str, np.ndarray]) -> None:
        self.model, self.dim, self.cache = model, dim, cache

    def encode(self, sentences, batch_size: int = 64, **kwargs):
        missing = [s for s in dict.fromkeys(sentences) if s not in self.cache]
        if missing:
            vectors = self.model.encode(missing, batch_size=batch_size, precision="fp32")
            self.cache.update(zip(missing, np.asarray(vectors, dtype=np.float32), strict=True))
        return np.stack([self.cache[s][: self.dim] for s in sentences])


def score(model_path: str, dims: list[int], data_dir: str | None) -> dict[str, dict[str, float]]:
    """``{task: {dim: Spearman x100}}`` of the model's vectors cut to each of ``dims``."""
    import unisent
    from unisent.evaluation import evaluate

    model = unisent.load(model_path)
    cache: dict[str, np.ndarray] = {}
    out: dict[str, dict[str, float]] = {task: {} for task in TASKS}
    for dim in dims:
        results = evaluate(Prefix(model, dim, cache), list(TASKS), data_dir, progress=False)
        for task in TASKS:
            out[task][str(dim)] = round(float(results["tasks"][task]["score"]), 4)
    return out


def train(variant: str, seed: int, out: Path, model: str | None, steps: int | None, extra: list[str]) -> Path:
    """One fit of ``variant`` with ``seed``; its saved encoder."""
    from unisent.commands.fitting import fit

    name = variant.replace(" ", "-")
    overrides = [
        f"--seed_everything={seed}",
        f"--trainer.logger.init_args.save_dir={out / 'runs'}",
        f"--trainer.logger.init_args.name={name}",
        f"--trainer.logger.init_args.version=seed{seed}",
        "--trainer.enable_progress_bar=false",
        "--trainer.enable_checkpointing=false",
    ]
    overrides += [f"--model.encoder.model={model}"] if model else []
    overrides += [f"--trainer.max_steps={steps}"] if steps else []
    overrides += list(extra)
    encoder = out / "runs" / name / f"seed{seed}" / "encoder"
    if not encoder.is_dir():
        outcome = fit([RECIPES[variant]], overrides)
        if outcome.interrupted is not None:
            raise SystemExit(130)
    return encoder


def interval(values: list[float]) -> tuple[float, float]:
    mean = statistics.fmean(values)
    if len(values) < 2:
        return mean, 0.0
    return mean, T95.get(len(values) - 1, 1.96) * statistics.stdev(values) / math.sqrt(len(values))


def table(results: dict, dims: list[int]) -> str:
    """The markdown table: one row per variant and task, one column per dimension."""
    header = "| model | test | " + " | ".join(f"{d} dims" for d in dims) + " |"
    lines = [header, "|---|---|" + "---:|" * len(dims)]
    for variant, per_seed in results.items():
        for task in TASKS:
            cells = []
            for d in dims:
                values = [scores[task][str(d)] for scores in per_seed.values()]
                mean, half = interval(values)
                cells.append(f"{mean:.2f}" if len(values) == 1 else f"{mean:.2f} ± {half:.2f}")
            lines.append(
                f"| {variant} ({len(per_seed)} seed{'s' if len(per_seed) > 1 else ''}) | {task} | "
                + " | ".join(cells)
                + " |"
            )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default="runs/matryoshka")
    parser.add_argument("--seeds", type=int, nargs="+", default=[42, 43, 44])
    parser.add_argument("--dims", type=int, nargs="+", default=[384, 256, 128, 64])
    parser.add_argument("--data-dir", default=None, help="evaluation data (../shared/data layout); default: bundled")
    parser.add_argument("--model", default=None, help="another backbone (default: the recipes' minilm-l6)")
    parser.add_argument("--steps", type=int, default=None, help="cap each fit at N optimiser steps")
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        help="a recipe override for both variants, e.g. --set=--trainer.max_epochs=2",
    )
    args = parser.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    results: dict = {"untrained": {"-": score(args.model or "minilm-l6", args.dims, args.data_dir)}}
    for variant in RECIPES:
        results[variant] = {}
        for seed in args.seeds:
            encoder = train(variant, seed, out, args.model, args.steps, args.set)
            results[variant][str(seed)] = score(str(encoder), args.dims, args.data_dir)
            print(f"matryoshka_table: {variant}, seed {seed}: {results[variant][str(seed)]}", file=sys.stderr)
    text = table(results, args.dims)
    (out / "matryoshka.json").write_text(json.dumps({"dims": args.dims, "results": results}, indent=1) + "\n")
    (out / "matryoshka.md").write_text(text)
    print(text)
    print(f"matryoshka_table: {time.perf_counter() - start:.0f} s; {out / 'matryoshka.md'}", file=sys.stderr)
    return results


if __name__ == "__main__":
    main()
