"""NLI as a similarity threshold (2-way) and entailment direction (GaussCSE evaluation)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch
from sklearn.metrics import accuracy_score, auc, average_precision_score, precision_recall_curve
from torch import Tensor

from .similarity import Representation, SimilarityFn

__all__ = [
    "best_threshold",
    "direction_accuracy_by_similarity",
    "direction_accuracy_by_variance",
    "direction_by_length",
    "pr_auc",
    "threshold_accuracy",
]

DEFAULT_THRESHOLDS = np.round(np.arange(0, 1001) / 1000, 3)


def _scores(x: Sequence[float] | np.ndarray | Tensor) -> np.ndarray:
    return np.asarray(torch.as_tensor(x).detach().cpu().double())


def threshold_accuracy(scores: Sequence[float] | np.ndarray | Tensor, labels: Sequence[int], threshold: float) -> float:
    """Accuracy in [0, 1] of predicting entailment (label 1; 0 otherwise) when ``score >= threshold``."""
    return float(accuracy_score(np.asarray(labels), (_scores(scores) >= threshold).astype(int)))


def best_threshold(
    scores: Sequence[float] | np.ndarray | Tensor,
    labels: Sequence[int],
    thresholds: Sequence[float] | np.ndarray = DEFAULT_THRESHOLDS,
) -> tuple[float, float]:
    """``(accuracy, threshold)``: the grid threshold with the best accuracy (GaussCSE's grid: 0 to 1 in steps
    of 0.001); ties go to the smallest. ``labels``: 1 for entailment, 0 otherwise."""
    values = _scores(scores)
    gold = np.asarray(labels).astype(bool)
    grid = np.asarray(thresholds, dtype=np.float64)
    predicted = values[None, :] >= grid[:, None]  # (thresholds, n)
    accuracies = (predicted == gold[None, :]).mean(axis=1)
    best = int(np.argmax(accuracies))
    return float(accuracies[best]), float(grid[best])


def pr_auc(scores: Sequence[float] | np.ndarray | Tensor, labels: Sequence[int]) -> dict[str, float]:
    """Areas in [0, 1] under the precision-recall curve of entailment detection (``labels``: 1 or 0).

    ``pr_auc``: ``sklearn.metrics.auc(recall, precision)`` over ``precision_recall_curve`` (trapezoidal, as
    GaussCSE's code computes it); ``average_precision``: ``average_precision_score`` (step-wise).
    """
    values, gold = _scores(scores), np.asarray(labels)
    precision, recall, _ = precision_recall_curve(gold, values)
    return {
        "pr_auc": float(auc(recall, precision)),
        "average_precision": float(average_precision_score(gold, values)),
    }


def direction_accuracy_by_similarity(
    premise: Representation, hypothesis: Representation, similarity: SimilarityFn, *, per_pair: bool = False
) -> float | Tensor:
    """Fraction of entailment pairs where ``sim(hyp || pre) > sim(pre || hyp)``, with ``similarity(a, b) =
    sim(a || b)``. Ties (always, for a symmetric similarity) count as errors. ``per_pair``: return the (n,)
    booleans instead of their mean."""
    forward = similarity(hypothesis, premise)
    backward = similarity(premise, hypothesis)
    right = torch.as_tensor(forward > backward)
    return right if per_pair else float(right.double().mean())


def direction_accuracy_by_variance(
    premise_var: Tensor, hypothesis_var: Tensor, *, per_pair: bool = False
) -> float | Tensor:
    """Fraction of entailment pairs whose premise has the larger variance (sum of log-variances of the
    (n, d) diagonal variances). ``per_pair``: return the (n,) booleans instead of their mean."""
    premise_spread = torch.log(premise_var.double()).sum(dim=-1)
    hypothesis_spread = torch.log(hypothesis_var.double()).sum(dim=-1)
    right = premise_spread > hypothesis_spread
    return right if per_pair else float(right.double().mean())


def direction_by_length(correct: Tensor, premise_length: Tensor, hypothesis_length: Tensor, name: str) -> dict:
    """A direction accuracy split by the pairs' length relation: "the longer sentence is the premise" alone
    scores high on SNLI, so the accuracy says most where length does not give the answer.

    Returns ``{name}_{relation}``: accuracy x100 of ``correct`` within the relation (absent when no pair is
    in it), and ``share_{relation}``: its share of the pairs x100, for ``premise_longer``, ``equal_length``,
    ``hypothesis_longer`` and ``hypothesis_not_shorter`` (the last two together).
    """
    premise_length, hypothesis_length = premise_length.long(), hypothesis_length.long()
    masks = {
        "premise_longer": premise_length > hypothesis_length,
        "equal_length": premise_length == hypothesis_length,
        "hypothesis_longer": premise_length < hypothesis_length,
        "hypothesis_not_shorter": premise_length <= hypothesis_length,
    }
    result: dict[str, float] = {}
    for relation, mask in masks.items():
        if mask.any():
            result[f"{name}_{relation}"] = 100.0 * float(correct[mask].double().mean())
        result[f"share_{relation}"] = 100.0 * float(mask.double().mean())
    return result
