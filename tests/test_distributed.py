"""2-process (gloo) parity: loss and gradients with gathered candidates equal one process on the global batch
(InfoNCE, GaussCSE, CMLM's bitext retrieval loss)."""

import pytest
import torch
import torch.distributed as dist

from unisent.losses import additive_margin_softmax, gauss_cse_loss, info_nce
from unisent.testing import run_distributed

pytestmark = [pytest.mark.distributed, pytest.mark.integration]

WORLD, LOCAL, DIM_IN, DIM = 2, 4, 6, 4


def _data():
    g = torch.Generator().manual_seed(0)
    inputs = [torch.randn(WORLD * LOCAL, DIM_IN, generator=g) for _ in range(3)]
    weight = torch.randn(DIM, DIM_IN, generator=g)
    return inputs, weight


def _loss(layer, inputs, **kw):
    q, p, n = (layer(x) for x in inputs)
    if kw.pop("bitext", False):  # source = q, target = p
        return additive_margin_softmax(q, p, margin=0.3, **kw)
    if kw.pop("gauss", False):  # GaussCSE: first half mean, second half variance
        q, p, n = ((t[:, :2], torch.nn.functional.softplus(t[:, 2:]) + 0.1) for t in (q, p, n))
        return gauss_cse_loss(q, p, n, sets=("ent", "con", "rev"), temperature=0.5, **kw)
    return info_nce(q, p, hard_negatives=n, temperature=0.1, **kw)


def _worker(rank, world, kw):
    inputs, weight = _data()
    layer = torch.nn.Linear(DIM_IN, DIM, bias=False)
    layer.weight.data.copy_(weight)
    shard = [x[rank * LOCAL : (rank + 1) * LOCAL] for x in inputs]
    loss = _loss(layer, shard, **dict(kw))
    loss.backward()
    grad = layer.weight.grad.clone()
    dist.all_reduce(grad)  # what DDP does: average gradients over processes
    grad /= world
    losses = [torch.zeros(()) for _ in range(world)]
    dist.all_gather(losses, loss.detach())
    return torch.stack(losses).mean().item(), grad.numpy().copy()


def _run_two_processes(kw):
    return run_distributed(_worker, kw, world_size=WORLD)


def _one_process(kw):
    inputs, weight = _data()
    layer = torch.nn.Linear(DIM_IN, DIM, bias=False)
    layer.weight.data.copy_(weight)
    loss = _loss(layer, inputs, **{k: v for k, v in kw.items() if k != "gather"})
    loss.backward()
    return loss, layer.weight.grad


@pytest.mark.parametrize(
    "kw",
    [
        {},
        {"symmetric": True, "hard_negative_weight": 0.7},
        {"gauss": True},
        {"bitext": True},
        {"bitext": True, "normalize": True, "scale": 10.0},
        {"bitext": True, "bidirectional": False},
    ],
    ids=[
        "info_nce",
        "info_nce_symmetric_weighted",
        "gauss_cse",
        "bitext_inner_product",
        "bitext_scaled_cosine",
        "bitext_one_direction",
    ],
)
def test_two_processes_equal_one_process_on_global_batch(kw):
    dist_loss, dist_grad = _run_two_processes(kw)
    loss, grad = _one_process(kw)
    assert dist_loss == pytest.approx(loss.item(), rel=1e-5)
    torch.testing.assert_close(torch.from_numpy(dist_grad), grad, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("kw", [{}, {"bitext": True}], ids=["info_nce", "bitext"])
def test_without_gathering_the_processes_see_fewer_negatives(kw):
    """Control: the parity above is not automatic; local-only negatives give another loss and gradient."""
    dist_loss, dist_grad = _run_two_processes({**kw, "gather": False})
    loss, grad = _one_process(kw)
    assert abs(dist_loss - loss.item()) > 1e-3
    assert not torch.allclose(torch.from_numpy(dist_grad), grad, rtol=1e-3, atol=1e-4)


def _fails_on_rank_one(rank, world):
    if rank == 1:
        raise ValueError("boom on rank one")
    return rank


def test_run_distributed_reports_the_failing_process():
    with pytest.raises(RuntimeError, match="(?s)process 1 failed.*ValueError: boom on rank one"):
        run_distributed(_fails_on_rank_one, world_size=WORLD, timeout=60)


def _returns_tensors(rank, world):
    return {"grad": torch.arange(6.0).reshape(2, 3) * (rank + 1), "rank": rank}


def test_run_distributed_returns_tensors_by_value():
    """A returned tensor arrives as a copy, not as shared memory the parent would fetch, by file descriptor,
    from a process that has already left (CI once saw 'connection reset by peer' there)."""
    value = run_distributed(_returns_tensors, world_size=WORLD, timeout=60)
    assert value["rank"] == 0
    torch.testing.assert_close(value["grad"], torch.arange(6.0).reshape(2, 3))
    assert not value["grad"].is_shared()


def test_a_worker_whose_module_is_not_importable_is_loaded_from_its_file(tmp_path):
    """Plain ``pytest`` with ``--import-mode=importlib`` collects ``tests/test_x.py`` as module ``tests.test_x``
    without putting the repository on ``sys.path``: a spawned process then finds the worker by its file."""
    from unisent.testing import _reference, _resolve

    path = tmp_path / "worker_mod.py"
    path.write_text(
        "def worker(rank, world_size):\n    return rank * 10 + world_size\n\n"
        "class K:\n    @staticmethod\n    def f():\n        return 7\n"
    )
    fn = _resolve(("tests_not_on_path.worker_mod", "worker", str(path)))
    assert fn(1, 2) == 12
    assert _resolve(("tests_not_on_path.worker_mod2", "K.f", str(path)))() == 7
    assert _reference(_reference) == ("unisent.testing", "_reference", __import__("unisent.testing").testing.__file__)
    with pytest.raises(ImportError):
        _resolve(("tests_not_on_path.nowhere", "worker", None))
