"""The settings of the linear probes, apart from ``probes`` so that building the task registry
(``unisent evaluate --list``) imports neither scikit-learn nor torch."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["ProbeConfig"]


@dataclass(frozen=True)
class ProbeConfig:
    """Settings of the logistic-regression probes.

    Attributes:
        c_grid: candidate values of the inverse L2 regularisation strength ``C``.
        kfold: outer folds for tasks without a split.
        inner_kfold: folds used to choose ``C`` where there is no dev set.
        standardize: standardise features before the regression.
        max_iter: iteration cap of the lbfgs solver.
        seed: seed of the fold shuffling and the solver.
    """

    c_grid: tuple[float, ...] = (2.0**-8, 2.0**-6, 2.0**-4, 2.0**-2, 1.0)
    kfold: int = 10
    inner_kfold: int = 3
    standardize: bool = True
    max_iter: int = 1000
    seed: int = 1111

    def __post_init__(self) -> None:
        if not self.c_grid or any(c <= 0 for c in self.c_grid):
            raise ValueError(f"c_grid must hold positive values, got {self.c_grid}")
        if self.kfold < 2 or self.inner_kfold < 2:
            raise ValueError(f"kfold and inner_kfold must be >= 2, got {self.kfold}, {self.inner_kfold}")
