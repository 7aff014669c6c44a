"""Metrics on embeddings: STS correlation, clustering, retrieval and mining, linear probes, NLI, analysis.

Imported on first use (PEP 562): the task registry needs only [`ProbeConfig`][unisent.evaluation.ProbeConfig], not torch
or SciPy.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING

from ...io.imports import lazy_exports

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
    "margin_candidates": "retrieval",
    "tatoeba_accuracy": "retrieval",
    "Similarity": "similarity",
    "alignment": "similarity",
    "averaged_kl_similarity": "similarity",
    "cosine_similarity": "similarity",
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
    from .retrieval import bucc_f1, margin_candidates, tatoeba_accuracy
    from .similarity import (
        Similarity,
        alignment,
        averaged_kl_similarity,
        cosine_similarity,
        kl_similarity,
        sts_correlation,
        sts_spearman,
        symmetric_kl_similarity,
        uniformity,
    )

__getattr__, __dir__ = lazy_exports(globals(), _LAZY, lambda sub: import_module(f".{sub}", __name__))


__all__ = [
    "ProbeConfig",
    "Similarity",
    "alignment",
    "averaged_kl_similarity",
    "best_threshold",
    "bucc_f1",
    "cosine_similarity",
    "cross_validated_accuracy",
    "direction_accuracy_by_similarity",
    "direction_accuracy_by_variance",
    "fit_probe",
    "hungarian_accuracy",
    "kl_similarity",
    "kmeans_clustering",
    "margin_candidates",
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
