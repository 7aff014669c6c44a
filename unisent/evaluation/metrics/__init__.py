"""Metrics on embeddings: STS correlation, clustering, retrieval and mining, linear probes, NLI, analysis.

The names are imported on first use (PEP 562): the task registry (``unisent evaluate --list``) needs
only :class:`ProbeConfig`, and the metrics import torch, SciPy and scikit-learn.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

#: name -> submodule that defines it
_LAZY: dict[str, str] = {
    "hungarian_accuracy": "clustering",
    "kmeans_clustering": "clustering",
    "best_threshold": "nli",
    "direction_accuracy_by_similarity": "nli",
    "direction_accuracy_by_variance": "nli",
    "pr_auc": "nli",
    "threshold_accuracy": "nli",
    "ProbeConfig": "probe_config",
    "cross_validated_accuracy": "probes",
    "fit_probe": "probes",
    "pair_features": "probes",
    "probe_scores": "probes",
    "bucc_f1": "retrieval",
    "cosine_knn": "retrieval",
    "margin_candidates": "retrieval",
    "nearest_neighbor_accuracy": "retrieval",
    "tatoeba_accuracy": "retrieval",
    "COSINE": "similarity",
    "Representation": "similarity",
    "Similarity": "similarity",
    "SimilarityFn": "similarity",
    "alignment": "similarity",
    "averaged_kl_similarity": "similarity",
    "cosine_similarity": "similarity",
    "dot_similarity": "similarity",
    "kl_similarity": "similarity",
    "sts_correlation": "similarity",
    "sts_spearman": "similarity",
    "symmetric_kl_similarity": "similarity",
    "uniformity": "similarity",
}

if TYPE_CHECKING:
    from .clustering import hungarian_accuracy, kmeans_clustering
    from .nli import (
        best_threshold,
        direction_accuracy_by_similarity,
        direction_accuracy_by_variance,
        pr_auc,
        threshold_accuracy,
    )
    from .probe_config import ProbeConfig
    from .probes import cross_validated_accuracy, fit_probe, pair_features, probe_scores
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


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        value = getattr(import_module(f".{_LAZY[name]}", __name__), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *_LAZY})


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
