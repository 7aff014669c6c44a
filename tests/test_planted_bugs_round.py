"""Seven behaviours that passed the test suite with a bug planted in them (issue 65). Each test below fails
with its mutant and passes without it: each mutant was planted alone in a copy of the tree and this module run
against that copy (``PYTHONPATH=<copy>``), then the copy restored and the module run again (all pass).

1. mutant: merging/runs.py ``merge_runs`` without its ``_check_tokenizers(inputs, union)`` call.
   test_merge_refuses_runs_whose_tokenizers_give_a_shared_token_other_ids: with it, failed (DID NOT RAISE
   MergeError: a model was written); without, passes (2 s).
2. mutant: merging/runs.py ``_aligned``'s guard ``tensor.shape[0] < base.shape[0]`` weakened to ``!=``.
   test_merge_refuses_a_tensor_with_extra_rows_in_one_line: with it, failed (torch's RuntimeError "stack expects
   each tensor to be equal size"); without, passes (0.5 s).
3. mutant a: io/registry.py ``_with_package_aliases`` storing ``table[alias] = value`` for ``setdefault``;
   mutant b: ``subclasses`` starting from an empty table (``{}``), so that an alias can take an exact name first.
   test_an_exact_qualified_name_wins_over_a_package_alias: with a, both ids failed; with b, the
   aliased-class-found-first id failed (the other order passes: why both orders run); without, passes (<0.1 s).
4. mutant: resume.py ``_save_if_interrupted`` without its ``_should_accumulate()`` early return.
   test_a_stop_signal_in_the_middle_of_gradient_accumulation_saves_at_the_step: with it, failed (saved and
   stopped at step 1, after 3 micro-batches); without, passes (1 s).
5. mutant: resume.py ``on_validation_end`` without its ``self._save_if_interrupted(trainer)``.
   test_a_stop_signal_during_validation_is_saved_right_after_that_validation: with it, failed (one more step
   trained, saved at step 4); without, passes (2-3 s).
6. mutant: strategies.py ``join_elastic_group`` with ``PrefixStore("unisent/start", agent)`` for
   ``PrefixStore(f"unisent/start_{restart}", agent)``.
   test_join_elastic_group_keys_carry_the_restart_number: with it, failed (the restart sees the first start's
   key); without, passes (<0.1 s).
7. mutant: lightning_module.py ``UnisentModule._run_objective``'s cached branch adding ``objective.total(out.terms)``
   for ``weight * objective.total(out.terms)``.
   test_a_static_weight_is_kept_on_the_cached_path: with it, failed (cached loss 1.426, uncached 0.713); without,
   passes (1 s).

All run in this process on the tiny BERT (about 20 s for the module on a shared 2-core CPU): the stop signals are
sent by the process to itself through the ``UNISENT_FAULT`` hook (:func:`unisent.testing.fault_point`), and the
elastic group's agent store is a ``HashStore`` (no process group is made).
"""

from __future__ import annotations

import copy
import signal
from pathlib import Path

import lightning as L
import pytest
import torch

from unisent.data import DataSource, UnisentDataModule
from unisent.encoders import EncoderConfig
from unisent.lightning_module import UnisentModule
from unisent.objectives import SimCSE
from unisent.optim import AdamW
from unisent.training_config import EvaluationConfig, TrainConfig

pytestmark = [pytest.mark.usefixtures("one_thread"), pytest.mark.filterwarnings("ignore:.*self.log.*")]

SAMPLES = Path(__file__).resolve().parents[1] / "samples"


# ------------------------------------------------------------------------------------------ (1), (2) merge
def _run_checkpoint(model_dir: Path, path: Path, objectives: list) -> Path:
    """A checkpoint as ``unisent fit`` leaves it for ``unisent merge``: the ``unisent`` record and the weights."""
    module = UnisentModule(
        encoder=EncoderConfig(model=str(model_dir)), objectives=objectives, evaluation=EvaluationConfig(val_tasks=[])
    )
    torch.save({"unisent": module.run_config(), "state_dict": module.state_dict(), "global_step": 1}, path)
    return path


# Catches mutant 1: merge_runs without its tokenizer check. Two AMR runs each added their own symbols: run A
# ":ARG0" and ":ARG1", run B ":ARG1" only, so B's ":ARG1" is A's ":ARG0" row. Without the check the merge goes
# through (B's row is aligned, silently, to another token) and writes a model.
def test_merge_refuses_runs_whose_tokenizers_give_a_shared_token_other_ids(tiny_bert_dir, tmp_path):
    from unisent.merging import MergeError, merge_runs
    from unisent.objectives import AMRSimCSE

    a = _run_checkpoint(tiny_bert_dir, tmp_path / "a.ckpt", [AMRSimCSE(symbols=[":ARG0", ":ARG1"], name="amr_a")])
    b = _run_checkpoint(tiny_bert_dir, tmp_path / "b.ckpt", [AMRSimCSE(symbols=[":ARG1"], name="amr_b")])
    base = len(UnisentModule(encoder=EncoderConfig(model=str(tiny_bert_dir))).encoder.tokenizer)
    out = tmp_path / "merged"
    with pytest.raises(MergeError) as err:
        merge_runs([a, b], out, method="linear")
    message = str(err.value)
    assert "\n" not in message
    assert message == (
        f"{b}: its tokenizer gives ':ARG1' the id {base}, the merged model's {base + 1}: merging needs runs whose "
        "tokenizers agree on every token they share"
    )
    assert not out.exists()  # refused before anything was written


# Catches mutant 2: _aligned's guard weakened so that a tensor with more rows than the merged model's passes
# (``!=`` for ``<``, or the row test dropped): it then fails deep in torch ("stack expects each tensor to be equal
# size") instead of the one-line MergeError. Run B's embedding gets two extra rows after it was read (a backbone
# resized behind its record's back: no other path gets such a run past read_inputs' strict load).
def test_merge_refuses_a_tensor_with_extra_rows_in_one_line(tiny_bert_dir, tmp_path, monkeypatch):
    from unisent.merging import MergeError, merge_runs
    from unisent.merging import runs as merging

    a = _run_checkpoint(tiny_bert_dir, tmp_path / "a.ckpt", [SimCSE(name="a")])
    b = _run_checkpoint(tiny_bert_dir, tmp_path / "b.ckpt", [SimCSE(name="b")])
    read = merging.read_inputs
    rows: list[int] = []

    def with_extra_rows(sources):
        inputs = read(sources)
        backbone = inputs[1].module.encoder.backbone
        rows.append(backbone.get_input_embeddings().weight.shape[0])
        backbone.resize_token_embeddings(rows[0] + 2)
        return inputs

    monkeypatch.setattr(merging, "read_inputs", with_extra_rows)
    out = tmp_path / "merged"
    with pytest.raises(MergeError) as err:
        merge_runs([a, b], out, method="ties")
    message = str(err.value)
    assert "\n" not in message
    assert message.startswith(f"{b}: tensor encoder.") and "word_embeddings.weight has shape" in message
    assert message.endswith(
        f"({rows[0] + 2}, 32), the merged model's ({rows[0]}, 32): merging needs runs of the same architecture"
    )
    assert not out.exists()
    # the rule itself: fewer rows are another run's added tokens (taken from the start), more rows or another
    # width are refused
    base = torch.arange(12.0).view(4, 3)
    assert torch.equal(
        merging._aligned(torch.zeros(3, 3), base, "k", Path("r")), torch.cat([torch.zeros(3, 3), base[3:]])
    )
    for shape in ((5, 3), (4, 2), (3, 2), (12,)):
        with pytest.raises(MergeError, match=rf"^r: tensor k has shape \({shape[0]},"):
            merging._aligned(torch.zeros(shape), base, "k", Path("r"))


# ------------------------------------------------------------------------------------------ (3) registry
# Catches mutant 3: a package alias overwriting an exact qualified name (``table[alias] = cls`` for
# ``table.setdefault``, or the table built without its exact names first, so that whichever class is found
# first wins). ``plug.objectives.Contrastive`` has the alias ``plug.Contrastive``, which is also the exact name
# of another class: the exact name must win, in both orders the classes can be discovered in.
@pytest.mark.parametrize("alias_first", [False, True], ids=["exact-class-found-first", "aliased-class-found-first"])
def test_an_exact_qualified_name_wins_over_a_package_alias(alias_first):
    from unisent.io.registry import RegistryError, resolve, subclasses

    class Base:
        pass

    def make(module: str) -> type:
        return type("Contrastive", (Base,), {"__module__": module, "__qualname__": "Contrastive"})

    # subclasses() walks __subclasses__ (creation order) from a stack: the class created last is found first
    if alias_first:
        top, deep = make("plug"), make("plug.objectives")
    else:
        deep, top = make("plug.objectives"), make("plug")
    table = subclasses(Base)
    assert table["plug.Contrastive"] is top  # its own name, not deep's alias
    assert table["plug.objectives.Contrastive"] is deep
    assert resolve("plug.Contrastive", table, source="f", field="class_path", what="objective") is top
    # an alias nobody owns still resolves (unisent.objectives.SimCSE for unisent.objectives.simcse.SimCSE)
    other = type("Only", (Base,), {"__module__": "plug.deep.er", "__qualname__": "Only"})
    table = subclasses(Base)
    assert table["plug.Only"] is other and table["plug.deep.Only"] is other and table["plug.Contrastive"] is top
    with pytest.raises(RegistryError):
        resolve("plug.objectives.Only", table, source="f", field="class_path", what="objective")


# ------------------------------------------------------------------------------------------ (4), (5) signals
@pytest.fixture
def signal_handlers(monkeypatch):
    """The process's signal handlers and UNISENT_FAULT's counts restored after the test (Lightning's shutdown
    after a KeyboardInterrupt sets SIGINT to SIG_IGN)."""
    from unisent import testing

    monkeypatch.setattr(testing, "_fault_counts", {})
    names = [n for n in ("SIGINT", "SIGTERM", "SIGUSR1") if hasattr(signal, n)]
    before = {n: signal.getsignal(getattr(signal, n)) for n in names}
    yield
    for n, handler in before.items():
        signal.signal(getattr(signal, n), handler)


def _fit_until_stopped(model_dir, root: Path, *, val_tasks=(), max_steps=6, **trainer_args):
    """``unisent fit``'s checkpointing (UnisentCheckpoint, save_last, no resume points of its own) over 48 sentences
    in batches of 8; a stop signal (UNISENT_FAULT) ends it as Lightning ends a run on Ctrl-C (sys.exit(1)).
    Returns the checkpoint callback and the trainer."""
    from unisent.evaluation import EvaluationCallback
    from unisent.resume import UnisentCheckpoint

    L.seed_everything(5)
    module = UnisentModule(
        encoder=EncoderConfig(model=str(model_dir), max_length=24, pooler="mean"),
        objectives=[SimCSE(name="unsup")],
        optimizer=lambda params: AdamW(params, lr=1e-3),
        evaluation=EvaluationConfig(val_tasks=list(val_tasks), batch_size=256),
        train=TrainConfig(save_encoder=False),
    )
    data = UnisentDataModule(
        train={"unsup": DataSource(str(SAMPLES / "sentences.txt"), max_records=48)}, batch_size=8, seed=11
    )
    # save_on_train_epoch_end: Lightning's own end-of-validation save of last.ckpt is off, so that only the
    # interrupt's save writes it
    checkpoint = UnisentCheckpoint(dirpath=root / "ckpt", save_last=True, monitor=None, save_on_train_epoch_end=True)
    trainer = L.Trainer(
        default_root_dir=root,
        max_steps=max_steps,
        max_epochs=100,
        accelerator="cpu",
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        num_sanity_val_steps=0,
        callbacks=[checkpoint, *([EvaluationCallback()] if val_tasks else [])],
        **trainer_args,
    )
    with pytest.raises(SystemExit):  # Lightning's shutdown after the callback's KeyboardInterrupt
        trainer.fit(module, datamodule=data)
    return checkpoint, trainer


def _saved(checkpoint) -> tuple[int, int]:
    """The optimiser step and the number of training batches done that ``last.ckpt`` records."""
    saved = torch.load(Path(checkpoint.dirpath) / "last.ckpt", map_location="cpu", weights_only=False)
    batches = saved["loops"]["fit_loop"]["epoch_loop.batch_progress"]["total"]["processed"]
    return saved["global_step"], batches


# Catches mutant 4: _save_if_interrupted without its "in the middle of an accumulated step" return: SIGTERM in
# the third micro-batch (the first of optimiser step 2, two micro-batches a step) saved last.ckpt at step 1 after 3
# batches, the third batch's gradients in no checkpoint. The save must wait for the optimiser step: step 2, 4 batches.
def test_a_stop_signal_in_the_middle_of_gradient_accumulation_saves_at_the_step(
    tiny_bert_dir, tmp_path, monkeypatch, signal_handlers
):
    monkeypatch.setenv("UNISENT_FAULT", "train_step@3=SIGTERM")
    checkpoint, trainer = _fit_until_stopped(tiny_bert_dir, tmp_path, accumulate_grad_batches=2)
    stopped = checkpoint.interrupt
    assert stopped is not None and stopped.signal == "SIGTERM" and not stopped.now
    assert stopped.step == trainer.global_step == 2
    assert stopped.checkpoint == str(tmp_path / "ckpt" / "last.ckpt")
    assert _saved(checkpoint) == (2, 4)  # an optimiser-step boundary: 2 steps of 2 micro-batches


# Catches mutant 5: on_validation_end without its _save_if_interrupted: SIGTERM while the validation after step 3
# evaluates (UNISENT_FAULT's "evaluation" point, in EvaluationCallback) went unnoticed until another training step
# had run, and was saved at step 4. It must be saved right after that validation, at step 3, and the run stop there.
def test_a_stop_signal_during_validation_is_saved_right_after_that_validation(
    tiny_bert_dir, tmp_path, monkeypatch, signal_handlers
):
    monkeypatch.setenv("UNISENT_FAULT", "evaluation@1=SIGTERM")
    checkpoint, trainer = _fit_until_stopped(tiny_bert_dir, tmp_path, val_tasks=["stsb-dev"], val_check_interval=3)
    stopped = checkpoint.interrupt
    assert stopped is not None and stopped.signal == "SIGTERM"
    assert stopped.step == trainer.global_step == 3
    assert stopped.checkpoint == str(tmp_path / "ckpt" / "last.ckpt")
    assert _saved(checkpoint) == (3, 3)


# ------------------------------------------------------------------------------------------ (6) torchrun restarts
# Catches mutant 6: join_elastic_group's store keys without the restart number (``PrefixStore("unisent/start",
# agent)``, or the agent's store itself): a restarted worker then reads what a worker of the previous start wrote
# (the dead peer's address). torchrun's agent store is a HashStore here, shared by every start, and
# init_process_group only records the store it gets: no process group is made.
def test_join_elastic_group_keys_carry_the_restart_number(monkeypatch):
    import torch.distributed as dist
    from lightning.pytorch.strategies import DDPStrategy

    from unisent.strategies import join_elastic_group

    agent = dist.HashStore()  # the torchrun agent's store, one for the whole job
    joined: list[dict] = []
    monkeypatch.setattr(dist, "TCPStore", lambda host, port, **kw: agent)
    monkeypatch.setattr(dist, "init_process_group", lambda backend, **kw: joined.append({"backend": backend, **kw}))
    monkeypatch.setattr(dist, "is_initialized", lambda: False)
    env = {"TORCHELASTIC_USE_AGENT_STORE": "True", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29500"}
    for key, value in env.items():
        monkeypatch.setenv(key, value)

    def join(restart: int, rank: int):
        monkeypatch.setenv("TORCHELASTIC_RESTART_COUNT", str(restart))
        monkeypatch.setenv("RANK", str(rank))
        monkeypatch.setenv("WORLD_SIZE", "2")
        assert join_elastic_group(DDPStrategy(parallel_devices=[torch.device("cpu")]))
        call = joined[-1]
        assert (call["backend"], call["rank"], call["world_size"]) == ("gloo", rank, 2)
        return call["store"]

    first, first_peer = join(0, 0), join(0, 1)
    first.set("rank_1_address", b"dead peer")  # what gloo publishes, in the first start
    assert first_peer.get("rank_1_address") == b"dead peer"  # the workers of one start share their keys
    again, again_peer = join(1, 0), join(1, 1)
    assert not again.check(["rank_1_address"])  # the restart does not see the first start's keys
    again_peer.set("rank_1_address", b"live peer")
    assert again.get("rank_1_address") == b"live peer" and first.get("rank_1_address") == b"dead peer"
    # the keys on the agent's store name the start
    assert agent.get("unisent/start_0/rank_1_address") == b"dead peer"
    assert agent.get("unisent/start_1/rank_1_address") == b"live peer"
    # outside torchrun (no restart count): nothing is joined
    monkeypatch.delenv("TORCHELASTIC_RESTART_COUNT")
    assert not join_elastic_group(DDPStrategy(parallel_devices=[torch.device("cpu")]))
    assert len(joined) == 4


# ------------------------------------------------------------------------------------------ (7) GradCache
# Catches mutant 7: the cached path (model.cache_chunk) dropping the objective's static weight (``weight *`` left out
# of UnisentModule._run_objective's cached branch): with weight 0.5 its loss and gradients were twice the uncached
# step's.
def test_a_static_weight_is_kept_on_the_cached_path(tiny_bert_dir, tmp_path):
    torch.manual_seed(0)
    module = UnisentModule(
        encoder=EncoderConfig(model=str(tiny_bert_dir), max_length=24, pooler="mean"),
        objectives=[SimCSE(name="simcse", weight=0.5), SimCSE(supervised=True, name="sup")],
        train=TrainConfig(cache_chunk=3, save_encoder=False),
        evaluation=EvaluationConfig(val_tasks=[]),
    )
    for layer in module.modules():  # no dropout: the cached step equals one plain pass over the whole batch
        if isinstance(layer, torch.nn.Dropout):
            layer.p = 0.0
    train = {
        "simcse": DataSource(str(SAMPLES / "sentences.txt"), max_records=16),
        "sup": DataSource(str(SAMPLES / "nli_triples.jsonl"), max_records=16),
    }
    data = UnisentDataModule(train=train, batch_size=8, cache_dir=str(tmp_path / "cache")).attach(module)
    data.setup("fit")
    batch = {name: next(iter(data._loader(name))) for name in train}

    def step(model: UnisentModule, only: str | None = None) -> tuple[float, dict[str, torch.Tensor]]:
        model.zero_grad(set_to_none=True)
        model.train()
        loss = model.training_step({k: v for k, v in batch.items() if only in (None, k)}, 0)
        loss.backward()
        return float(loss.detach()), {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}

    uncached = copy.deepcopy(module)
    uncached.cache_chunk = None
    unweighted = copy.deepcopy(uncached)
    unweighted.objectives[0].weight = 1.0
    for only in ("simcse", None):  # the weighted objective alone, and beside one of weight 1
        (loss_c, grads_c), (loss_u, grads_u) = step(module, only), step(uncached, only)
        assert loss_c == pytest.approx(loss_u, abs=1e-5)
        assert set(grads_c) == set(grads_u) and any(n.startswith("encoder.") for n in grads_u)
        for name, g in grads_u.items():
            torch.testing.assert_close(grads_c[name], g, atol=1e-6, rtol=1e-4, msg=name)
    # and the weight is applied at all: half the weight-1 objective's loss and gradients
    (loss_half, grads_half), (loss_one, grads_one) = step(uncached, "simcse"), step(unweighted, "simcse")
    assert loss_half == pytest.approx(0.5 * loss_one, rel=1e-5)
    for name, g in grads_one.items():
        torch.testing.assert_close(grads_half[name], 0.5 * g, atol=1e-7, rtol=1e-4, msg=name)
