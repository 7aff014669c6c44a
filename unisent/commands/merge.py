"""``unisent merge RUN RUN ... --out DIR --method ties``: runs that share a starting model merged into one
model ([`unisent.merging.merge_runs`][unisent.merging.merge_runs]; docs/merging.md)."""

from __future__ import annotations

from functools import partial
from typing import Any, Literal

from .function_commands import run_command

__all__ = ["main", "merge"]


def merge(
    runs: list[str],
    *,
    out: str,
    method: Literal["linear", "task_arithmetic", "ties", "dare_ties"] = "ties",
    weights: list[float] | None = None,
    density: float | None = None,
    scale: float = 1.0,
    seed: int = 0,
) -> dict[str, Any]:
    """Merge runs of `unisent fit` that share a starting model into one model: OUT/encoder (unisent.load,
    evaluate, export), OUT/checkpoints/last.ckpt (every objective's own parameters) and OUT/merge.json.

    Each objective keeps the parameters of the run that trained it; the encoder's weights are merged.
    Checked before anything is written: checkpoints of unisent fit, one backbone, tokenizers that agree,
    the same shapes.

    Args:
        runs: run folders (their checkpoints/last.ckpt) or .ckpt files, two or more
        out: a new or empty folder
        method: linear (model soups), task_arithmetic (Ilharco et al. 2023), ties (Yadav et al. 2023),
            dare_ties (Yu et al. 2024 with TIES' sign election)
        weights: one per run, in the runs' order (default: 1 each)
        density: share of each task vector kept (default: ties 0.2, dare_ties 0.1, the others 1)
        scale: factor of the merged task vector (task_arithmetic, ties, dare_ties)
        seed: DARE's random source (recorded in merge.json)
    """
    from ..merging import merge_runs

    return merge_runs(runs, out, method=method, weights=weights, density=density, scale=scale, seed=seed)


main = partial(run_command, merge, prog="unisent merge")
