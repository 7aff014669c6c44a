"""Each metric on a small input whose answer is computed independently (by hand or with plain numpy)."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
import torch

from unisent.evaluation.metrics import (
    ProbeConfig,
    alignment,
    best_threshold,
    bucc_f1,
    cosine_similarity,
    cross_validated_accuracy,
    direction_accuracy_by_similarity,
    direction_accuracy_by_variance,
    fit_probe,
    hungarian_accuracy,
    kl_similarity,
    kmeans_clustering,
    margin_candidates,
    pair_features,
    pr_auc,
    probe_scores,
    sts_correlation,
    sts_spearman,
    symmetric_kl_similarity,
    tatoeba_accuracy,
    threshold_accuracy,
    uniformity,
)


def _ranks(x: np.ndarray) -> np.ndarray:
    return np.argsort(np.argsort(x)).astype(float)


def test_sts_spearman_matches_numpy_ranks() -> None:
    rng = np.random.default_rng(0)
    a, b = rng.normal(size=(20, 8)), rng.normal(size=(20, 8))
    gold = rng.uniform(0, 5, size=20)
    cos = (a * b).sum(1) / np.linalg.norm(a, axis=1) / np.linalg.norm(b, axis=1)
    expected = 100 * np.corrcoef(_ranks(cos), _ranks(gold))[0, 1]
    got = sts_spearman(torch.tensor(a), torch.tensor(b), gold.tolist())
    assert got == pytest.approx(expected, abs=1e-4)
    pearson = 100 * np.corrcoef(cos, gold)[0, 1]
    assert sts_correlation(torch.tensor(cos), gold.tolist())["pearson"] == pytest.approx(pearson, abs=1e-6)


def test_sts_spearman_with_custom_similarity() -> None:
    a = torch.tensor([[1.0, 0.0], [2.0, 0.0], [3.0, 0.0]])
    b = torch.ones(3, 2)
    # dot products 1, 2, 3 against gold 3, 2, 1: perfectly anti-correlated
    assert sts_spearman(a, b, [3.0, 2.0, 1.0], similarity=lambda x, y: (x * y).sum(-1)) == pytest.approx(-100.0)


def test_cosine_similarity_by_hand() -> None:
    got = cosine_similarity(torch.tensor([[1.0, 0.0], [1.0, 1.0]]), torch.tensor([[0.0, 2.0], [2.0, 2.0]]))
    assert got.tolist() == pytest.approx([0.0, 1.0])


def test_hungarian_accuracy_by_hand() -> None:
    # best mapping: cluster 1 -> class 0 (2 items), cluster 0 -> class 1 (2), cluster 2 -> class 2 (1)
    assert hungarian_accuracy([0, 0, 1, 1, 2, 2], [1, 1, 0, 0, 0, 2]) == pytest.approx(5 / 6)
    assert hungarian_accuracy(["a", "a", "b"], [7, 7, 3]) == 1.0


def test_kmeans_clustering_on_separated_blobs() -> None:
    rng = np.random.default_rng(1)
    centers = np.array([[10, 0, 0], [0, 10, 0], [0, 0, 10]], dtype=np.float32)
    points = np.concatenate([c + rng.normal(scale=0.1, size=(15, 3)) for c in centers]).astype(np.float32)
    labels = [k for k in ("x", "y", "z") for _ in range(15)]
    result = kmeans_clustering(torch.tensor(points), labels, seeds=(0, 1, 2), n_init=2)
    assert result["accuracy"] == pytest.approx(100.0)
    assert result["nmi"] == pytest.approx(100.0)
    assert result["n_classes"] == 3 and result["n_texts"] == 45


def test_tatoeba_accuracy_by_hand() -> None:
    source = torch.tensor([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]])
    # source 2 is nearer target 2 ... except target 2 is a duplicate direction of target 0
    target = torch.tensor([[1.0, 0.1], [0.0, 1.0], [1.0, 0.05]])
    # source->target: 0->2 (wrong: cos 0.9988 > 0.995), 1->1, 2->0 (wrong) => 1/3
    # target->source: 0->0, 1->1, 2->0 (wrong) => 2/3
    result = tatoeba_accuracy(source, target)
    assert result["accuracy_to_eng"] == pytest.approx(100 / 3)
    assert result["accuracy_from_eng"] == pytest.approx(200 / 3)
    assert result["accuracy"] == pytest.approx(50.0)


def test_margin_candidates_and_bucc_f1_by_brute_force() -> None:
    rng = np.random.default_rng(2)
    source = rng.normal(size=(12, 6))
    target = np.concatenate([source[:8] + rng.normal(scale=0.3, size=(8, 6)), rng.normal(size=(5, 6))])
    k = 4
    src, tgt, scores = margin_candidates(torch.tensor(source), torch.tensor(target), k=k)

    s = source / np.linalg.norm(source, axis=1, keepdims=True)
    t = target / np.linalg.norm(target, axis=1, keepdims=True)
    cos = s @ t.T
    knn_s = np.sort(cos, axis=1)[:, -k:].mean(1)
    knn_t = np.sort(cos, axis=0)[-k:, :].mean(0)
    margin = cos / ((knn_s[:, None] + knn_t[None, :]) / 2)
    expected = {}
    for i in range(len(s)):
        neighbours = np.argsort(-cos[i])[:k]
        j = neighbours[np.argmax(margin[i, neighbours])]
        expected[(i, int(j))] = margin[i, j]
    for j in range(len(t)):
        neighbours = np.argsort(-cos[:, j])[:k]
        i = neighbours[np.argmax(margin[neighbours, j])]
        expected[(int(i), j)] = margin[i, j]
    got = {(int(i), int(j)): v for i, j, v in zip(src, tgt, scores)}
    assert got.keys() == expected.keys()
    for key, value in expected.items():
        assert got[key] == pytest.approx(value, rel=1e-5)
    assert list(scores) == sorted(scores, reverse=True)

    gold = [(f"s{i}", f"t{i}") for i in range(8)] + [("s11", "t99")]  # one gold pair can never be mined
    pairs = [(f"s{i}", f"t{j}") for i, j in zip(src, tgt)]
    best = 0.0
    for threshold in scores:
        kept = [p for p, v in zip(pairs, scores) if v >= threshold]
        tp = len(set(kept) & set(gold))
        p, r = tp / len(kept), tp / len(gold)
        best = max(best, 2 * p * r / (p + r) if tp else 0.0)
    result = bucc_f1(pairs, scores, gold)
    assert result["f1"] == pytest.approx(100 * best)
    fixed = bucc_f1(pairs, scores, gold, threshold=result["threshold"])
    assert fixed["f1"] == pytest.approx(result["f1"])


def test_bucc_f1_by_hand() -> None:
    pairs = [("a", "1"), ("b", "2"), ("c", "9"), ("d", "4")]
    scores = [0.9, 0.8, 0.7, 0.6]
    gold = [("a", "1"), ("b", "2"), ("d", "4"), ("e", "5")]
    # thresholds: 0.9 -> P 1, R 1/4; 0.8 -> P 1, R 1/2 (F1 2/3); 0.7 -> P 2/3, R 1/2;
    # 0.6 -> P 3/4, R 3/4 (F1 3/4)
    result = bucc_f1(pairs, scores, gold)
    assert result["f1"] == pytest.approx(75.0)
    assert result["threshold"] == pytest.approx(0.6)
    assert bucc_f1(pairs, scores, gold, threshold=0.8)["f1"] == pytest.approx(100 * 2 / 3)


def test_best_threshold_gausscse_example() -> None:
    # the worked example in GaussCSE's code: best accuracy 6/8 for any threshold in (0.349, 0.4]
    labels = [1, 0, 0, 0, 1, 1, 1, 0]
    scores = [0.1, 0.2, 0.3, 0.349, 0.4, 0.7, 0.8, 0.9]
    accuracy, threshold = best_threshold(scores, labels)
    assert accuracy == pytest.approx(0.75)
    assert threshold == pytest.approx(0.35)
    assert threshold_accuracy(scores, labels, 0.35) == pytest.approx(0.75)
    assert threshold_accuracy(scores, labels, 0.0) == pytest.approx(0.5)


def test_pr_auc_by_hand() -> None:
    labels = [1, 0, 1, 0]
    scores = [0.9, 0.8, 0.7, 0.1]
    # PR points by decreasing threshold: (R, P) = (0, 1), (.5, 1), (.5, .5), (1, 2/3), (1, .5)
    trapezoid = 0.5 * (1 + 1) / 2 + 0.5 * (0.5 + 2 / 3) / 2
    # step-wise average precision: sum over positives of precision at their rank / #positives
    average_precision = (1 + 2 / 3) / 2
    result = pr_auc(scores, labels)
    assert result["pr_auc"] == pytest.approx(trapezoid)
    assert result["average_precision"] == pytest.approx(average_precision)


def test_kl_similarity_closed_form() -> None:
    mu_a, var_a = np.array([[0.0, 1.0]]), np.array([[1.0, 2.0]])
    mu_b, var_b = np.array([[1.0, 1.0]]), np.array([[2.0, 0.5]])
    kl = 0.5 * np.sum(np.log(var_b / var_a) + (var_a + (mu_a - mu_b) ** 2) / var_b - 1)
    a = (torch.tensor(mu_a), torch.tensor(var_a))
    b = (torch.tensor(mu_b), torch.tensor(var_b))
    assert kl_similarity(a, b).item() == pytest.approx(1 / (1 + kl))
    per_dim = 0.5 * (np.log(var_b / var_a) + (var_a + (mu_a - mu_b) ** 2) / var_b - 1)
    assert kl_similarity(a, b, reduction="mean").item() == pytest.approx(np.mean(1 / (1 + per_dim)))
    assert symmetric_kl_similarity(a, b).item() == pytest.approx(symmetric_kl_similarity(b, a).item())


def test_direction_accuracies() -> None:
    mu = torch.zeros(3, 2)
    premise = (mu, torch.tensor([[2.0, 2.0], [1.0, 1.0], [3.0, 3.0]]))
    hypothesis = (mu, torch.tensor([[1.0, 1.0], [2.0, 2.0], [1.0, 1.0]]))
    # equal means: sim(hyp||pre) > sim(pre||hyp) exactly when the premise is the broader Gaussian
    assert direction_accuracy_by_similarity(premise, hypothesis, kl_similarity) == pytest.approx(2 / 3)
    assert direction_accuracy_by_variance(premise[1], hypothesis[1]) == pytest.approx(2 / 3)
    # a symmetric similarity always ties: every pair counts as an error
    vectors = torch.randn(3, 4)
    assert direction_accuracy_by_similarity(vectors, vectors.flip(0), cosine_similarity) == 0.0
    right = direction_accuracy_by_similarity(premise, hypothesis, kl_similarity, per_pair=True)
    assert right.tolist() == [True, False, True]


def test_direction_by_length_splits_the_accuracy_by_the_pairs_length_relation() -> None:
    from unisent.evaluation.metrics.nli import direction_by_length

    # 6 pairs: premise longer (0, 1, 2), equal (3), hypothesis longer (4, 5)
    premise_length = torch.tensor([9, 8, 7, 5, 3, 4])
    hypothesis_length = torch.tensor([4, 4, 4, 5, 6, 9])
    right = torch.tensor([True, True, False, True, False, True])
    got = direction_by_length(right, premise_length, hypothesis_length, "direction_sim")
    assert got == pytest.approx(
        {
            "direction_sim_premise_longer": 100 * 2 / 3,
            "share_premise_longer": 100 * 3 / 6,
            "direction_sim_equal_length": 100.0,
            "share_equal_length": 100 * 1 / 6,
            "direction_sim_hypothesis_longer": 50.0,
            "share_hypothesis_longer": 100 * 2 / 6,
            "direction_sim_hypothesis_not_shorter": 100 * 2 / 3,  # pairs 3, 4, 5
            "share_hypothesis_not_shorter": 50.0,
        }
    )
    # "the longer sentence is the premise" scores 100 where the premise is longer and 0 where it is not
    rule = premise_length > hypothesis_length
    by_rule = direction_by_length(rule, premise_length, hypothesis_length, "rule")
    assert by_rule["rule_premise_longer"] == 100.0 and by_rule["rule_hypothesis_not_shorter"] == 0.0
    # a relation without pairs has no accuracy, only its share of 0
    none_equal = direction_by_length(right[:3], premise_length[:3], hypothesis_length[:3], "d")
    assert "d_equal_length" not in none_equal and none_equal["share_equal_length"] == 0.0


def test_alignment_and_uniformity_by_loops() -> None:
    rng = np.random.default_rng(3)
    x, y = rng.normal(size=(6, 4)), rng.normal(size=(6, 4))
    xn = x / np.linalg.norm(x, axis=1, keepdims=True)
    yn = y / np.linalg.norm(y, axis=1, keepdims=True)
    expected_align = np.mean([np.sum((xn[i] - yn[i]) ** 2) for i in range(6)])
    pairs = [np.exp(-2 * np.sum((xn[i] - xn[j]) ** 2)) for i, j in itertools.combinations(range(6), 2)]
    expected_uniform = math.log(np.mean(pairs))
    assert alignment(torch.tensor(x), torch.tensor(y)) == pytest.approx(expected_align, rel=1e-5)
    assert uniformity(torch.tensor(x)) == pytest.approx(expected_uniform, rel=1e-6)


def test_pair_features_layout() -> None:
    u = torch.tensor([[1.0, -2.0]])
    v = torch.tensor([[3.0, 4.0]])
    assert pair_features(u, v).tolist() == [[1.0, -2.0, 3.0, 4.0, 2.0, 6.0, 3.0, -8.0]]
    assert pair_features(u, v, kind="senteval").tolist() == [[2.0, 6.0, 3.0, -8.0]]


def _separable(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    features = rng.normal(size=(n, 5))
    labels = np.where(features[:, 0] + 0.5 * features[:, 1] > 0, "pos", "neg")
    return features, labels


def test_cross_validated_probe_on_separable_data() -> None:
    features, labels = _separable(80, 4)
    config = ProbeConfig(c_grid=(1.0, 100.0), kfold=3, inner_kfold=2)
    result = cross_validated_accuracy(features, labels, config)
    assert result["accuracy"] >= 95.0
    # an uninformative feature gives chance-level accuracy
    noise = np.random.default_rng(5).normal(size=(80, 5))
    assert cross_validated_accuracy(noise, labels, config)["accuracy"] < 80.0


def test_fit_probe_chooses_c_on_dev_and_scores_f1() -> None:
    train, train_y = _separable(60, 6)
    dev, dev_y = _separable(30, 7)
    test, test_y = _separable(30, 8)
    config = ProbeConfig(c_grid=(1e-4, 10.0))
    model, info = fit_probe(train, train_y, config, dev=(dev, dev_y))
    assert info["C"] == 10.0  # the tiny C predicts one class only
    scores = probe_scores(model, test, test_y, positive_label="pos")
    predicted = model.predict(test)
    tp = np.sum((predicted == "pos") & (test_y == "pos"))
    precision, recall = tp / np.sum(predicted == "pos"), tp / np.sum(test_y == "pos")
    assert scores["f1"] == pytest.approx(100 * 2 * precision * recall / (precision + recall))
    assert scores["accuracy"] == pytest.approx(100 * np.mean(predicted == test_y))
    cv_model, cv_info = fit_probe(train, train_y, ProbeConfig(c_grid=(1e-4, 10.0), inner_kfold=3))
    assert cv_info["C"] == 10.0 and "dev_accuracy" not in cv_info


def test_probe_config_validation() -> None:
    with pytest.raises(ValueError, match="c_grid"):
        ProbeConfig(c_grid=())
    with pytest.raises(ValueError, match="kfold"):
        ProbeConfig(kfold=1)
