"""Each objective's gradients are taken right after its own forward pass (``unisent.balancers.StepGradients``),
so a step holds one objective's graph at a time. One optimiser step of that order must give the parameters
of the previous order (every forward pass, then the gradients), kept here as a reference implementation,
for a static, two gradient-level and a loss-level balancer; the gradient matrix is not copied to be
aggregated; conflict statistics come from a float64 Gram matrix accumulated over column chunks."""

from __future__ import annotations

import pytest
import torch

from unisent.balancers import JacobianAccumulator, JacobianAggregator, PCGrad, Static, Uncertainty, conflict_stats
from unisent.balancers.conflicts import gram
from unisent.encoders import EncoderConfig
from unisent.lightning_module import UnisentModule
from unisent.objectives import Objective
from unisent.objectives.objective import ObjectiveOutput
from unisent.training_config import TrainConfig

pytestmark = [pytest.mark.usefixtures("one_thread"), pytest.mark.filterwarnings("ignore:.*self.log.*")]

SENTENCES = {
    "a": ["A man is playing a guitar.", "The little prince asked for a sheep.", "A dog runs in the park."],
    "b": ["Two children are reading.", "A woman is cutting an onion.", "The sun sets over the sea.", "Rain."],
}


class Probe(Objective):
    """A regression of the pooled vector through a linear head of its own (a real encoder graph per objective)."""

    def setup_for(self, encoder) -> None:
        if not hasattr(self, "head"):
            self.head = torch.nn.Linear(encoder.hidden_size, 1)

    def forward(self, encoder, batch):
        pooled = encoder(batch["input_ids"], batch["attention_mask"])
        return {"loss": (self.head(pooled).squeeze(-1) - batch["target"]).pow(2).mean()}


def _module(model_dir, balancer, conflict_every=0) -> UnisentModule:
    torch.manual_seed(0)
    module = UnisentModule(
        encoder=EncoderConfig(model=str(model_dir), pooler="mean"),
        objectives=[Probe(name="a"), Probe(name="b", weight=0.7)],
        balancer=balancer,
        train=TrainConfig(conflict_every=conflict_every, save_encoder=False),
    )
    module.eval()  # no dropout: both orders see the same forward passes
    return module


def _batch(module) -> dict:
    out = {}
    for i, (name, texts) in enumerate(SENTENCES.items()):
        tokens = module.encoder.tokenizer(texts, padding=True, return_tensors="pt")
        target = torch.linspace(-1.0, 1.0 + i, len(texts))
        out[name] = {"input_ids": tokens["input_ids"], "attention_mask": tokens["attention_mask"], "target": target}
    return out


def _previous_order(module: UnisentModule, batch: dict) -> None:
    """The reference: every objective's forward pass, then the gradients (the code before issue 40), into
    ``.grad``: gradient-level, each objective's row of the shared parameters from its own graph, aggregated;
    loss-level, one backward pass of ``sum_i w_i L_i + regularizer`` with a hook dividing each objective's
    own gradient by ``w_i``."""
    losses = {}
    for o in module.objectives:
        out = ObjectiveOutput.of(o(module.encoder, batch[o.name]))
        losses[o.name] = module.objective_weight(o, 0) * o.total(out.terms)
    shared, own = module._shared_params(), module._own_params()
    balancer = module.balancer
    if balancer.gradient_level:
        rows, names = [], list(losses)
        for name, loss in losses.items():
            grads = torch.autograd.grad(loss, [*shared, *own[name]], allow_unused=True)
            rows.append(
                torch.cat([(torch.zeros_like(p) if g is None else g).reshape(-1) for p, g in zip(shared, grads)])
            )
            for p, g in zip(own[name], grads[len(shared) :]):
                if g is not None:
                    p.grad = g.clone()
        combined = balancer.aggregate(torch.stack(rows), names, 0)
        offset = 0
        for p in shared:
            p.grad = combined[offset : offset + p.numel()].view_as(p).clone()
            offset += p.numel()
        return
    weights = balancer.weights(losses, 0)
    handles = []
    if not isinstance(balancer, Static):
        scale = {n: 1.0 / float(w.detach()) for n, w in weights.items()}
        for name, params in own.items():
            handles += [p.register_hook(lambda g, n=name: g * scale[n]) for p in params]
    loss = sum(weights[n] * losses[n] for n in losses)
    regularizer = balancer.regularizer(losses)
    if regularizer is not None:
        loss = loss + regularizer
    loss.backward()
    for handle in handles:
        handle.remove()


BALANCERS = {
    "Static": lambda: Static(),
    "Static-conflicts": lambda: Static(),
    "PCGrad": lambda: PCGrad(),
    "UPGrad": lambda: JacobianAggregator("UPGrad"),
    "Uncertainty": lambda: Uncertainty(lr=0.1, init=0.3),
    # the previous order itself, kept for FSDP and DeepSpeed (their gradients come from one backward call)
    "Static-deferred": lambda: Static(),
    "UPGrad-deferred": lambda: JacobianAggregator("UPGrad"),
    "Uncertainty-deferred": lambda: Uncertainty(lr=0.1, init=0.3),
}


@pytest.mark.parametrize("name", list(BALANCERS))
def test_one_step_equals_the_previous_order(tiny_bert_dir, name):
    conflicts = int(name.endswith("-conflicts"))
    new, old = _module(tiny_bert_dir, BALANCERS[name](), conflicts), _module(tiny_bert_dir, BALANCERS[name]())
    if isinstance(new.balancer, Uncertainty):  # weights other than 1: the heads must still get their own gradient
        with torch.no_grad():
            for m in (new, old):
                m.balancer.log_vars.copy_(torch.tensor([0.3, -0.5]))
    for a, b in zip(new.parameters(), old.parameters()):
        assert torch.equal(a, b)
    batch = _batch(new)
    if name.endswith("-deferred"):
        start = new._gradients.start
        new._gradients.start = lambda *a, **k: start(*a, **(k | {"deferred": True}))  # noqa: E731
    logged = {}
    new.log = lambda key, value, **kw: logged.__setitem__(key, value)  # noqa: E731
    loss = new.training_step(batch, 0)
    loss.backward()
    _previous_order(old, batch)
    reached = [n for n, p in old.named_parameters() if p.grad is not None]
    assert reached == [n for n, p in new.named_parameters() if p.grad is not None]
    assert any(n.startswith("objectives.") for n in reached) and any(n.startswith("encoder.") for n in reached)
    for m in (new, old):
        torch.optim.SGD(m.parameters(), lr=0.1).step()
    for (n, a), (_, b) in zip(new.named_parameters(), old.named_parameters()):
        torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-6, msg=f"{name}: {n}")
    if conflicts:
        assert "conflict/a~b/cosine" in logged and "conflict/b/grad_norm" in logged


def test_take_aggregates_the_matrix_itself_and_reset_clears_it():
    acc = JacobianAccumulator(["a", "b"])
    w = torch.nn.Parameter(torch.tensor([1.0, 2.0, 3.0]))
    for name, loss in {"a": (w * 2).sum(), "b": (w * w).sum()}.items():
        acc.row(name, [w]).add_(torch.autograd.grad(loss, w)[0])
    jacobian, names = acc.take()
    assert names == ["a", "b"] and jacobian.data_ptr() == acc.matrix.data_ptr()  # no copy
    torch.testing.assert_close(jacobian, torch.tensor([[2.0, 2.0, 2.0], [2.0, 4.0, 6.0]]))
    acc.reset()
    assert not acc.matrix.any()
    acc.row("b", [w]).add_(torch.autograd.grad((w * w).sum(), w)[0])  # one objective: its row only
    jacobian, names = acc.take()
    assert names == ["b"] and jacobian.tolist() == [[2.0, 4.0, 6.0]]


def test_conflict_statistics_from_the_chunked_gram_match_a_float64_copy():
    g = torch.Generator().manual_seed(3)
    matrix = torch.randn(4, 1003, generator=g) * torch.tensor([[1.0], [1e-3], [50.0], [0.0]])
    full = matrix.double()
    torch.testing.assert_close(gram(matrix, chunk=97), full @ full.T, rtol=1e-12, atol=0)
    stats = conflict_stats(matrix, list("abcd"))
    norms = full.norm(dim=1)
    assert stats["norms"] == pytest.approx(norms.tolist(), rel=1e-9)
    cos = (full @ full.T) / torch.outer(norms, norms)
    for i in range(3):
        for j in range(3):
            assert stats["cosines"][i][j] == pytest.approx(float(cos[i, j].clamp(-1, 1)), rel=1e-9, abs=1e-12)
    assert all(v != v for v in stats["cosines"][3])  # a zero row: nan
    picked = conflict_stats(matrix, ["c", "a"], [2, 0])  # selected rows, in order
    assert picked["norms"] == pytest.approx([float(norms[2]), float(norms[0])], rel=1e-9)
