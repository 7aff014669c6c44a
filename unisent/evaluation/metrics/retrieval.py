"""Bitext retrieval (Tatoeba) and parallel sentence mining with margin scoring (BUCC)."""

from __future__ import annotations

from collections.abc import Collection, Sequence

import numpy as np
import torch
import torch.nn.functional as F
from sklearn.metrics import precision_recall_curve
from torch import Tensor

__all__ = ["bucc_f1", "margin_candidates", "tatoeba_accuracy"]


def cosine_knn(queries: Tensor, keys: Tensor, k: int, chunk_size: int = 4096) -> tuple[Tensor, Tensor]:
    """``(similarities, indices)``, each (n, k), nearest first: the k nearest keys of each query by cosine.

    ``chunk_size``: queries per matrix product (bounds memory to chunk_size x m).
    """
    if k > len(keys):
        raise ValueError(f"k={k} neighbours requested but there are only {len(keys)} keys")
    queries = F.normalize(queries.float(), dim=-1)
    keys = F.normalize(keys.float(), dim=-1)
    sims, idx = [], []
    for start in range(0, len(queries), chunk_size):
        top = (queries[start : start + chunk_size] @ keys.T).topk(k, dim=1)
        sims.append(top.values)
        idx.append(top.indices)
    return torch.cat(sims), torch.cat(idx)


def nearest_neighbor_accuracy(queries: Tensor, keys: Tensor) -> float:
    """Fraction of queries whose nearest key by cosine is their gold match, ``keys[i]`` for ``queries[i]``."""
    if len(queries) != len(keys):
        raise ValueError(f"got {len(queries)} queries and {len(keys)} keys; they must be aligned")
    _, idx = cosine_knn(queries, keys, k=1)
    return float((idx[:, 0] == torch.arange(len(queries))).float().mean())


def tatoeba_accuracy(source: Tensor, target: Tensor) -> dict[str, float]:
    """Tatoeba retrieval of row-aligned ``source`` (non-English) and ``target`` (English) by cosine:
    ``accuracy`` (mean of both directions, x100), ``accuracy_to_eng``, ``accuracy_from_eng``."""
    to_eng = 100.0 * nearest_neighbor_accuracy(source, target)
    from_eng = 100.0 * nearest_neighbor_accuracy(target, source)
    return {"accuracy": (to_eng + from_eng) / 2, "accuracy_to_eng": to_eng, "accuracy_from_eng": from_eng}


def margin_candidates(
    source: Tensor, target: Tensor, k: int = 4, chunk_size: int = 4096
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Mine candidate translation pairs with the ratio margin of Artetxe & Schwenk (2019).

    ``margin(x, y) = cos(x, y) / (mean_{z in NN_k(x)} cos(x, z) / 2 + mean_{z in NN_k(y)} cos(y, z) / 2)``.
    Each sentence of either side proposes its best partner among its k nearest neighbours by margin ("max"
    retrieval); the union is returned as ``(source_index, target_index, score)`` arrays sorted by
    decreasing score. ``k``: 4 in LASER's BUCC setup.
    """
    s2t_sim, s2t_idx = cosine_knn(source, target, k, chunk_size)
    t2s_sim, t2s_idx = cosine_knn(target, source, k, chunk_size)
    source_mean, target_mean = s2t_sim.mean(dim=1), t2s_sim.mean(dim=1)
    forward = s2t_sim / ((source_mean[:, None] + target_mean[s2t_idx]) / 2)
    backward = t2s_sim / ((target_mean[:, None] + source_mean[t2s_idx]) / 2)
    best_f, arg_f = forward.max(dim=1)
    best_b, arg_b = backward.max(dim=1)
    forward_targets = s2t_idx.gather(1, arg_f[:, None])[:, 0]
    pairs = {(i, j): score for i, (j, score) in enumerate(zip(forward_targets.tolist(), best_f.tolist()))}
    backward_sources = t2s_idx.gather(1, arg_b[:, None])[:, 0]
    for j, (i, score) in enumerate(zip(backward_sources.tolist(), best_b.tolist())):
        pairs[(i, j)] = max(score, pairs.get((i, j), float("-inf")))
    ordered = sorted(pairs, key=lambda pair: -pairs[pair])
    index = np.array(ordered, dtype=np.int64).reshape(-1, 2)  # (pairs, 2): source, target
    return index[:, 0], index[:, 1], np.array([pairs[pair] for pair in ordered], dtype=np.float64)


def bucc_f1(
    candidates: Sequence[tuple[str, str]],
    scores: Sequence[float] | np.ndarray,
    gold: Collection[tuple[str, str]],
    threshold: float | None = None,
) -> dict[str, float]:
    """F1 of mined pairs against the gold pairs, at a given or at the best score threshold.

    Returns ``f1``, ``precision``, ``recall`` (x100) and ``threshold``. Recall counts all gold pairs, not
    only those among the candidates. ``threshold=None`` chooses the F1-maximising one (the usual protocol
    on the BUCC sample and training sets, whose gold is public); pass it to score another split.
    """
    gold_set = set(gold)
    if not gold_set:
        raise ValueError("bucc_f1 needs at least one gold pair")
    scores = np.asarray(scores, dtype=np.float64)
    correct = np.array([pair in gold_set for pair in candidates], dtype=bool)
    if threshold is not None:
        keep = scores >= threshold
        true_positives = int(correct[keep].sum())
        precision = true_positives / max(int(keep.sum()), 1)
        recall = true_positives / len(gold_set)
    elif not correct.any():
        return {"f1": 0.0, "precision": 0.0, "recall": 0.0, "threshold": float(scores.max(initial=0.0))}
    else:
        precisions, candidate_recalls, thresholds = precision_recall_curve(correct, scores)
        precisions, candidate_recalls = precisions[:-1], candidate_recalls[:-1]
        recalls = candidate_recalls * correct.sum() / len(gold_set)
        f1s = 2 * precisions * recalls / np.maximum(precisions + recalls, 1e-12)
        best = int(np.argmax(f1s))
        precision, recall, threshold = float(precisions[best]), float(recalls[best]), float(thresholds[best])
    f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    return {
        "f1": 100.0 * f1,
        "precision": 100.0 * precision,
        "recall": 100.0 * recall,
        "threshold": threshold,
    }
