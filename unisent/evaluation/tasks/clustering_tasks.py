"""Clustering tasks (K-means + Hungarian accuracy) and bitext retrieval / mining tasks."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar

from ...data.benchmark_readers import BuccCorpus, LabeledTexts, ParallelSentences
from .task import Source, Task

if TYPE_CHECKING:  # the metrics (torch, scikit-learn) are imported when a task runs, not by `evaluate --list`
    from ..encoding import Embedder

__all__ = ["BuccTask", "ClusteringTask", "TatoebaTask"]


@dataclass(frozen=True, kw_only=True)
class ClusteringTask(Task):
    """K-means with K = number of gold classes, accuracy after Hungarian matching, mean over ``seeds``
    (3 runs, as in EASE). ``source`` reads a ``LabeledTexts``."""

    main_metric: ClassVar[str] = "accuracy"
    source: Source
    seeds: tuple[int, ...] = (0, 1, 2)
    n_init: int = 10

    def evaluate(self, embedder: Embedder, data_dir: Path) -> dict[str, float]:
        from ..metrics.clustering import kmeans_clustering

        data: LabeledTexts = self.source.load(data_dir)
        embeddings = embedder.encode(data.texts)
        return kmeans_clustering(embeddings, data.labels, seeds=self.seeds, n_init=self.n_init)


@dataclass(frozen=True, kw_only=True)
class TatoebaTask(Task):
    """Tatoeba: nearest neighbour by cosine in both directions, accuracy x100 averaged over the two.
    ``source`` reads a ``ParallelSentences`` (non-English first)."""

    main_metric: ClassVar[str] = "accuracy"
    source: Source

    def evaluate(self, embedder: Embedder, data_dir: Path) -> dict[str, float]:
        from ..metrics.retrieval import tatoeba_accuracy

        data: ParallelSentences = self.source.load(data_dir)
        embeddings = embedder.encode(data.source + data.target)
        n = len(data)
        return {**tatoeba_accuracy(embeddings[:n], embeddings[n:]), "n_pairs": float(n)}


@dataclass(frozen=True, kw_only=True)
class BuccTask(Task):
    """BUCC 2018 parallel sentence mining: ratio-margin candidates (``k`` neighbours), F1 x100 at the best
    threshold. ``source`` reads a ``BuccCorpus``."""

    main_metric: ClassVar[str] = "f1"
    source: Source
    k: int = 4

    def evaluate(self, embedder: Embedder, data_dir: Path) -> dict[str, float]:
        from ..metrics.retrieval import bucc_f1, margin_candidates

        data: BuccCorpus = self.source.load(data_dir)
        source = embedder.encode(data.source)
        target = embedder.encode(data.target)
        src, tgt, scores = margin_candidates(source, target, k=self.k)
        pairs = [(data.source_ids[i], data.target_ids[j]) for i, j in zip(src.tolist(), tgt.tolist())]
        result = bucc_f1(pairs, scores, data.gold)
        return {**result, "n_gold": float(len(data.gold))}
