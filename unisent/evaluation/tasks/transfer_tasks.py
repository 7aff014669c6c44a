"""SentEval transfer tasks and zero-shot cross-lingual transfer: logistic regression on frozen embeddings."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from ...data.benchmark_readers import LabeledPairs, LabeledTexts
from ..metrics.probe_config import ProbeConfig
from .task import Source, Task

if TYPE_CHECKING:  # the probes (torch, scikit-learn) are imported when a task runs, not by `evaluate --list`
    from ..encoding import Embedder

__all__ = ["CrossValidatedProbeTask", "SplitProbeTask", "ZeroShotProbeTask", "features_of"]


def features_of(embedder: Embedder, data: LabeledTexts | LabeledPairs, pair_kind: str = "full") -> np.ndarray:
    """(n, f) probe features: embeddings of single texts, or for sentence pairs
    ``pair_features`` of kind ``pair_kind``."""
    if isinstance(data, LabeledPairs):
        from ..metrics.probes import pair_features

        n = len(data)
        embeddings = embedder.encode(data.sentences1 + data.sentences2)
        return pair_features(embeddings[:n], embeddings[n:], kind=pair_kind)
    return np.asarray(embedder.encode(data.texts))


@dataclass(frozen=True, kw_only=True)
class CrossValidatedProbeTask(Task):
    """A SentEval task without a split (MR, CR, SUBJ, MPQA): k-fold cross-validated accuracy x100.
    ``source`` reads a ``LabeledTexts`` or ``LabeledPairs``."""

    main_metric: ClassVar[str] = "accuracy"
    source: Source
    probe: ProbeConfig = field(default_factory=ProbeConfig)

    def evaluate(self, embedder: Embedder, data_dir: Path) -> dict[str, float]:
        from ..metrics.probes import cross_validated_accuracy

        data = self.source.load(data_dir)
        result = cross_validated_accuracy(features_of(embedder, data), data.labels, self.probe)
        return {**result, "n": float(len(data))}


@dataclass(frozen=True, kw_only=True)
class SplitProbeTask(Task):
    """A SentEval task with a train/test split (TREC, MRPC) or train/dev/test split (SST-2, SICK-E).

    ``C`` is chosen on ``dev`` when given, else by cross-validation on train; ``accuracy`` is on test.
    ``positive_label``: also report binary F1 of this label (MRPC).
    """

    main_metric: ClassVar[str] = "accuracy"
    train: Source
    dev: Source | None = None  # (the fields' order is the order the sources are read in)
    test: Source
    positive_label: str | None = None
    probe: ProbeConfig = field(default_factory=ProbeConfig)

    def _fit(self, embedder: Embedder, data_dir: Path) -> tuple[Any, dict[str, float]]:
        """The probe fitted on ``train``, ``C`` chosen on ``dev`` (else by cross-validation); info has ``n_train``."""
        from ..metrics.probes import fit_probe

        data = self.train.load(data_dir)
        dev_data = self.dev.load(data_dir) if self.dev is not None else None
        dev_set = None if dev_data is None else (features_of(embedder, dev_data), dev_data.labels)
        model, info = fit_probe(features_of(embedder, data), data.labels, self.probe, dev=dev_set)
        return model, {**info, "n_train": float(len(data))}

    def evaluate(self, embedder: Embedder, data_dir: Path) -> dict[str, float]:
        from ..metrics.probes import probe_scores

        model, info = self._fit(embedder, data_dir)
        test = self.test.load(data_dir)
        scores = probe_scores(model, features_of(embedder, test), test.labels, self.positive_label)
        return {**scores, **info, "n_test": float(len(test))}


@dataclass(frozen=True, kw_only=True)
class ZeroShotProbeTask(SplitProbeTask):
    """Zero-shot cross-lingual transfer: a pair classifier trained on English, tested in one language.

    The probe on ``[u, v, |u-v|, u*v]`` is trained once per model and run (in the embedder's memo) and
    reused by every language of the family. ``dev``: English pairs to choose ``C``, else cross-validation.
    """

    def _fit(self, embedder: Embedder, data_dir: Path) -> tuple[Any, dict[str, float]]:
        key = ("zero-shot-probe", data_dir, self.train, self.dev, self.probe)
        if key not in embedder.memo:
            embedder.memo[key] = super()._fit(embedder, data_dir)
        return embedder.memo[key]
