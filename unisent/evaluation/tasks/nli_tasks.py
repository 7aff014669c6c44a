"""NLI tasks scored with a similarity (GaussCSE): 2-way threshold accuracy, PR-AUC, entailment direction."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from ...data.benchmark_readers import LabeledPairs
from .sts_tasks import score_pairs
from .task import Source, Task

if TYPE_CHECKING:  # the metrics (torch, scikit-learn) are imported when a task runs, not by `evaluate --list`
    import torch

    from ..encoding import Embedder

__all__ = ["EntailmentDirectionTask", "NLIThresholdTask"]


def _is_entailment(labels: list[str], positive_label: str) -> list[int]:
    return [int(label.lower() == positive_label.lower()) for label in labels]


@dataclass(frozen=True, kw_only=True)
class NLIThresholdTask(Task):
    """NLI as 2-way classification (entailment vs. the rest) by thresholding ``sim(hyp || pre)``.

    The threshold with the best accuracy on ``dev`` (grid 0..1, step 0.001) is applied to ``test``.
    ``accuracy``, ``dev_accuracy``, ``pr_auc`` (trapezoidal) and ``average_precision`` are x100.
    ``positive_label`` is compared case-insensitively.
    """

    main_metric: ClassVar[str] = "accuracy"
    dev: Source
    test: Source
    positive_label: str = "entailment"

    def _scores(self, embedder: Embedder, data: LabeledPairs):
        # sim(hypothesis || premise): the hypothesis is the similarity's first argument
        return score_pairs(embedder, data.sentences2, data.sentences1)

    def evaluate(self, embedder: Embedder, data_dir: Path) -> dict[str, float]:
        from ..metrics.nli import best_threshold, pr_auc, threshold_accuracy

        dev: LabeledPairs = self.dev.load(data_dir)
        test: LabeledPairs = self.test.load(data_dir)
        dev_accuracy, threshold = best_threshold(
            self._scores(embedder, dev), _is_entailment(dev.labels, self.positive_label)
        )
        test_scores = self._scores(embedder, test)
        test_gold = _is_entailment(test.labels, self.positive_label)
        areas = pr_auc(test_scores, test_gold)
        return {
            "accuracy": 100.0 * threshold_accuracy(test_scores, test_gold, threshold),
            "pr_auc": 100.0 * areas["pr_auc"],
            "average_precision": 100.0 * areas["average_precision"],
            "threshold": threshold,
            "dev_accuracy": 100.0 * dev_accuracy,
            "n_test": float(len(test)),
        }


@dataclass(frozen=True, kw_only=True)
class EntailmentDirectionTask(Task):
    """Which sentence of an entailment pair entails the other (pairs labelled entailment only).

    ``direction_sim``: accuracy x100 of ``sim(hyp || pre) > sim(pre || hyp)`` (a symmetric similarity
    such as cosine scores 0, so a run that names no similarity scores a Gaussian model with ``kl``);
    ``direction_var``: of "the premise has the larger variance", for Gaussian similarities only. Each also by
    length relation in the model's tokens (``direction_by_length``).
    ``source``: labelled pairs, premise first; ``positive_label`` is compared case-insensitively.
    """

    main_metric: ClassVar[str] = "direction_sim"
    gaussian_similarity: ClassVar[str | None] = "kl"  # the paper's asymmetric similarity, unless the run names one
    source: Source
    positive_label: str = "entailment"

    def evaluate(self, embedder: Embedder, data_dir: Path) -> dict[str, float]:
        from ..metrics.nli import direction_accuracy_by_similarity, direction_accuracy_by_variance, direction_by_length

        data: LabeledPairs = self.source.load(data_dir)
        keep = [i for i, y in enumerate(_is_entailment(data.labels, self.positive_label)) if y]
        if not keep:
            raise ValueError(f"task {self.name!r}: no pair is labelled {self.positive_label!r}")
        premise_text, hypothesis_text = [data.sentences1[i] for i in keep], [data.sentences2[i] for i in keep]
        premises, hypotheses = embedder.represent(premise_text), embedder.represent(hypothesis_text)
        lengths = token_counts(embedder.model, premise_text), token_counts(embedder.model, hypothesis_text)
        right: dict[str, Any] = {  # per_pair: (n,) boolean tensors
            "direction_sim": direction_accuracy_by_similarity(premises, hypotheses, embedder.similarity, per_pair=True)
        }
        if embedder.similarity.gaussian:
            right["direction_var"] = direction_accuracy_by_variance(premises[1], hypotheses[1], per_pair=True)
        result = {name: 100.0 * float(r.double().mean()) for name, r in right.items()} | {"n_pairs": float(len(keep))}
        for name, r in right.items():
            result |= direction_by_length(r, *lengths, name)
        return result


def token_counts(model: Any, sentences: list[str]) -> torch.Tensor:
    """Each sentence's length in the model's own tokens (``tokenize_ids`` of a unisent encoder, or of the
    encoder a wrapper holds, or a Hugging Face ``tokenizer``), in whitespace words for a model without one."""
    import torch

    for candidate in (model, getattr(model, "encoder", None), getattr(model, "model", None)):
        tokenize_ids: Callable[..., Any] | None = getattr(candidate, "tokenize_ids", None)
        if callable(tokenize_ids):
            return torch.tensor([len(ids) for ids in tokenize_ids(sentences)])
        tokenizer: Callable[..., Any] | None = getattr(candidate, "tokenizer", None)
        if callable(tokenizer):
            return torch.tensor([len(ids) for ids in tokenizer(list(sentences))["input_ids"]])
    return torch.tensor([len(sentence.split()) for sentence in sentences])
