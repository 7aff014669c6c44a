"""Balancers (unisent.balancers) against hand computations on two toy objectives that share one encoder
parameter: the weights, the encoder's combined gradient and each head's own gradient; exactness under
gradient accumulation and with two gloo processes; conflict statistics, their CSV and plot; a real
``unisent fit`` of the unified recipe on the tiny model with each balancer and conflict logging."""

from __future__ import annotations

import csv
import math
from pathlib import Path

import pytest
import torch
import yaml

from unisent.balancers import (
    DWA,
    Anchored,
    JacobianAggregator,
    PCGrad,
    Static,
    Uncertainty,
    conflict_stats,
    plot_conflicts,
)
from unisent.balancers import GradientConflicts as Conflicts
from unisent.encoders import EncoderConfig
from unisent.lightning_module import UnisentModule
from unisent.objectives import Objective
from unisent.training_config import TrainConfig

pytestmark = [pytest.mark.usefixtures("one_thread"), pytest.mark.filterwarnings("ignore:.*self.log.*")]

HIDDEN = 32


class Toy(Objective):
    """Loss ``h * <u, w>`` on the encoder's first LayerNorm weight ``w`` (shared) with a scalar head ``h``
    of its own; ``u`` comes with the batch (a micro-batch or a process sees its own). The inner product is
    elementwise, so that bf16 autocast leaves it in float32."""

    def setup_for(self, encoder) -> None:
        if not hasattr(self, "head"):
            self.head = torch.nn.Parameter(torch.tensor(1.5))

    def forward(self, encoder, batch):
        return {"loss": self.head * (batch["u"] * shared_param(encoder)).sum()}


def shared_param(encoder) -> torch.nn.Parameter:
    return encoder.backbone.embeddings.LayerNorm.weight


class Stepped(UnisentModule):
    """The module at optimiser step ``at_step`` without a Trainer (Lightning's ``global_step`` is the trainer's)."""

    at_step = 0

    @property
    def global_step(self) -> int:
        return self.at_step


def _module(tiny_bert_dir, balancer=None, heads=(1.5, -0.5), conflict_every=0) -> UnisentModule:
    torch.manual_seed(0)
    objectives = [Toy(name="a"), Toy(name="b")]
    module = Stepped(
        encoder=EncoderConfig(model=str(tiny_bert_dir)),
        objectives=objectives,
        balancer=balancer,
        train=TrainConfig(conflict_every=conflict_every),
    )
    with torch.no_grad():
        shared_param(module.encoder).copy_(torch.linspace(-1, 1, HIDDEN))
        for o, h in zip(objectives, heads):
            o.head.fill_(h)
    return module


def _vectors(seed: int = 1) -> tuple[torch.Tensor, torch.Tensor]:
    """Two directions whose gradients conflict (negative inner product)."""
    g = torch.Generator().manual_seed(seed)
    u = torch.randn(HIDDEN, generator=g)
    v = -0.6 * u + torch.randn(HIDDEN, generator=g)
    return u, v


def _batch(u, v) -> dict[str, dict[str, torch.Tensor]]:
    """A training batch of the toys ``a`` and ``b``: their directions ``u`` and ``v``."""
    return {"a": {"u": u}, "b": {"u": v}}


def _step(module, batch, scale: float = 1.0, step: int = 0) -> torch.Tensor:
    """What Lightning runs: ``training_step`` at optimiser step ``step``, then the backward pass of its loss
    (``scale``: Lightning divides an accumulated micro-batch's loss by their number)."""
    module.at_step = step
    loss = module.training_step(batch, 0)
    (loss * scale).backward()
    return loss


def _pcgrad(g1: torch.Tensor, g2: torch.Tensor) -> torch.Tensor:
    """Algorithm 1 of Yu et al. 2020 for two tasks, by hand."""
    p1 = g1 - (g1 @ g2) / (g2 @ g2) * g2 if g1 @ g2 < 0 else g1
    p2 = g2 - (g2 @ g1) / (g1 @ g1) * g1 if g2 @ g1 < 0 else g2
    return p1 + p2


def _other_encoder_grads(module) -> float:
    w = shared_param(module.encoder)
    return sum(float(p.grad.abs().sum()) for p in module.encoder.parameters() if p is not w and p.grad is not None)


def test_static_is_the_weighted_sum_and_heads_get_their_own_gradient(tiny_bert_dir):
    module = _module(tiny_bert_dir)
    module.on_fit_start()
    u, v = _vectors()
    loss = _step(module, _batch(u, v))
    w = shared_param(module.encoder)
    a, b = module.objectives
    assert float(loss) == pytest.approx(float(1.5 * (u @ w) - 0.5 * (v @ w)), rel=1e-6)
    torch.testing.assert_close(w.grad, 1.5 * u - 0.5 * v)
    assert float(a.head.grad) == pytest.approx(float(u @ w), rel=1e-6)
    assert float(b.head.grad) == pytest.approx(float(v @ w), rel=1e-6)


def test_uncertainty_weights_the_encoder_by_exp_minus_s_and_learns_s(tiny_bert_dir):
    balancer = Uncertainty(lr=0.05)
    module = _module(tiny_bert_dir, balancer)
    with torch.no_grad():
        balancer.log_vars.copy_(torch.tensor([0.7, -0.4]))
    module.on_fit_start()
    u, v = _vectors()
    w = shared_param(module.encoder)
    a, b = module.objectives
    la, lb = float(a.head * (u @ w)), float(b.head * (v @ w))
    _step(module, _batch(u, v))
    ea, eb = math.exp(-0.7), math.exp(0.4)
    torch.testing.assert_close(w.grad, ea * 1.5 * u + eb * -0.5 * v)
    # the heads keep the gradient of their own loss (taken from it alone, before the weighting)
    assert float(a.head.grad) == pytest.approx(float(u @ w), rel=1e-5)
    assert float(b.head.grad) == pytest.approx(float(v @ w), rel=1e-5)
    # d/ds (exp(-s) L + s) = 1 - exp(-s) L
    torch.testing.assert_close(balancer.log_vars.grad, torch.tensor([1 - ea * la, 1 - eb * lb]))
    groups = module.configure_optimizers  # the s_i get their own learning rate
    from unisent.lightning_module import parameter_groups

    lrs = [g.get("lr") for g in parameter_groups(module.named_parameters(), [*module.objectives, balancer])]
    assert 0.05 in lrs and groups is not None


def test_dwa_weights_by_hand():
    dwa = DWA(temperature=2.0, period=1)
    dwa.setup(["a", "b"])
    one = lambda x, y: {"a": torch.tensor(x), "b": torch.tensor(y)}  # noqa: E731
    # the first two periods: every weight 1
    assert [float(w) for w in dwa.weights(one(2.0, 4.0), 0).values()] == [1.0, 1.0]
    assert [float(w) for w in dwa.weights(one(1.0, 3.0), 1).values()] == [1.0, 1.0]
    # r = (1/2, 3/4): w = 2 softmax(r / 2)
    r = torch.tensor([0.5, 0.75], dtype=torch.float64)
    expected = 2 * torch.softmax(r / 2.0, dim=0)
    got = dwa.weights(one(5.0, 5.0), 2)
    assert [float(w) for w in got.values()] == pytest.approx(expected.tolist(), rel=1e-6)
    # the objective whose loss fell less gets more weight; the weights sum to K
    assert float(got["b"]) > float(got["a"]) and sum(float(w) for w in got.values()) == pytest.approx(2.0)
    # a period of 3 steps averages its micro-batches/steps: (1+3)/2 against (4+8)/2 ... by hand
    slow = DWA(temperature=1.0, period=2)
    slow.setup(["a", "b"])
    for step, (x, y) in enumerate([(4.0, 2.0), (2.0, 2.0), (1.0, 2.0), (2.0, 1.0)]):
        slow.weights(one(x, y), step)
    r = torch.tensor([1.5 / 3.0, 1.5 / 2.0], dtype=torch.float64)
    got = slow.weights(one(1.0, 1.0), 4)
    assert [float(w) for w in got.values()] == pytest.approx((2 * torch.softmax(r, dim=0)).tolist(), rel=1e-6)


def test_dwa_weights_only_the_objectives_seen_in_both_periods():
    dwa = DWA(temperature=1.0, period=1)
    dwa.setup(["a", "b", "c"])
    dwa.weights({"a": torch.tensor(2.0), "b": torch.tensor(1.0)}, 0)  # c switched off (weight schedule)
    dwa.weights({"a": torch.tensor(1.0), "b": torch.tensor(1.0), "c": torch.tensor(3.0)}, 1)
    got = dwa.weights({"a": torch.tensor(1.0), "b": torch.tensor(1.0), "c": torch.tensor(1.0)}, 2)
    expected = 2 * torch.softmax(torch.tensor([0.5, 1.0], dtype=torch.float64), dim=0)
    assert [float(got["a"]), float(got["b"])] == pytest.approx(expected.tolist()) and float(got["c"]) == 1.0


def test_dwa_state_is_in_the_checkpoint():
    dwa = DWA(period=1)
    dwa.setup(["a", "b"])
    for step, loss in enumerate([3.0, 2.0]):
        dwa.weights({"a": torch.tensor(loss), "b": torch.tensor(1.0)}, step)
    state = dwa.state_dict()
    again = DWA(period=1)
    again.setup(["a", "b"])
    again.load_state_dict(state)
    later = {"a": torch.tensor(1.0), "b": torch.tensor(1.0)}
    assert [float(w) for w in again.weights(later, 2).values()] == [float(w) for w in dwa.weights(later, 2).values()]


def test_pcgrad_projects_conflicting_gradients_by_hand(tiny_bert_dir):
    module = _module(tiny_bert_dir, PCGrad())
    u, v = _vectors()
    assert float(u @ v) < 0
    loss = _step(module, _batch(u, v))
    w = shared_param(module.encoder)
    a, b = module.objectives
    torch.testing.assert_close(w.grad, _pcgrad(1.5 * u, -0.5 * v), rtol=1e-5, atol=1e-6)
    assert _other_encoder_grads(module) == 0.0
    assert float(a.head.grad) == pytest.approx(float(u @ w), rel=1e-5)
    assert float(b.head.grad) == pytest.approx(float(v @ w), rel=1e-5)
    # the returned loss still says the plain sum
    assert float(loss) == pytest.approx(float(1.5 * (u @ w) - 0.5 * (v @ w)), rel=1e-5)


def test_pcgrad_without_conflict_is_the_sum(tiny_bert_dir):
    module = _module(tiny_bert_dir, PCGrad())
    u, _ = _vectors()
    _step(module, _batch(u, -2 * u))  # gradients 1.5 u and u: no conflict
    torch.testing.assert_close(shared_param(module.encoder).grad, 1.5 * u + u)


def test_a_torchjd_aggregator_by_name(tiny_bert_dir):
    module = _module(tiny_bert_dir, JacobianAggregator("Mean"))
    u, v = _vectors()
    _step(module, _batch(u, v))
    torch.testing.assert_close(shared_param(module.encoder).grad, (1.5 * u - 0.5 * v) / 2)
    with pytest.raises(ValueError, match="did you mean 'PCGrad'"):
        JacobianAggregator("PCgrad")


def _planar(g1: tuple[float, float], g2: tuple[float, float]) -> tuple[torch.Tensor, torch.Tensor]:
    """``u, v`` whose gradients (heads 1.5 and -0.5) are ``g1`` and ``g2`` in the first two coordinates."""
    u, v = torch.zeros(HIDDEN), torch.zeros(HIDDEN)
    u[:2], v[:2] = torch.tensor(g1) / 1.5, torch.tensor(g2) / -0.5
    return u, v


@pytest.mark.parametrize(
    "aggregator, g1, g2, expected",
    [
        # UPGrad: each gradient projected onto the cone of directions conflicting with neither, then the
        # mean. (1, 0) conflicts with (-1, 1): it loses its part along (-1, 1) -> (0.5, 0.5); (-1, 1)
        # loses its part along (1, 0) -> (0, 1); the mean is (0.25, 0.75)
        ("UPGrad", (1.0, 0.0), (-1.0, 1.0), (0.25, 0.75)),
        ("UPGrad", (2.0, 0.0), (1.0, 1.0), (1.5, 0.5)),  # no conflict: the mean of the two
        # IMTL-G: weights G^+ d / sum, d the gradient norms; orthogonal (2, 0), (0, 1): G = diag(4, 1),
        # G^+ d = (0.5, 1) -> weights (1/3, 2/3) -> (2/3, 2/3), the same projection on either unit gradient
        ("IMTLG", (2.0, 0.0), (0.0, 1.0), (2 / 3, 2 / 3)),
    ],
)
def test_upgrad_and_imtlg_by_hand(tiny_bert_dir, aggregator, g1, g2, expected):
    """The two aggregators of the unified study (docs/results/unified.md) on the shared encoder, by hand."""
    module = _module(tiny_bert_dir, JacobianAggregator(aggregator))
    u, v = _planar(g1, g2)
    _step(module, _batch(u, v))
    grad = shared_param(module.encoder).grad
    # atol: torchjd solves UPGrad's projection as a quadratic programme regularised by 1e-4 (0.2499, not 0.25)
    torch.testing.assert_close(grad[:2], torch.tensor(expected), rtol=0, atol=5e-4)
    assert float(grad[2:].abs().max()) == 0.0
    assert _other_encoder_grads(module) == 0.0


def _anchored_step(tiny_bert_dir, grads: dict[str, tuple[float, ...]], balancer: Anchored) -> torch.Tensor:
    """The encoder's gradient of one step of toys named as ``grads``, each with that gradient."""
    torch.manual_seed(0)
    module = Stepped(
        encoder=EncoderConfig(model=str(tiny_bert_dir)),
        objectives=[Toy(name=name) for name in grads],
        balancer=balancer,
    )
    w = shared_param(module.encoder)
    batch = {}
    for name, g in grads.items():
        u = torch.zeros(HIDDEN)
        u[: len(g)] = torch.tensor(g) / 1.5  # the toy's head is 1.5
        batch[name] = {"u": u}
    _step(module, batch)
    assert _other_encoder_grads(module) == 0.0
    return w.grad


def test_anchored_gives_the_anchor_as_much_of_the_update_as_all_the_tasks_by_hand(tiny_bert_dir):
    """UPGrad of the tasks (1, 0), (-1, 1) is (0.25, 0.75) = t (above); the anchor's d = (0, 0, 0.05) is
    orthogonal to it and 16 times shorter. IMTL-G of (t, d): the update is p (t/|t| + d/|d|), the same
    projection p on either unit gradient, with weights summing to 1: p/|t| + p/|d| = 1."""
    grad = _anchored_step(tiny_bert_dir, {"a": (1.0, 0.0), "b": (-1.0, 1.0), "distill": (0.0, 0.0, 0.05)}, Anchored())
    t, d = torch.tensor([0.25, 0.75, 0.0]), torch.tensor([0.0, 0.0, 0.05])
    p = 1 / (1 / t.norm() + 1 / d.norm())
    torch.testing.assert_close(grad[:3], p * (t / t.norm() + d / d.norm()), rtol=0, atol=5e-4)
    assert float(grad[3:].abs().max()) == 0.0
    assert float(grad[2] / p) == pytest.approx(1.0, abs=1e-3)  # the anchor's unit gradient counts in full


def test_anchored_without_an_anchor_gradient_is_the_tasks_update(tiny_bert_dir):
    """A zero anchor row (the encoder held, or the start not yet left) leaves the tasks' UPGrad."""
    grad = _anchored_step(tiny_bert_dir, {"a": (1.0, 0.0), "b": (-1.0, 1.0), "distill": (0.0,)}, Anchored())
    torch.testing.assert_close(grad[:2], torch.tensor([0.25, 0.75]), rtol=0, atol=5e-4)


def test_anchored_names_an_objective_of_the_model():
    with pytest.raises(ValueError, match=r"model.balancer.init_args.anchor: unknown objective 'distil' \(did you mean"):
        Anchored(anchor="distil").setup(["gausscse", "distill"])
    assert Anchored(aggregator="Mean").config() == {
        "class_path": "unisent.balancers.Anchored",
        "init_args": {"anchor": "distill", "aggregator": "Mean", "seed": 0},
    }


@pytest.mark.parametrize("balancer", [PCGrad, Uncertainty, Static])
def test_gradient_accumulation_equals_the_whole_batch(tiny_bert_dir, monkeypatch, balancer):
    """Two accumulated micro-batches (Lightning divides each loss by 2) give the whole batch's update; for
    PCGrad only because the matrix is summed over micro-batches and aggregated once (per micro-batch
    projections differ: checked)."""
    (u1, v1), (u2, v2) = _planar((1.0, 0.0), (-1.0, 1.0)), _planar((0.0, 1.0), (1.0, 1.0))
    whole = _module(tiny_bert_dir, balancer())
    whole.on_fit_start()
    _step(whole, _batch((u1 + u2) / 2, (v1 + v2) / 2))

    accumulated = _module(tiny_bert_dir, balancer())
    accumulated.on_fit_start()
    monkeypatch.setattr(accumulated, "_last_micro_batch", lambda: False)
    _step(accumulated, _batch(u1, v1), 0.5)
    monkeypatch.setattr(accumulated, "_last_micro_batch", lambda: True)
    _step(accumulated, _batch(u2, v2), 0.5)
    for p, q in zip(whole.parameters(), accumulated.parameters()):
        if p.grad is not None or q.grad is not None:
            torch.testing.assert_close(p.grad, q.grad, rtol=1e-5, atol=1e-6)
    if balancer is PCGrad:  # by hand: the whole batch's (0.5, 0.5) and (0, 1) do not conflict: their sum
        assert shared_param(accumulated.encoder).grad[:2].tolist() == pytest.approx([0.5, 1.5])
        per_micro = (_pcgrad(1.5 * u1, -0.5 * v1) + _pcgrad(1.5 * u2, -0.5 * v2)) / 2  # projecting each alone
        assert per_micro[:2].tolist() == pytest.approx([0.75, 1.75])


def _parity_worker(rank, world, model_dir, balancer_name):
    """One of two processes: its half of the batch, then DDP's averaging of the gradients."""
    import torch.distributed as dist

    balancer = {"pcgrad": PCGrad, "uncertainty": Uncertainty, "dwa": lambda: DWA(period=1)}[balancer_name]()
    module = _module(Path(model_dir), balancer)
    module.on_fit_start()
    halves = [_vectors(1), _vectors(7)]
    u, v = halves[rank]
    for step in range(3):  # DWA's weights move from the third period on
        module.zero_grad()
        _step(module, _batch(u * (step + 1), v), step=step)
        for p in module.parameters():
            if p.grad is not None:
                dist.all_reduce(p.grad)
                p.grad /= world
    return {n: p.grad.clone() for n, p in module.named_parameters() if p.grad is not None}


@pytest.mark.integration
@pytest.mark.distributed
@pytest.mark.parametrize(  # the default run keeps PCGrad; the loss-level ones are slow (17 s each)
    "balancer",
    ["pcgrad", pytest.param("uncertainty", marks=pytest.mark.slow), pytest.param("dwa", marks=pytest.mark.slow)],
)
def test_two_gloo_processes_equal_one_process_on_the_whole_batch(tiny_bert_dir, balancer):
    from unisent.testing import run_distributed

    two = run_distributed(_parity_worker, str(tiny_bert_dir), balancer, world_size=2, timeout=300)
    make = {"pcgrad": PCGrad, "uncertainty": Uncertainty, "dwa": lambda: DWA(period=1)}[balancer]
    one = _module(tiny_bert_dir, make())
    one.on_fit_start()
    (u1, v1), (u2, v2) = _vectors(1), _vectors(7)
    for step in range(3):
        one.zero_grad()
        _step(one, _batch((u1 + u2) / 2 * (step + 1), (v1 + v2) / 2), step=step)
    grads = {n: p.grad for n, p in one.named_parameters() if p.grad is not None}
    assert set(grads) <= set(two)
    for name, grad in grads.items():
        torch.testing.assert_close(two[name], grad, rtol=1e-5, atol=1e-6, msg=f"{balancer}: {name}")
    if balancer == "dwa":  # the weights did move: not the static sum
        w = shared_param(one.encoder).grad
        assert not torch.allclose(w, 1.5 * 3 * (u1 + u2) / 2 - 0.5 * (v1 + v2) / 2, atol=1e-4)


def test_conflict_statistics_by_hand(tmp_path):
    rows = torch.tensor([[3.0, 4.0, 0.0], [-4.0, 3.0, 0.0], [0.0, 0.0, 0.0]])
    stats = conflict_stats(rows, ["a", "b", "c"])
    assert stats["norms"] == pytest.approx([5.0, 5.0, 0.0])
    assert stats["cosines"][0][1] == pytest.approx(0.0, abs=1e-12)
    stats2 = conflict_stats(torch.tensor([[1.0, 0.0], [-1.0, 1.0]]), ["a", "b"])
    assert stats2["cosines"][0][1] == pytest.approx(-1 / math.sqrt(2))
    assert math.isnan(stats["cosines"][0][2])  # a zero gradient has no direction
    log = Conflicts(tmp_path)
    log.append(0, stats2)
    log.append(5, conflict_stats(torch.tensor([[1.0, 0.0], [1.0, 1.0]]), ["a", "b"]))
    with (tmp_path / "conflicts.csv").open() as f:
        table = list(csv.DictReader(f))
    assert [(r["step"], r["a"], r["b"]) for r in table] == [
        ("0", "a", "a"),
        ("0", "a", "b"),
        ("0", "b", "b"),
        ("5", "a", "a"),
        ("5", "a", "b"),
        ("5", "b", "b"),
    ]
    from unisent.balancers import mean_cosines, read_conflicts

    names, cosines, norms = read_conflicts(tmp_path / "conflicts.csv")
    assert mean_cosines(names, cosines)[0][1] == pytest.approx((-1 / math.sqrt(2) + 1 / math.sqrt(2)) / 2)
    assert [s for s, _ in norms["b"]] == [0, 5]
    assert [n for _, n in norms["b"]] == pytest.approx([math.sqrt(2), math.sqrt(2)], rel=1e-5)
    png = plot_conflicts(tmp_path / "conflicts.csv")
    assert png.stat().st_size > 5000 and png.read_bytes()[:4] == b"\x89PNG"


def test_conflicts_are_logged_from_the_combined_step(tiny_bert_dir):
    module = _module(tiny_bert_dir, PCGrad(), conflict_every=1)
    logged = {}
    module.log = lambda key, value, **kw: logged.__setitem__(key, value)  # noqa: E731
    u, v = _vectors()
    _step(module, _batch(u, v))
    g1, g2 = 1.5 * u, -0.5 * v
    assert logged["conflict/a/grad_norm"] == pytest.approx(float(g1.norm()), rel=1e-5)
    assert logged["conflict/a~b/cosine"] == pytest.approx(float(g1 @ g2 / g1.norm() / g2.norm()), rel=1e-5)
    # a loss-level balancer computes them on the logged steps without changing the update
    static = _module(tiny_bert_dir, conflict_every=1)
    logged.clear()
    static.log = lambda key, value, **kw: logged.__setitem__(key, value)  # noqa: E731
    _step(static, _batch(u, v))
    assert logged["conflict/a~b/cosine"] == pytest.approx(float(g1 @ g2 / g1.norm() / g2.norm()), rel=1e-5)
    torch.testing.assert_close(shared_param(static.encoder).grad, g1 + g2)


def test_a_wrong_balancer_setting_is_one_clear_error():
    with pytest.raises(ValueError, match="DWA needs temperature > 0"):
        DWA(temperature=0)


# ------------------------------------------------------------------------------- through unisent fit
@pytest.mark.integration
@pytest.mark.parametrize("balancer", ["PCGrad", "Uncertainty", "DWA"])
def test_unified_fit_with_a_balancer_logs_conflicts_and_plots_them(tiny_unified, unisent_cli, tmp_path, balancer):
    path = tiny_unified()
    config = yaml.safe_load(path.read_text(encoding="utf-8"))
    config["model"]["balancer"] = {"class_path": f"unisent.balancers.{balancer}"}
    if balancer == "DWA":
        config["model"]["balancer"]["init_args"] = {"period": 1}
    config["model"]["train"]["conflict_every"] = 2
    for objective in config["model"]["objectives"]:  # GaussCSE's gradient reaches the encoder too
        (objective.get("init_args") or {}).pop("encoder_grad", None)
    config["trainer"]["accumulate_grad_batches"] = 2
    config["trainer"]["max_steps"] = 3
    path.write_text(yaml.safe_dump(config, sort_keys=False), encoding="utf-8")
    unisent_cli("fit", "-c", str(path))
    run = tmp_path / "runs" / "unified" / "version_0"
    with (run / "conflicts.csv").open() as f:
        table = list(csv.DictReader(f))
    assert sorted({int(r["step"]) for r in table}) == [0, 2]
    names = {r["a"] for r in table}
    assert names >= {"gausscse", "ease", "amr", "cmlm"}
    for r in table:
        assert float(r["norm_a"]) > 0 and (r["a"] == r["b"] or -1 <= float(r["cosine"]) <= 1)
    assert (run / "conflicts.png").stat().st_size > 5000
    with (run / "metrics.csv").open() as f:
        header = next(csv.reader(f))
    assert "conflict/ease~amr/cosine" in header and "conflict/cmlm/grad_norm" in header
    if balancer != "PCGrad":
        assert "train/ease/balance_weight" in header
    ckpt = torch.load(run / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=False)
    assert ckpt["unisent"]["balancer"]["class_path"] == f"unisent.balancers.{balancer}"
    import unisent

    assert unisent.load(run / "checkpoints" / "last.ckpt") is not None  # the balancer's state is not needed


@pytest.mark.integration
@pytest.mark.distributed
@pytest.mark.parametrize(
    "balancer,strategy,cache_chunk",
    [
        # 30 s each: the default run keeps UPGrad cached (the gradient-level path, GradCache and DDP together)
        pytest.param("PCGrad", "ddp", None, marks=pytest.mark.slow),
        pytest.param("Static", "ddp_find_unused_parameters_true", None, marks=pytest.mark.slow),
        pytest.param("Uncertainty", "ddp_find_unused_parameters_true", None, marks=pytest.mark.slow),
        ("UPGrad", "ddp", 3),
    ],
    ids=["pcgrad", "static", "uncertainty", "upgrad-cached"],
)
def test_balancers_under_lightning_ddp_with_two_gloo_processes(tiny_unified, tmp_path, balancer, strategy, cache_chunk):
    """The real path: Lightning's DDP (2 CPU processes, gloo) with gradient accumulation, conflicts logged from rank
    0. Gradient-level balancers under plain ``ddp`` (every parameter reduced, no unused-parameter search);
    loss-level ones are a surrogate loss too, and parameters no loss reaches (BERT's pooler under mean pooling)
    need ``ddp_find_unused_parameters_true``; GradCache (``cache_chunk``) under the same DDP."""
    import os
    import subprocess
    import sys

    path = tiny_unified(max_steps=2, keep=("EASE", "AMRSimCSE"))
    config = yaml.safe_load(path.read_text(encoding="utf-8"))
    model = config["model"]
    aggregator = {"class_path": "unisent.balancers.JacobianAggregator", "init_args": {"aggregator": "UPGrad"}}
    model["balancer"] = aggregator if balancer == "UPGrad" else {"class_path": f"unisent.balancers.{balancer}"}
    model["train"]["conflict_every"] = 1
    if cache_chunk:
        model["train"]["cache_chunk"] = cache_chunk
    config["trainer"].update(devices=2, accelerator="cpu", strategy=strategy, accumulate_grad_batches=2)
    path.write_text(yaml.safe_dump(config, sort_keys=False), encoding="utf-8")
    done = subprocess.run(
        [sys.executable, "-m", "unisent.cli", "fit", "-c", str(path)],
        capture_output=True,
        text=True,
        timeout=600,
        env=dict(os.environ, OMP_NUM_THREADS="1"),
    )
    assert done.returncode == 0, done.stderr[-3000:]
    run = tmp_path / "runs" / "unified" / "version_0"
    with (run / "conflicts.csv").open() as f:
        table = list(csv.DictReader(f))
    assert sorted({int(r["step"]) for r in table}) == [0, 1]
    assert {(r["a"], r["b"]) for r in table} == {("ease", "ease"), ("ease", "amr"), ("amr", "amr")}
    ckpt = torch.load(run / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=False)
    assert ckpt["global_step"] == 2 and ckpt["hyper_parameters"]["train"]["cache_chunk"] == cache_chunk


@pytest.mark.integration
def test_conflicts_reach_wandb_as_a_matrix_table(tiny_unified, unisent_cli, tmp_path):
    pytest.importorskip("wandb")
    path = tiny_unified(max_steps=2, keep=("EASE", "AMRSimCSE"))
    config = yaml.safe_load(path.read_text(encoding="utf-8"))
    config["model"]["train"]["conflict_every"] = 1
    config["trainer"]["logger"] = {
        "class_path": "lightning.pytorch.loggers.WandbLogger",
        "init_args": {"save_dir": str(tmp_path / "wandb-runs"), "offline": True, "project": "conflicts"},
    }
    path.write_text(yaml.safe_dump(config, sort_keys=False), encoding="utf-8")
    import wandb

    try:
        unisent_cli("fit", "-c", str(path))
    finally:
        wandb.finish()  # the next test's logger must not find this run still open
    tables = sorted((tmp_path / "wandb-runs").rglob("conflict/cosine_matrix_*.table.json"))
    assert len(tables) == 2  # steps 0 and 1
    import json

    table = json.loads(tables[0].read_text())
    assert table["columns"] == ["objective", "ease", "amr"]
    assert [row[0] for row in table["data"]] == ["ease", "amr"] and table["data"][0][1] == pytest.approx(1.0)
    assert -1 <= table["data"][0][2] <= 1 and table["data"][0][2] == pytest.approx(table["data"][1][1])


@pytest.mark.parametrize("aggregator", ["PCGrad", "IMTLG"])
def test_the_aggregation_runs_in_float32_under_bf16_autocast(tiny_bert_dir, aggregator):
    """A bf16-mixed step must not compute the Gramian in bf16 (IMTLG's pinv refuses bf16; PCGrad's
    projections would keep ~3 digits)."""
    balancer = PCGrad() if aggregator == "PCGrad" else JacobianAggregator("IMTLG")
    module = _module(tiny_bert_dir, balancer)
    u, v = _vectors()
    u, v = u * 1.001, v * 0.999  # values that bf16 would round
    with torch.autocast("cpu", dtype=torch.bfloat16):  # elementwise losses: autocast leaves them in float32
        loss = module.training_step(_batch(u, v), 0)
    loss.backward()
    g1, g2 = 1.5 * u, -0.5 * v
    if aggregator == "PCGrad":
        expected = _pcgrad(g1, g2)
    else:  # IMTL-G: equal projections of the update on every unit gradient, d = sum of alpha_i g_i
        expected = JacobianAggregator("IMTLG")._aggregator(torch.stack([g1, g2]))
        units = torch.stack([g1 / g1.norm(), g2 / g2.norm()])
        projections = units @ expected
        assert float(projections[0]) == pytest.approx(float(projections[1]), rel=1e-4)
    torch.testing.assert_close(shared_param(module.encoder).grad, expected, rtol=1e-5, atol=1e-6)


def test_a_mistyped_balancer_class_is_one_line_with_the_closest(tiny_unified, capsys):
    from unisent.cli import main

    path = tiny_unified()
    with pytest.raises(SystemExit) as done:
        main(["fit", "-c", str(path), "--model.balancer=unisent.balancers.PCgrad", "--print_config"])
    assert done.value.code == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Union" not in err
    assert "model.balancer: unisent.balancers has no class 'PCgrad' (did you mean unisent.balancers.PCGrad?)" in err
