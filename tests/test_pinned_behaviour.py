"""Value tests that pin behaviour before the architecture refactor moves code (issue 38, point 6): each
fails on one plausible bug that the rest of the default suite let through when it was planted in round
3's code. Each is checked against a hand computation or against the reference implementation, not
against unisent's own output:

- two gradient-level optimiser steps of a real ``Trainer`` against each step computed alone
  (``balancers/step_gradients.py``: the per-objective gradient matrix reset after each optimiser step);
- a mean exactly on its target and an own column exactly on its interval's edge
  (``commands/ablate/summarise.py``: ``>=``, not ``>``);
- one source tokenised at two lengths into one cache (``data/token_cache.py``: ``max_length`` in the
  cache key);
- a cased tokenizer under a Sentence Transformers ``do_lower_case: true`` against
  ``sentence_transformers`` (``encoders/st_files.py``, formerly ``encoders/sentence_transformers.py``)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import lightning as L
import pytest
import torch

import unisent
from unisent.balancers import JacobianAggregator, PCGrad
from unisent.commands.ablate.summarise import own_columns, table, target_verdicts
from unisent.data import UnisentDataModule
from unisent.data.tokenizing import RowTokenizer
from unisent.encoders import Encoder, EncoderConfig
from unisent.lightning_module import UnisentModule
from unisent.objectives import Objective, SimCSE
from unisent.training_config import ScheduleConfig, TrainConfig

pytestmark = [pytest.mark.usefixtures("one_thread"), pytest.mark.filterwarnings("ignore:.*self.log.*")]

#: the repository's training, benchmark and test samples (not in the wheel)
SAMPLE_DIR = Path(__file__).resolve().parents[1] / "samples"
HIDDEN = 32


def sample_sentences() -> list[str]:
    return (SAMPLE_DIR / "sentences.txt").read_text(encoding="utf-8").splitlines()


# ------------------------------------------------------------------ 1. two gradient-level optimiser steps
class Toy(Objective):
    """Loss ``h * <u, w>`` on the encoder's first LayerNorm weight ``w`` (shared) with a scalar head ``h``
    of its own; ``u`` comes with the batch, so each step's gradient on ``w`` is ``h * u`` by hand."""

    def setup_for(self, encoder) -> None:
        if not hasattr(self, "head"):
            self.head = torch.nn.Parameter(torch.tensor(1.0))

    def forward(self, encoder, batch):
        return {"loss": self.head * (batch["u"][0] @ _shared(encoder))}


def _shared(encoder) -> torch.nn.Parameter:
    return encoder.backbone.embeddings.LayerNorm.weight


def _pcgrad(g1: torch.Tensor, g2: torch.Tensor) -> torch.Tensor:
    """Algorithm 1 of Yu et al. 2020 for two tasks, by hand."""
    p1 = g1 - (g1 @ g2) / (g2 @ g2) * g2 if g1 @ g2 < 0 else g1
    p2 = g2 - (g2 @ g1) / (g1 @ g1) * g1 if g2 @ g1 < 0 else g2
    return p1 + p2


def _upgrad_planar(g1: torch.Tensor, g2: torch.Tensor) -> torch.Tensor:
    """UPGrad for two gradients, by hand: each projected onto the dual cone {x: <x, g1> >= 0, <x, g2> >= 0}
    (with two rows: a gradient that conflicts with the other loses its component along it), then the
    mean of the two projections."""

    def project(g: torch.Tensor, other: torch.Tensor) -> torch.Tensor:
        return g - (g @ other) / (other @ other) * other if g @ other < 0 else g

    return (project(g1, g2) + project(g2, g1)) / 2


#: per step: (u_a, u_b) in the first two coordinates of the shared vector; with the heads (1.5 and 0.5 at
#: the start, both still positive at step 2) each step's two gradients conflict
STEPS = [((1.0, 0.0), (-1.0, 1.0)), ((0.0, 1.0), (1.0, -2.0))]
LR = 0.1


@pytest.mark.parametrize(
    "balancer, by_hand, atol",
    [
        (PCGrad, _pcgrad, 1e-6),
        # torchjd solves UPGrad's projection as a quadratic programme regularised by 1e-4 (0.2499, not 0.25)
        (lambda: JacobianAggregator("UPGrad"), _upgrad_planar, 5e-4),
        (lambda: JacobianAggregator("Mean"), lambda g1, g2: (g1 + g2) / 2, 1e-6),
    ],
    ids=["PCGrad", "UPGrad", "Mean"],
)
def test_each_gradient_level_step_aggregates_only_its_own_gradients(tiny_bert_dir, tmp_path, balancer, by_hand, atol):
    """Pins the reset of the per-objective gradient matrix after each optimiser step (``balancers/step_gradients.py``,
    ``JacobianAccumulator.take``): without it, step 2 aggregates step 1's gradients plus its own. Two
    optimiser steps of a real ``Trainer`` (SGD, constant rate); at each step the gradient the optimiser
    sees on the shared parameter equals the balancer's rule applied by hand to that step's two gradients
    alone (each from plain autograd at the parameters of that step), and the update is ``-lr`` times it."""
    torch.manual_seed(0)
    objectives = [Toy(name="a"), Toy(name="b")]
    module = UnisentModule(
        encoder=EncoderConfig(model=str(tiny_bert_dir)),
        objectives=objectives,
        balancer=balancer(),
        optimizer=lambda params: torch.optim.SGD(params, lr=LR),
        train=TrainConfig(schedule=ScheduleConfig(decay="constant"), save_encoder=False),
    )
    with torch.no_grad():
        _shared(module.encoder).copy_(torch.linspace(-1, 1, HIDDEN))
        objectives[0].head.fill_(1.5)
        objectives[1].head.fill_(0.5)

    def vector(xy) -> torch.Tensor:
        u = torch.zeros(1, HIDDEN)
        u[0, :2] = torch.tensor(xy)
        return u

    batches = [{"a": {"u": vector(ua)}, "b": {"u": vector(ub)}} for ua, ub in STEPS]
    seen: list[dict[str, torch.Tensor]] = []

    class Watch(L.Callback):
        def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
            a, b = pl_module.objectives
            w = _shared(pl_module.encoder).detach().clone()
            seen.append({"w": w, "heads": torch.stack([a.head.detach(), b.head.detach()]).clone()})

        def on_before_optimizer_step(self, trainer, pl_module, optimizer):
            seen[-1]["grad"] = _shared(pl_module.encoder).grad.detach().clone()

    trainer = L.Trainer(
        default_root_dir=tmp_path,
        max_steps=len(STEPS),
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        accelerator="cpu",
        limit_val_batches=0,
        callbacks=[Watch()],
    )
    loader = torch.utils.data.DataLoader(batches, batch_size=None)  # each item is already one step's batch
    trainer.fit(module, train_dataloaders=loader)
    assert len(seen) == len(STEPS) and all("grad" in s for s in seen)

    for step, (state, batch) in enumerate(zip(seen, batches)):
        # each objective's gradient on the shared parameter, alone, by plain autograd at this step's parameters
        grads = []
        for head, name in zip(state["heads"], ("a", "b")):
            w = state["w"].clone().requires_grad_(True)
            (grad,) = torch.autograd.grad(head * (batch[name]["u"][0] @ w), [w])
            grads.append(grad)
        assert float(grads[0] @ grads[1]) < 0, "each step's two gradients conflict (so the rule is not a sum)"
        expected = by_hand(*grads)
        torch.testing.assert_close(
            state["grad"], expected, rtol=0, atol=atol, msg=lambda m, step=step: f"optimiser step {step + 1}: {m}"
        )
        after = seen[step + 1]["w"] if step + 1 < len(seen) else _shared(module.encoder).detach()
        torch.testing.assert_close(after, state["w"] - LR * state["grad"], rtol=0, atol=1e-6)
    assert not torch.equal(seen[1]["heads"], seen[0]["heads"]), "the heads learned: step 2's gradients are its own"


# ------------------------------------------------------------------ 2. ablate's verdicts on the edge
def _row(name, kind, **cells):
    cells = {c: {"mean": m, "ci": ci} for c, (m, ci) in cells.items()}
    return {"row": name, "kind": kind, "cells": cells, "seeds": [1, 2], "train_minutes": [1.0, 1.0]}


def test_a_mean_on_its_target_is_met_and_an_own_column_on_its_interval_edge_is_within():
    """Pins ``commands/ablate/summarise.py``'s comparisons: a target is met when mean >= target (a mean exactly on
    it is met, margin 0), and an own column is within when it lies below the single-objective mean by at
    most that row's half-width (exactly the half-width below: within; a single-seed row has no interval,
    so an equal mean is within). Values are exact in binary floating point."""
    rows = [
        # stsb exactly on its target; own_a exactly the half-width (1.5) below "only a"; own_b equal to the
        # single-seed "only b" (no interval: width 0)
        _row("unified (edge)", "unified", stsb=(82.0, 0.5), own_a=(60.5, 2.0), own_b=(21.75, 1.0)),
        # just past each edge: missed / below
        _row("unified (past)", "unified", stsb=(81.75, 0.5), own_a=(60.25, 2.0), own_b=(21.5, 1.0)),
        _row("only a", "single", own_a=(62.0, 1.5)),
        _row("only b", "single", own_b=(21.75, None)),
    ]
    own, units = {"a": "own_a", "b": "own_b"}, {"a": ("a",), "b": ("b",)}
    targets = {"stsb": 82.0, "own_a": 60.5}

    edge = {o["objective"]: o for o in own_columns(rows[0], rows, own, units)}
    assert (edge["a"]["diff"], edge["a"]["width"], edge["a"]["within"]) == (-1.5, 1.5, True)
    assert (edge["b"]["diff"], edge["b"]["width"], edge["b"]["within"]) == (0.0, 0.0, True)
    past = {o["objective"]: o for o in own_columns(rows[1], rows, own, units)}
    assert not past["a"]["within"] and not past["b"]["within"]

    verdicts = target_verdicts(rows, targets, own, units)
    on = verdicts["unified (edge)"]
    assert on["targets"]["stsb"] == {"mean": 82.0, "target": 82.0, "margin": 0.0, "met": True}
    assert on["targets"]["own_a"]["met"] and on["targets"]["own_a"]["margin"] == 0.0
    assert on["own_below"] == {} and on["all_met"]
    off = verdicts["unified (past)"]
    assert not off["targets"]["stsb"]["met"] and not off["targets"]["own_a"]["met"]
    assert off["own_below"] == {"a": 0.25, "b": 0.25} and not off["all_met"]

    text = table(rows, ["stsb", "own_a", "own_b"], own, units, targets)
    assert "| unified (edge) | 82.00, met by 0.00 | 60.50, met by 0.00 | all within | yes |" in text
    assert "| unified (past) | 81.75, **missed by 0.25** | 60.25, **missed by 0.25** |" in text


# ------------------------------------------------------------------ 3. one source at two lengths, one cache
def test_one_source_tokenised_at_two_lengths_into_one_cache_keeps_each_length(tiny_bert_dir, tmp_path):
    """Pins ``data/token_cache.py``'s tokenisation cache key including ``max_length``: the same file
    tokenised through the DataModule (``prepare_data`` then ``setup``, as the trainer calls them) into
    one cache directory at the encoder's ``max_length`` 32, then 8, then at an objective's own
    ``max_length`` 12, gives each length's ids (the tokenizer's truncation, by hand), not the ids cached
    for the earlier, longer length."""
    path = tmp_path / "s.txt"
    lines = sample_sentences()[:40]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    cache = tmp_path / "cache"
    tokenizer = Encoder(EncoderConfig(model=str(tiny_bert_dir))).tokenizer

    def tokenised(encoder_length: int, objective_length: int | None = None):
        module = UnisentModule(
            encoder=EncoderConfig(model=str(tiny_bert_dir), max_length=encoder_length),
            objectives=[SimCSE(name="simcse", max_length=objective_length)],
            train=TrainConfig(save_encoder=False),
        )
        data = UnisentDataModule(train={"simcse": str(path)}, batch_size=8, cache_dir=str(cache)).attach(module)
        data.prepare_data()
        data.setup("fit")
        return data, data.datasets["simcse"]

    for encoder_length, objective_length, length in ((32, None, 32), (8, None, 8), (32, 12, 12)):
        data, dataset = tokenised(encoder_length, objective_length)
        ids = dataset["text"]
        expected = RowTokenizer(tokenizer, ["text"], length).ids(lines)
        assert ids == expected, f"max_length {length}: got ids of lengths up to {max(map(len, ids))}"
        assert max(map(len, ids)) == length  # the sample has sentences longer than every length used
        batch, *_ = next(iter(data.train_dataloader()))  # Lightning's CombinedLoader: (batch, index, loader)
        assert batch["simcse"]["text"]["input_ids"].shape[1] <= length
    assert len(list(cache.glob("*.arrow"))) == 3


# ------------------------------------------------------------------ 4. do_lower_case over a cased tokenizer
MIXED = [
    "A Woman Is Slicing An ONION.",
    "THE MAN PLAYS A GUITAR.",
    "Two Dogs Run On The Grass While A Child Throws A Ball.",
    "a man plays a guitar.",
]


def test_do_lower_case_over_a_cased_tokenizer_equals_sentence_transformers(tiny_cased_bert_dir, tmp_path):
    """Pins ``encoders/st_files.py`` (formerly ``encoders/sentence_transformers.py``) applying ``do_lower_case`` from
    ``sentence_bert_config.json``: a directory whose tokenizer keeps case and whose
    ``sentence_bert_config.json`` says ``{"max_seq_length": 32, "do_lower_case": true}`` (as Sentence
    Transformers before 6 saved it). unisent's model (through ``unisent.load`` and through ``encoder.model``
    as training builds it) lowercases as ``sentence_transformers.SentenceTransformer`` does and gives its
    vectors on mixed-case input (to 1e-5); the raw cased text gives other vectors (so the lowercasing is
    what is checked)."""
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.models import Pooling, Transformer

    base = tiny_cased_bert_dir
    transformer = Transformer(str(base), max_seq_length=32)
    pooling = Pooling(transformer.get_embedding_dimension(), pooling_mode="mean")
    cased_dir = tmp_path / "st-cased"
    SentenceTransformer(modules=[transformer, pooling], device="cpu").save(str(cased_dir))
    # Sentence Transformers 6 bakes do_lower_case into the saved tokenizer; models saved by earlier versions
    # (most of the Hub's) keep the tokenizer cased and say it in sentence_bert_config.json
    directory = Path(shutil.copytree(cased_dir, tmp_path / "st"))
    (directory / "sentence_bert_config.json").write_text(json.dumps({"max_seq_length": 32, "do_lower_case": True}))

    reference = SentenceTransformer(str(directory), device="cpu")
    expected = torch.as_tensor(reference.encode(MIXED, batch_size=2))
    lowered = reference.tokenizer(MIXED[0])["input_ids"]
    assert lowered == reference.tokenizer(MIXED[0].lower())["input_ids"]  # Sentence Transformers lowercases
    raw = SentenceTransformer(str(cased_dir), device="cpu")
    assert raw.tokenizer(MIXED[0])["input_ids"] != lowered  # the tokenizer on its own keeps case
    cased = torch.as_tensor(raw.encode(MIXED, batch_size=2))  # what the raw cased text gives
    assert float((cased - expected).abs().max()) > 1e-3

    loaded = unisent.load(str(directory))
    trained = UnisentModule(
        encoder=EncoderConfig(model=str(directory)), train=TrainConfig(save_encoder=False)
    ).encoder.eval()
    for how, model in (("unisent.load", loaded), ("model.encoder.model (training)", trained)):
        with torch.no_grad():
            got = model.encode(MIXED, precision="fp32")  # float32, as SentenceTransformer computes, on any CPU
        diff = float((got - expected).abs().max())
        assert diff <= 1e-5, f"{how}: max abs difference to SentenceTransformer {diff:.2e}"
        assert model.tokenizer(MIXED[0])["input_ids"] == lowered


@pytest.mark.integration
def test_two_processes_build_the_same_tiny_model_byte_for_byte(tmp_path):
    """``build_tiny_bert`` (tests/conftest.py) in two fresh interpreters: identical files (tokenizers'
    WordPieceTrainer broke ties in hash order, so each process trained another vocabulary)."""
    import subprocess
    import sys

    tests = Path(__file__).resolve().parent
    code = (
        f"import sys; sys.path.insert(0, {str(tests)!r}); from pathlib import Path; "
        "from conftest import build_tiny_bert; "
        "build_tiny_bert(Path(sys.argv[1])); build_tiny_bert(Path(sys.argv[1] + '-cased'), cased=True)"
    )
    for name in ("a", "b"):
        subprocess.run([sys.executable, "-c", code, str(tmp_path / name)], check=True, capture_output=True)
    for suffix in ("", "-cased"):
        first, second = tmp_path / f"a{suffix}", tmp_path / f"b{suffix}"
        names = sorted(p.name for p in first.iterdir())
        assert names == sorted(p.name for p in second.iterdir()) and "tokenizer.json" in names
        for name in names:
            assert (first / name).read_bytes() == (second / name).read_bytes(), f"{name} differs between processes"
