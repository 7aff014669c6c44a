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
    """Clustering accuracy in [0, 1] under the best one-to-one cluster-to-class mapping (Hungarian method).

    ``labels_true`` may be any hashable labels, ``labels_pred`` cluster ids.
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
    """K-means (K = number of gold classes) on the raw ``embeddings``, once per seed, averaged.

    ``n_init``: restarts per run (10, scikit-learn's former default that EASE's code ran with). Returns
    ``accuracy`` (mean x100), ``accuracy_std``, ``nmi`` (mean x100), ``n_texts`` and ``n_classes``.
    """
    features = np.asarray(torch.as_tensor(embeddings).detach().cpu().float())
    n_classes = len(set(labels))
    if len(features) != len(labels):
        raise ValueError(f"got {len(features)} embeddings and {len(labels)} labels")
    accuracies, nmis = [], []
    for seed in seeds:
        predicted = KMeans(n_clusters=n_classes, n_init=n_init, random_state=seed).fit_predict(features)  # pyright: ignore[reportArgumentType]  # n_init: typed by its default "auto"
        accuracies.append(100.0 * hungarian_accuracy(labels, predicted))
        nmis.append(100.0 * normalized_mutual_info_score(labels, predicted))
    return {
        "accuracy": float(np.mean(accuracies)),
        "accuracy_std": float(np.std(accuracies)),
        "nmi": float(np.mean(nmis)),
        "n_texts": float(len(features)),
        "n_classes": float(n_classes),
    }
