"""Short-text clustering: K-means with K = number of gold classes, accuracy after Hungarian matching."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch
from scipy.optimize import linear_sum_assignment
from sklearn.cluster import KMeans
from sklearn.metrics import normalized_mutual_info_score
from sklearn.metrics.cluster import contingency_matrix
from torch import Tensor

__all__ = ["hungarian_accuracy", "kmeans_clustering"]


def hungarian_accuracy(labels_true: Sequence, labels_pred: Sequence) -> float:
    """Clustering accuracy: the best one-to-one mapping of clusters to classes, found by the Hungarian method.

    Args:
        labels_true: (n,) gold class of each item (any hashable labels).
        labels_pred: (n,) cluster id of each item.

    Returns:
        Fraction of items whose mapped cluster equals their class, in [0, 1].
    """
    if len(labels_true) != len(labels_pred):
        raise ValueError(f"got {len(labels_true)} gold labels and {len(labels_pred)} predictions")
    counts = contingency_matrix(labels_true, labels_pred)  # (classes, clusters)
    rows, cols = linear_sum_assignment(counts, maximize=True)
    return float(counts[rows, cols].sum() / counts.sum())


def kmeans_clustering(
    embeddings: Tensor | np.ndarray,
    labels: Sequence,
    seeds: Sequence[int] = (0, 1, 2),
    n_init: int = 10,
) -> dict[str, float]:
    """Cluster embeddings with K-means (K = number of gold classes) once per seed and score each run.

    Args:
        embeddings: (n, d) sentence embeddings, clustered as they are (no normalisation).
        labels: (n,) gold labels.
        seeds: one K-means run per seed; results are averaged.
        n_init: K-means restarts per run (10, scikit-learn's former default that EASE's code ran with).

    Returns:
        ``accuracy`` (mean x100), ``accuracy_std``, ``nmi`` (mean normalised mutual information x100),
        ``n_texts`` and ``n_classes``.
    """
    features = np.asarray(torch.as_tensor(embeddings).detach().cpu().float())
    n_classes = len(set(labels))
    if len(features) != len(labels):
        raise ValueError(f"got {len(features)} embeddings and {len(labels)} labels")
    accuracies, nmis = [], []
    for seed in seeds:
        predicted = KMeans(n_clusters=n_classes, n_init=n_init, random_state=seed).fit_predict(features)
        accuracies.append(100.0 * hungarian_accuracy(labels, predicted))
        nmis.append(100.0 * normalized_mutual_info_score(labels, predicted))
    return {
        "accuracy": float(np.mean(accuracies)),
        "accuracy_std": float(np.std(accuracies)),
        "nmi": float(np.mean(nmis)),
        "n_texts": float(len(features)),
        "n_classes": float(n_classes),
    }
