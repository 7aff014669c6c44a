import math

import pytest
import torch

from unisent.losses import info_nce


def _hand_info_nce(q, p, n=None, tau=0.05, w=0.0):
    """Eq. of SimCSE written out with Python loops over rows (independent of the library)."""

    def cos(a, b):
        return float(a @ b / (a.norm() * b.norm()))

    total = 0.0
    for i in range(len(q)):
        logits = [cos(q[i], p[j]) / tau for j in range(len(p))]
        if n is not None:
            logits += [cos(q[i], n[j]) / tau + (w if j == i else 0.0) for j in range(len(n))]
        total += -logits[i] + math.log(sum(math.exp(x) for x in logits))
    return total / len(q)


@pytest.fixture
def vecs():
    g = torch.Generator().manual_seed(1)
    return [torch.randn(5, 7, generator=g, dtype=torch.float64) for _ in range(3)]


def test_in_batch_negatives_match_hand_computation(vecs):
    q, p, _ = vecs
    assert info_nce(q, p, temperature=0.05).item() == pytest.approx(_hand_info_nce(q, p), rel=1e-5)
    assert info_nce(q, p, temperature=0.5).item() == pytest.approx(_hand_info_nce(q, p, tau=0.5), rel=1e-5)


def test_hard_negatives_and_log_weight_match_hand_computation(vecs):
    q, p, n = vecs
    got = info_nce(q, p, hard_negatives=n, temperature=0.1)
    assert got.item() == pytest.approx(_hand_info_nce(q, p, n, tau=0.1), rel=1e-5)
    got_w = info_nce(q, p, hard_negatives=n, temperature=0.1, hard_negative_weight=math.log(2.0))
    assert got_w.item() == pytest.approx(_hand_info_nce(q, p, n, tau=0.1, w=math.log(2.0)), rel=1e-5)
    assert got_w.item() > got.item()  # a heavier own negative makes the task harder


def test_symmetric_is_mean_of_both_directions(vecs):
    q, p, _ = vecs
    expected = (_hand_info_nce(q, p) + _hand_info_nce(p, q)) / 2
    assert info_nce(q, p, symmetric=True).item() == pytest.approx(expected, rel=1e-5)


def test_perfect_alignment_gives_low_loss_and_shape_mismatch_fails():
    x = torch.eye(4)
    assert info_nce(x, x, temperature=0.05).item() < 1e-6
    with pytest.raises(ValueError, match="differ in shape"):
        info_nce(torch.zeros(3, 2), torch.zeros(4, 2))


def test_gradients_flow_to_both_sides(vecs):
    q, p, n = (v.clone().requires_grad_() for v in vecs)
    info_nce(q, p, hard_negatives=n).backward()
    assert all(t.grad is not None and t.grad.abs().sum() > 0 for t in (q, p, n))
