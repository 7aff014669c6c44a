"""SentEval-style linear probes on frozen embeddings, with scikit-learn logistic regression.

The protocols (k-fold CV, ``C`` by inner CV or on dev) are in docs/evaluation.md. Features are
standardised on the training data, unlike SentEval, so that one ``C`` grid suits every embedding scale.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from typing import cast

import numpy as np
import torch
from sklearn.base import BaseEstimator
from sklearn.linear_model import LogisticRegression, LogisticRegressionCV
from sklearn.metrics import accuracy_score, f1_score
from sklearn.model_selection import StratifiedKFold
from sklearn.pipeline import Pipeline, make_pipeline
from sklearn.preprocessing import StandardScaler
from torch import Tensor

from .probe_config import ProbeConfig

__all__ = ["cross_validated_accuracy", "fit_probe", "pair_features", "probe_scores"]


def _numpy(x: Tensor | np.ndarray) -> np.ndarray:
    return np.asarray(torch.as_tensor(x).detach().cpu().float())


def pair_features(u: Tensor | np.ndarray, v: Tensor | np.ndarray, kind: str = "full") -> np.ndarray:
    """Features of sentence pairs: ``kind="full"`` ``[u, v, |u - v|, u * v]`` (n, 4d), ``"senteval"``
    SentEval's ``[|u - v|, u * v]`` (n, 2d)."""
    u, v = _numpy(u), _numpy(v)
    if kind == "full":
        return np.concatenate([u, v, np.abs(u - v), u * v], axis=1)
    if kind == "senteval":
        return np.concatenate([np.abs(u - v), u * v], axis=1)
    raise ValueError(f"kind must be 'full' or 'senteval', got {kind!r}")


def _pipeline(config: ProbeConfig, regression: BaseEstimator) -> Pipeline:
    """``regression``, after a ``StandardScaler`` when ``config.standardize``."""
    return make_pipeline(*([StandardScaler()] if config.standardize else []), regression)


# scikit-learn 1.9 announces changes of LogisticRegressionCV defaults that do not affect an L2 model
# scored by accuracy (both set explicitly in fit_probe) and of the layout of its fitted attributes.
_SKLEARN_TRANSITION = r".*(l1_ratios|use_legacy_attributes|fitted attributes).*"


def fit_probe(
    features: np.ndarray,
    labels: Sequence | np.ndarray,
    config: ProbeConfig | None = None,
    dev: tuple[np.ndarray, Sequence] | None = None,
) -> tuple[Pipeline, dict[str, float]]:
    """Fit a logistic-regression probe, choosing ``C`` on ``dev`` (``(features, labels)``) or by inner CV.

    Returns the classifier and ``{"C": ..., "dev_accuracy": ...}`` (x100, only with ``dev``).
    """
    config = config or ProbeConfig()
    labels = np.asarray(labels)
    if dev is None:
        folds = StratifiedKFold(config.inner_kfold, shuffle=True, random_state=config.seed)
        regression = LogisticRegressionCV(
            Cs=list(config.c_grid),  # pyright: ignore[reportArgumentType]  # unannotated: typed by its default 10
            cv=folds,
            scoring="accuracy",
            max_iter=config.max_iter,
            random_state=config.seed,
        )
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=_SKLEARN_TRANSITION, category=FutureWarning)
            model = _pipeline(config, regression).fit(features, labels)
        return model, {"C": float(np.ravel(cast(LogisticRegressionCV, model[-1]).C_)[0])}
    best: tuple[float, float, Pipeline] | None = None
    for c in config.c_grid:
        regression = LogisticRegression(C=c, max_iter=config.max_iter, random_state=config.seed)
        model = _pipeline(config, regression).fit(features, labels)
        score = accuracy_score(np.asarray(dev[1]), model.predict(dev[0]))
        if best is None or score > best[0]:
            best = (score, c, model)
    assert best is not None
    return best[2], {"C": best[1], "dev_accuracy": 100.0 * best[0]}


def probe_scores(
    model: Pipeline, features: np.ndarray, labels: Sequence | np.ndarray, positive_label: str | None = None
) -> dict[str, float]:
    """Accuracy (x100) of a fitted probe, plus binary F1 (x100) of ``positive_label`` when given."""
    predicted = model.predict(features)
    labels = np.asarray(labels)
    scores = {"accuracy": 100.0 * accuracy_score(labels, predicted)}
    if positive_label is not None:
        scores["f1"] = 100.0 * f1_score(labels, predicted, pos_label=positive_label)  # pyright: ignore[reportArgumentType]  # typed by its default 1
    return scores


def cross_validated_accuracy(
    features: np.ndarray, labels: Sequence | np.ndarray, config: ProbeConfig | None = None
) -> dict[str, float]:
    """Stratified k-fold ``accuracy`` (mean x100) and ``accuracy_std`` of the probe, ``C`` chosen by inner
    cross-validation in each fold."""
    config = config or ProbeConfig()
    labels = np.asarray(labels)
    folds = StratifiedKFold(config.kfold, shuffle=True, random_state=config.seed)
    accuracies = []
    for train, test in folds.split(features, labels):
        model, _ = fit_probe(features[train], labels[train], config)
        accuracies.append(100.0 * accuracy_score(labels[test], model.predict(features[test])))
    return {"accuracy": float(np.mean(accuracies)), "accuracy_std": float(np.std(accuracies))}
