"""Cached contrastive training (``model.cache_chunk``, GradCache): the loss and every parameter's gradient of a
cached step equal those of the uncached step, for each in-batch objective, for two objectives under PCGrad and
UPGrad, with an uncached objective beside a cached one, and in a 2-process gloo run against one process on the
doubled batch.

Dropout on: the uncached reference encodes the batch in the same chunks, with a graph (one backward pass over
the whole graph), so that its dropout masks are drawn in the same order as the cache's first pass: the cache is
exact only if its second pass replays those masks (a replay under another random state fails these tests).
Dropout off: the reference is the plain uncached step, one encoder pass over the whole batch."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import torch

from unisent.balancers import JacobianAggregator, PCGrad, Uncertainty
from unisent.data import DataSource, UnisentDataModule
from unisent.encoders import EncoderConfig
from unisent.io import import_object
from unisent.lightning_module import UnisentModule
from unisent.objectives import Objective
from unisent.testing import run_distributed
from unisent.training_config import ModelConfigError, ScheduleConfig, TrainConfig

pytestmark = [pytest.mark.usefixtures("one_thread"), pytest.mark.filterwarnings("ignore:.*self.log.*")]

ROOT = Path(__file__).resolve().parents[1]
SAMPLES = ROOT / "samples"
CHUNK, BATCH = 3, 8  # 8 rows (16 with two views) in chunks of 3: the last chunk is short
AMR_SYMBOLS = {
    "symbol_counts": str(ROOT / "unisent/resources/amr_predicates.tsv"),
    "symbol_lists": str(ROOT / "unisent/resources/amr_additions.txt"),
    "min_count": 390,
}
#: every in-batch objective (embed + loss), and CMLM (not in-batch: it runs uncached beside the others)
OBJECTIVES = {
    "simcse": ("SimCSE", {}, "sentences.txt"),
    "simcse_sup": ("SimCSE", {"supervised": True, "hard_negative_weight": 0.5}, "nli_triples.jsonl"),
    "ease": (
        "EASE",
        {"entity_dim": 16, "entity_titles": str(SAMPLES / "ease_fewrel_entities.tsv")},
        "ease_fewrel.jsonl",
    ),
    "gausscse": ("GaussCSE", {}, "nli_triples.jsonl"),
    "bitext": ("BitextRetrieval", {}, "bitext_xnli_dev_deu_eng.jsonl"),
    "amr": (
        "AMRSimCSE",
        {"mode": "self", "forms": {"anchor": "text", "positive": "graph"}, **AMR_SYMBOLS},
        "amr_little_prince.jsonl",
    ),
    "cmlm": ("CMLM", {"num_projections": 2}, "cmlm_pairs.jsonl"),
    "matryoshka": (
        "Matryoshka",
        {"objective": {"class_path": "unisent.objectives.SimCSE"}, "dims": [32, 8]},
        "sentences.txt",
    ),
}


def _objective(name: str) -> Objective:
    cls, settings, _ = OBJECTIVES[name]
    return import_object(f"unisent.objectives.{cls}")(**settings, name=name)


def _setup(model_dir, tmp_path, names, balancer=None, dropout=True, batch_size=BATCH):
    """The cached module (chunks of :data:`CHUNK`) and a batch of every objective of ``names``."""
    torch.manual_seed(0)
    module = UnisentModule(
        encoder=EncoderConfig(model=str(model_dir), max_length=24, pooler="mean"),
        objectives=[_objective(n) for n in names],
        balancer=balancer,
        train=TrainConfig(cache_chunk=CHUNK, save_encoder=False),
    )
    if not dropout:
        for layer in module.modules():
            if isinstance(layer, torch.nn.Dropout):
                layer.p = 0.0
    train = {n: DataSource(str(SAMPLES / OBJECTIVES[n][2]), max_records=4 * batch_size) for n in names}
    data = UnisentDataModule(train=train, batch_size=batch_size, cache_dir=str(tmp_path / "cache")).attach(module)
    data.setup("fit")
    return module, {n: next(iter(data._loader(n))) for n in names}


def _uncached(module: UnisentModule, chunked: bool) -> UnisentModule:
    """A copy of ``module`` without the cache; ``chunked``: its encoder runs over the same chunks as the cache's
    first pass, with a graph (the same dropout masks in the same order)."""
    ref = copy.deepcopy(module)
    ref.cache_chunk = None
    if chunked:
        forward = ref.encoder.forward

        def in_chunks(ids, mask, *args, **kwargs):
            return torch.cat([forward(ids[s : s + CHUNK], mask[s : s + CHUNK]) for s in range(0, len(ids), CHUNK)])

        ref.encoder.forward = in_chunks
    return ref


def _step(module: UnisentModule, batch) -> tuple[float, dict[str, torch.Tensor], torch.Tensor]:
    """One training step from the same random state: the loss, every parameter's gradient, the random state
    after it."""
    torch.manual_seed(1)
    module.zero_grad(set_to_none=True)
    module.train()
    loss = module.training_step(batch, 0)
    loss.backward()
    grads = {n: p.grad.detach().clone() for n, p in module.named_parameters() if p.grad is not None}
    return float(loss.detach()), grads, torch.get_rng_state()


def _assert_same(cached, uncached, tol: float = 1e-5) -> None:
    (loss_c, grads_c, rng_c), (loss_u, grads_u, rng_u) = cached, uncached
    assert abs(loss_c - loss_u) <= tol, (loss_c, loss_u)
    assert set(grads_c) == set(grads_u)
    assert any(n.startswith("encoder.") for n in grads_c)
    scale = max(float(g.abs().max()) for g in grads_u.values())
    assert scale > 1e-3  # gradients that could differ
    for name, g in grads_u.items():
        diff = float((grads_c[name] - g).abs().max())
        assert diff <= tol * max(1.0, float(g.abs().max())), f"{name}: max abs difference {diff}"
    assert torch.equal(rng_c, rng_u)  # the replay drew nothing from the run's random stream


@pytest.mark.parametrize("name", ["simcse", "simcse_sup", "ease", "gausscse", "bitext", "amr", "matryoshka"])
def test_each_in_batch_objective_cached_equals_uncached_with_dropout(tiny_bert_dir, tmp_path, name):
    module, batch = _setup(tiny_bert_dir, tmp_path, [name])
    calls = []
    module.encoder.register_forward_hook(lambda m, args, out: calls.append((len(args[0]), torch.is_grad_enabled())))
    cached = _step(module, batch)
    assert calls and max(rows for rows, _ in calls) <= CHUNK  # one chunk's graph at a time
    assert sum(rows for rows, grad in calls if not grad) == sum(rows for rows, grad in calls if grad)  # replayed once
    _assert_same(cached, _step(_uncached(module, chunked=True), batch))


def test_the_replay_must_reuse_the_first_pass_dropout_masks(tiny_bert_dir, tmp_path, monkeypatch):
    """The reference of these tests can fail: a replay under a fresh random state gives other gradients."""
    from unisent.objectives import grad_cache

    module, batch = _setup(tiny_bert_dir, tmp_path, ["simcse"])
    reference = _step(_uncached(module, chunked=True), batch)
    monkeypatch.setattr(grad_cache.RandomState, "restore", lambda self: None)
    with pytest.raises(AssertionError):
        _assert_same(_step(module, batch), reference)


@pytest.mark.parametrize("names", [["simcse_sup", "ease", "gausscse", "bitext", "amr"], ["simcse", "cmlm"]])
def test_without_dropout_cached_equals_the_plain_whole_batch_step(tiny_bert_dir, tmp_path, names):
    """Every cached objective together (and CMLM, uncached, beside SimCSE) against one encoder pass per objective
    over its whole batch."""
    module, batch = _setup(tiny_bert_dir, tmp_path, names, dropout=False)
    _assert_same(_step(module, batch), _step(_uncached(module, chunked=False), batch))


BALANCERS = {
    "PCGrad": lambda: PCGrad(),
    "UPGrad": lambda: JacobianAggregator("UPGrad"),
    "Uncertainty": lambda: Uncertainty(lr=0.1, init=0.3),  # loss-level: one row per objective, weights != 1
}


@pytest.mark.parametrize("balancer", list(BALANCERS))
def test_two_objectives_under_a_balancer(tiny_bert_dir, tmp_path, balancer):
    """The balancer's rows are each objective's encoder gradient from its cached chunks: the aggregate (or the
    weighted sum) equals the uncached one, the balancer's own parameters' gradient too."""
    module, batch = _setup(tiny_bert_dir, tmp_path, ["simcse", "gausscse"], balancer=BALANCERS[balancer]())
    _assert_same(_step(module, batch), _step(_uncached(module, chunked=True), batch))


def _gloo_step(rank: int, world: int, model_dir: str, directory: str, names: list[str]) -> dict:
    """One cached step on this process's half of the batch, the gradients averaged over processes (DDP's
    reduction)."""
    import torch.distributed as dist

    torch.set_num_threads(1)
    module, batch = _setup(model_dir, Path(directory) / f"rank{rank}", names, dropout=False, batch_size=2 * BATCH)
    half = slice(rank * BATCH, (rank + 1) * BATCH)
    local = {n: _rows(b, half) for n, b in batch.items()}
    loss, grads, _ = _step(module, local)
    for g in grads.values():
        dist.all_reduce(g)
        g /= world
    losses = [torch.zeros(()) for _ in range(world)]
    dist.all_gather(losses, torch.tensor(loss))
    return {"loss": float(torch.stack(losses).mean()), "grads": {n: g.numpy() for n, g in grads.items()}}


def _rows(value, piece: slice):
    if torch.is_tensor(value):
        return value[piece]
    if isinstance(value, dict):
        return {k: _rows(v, piece) for k, v in value.items()}
    return value


@pytest.mark.integration
@pytest.mark.distributed
def test_two_gloo_processes_equal_one_process_on_the_doubled_batch(tiny_bert_dir, tmp_path):
    """Candidates are gathered across processes from the cached vectors: 2 processes x 8 rows, cached in chunks
    of 3, give the loss and gradients of one uncached process on the 16 rows."""
    names = ["simcse_sup", "ease"]
    out = run_distributed(_gloo_step, str(tiny_bert_dir), str(tmp_path), names, timeout=300)
    module, batch = _setup(tiny_bert_dir, tmp_path / "one", names, dropout=False, batch_size=2 * BATCH)
    loss, grads, _ = _step(_uncached(module, chunked=False), batch)
    gathered = {n: torch.from_numpy(g) for n, g in out["grads"].items()}
    _assert_same((out["loss"], gathered, torch.zeros(1)), (loss, grads, torch.zeros(1)))


def test_wrong_settings_are_one_line_errors(tiny_bert_dir):
    config = EncoderConfig(model=str(tiny_bert_dir), max_length=24)
    with pytest.raises(ModelConfigError, match="cache_chunk must be a number of rows >= 1"):
        TrainConfig(cache_chunk=0)
    with pytest.raises(ModelConfigError, match="none of the objectives \\(cmlm\\) can be cached"):
        UnisentModule(encoder=config, objectives=[_objective("cmlm")], train=TrainConfig(cache_chunk=8))
    # FSDP takes the gradients in one backward call of its own: refused when fit starts, in one user error
    from types import SimpleNamespace

    from lightning.pytorch.strategies import DDPStrategy, FSDPStrategy

    module = UnisentModule(encoder=config, objectives=[_objective("simcse")], train=TrainConfig(cache_chunk=8))
    module._trainer = SimpleNamespace(strategy=FSDPStrategy(), log_dir=None)
    with pytest.raises(ModelConfigError, match="FSDPStrategy takes them in one backward call"):
        module.on_fit_start()
    module._trainer = SimpleNamespace(strategy=DDPStrategy(), log_dir=None)
    module.on_fit_start()  # DDP takes them in the step

    class MyFSDPWrapper:  # a class name is not what decides
        pass

    module._trainer = SimpleNamespace(strategy=MyFSDPWrapper(), log_dir=None)
    module.on_fit_start()


def test_under_bf16_autocast_cached_equals_uncached(tiny_bert_dir, tmp_path):
    """The replay runs under the step's autocast: the same bf16 vectors, the same gradients (to bf16's precision)."""
    module, batch = _setup(tiny_bert_dir, tmp_path, ["simcse_sup", "gausscse"])
    reference = _uncached(module, chunked=True)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        cached, uncached = _step(module, batch), _step(reference, batch)
    _assert_same(cached, uncached, tol=2e-2)


def _lightning_fit(model_dir, root: Path, cached: bool, names: list[str]) -> UnisentModule:
    """Two optimiser steps of Lightning's loop, two accumulated micro-batches each."""
    import lightning as L

    L.seed_everything(3)
    module = UnisentModule(
        encoder=EncoderConfig(model=str(model_dir), max_length=24, pooler="mean"),
        objectives=[_objective(n) for n in names],
        # SGD: an update linear in the gradient (Adam's g / sqrt(v) turns the float noise of a near-zero gradient
        # into a step of +-lr)
        optimizer=lambda params: torch.optim.SGD(params, lr=0.5),
        train=TrainConfig(schedule=ScheduleConfig(decay="constant"), cache_chunk=CHUNK, save_encoder=False),
    )
    if not cached:
        module = _uncached(module, chunked=True)
    train = {n: DataSource(str(SAMPLES / OBJECTIVES[n][2]), max_records=32) for n in names}
    data = UnisentDataModule(train=train, batch_size=BATCH, cache_dir=str(root / "cache"), seed=7)
    trainer = L.Trainer(
        default_root_dir=root,
        max_steps=2,
        accumulate_grad_batches=2,
        accelerator="cpu",
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    trainer.fit(module, datamodule=data)
    return module


def test_lightnings_loop_with_gradient_accumulation(tiny_bert_dir, tmp_path):
    """``unisent fit``'s path: two optimiser steps of two accumulated micro-batches give the weights of the
    uncached run (the dropout masks drawn in the same chunks)."""
    names = ["simcse", "bitext"]
    cached = _lightning_fit(tiny_bert_dir, tmp_path / "cached", True, names)
    reference = _lightning_fit(tiny_bert_dir, tmp_path / "reference", False, names)
    moved = 0.0
    start = UnisentModule(encoder=EncoderConfig(model=str(tiny_bert_dir), max_length=24, pooler="mean")).encoder
    for (name, a), b in zip(cached.encoder.state_dict().items(), reference.encoder.state_dict().values()):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-4, msg=name)
        if a.is_floating_point():
            moved = max(moved, float((a - start.state_dict()[name]).abs().max()))
    assert moved > 1e-4  # the weights did move


def test_the_one_gpu_cached_preset_through_unisent_fit(tiny_recipe, unisent_cli, tmp_path, capsys):
    """The paper recipe with ``recipes/trainers/1gpu-cached.yaml`` trains through the CLI (on the CPU here), the
    checkpoint records the setting; a chunk of 0 is one line."""
    from unisent.cli import main
    from unisent.io import load_checkpoint

    recipe = tiny_recipe(ROOT / "recipes/simcse/sup-bert-base.yaml", max_records=16)
    args = ["fit", "-c", str(recipe), "-c", str(ROOT / "recipes/trainers/1gpu-cached.yaml")]
    args += ["--trainer.accelerator=cpu", "--trainer.precision=32-true", "--trainer.max_steps=2", "--data.batch_size=8"]
    args += ["--trainer.val_check_interval=null", "--model.evaluation.val_tasks=[]", "--model.train.save_encoder=false"]
    args += [f"--trainer.logger.init_args.save_dir={tmp_path}", "--trainer.enable_progress_bar=false"]
    unisent_cli(*args, "--model.train.cache_chunk=3")
    (ckpt,) = tmp_path.rglob("last.ckpt")
    saved = load_checkpoint(ckpt)
    assert saved["global_step"] == 2 and saved["hyper_parameters"]["train"]["cache_chunk"] == 3
    with pytest.raises(SystemExit) as done:
        main([*args, "--model.train.cache_chunk=0"])
    assert done.value.code not in (0, None)
    assert "model.train.cache_chunk must be a number of rows >= 1" in capsys.readouterr().err


def test_the_documented_in_batch_objective_trains_cached_and_under_matryoshka(tiny_bert_dir, tmp_path):
    """docs/new-objective.md's ``PairContrast`` (``embed`` and ``loss``, nothing set) trains cached, equal to
    uncached, also wrapped in Matryoshka."""
    import re

    from unisent.objectives import Matryoshka

    text = (ROOT / "docs" / "new-objective.md").read_text(encoding="utf-8")
    block = next(b for b in re.findall(r"```python\n(.*?)```", text, flags=re.S) if "class PairContrast" in b)
    namespace: dict = {}
    exec(compile(block, "docs/new-objective.md", "exec"), namespace)
    assert "cache_ready" not in block and "matryoshka_ready" not in block
    for wrap in (lambda o: o, lambda o: Matryoshka(o, dims=[32, 8])):
        torch.manual_seed(0)
        module = UnisentModule(
            encoder=EncoderConfig(model=str(tiny_bert_dir), max_length=24, pooler="mean"),
            objectives=[wrap(namespace["PairContrast"](name="pairs"))],
            train=TrainConfig(cache_chunk=CHUNK, save_encoder=False),
        )
        source = DataSource(str(SAMPLES / "nli_triples.jsonl"), columns={"anchor": "left", "positive": "right"})
        data = UnisentDataModule(train={"pairs": source}, batch_size=BATCH, cache_dir=str(tmp_path / "cache"))
        data.attach(module).setup("fit")
        batch = {"pairs": next(iter(data._loader("pairs")))}
        calls = []
        module.encoder.register_forward_hook(lambda m, args, out, calls=calls: calls.append(len(args[0])))
        cached = _step(module, batch)
        assert calls and max(calls) <= CHUNK  # it ran cached
        _assert_same(cached, _step(_uncached(module, chunked=True), batch))


@pytest.mark.parametrize("names,balancer", [(["gausscse"], None), (["gausscse", "ease"], "UPGrad")])
def test_a_frozen_encoder_trains_the_heads_without_a_replay(tiny_bert_dir, tmp_path, names, balancer):
    """``FreezeEncoder`` (GaussCSE's quickstart) with a cache: the heads' gradients are the uncached ones and the
    encoder runs once per chunk, without a graph; with nothing shared, a balancer has nothing to combine (each
    head gets its own loss's gradient)."""
    module, batch = _setup(tiny_bert_dir, tmp_path, names, balancer=balancer and BALANCERS[balancer]())
    for p in module.encoder.parameters():
        p.requires_grad_(False)
    calls = []
    module.encoder.register_forward_hook(lambda m, args, out: calls.append(torch.is_grad_enabled()))
    cached = _step(module, batch)
    assert calls and not any(calls)  # no replay
    assert not any(n.startswith("encoder.") for n in cached[1]) and cached[1]
    reference = _step(_uncached(module, chunked=True), batch)
    assert set(cached[1]) == set(reference[1])
    for name, g in reference[1].items():
        torch.testing.assert_close(cached[1][name], g, atol=1e-5, rtol=1e-5)
