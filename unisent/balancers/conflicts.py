"""Gradient conflicts between the objectives on the shared encoder: per-objective gradient norms and pairwise cosines,
logged by [`ConflictLog`][unisent.balancers.ConflictLog] (metrics, ``conflicts.csv``, W&B) and plotted."""

from __future__ import annotations

import csv
import math
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, cast

import torch

__all__ = [
    "ConflictLog",
    "GradientConflicts",
    "conflict_stats",
    "gram",
    "gram_stats",
    "mean_cosines",
    "plot_conflicts",
    "read_conflicts",
]


#: columns of the gradient matrix per float64 chunk of the Gram matrix (k x 2^20 x 8 bytes: 40 MB for 5 objectives)
GRAM_CHUNK = 1 << 20


def gram(jacobian: torch.Tensor, rows: Sequence[int] | None = None, chunk: int = GRAM_CHUNK) -> torch.Tensor:
    """``J J^T`` of the matrix's rows (``rows``: these rows only, in this order) in float64, accumulated over
    chunks of columns: never a float64 copy of the whole matrix."""
    index = list(range(jacobian.shape[0])) if rows is None else list(rows)
    whole = index == list(range(jacobian.shape[0]))
    out = torch.zeros(len(index), len(index), dtype=torch.float64, device=jacobian.device)
    for start in range(0, jacobian.shape[1], chunk):
        block = jacobian[:, start : start + chunk]
        block = (block if whole else block[index]).double()
        out += block @ block.T
    return out


def gram_stats(gram_matrix: torch.Tensor, names: Sequence[str]) -> dict[str, Any]:
    """Per-objective gradient norms and pairwise cosines from the objectives' Gram matrix (k x k)."""
    gram_matrix = gram_matrix.double()
    norms = gram_matrix.diagonal().clamp_min(0).sqrt()
    denom = torch.outer(norms, norms).clamp_min(1e-30)
    cosines = (gram_matrix / denom).clamp(-1, 1)
    cosines[norms == 0, :] = float("nan")
    cosines[:, norms == 0] = float("nan")
    as_list = cast(Callable[[torch.Tensor], list[Any]], torch.Tensor.tolist)  # list[Unknown] in torch
    return {"names": list(names), "norms": as_list(norms), "cosines": as_list(cosines)}


def conflict_stats(jacobian: torch.Tensor, names: Sequence[str], rows: Sequence[int] | None = None) -> dict[str, Any]:
    """``gram_stats`` of the rows of ``jacobian`` (``rows``: these, named ``names``), via ``gram``."""
    return gram_stats(gram(jacobian, rows), names)


class GradientConflicts:
    """Appends to a run's ``conflicts.csv``: one row per pair and logged step (``a == b``: the norm alone)."""

    FIELDS = ("step", "a", "b", "cosine", "norm_a", "norm_b")

    def __init__(self, folder: str | Path) -> None:
        self.path = Path(folder) / "conflicts.csv"

    def append(self, step: int, stats: dict[str, Any]) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        new = not self.path.exists()
        names, norms, cos = stats["names"], stats["norms"], stats["cosines"]
        with self.path.open("a", newline="", encoding="utf-8") as f:
            writer = csv.writer(f)
            if new:
                writer.writerow(self.FIELDS)
            for i, a in enumerate(names):
                for j in range(i, len(names)):
                    c = "" if i == j or math.isnan(cos[i][j]) else f"{cos[i][j]:.6f}"
                    writer.writerow([step, a, names[j], c, f"{norms[i]:.6g}", f"{norms[j]:.6g}"])


def read_conflicts(
    path: str | Path,
) -> tuple[list[str], dict[int, dict[tuple[str, str], float]], dict[str, list[tuple[int, float]]]]:
    """``conflicts.csv`` as (names, {step: {(a, b): cosine}}, {name: [(step, norm), ...]}); a resumed
    run may have written a step twice: the last row wins."""
    names: list[str] = []
    cosines: dict[int, dict[tuple[str, str], float]] = {}
    norms: dict[str, dict[int, float]] = {}
    with Path(path).open(encoding="utf-8") as f:
        for row in csv.DictReader(f):
            step, a, b = int(row["step"]), row["a"], row["b"]
            for n in (a, b):
                if n not in names:
                    names.append(n)
            if a == b:
                norms.setdefault(a, {})[step] = float(row["norm_a"])
            elif row["cosine"]:
                cosines.setdefault(step, {})[(a, b)] = float(row["cosine"])
    return names, cosines, {n: sorted(v.items()) for n, v in norms.items()}


def mean_cosines(names: Sequence[str], cosines: dict[int, dict[tuple[str, str], float]]) -> list[list[float]]:
    """The matrix of cosines averaged over the logged steps (diagonal 1; ``nan`` where never logged)."""
    k = len(names)
    matrix = [[1.0 if i == j else float("nan") for j in range(k)] for i in range(k)]
    for i, a in enumerate(names):
        for j, b in enumerate(names):
            if i == j:
                continue
            values = [c[(a, b)] if (a, b) in c else c.get((b, a)) for c in cosines.values()]
            values = [v for v in values if v is not None]
            if values:
                matrix[i][j] = sum(values) / len(values)
    return matrix


def plot_conflicts(csv_path: str | Path, png_path: str | Path | None = None) -> Path:
    """``conflicts.png`` from ``conflicts.csv``: mean cosine matrix (left), gradient norms over steps (right)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    csv_path = Path(csv_path)
    png_path = Path(png_path) if png_path else csv_path.with_suffix(".png")
    names, cosines, norms = read_conflicts(csv_path)
    matrix = mean_cosines(names, cosines)
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.5))
    image = left.imshow(matrix, cmap="RdBu", vmin=-1, vmax=1)
    left.set_xticks(range(len(names)), names, rotation=45, ha="right")
    left.set_yticks(range(len(names)), names)
    for i in range(len(names)):
        for j in range(len(names)):
            if not math.isnan(matrix[i][j]):
                left.text(j, i, f"{matrix[i][j]:.2f}", ha="center", va="center", fontsize=8)
    left.set_title(f"gradient cosine on the shared encoder\n(mean over {len(cosines)} logged steps)")
    cast(Callable[..., object], fig.colorbar)(image, ax=left, fraction=0.046)  # **kwargs untyped in matplotlib
    for name, points in norms.items():
        if points:
            right.plot([s for s, _ in points], [v for _, v in points], marker=".", label=name)
    right.set_yscale("log")
    right.set_xlabel("optimiser step")
    right.set_title("gradient norm on the shared encoder")
    right.legend(fontsize=8)
    fig.tight_layout()
    cast(Callable[..., object], fig.savefig)(png_path, dpi=110)
    plt.close(fig)
    return png_path


class ConflictLog:
    """When a run logs its gradient conflicts (every ``every`` optimiser steps, 0: never; once per step, on
    its last micro-batch) and where they go: ``conflict/<a>/grad_norm`` and ``conflict/<a>~<b>/cosine``,
    and on global zero ``conflicts.csv`` in ``run_dir`` (``None``: no file) and a W&B table."""

    def __init__(self, every: int = 0) -> None:
        self.every = every
        self.run_dir: str | None = None
        self._logged_at = -1

    def due(self, step: int, last_micro_batch: bool) -> bool:
        """Whether optimiser step ``step`` logs its conflicts (on its last micro-batch, not yet logged)."""
        return self.every > 0 and last_micro_batch and step % self.every == 0 and step != self._logged_at

    def record(self, log: Callable[..., Any], trainer: Any, step: int, stats: dict[str, Any]) -> None:
        """Log ``stats`` ([`conflict_stats`][unisent.balancers.conflict_stats]) of step ``step`` through ``log`` (the
        LightningModule's), and on ``trainer``'s global-zero process to the CSV and W&B."""
        self._logged_at = step
        names, norms, cosines = stats["names"], stats["norms"], stats["cosines"]
        for i, a in enumerate(names):
            log(f"conflict/{a}/grad_norm", norms[i], on_step=True, batch_size=1)
            for j in range(i + 1, len(names)):
                log(f"conflict/{a}~{names[j]}/cosine", cosines[i][j], on_step=True, batch_size=1)
        if trainer is None or not trainer.is_global_zero:
            return
        if self.run_dir:
            GradientConflicts(self.run_dir).append(step, stats)
        from lightning.pytorch.loggers import WandbLogger  # the class only: wandb is imported by the logger

        for logger in trainer.loggers:
            if isinstance(logger, WandbLogger):
                rows = [[a, *[round(c, 4) for c in cosines[i]]] for i, a in enumerate(names)]
                logger.log_table(key="conflict/cosine_matrix", columns=["objective", *names], data=rows)

    @staticmethod
    def plot(root: str | Path) -> None:
        """``conflicts.png`` beside ``root``'s ``conflicts.csv``, if the run wrote one (one stderr line)."""
        path = Path(root) / "conflicts.csv"
        if not path.exists():
            return
        try:
            print(f"unisent: gradient conflicts plotted to {plot_conflicts(path)}", file=sys.stderr)
        except ImportError:
            print("unisent: conflicts.csv written; pip install matplotlib to plot it", file=sys.stderr)
