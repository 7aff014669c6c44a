"""Metrics on embeddings: STS correlation, clustering, retrieval and mining, linear probes, NLI, analysis."""

from __future__ import annotations

from .clustering import hungarian_accuracy, kmeans_clustering
from .nli import (
    best_threshold,
    direction_accuracy_by_similarity,
    direction_accuracy_by_variance,
    pr_auc,
    threshold_accuracy,
)
from .probes import ProbeConfig, cross_validated_accuracy, fit_probe, pair_features, probe_scores
from .retrieval import bucc_f1, cosine_knn, margin_candidates, nearest_neighbor_accuracy, tatoeba_accuracy
from .similarity import (
    COSINE,
    Representation,
    Similarity,
    SimilarityFn,
    alignment,
    averaged_kl_similarity,
    cosine_similarity,
    dot_similarity,
    kl_similarity,
    sts_correlation,
    sts_spearman,
    symmetric_kl_similarity,
    uniformity,
)

__all__ = [
    "COSINE",
    "ProbeConfig",
    "Representation",
    "Similarity",
    "SimilarityFn",
    "alignment",
    "averaged_kl_similarity",
    "best_threshold",
    "bucc_f1",
    "cosine_knn",
    "cosine_similarity",
    "cross_validated_accuracy",
    "direction_accuracy_by_similarity",
    "direction_accuracy_by_variance",
    "dot_similarity",
    "fit_probe",
    "hungarian_accuracy",
    "kl_similarity",
    "kmeans_clustering",
    "margin_candidates",
    "nearest_neighbor_accuracy",
    "pair_features",
    "pr_auc",
    "probe_scores",
    "sts_correlation",
    "sts_spearman",
    "symmetric_kl_similarity",
    "tatoeba_accuracy",
    "threshold_accuracy",
    "uniformity",
]
