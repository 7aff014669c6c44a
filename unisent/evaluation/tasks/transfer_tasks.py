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
    """Probe features of a dataset: embeddings of single texts, or pair features of sentence pairs.

    Args:
        embedder: the shared embedder.
        data: single texts or sentence pairs.
        pair_kind: ``full`` (``[u, v, |u-v|, u*v]``) or ``senteval`` (``[|u-v|, u*v]``), pairs only.

    Returns:
        (n, f) features.
    """
    if isinstance(data, LabeledPairs):
        from ..metrics.probes import pair_features

        n = len(data)
        embeddings = embedder.encode(data.sentences1 + data.sentences2)
        return pair_features(embeddings[:n], embeddings[n:], kind=pair_kind)
    return np.asarray(embedder.encode(data.texts))


@dataclass(frozen=True, kw_only=True)
class CrossValidatedProbeTask(Task):
    """A SentEval task without a split (MR, CR, SUBJ, MPQA): k-fold cross-validated accuracy x100.

    Attributes:
        source: reads a :class:`LabeledTexts` or :class:`LabeledPairs`.
        probe: probe settings.
    """

    main_metric: ClassVar[str] = "accuracy"
    source: Source
    probe: ProbeConfig = field(default_factory=ProbeConfig)

    def sources(self) -> tuple[Source, ...]:
        return (self.source,)

    def evaluate(self, embedder: Embedder, data_dir: Path) -> dict[str, float]:
        from ..metrics.probes import cross_validated_accuracy

        data = self.source.load(data_dir)
        result = cross_validated_accuracy(features_of(embedder, data), data.labels, self.probe)
        return {**result, "n": float(len(data))}


@dataclass(frozen=True, kw_only=True)
class SplitProbeTask(Task):
    """A SentEval task with a train/test split (TREC, MRPC) or train/dev/test split (SST-2, SICK-E).

    ``C`` is chosen on dev when there is one, otherwise by cross-validation on train; ``accuracy`` is on
    test.

    Attributes:
        train: training data.
        test: test data.
        dev: development data, or ``None``.
        positive_label: also report binary F1 of this label (MRPC).
        probe: probe settings.
    """

    main_metric: ClassVar[str] = "accuracy"
    train: Source
    test: Source
    dev: Source | None = None
    positive_label: str | None = None
    probe: ProbeConfig = field(default_factory=ProbeConfig)

    def sources(self) -> tuple[Source, ...]:
        return tuple(s for s in (self.train, self.dev, self.test) if s is not None)

    def evaluate(self, embedder: Embedder, data_dir: Path) -> dict[str, float]:
        from ..metrics.probes import fit_probe, probe_scores

        train = self.train.load(data_dir)
        dev_set = None
        if self.dev is not None:
            dev = self.dev.load(data_dir)
            dev_set = (features_of(embedder, dev), dev.labels)
        model, info = fit_probe(features_of(embedder, train), train.labels, self.probe, dev=dev_set)
        test = self.test.load(data_dir)
        scores = probe_scores(model, features_of(embedder, test), test.labels, self.positive_label)
        return {**scores, **info, "n_train": float(len(train)), "n_test": float(len(test))}


@dataclass(frozen=True, kw_only=True)
class ZeroShotProbeTask(Task):
    """Zero-shot cross-lingual transfer: a pair classifier trained on English, tested in one language.

    The probe on ``[u, v, |u-v|, u*v]`` is trained once per model and run (kept in the embedder's memo)
    and reused by every language of the family.

    Attributes:
        train: English training pairs.
        test: test pairs in the target language.
        dev: English development pairs to choose ``C``, or ``None`` to choose it by cross-validation.
        probe: probe settings.
    """

    main_metric: ClassVar[str] = "accuracy"
    train: Source
    test: Source
    dev: Source | None = None
    probe: ProbeConfig = field(default_factory=ProbeConfig)

    def sources(self) -> tuple[Source, ...]:
        return tuple(s for s in (self.train, self.dev, self.test) if s is not None)

    def _english_probe(self, embedder: Embedder, data_dir: Path) -> tuple[Any, dict[str, float]]:
        key = ("zero-shot-probe", data_dir, self.train, self.dev, self.probe)
        if key not in embedder.memo:
            from ..metrics.probes import fit_probe

            train = self.train.load(data_dir)
            dev_set = None
            if self.dev is not None:
                dev = self.dev.load(data_dir)
                dev_set = (features_of(embedder, dev), dev.labels)
            model, info = fit_probe(features_of(embedder, train), train.labels, self.probe, dev=dev_set)
            embedder.memo[key] = (model, {**info, "n_train": float(len(train))})
        return embedder.memo[key]

    def evaluate(self, embedder: Embedder, data_dir: Path) -> dict[str, float]:
        from ..metrics.probes import probe_scores

        model, info = self._english_probe(embedder, data_dir)
        test = self.test.load(data_dir)
        scores = probe_scores(model, features_of(embedder, test), test.labels)
        return {**scores, **info, "n_test": float(len(test))}
