"""STS tasks (Spearman x100 of a similarity against gold scores) and the alignment/uniformity analysis."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar

from ...data.benchmark_readers import ScoredPairs
from .task import Source, Task

if TYPE_CHECKING:  # the metrics (torch, scipy) are imported when a task runs, not by `evaluate --list`
    import torch

    from ..encoding import Embedder

__all__ = ["AlignUniformTask", "STSSubsetsTask", "STSTask", "score_pairs"]


def _unscored(count: int) -> dict[str, float]:
    """``{"n_unscored": count}`` when the files had rows without a gold score (skipped), else nothing."""
    return {"n_unscored": float(count)} if count else {}


def score_pairs(embedder: Embedder, sentences1: list[str], sentences2: list[str]) -> torch.Tensor:
    """(n,) scores ``embedder.similarity(rep(sentences1), rep(sentences2))``, both sides encoded in one call."""
    n = len(sentences1)
    rep = embedder.represent(sentences1 + sentences2)
    if isinstance(rep, tuple):  # (mu, var)
        return embedder.similarity(tuple(part[:n] for part in rep), tuple(part[n:] for part in rep))
    return embedder.similarity(rep[:n], rep[n:])


@dataclass(frozen=True, kw_only=True)
class STSTask(Task):
    """One STS file: Spearman and Pearson x100 between pair similarities and gold scores.

    ``n_pairs`` counts the scored pairs; ``n_unscored`` (when non-zero) the rows without a gold score,
    which the reader skipped (STS17 tr-en: 250 of its 500 rows). ``source`` reads a ``ScoredPairs``.
    """

    main_metric: ClassVar[str] = "spearman"
    source: Source

    def evaluate(self, embedder: Embedder, data_dir: Path) -> dict[str, float]:
        from ..metrics.similarity import sts_correlation

        data: ScoredPairs = self.source.load(data_dir)
        result = sts_correlation(score_pairs(embedder, data.sentences1, data.sentences2), data.scores)
        return {**result, "n_pairs": float(len(data)), **_unscored(data.unscored)}


@dataclass(frozen=True, kw_only=True)
class STSSubsetsTask(Task):
    """An STS year of SentEval (STS12-16): several subsets, each an input file and a gold file.

    ``spearman`` is computed over all subsets concatenated (SimCSE's "all" setting, the number its
    papers report); ``spearman_mean`` and ``spearman_wmean`` are SentEval's plain and size-weighted means
    of the per-subset correlations, which are reported as ``spearman_<subset>``.
    """

    main_metric: ClassVar[str] = "spearman"
    subsets: tuple[tuple[str, Source], ...]

    def sources(self) -> tuple[Source, ...]:
        return tuple(source for _, source in self.subsets)

    def evaluate(self, embedder: Embedder, data_dir: Path) -> dict[str, float]:
        from ..metrics.similarity import sts_correlation

        loaded = [(name, source.load(data_dir)) for name, source in self.subsets]
        first = [s for _, data in loaded for s in data.sentences1]
        second = [s for _, data in loaded for s in data.sentences2]
        gold = [g for _, data in loaded for g in data.scores]
        scores = score_pairs(embedder, first, second)
        result = sts_correlation(scores, gold)
        sizes = [len(data) for _, data in loaded]
        per_subset = [
            sts_correlation(part, data.scores)["spearman"] for part, (_, data) in zip(scores.split(sizes), loaded)
        ]
        result |= {f"spearman_{name}": subset for (name, _), subset in zip(loaded, per_subset)}
        result["spearman_mean"] = sum(per_subset) / len(per_subset)
        result["spearman_wmean"] = sum(s * n for s, n in zip(per_subset, sizes)) / sum(sizes)
        result["n_pairs"] = float(len(gold))
        result.update(_unscored(sum(data.unscored for _, data in loaded)))
        return result


@dataclass(frozen=True, kw_only=True)
class AlignUniformTask(Task):
    """Alignment and uniformity (Wang & Isola 2020) of the embeddings on an STS set, as in SimCSE.

    Alignment is over the pairs whose gold score is at least ``positive_threshold``, uniformity over every
    distinct sentence of the set. Both are losses: lower is better.
    """

    main_metric: ClassVar[str] = "alignment"
    source: Source
    positive_threshold: float = 4.0

    def evaluate(self, embedder: Embedder, data_dir: Path) -> dict[str, float]:
        from ..metrics.similarity import alignment, uniformity

        data: ScoredPairs = self.source.load(data_dir)
        positives = [i for i, score in enumerate(data.scores) if score >= self.positive_threshold]
        if not positives:
            raise ValueError(f"task {self.name!r}: no pair has a score >= {self.positive_threshold}")
        first = embedder.encode([data.sentences1[i] for i in positives])
        second = embedder.encode([data.sentences2[i] for i in positives])
        everything = embedder.encode(list(dict.fromkeys(data.sentences1 + data.sentences2)))
        return {
            "alignment": alignment(first, second),
            "uniformity": uniformity(everything),
            "n_positive_pairs": float(len(positives)),
            "n_sentences": float(len(everything)),
        }
