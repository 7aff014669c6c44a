"""Early stopping per objective (``unisent.callbacks.BestOnDev``): each objective keeps its own parameters from
its best held-out reading and stops after ``patience`` readings without a gain."""

import json
from pathlib import Path

import lightning as L
import pytest
import torch

from unisent.data import UnisentDataModule
from unisent.encoders import EncoderConfig
from unisent.evaluation.best_on_dev import BestOnDev
from unisent.evaluation.panel import evaluate_panel
from unisent.lightning_module import UnisentModule
from unisent.objectives import GaussCSE
from unisent.objectives.distill import Distill
from unisent.training_config import HeadsConfig, TrainConfig

SAMPLE_DIR = Path(__file__).resolve().parents[1] / "samples"


def _module(tiny_bert_dir) -> UnisentModule:
    return UnisentModule(
        encoder=EncoderConfig(model=str(tiny_bert_dir), pooler="mean", max_length=32),
        objectives=[GaussCSE(own_layers=1), Distill()],
        train=TrainConfig(heads=HeadsConfig(lr=1e-2, only_steps=2)),
    )


def _fit(module, callback, tmp_path, steps: int) -> L.Trainer:
    data = UnisentDataModule(
        train={"gausscse": str(SAMPLE_DIR / "nli_triples.jsonl"), "distill": str(SAMPLE_DIR / "sentences.txt")},
        batch_size=8,
    )
    trainer = L.Trainer(
        max_steps=steps,
        logger=L.pytorch.loggers.CSVLogger(tmp_path, name="run"),
        enable_progress_bar=False,
        enable_checkpointing=False,
        callbacks=[callback],
        log_every_n_steps=1,
    )
    trainer.fit(module, datamodule=data)
    return trainer


class Scripted(BestOnDev):
    """Readings from a script instead of the data, with the objective's state at each reading."""

    def __init__(self, scores, **kw):
        super().__init__({"gausscse": "sick-direction-hyp-not-shorter-train"}, **kw)
        self.script = list(scores)
        self.states: dict[int, dict[str, torch.Tensor]] = {}
        self.encoders: dict[int, torch.Tensor] = {}

    def _read(self, pl_module, column):
        step = pl_module.global_step
        own = pl_module.objectives[0].state_dict()
        self.states[step] = {k: v.detach().clone() for k, v in own.items()}
        self.encoders[step] = next(pl_module.encoder.parameters()).detach().clone()
        return self.script.pop(0)


def _same(a: dict, b: dict) -> bool:
    return all(torch.equal(a[k], b[k]) for k in a)


def test_the_objective_stops_after_patience_with_its_best_parameters_back(tiny_bert_dir, tmp_path):
    module = _module(tiny_bert_dir)
    # readings at steps 2 (the encoder starts), 4, 6, 8 (every 2): best at step 4, no gain at 6 and 8 -> stop at 8
    callback = Scripted([50.0, 60.0, 55.0, 60.0], every_n_steps=2, patience=2)
    trainer = _fit(module, callback, tmp_path, steps=12)
    assert sorted(callback.states) == [2, 4, 6, 8]
    assert callback.best == {"gausscse": {"score": 60.0, "step": 4}}  # a tie is not a gain
    assert callback.stopped == {"gausscse": 8}
    final = module.objectives[0].state_dict()
    assert _same(callback.states[4], final)  # step 4's parameters, put back at step 8 and resting since
    assert not _same(callback.states[8], final)
    # after the stop GaussCSE weighs 0: no loss logged; Distill still moves the shared encoder
    assert module.objective_weight(module.objectives[0], 8) == 0.0 and module.objective_weight(module.objectives[0], 7)
    assert not torch.equal(callback.encoders[8], next(module.encoder.parameters()))
    record = json.loads((Path(trainer.log_dir) / "best_on_dev.json").read_text())
    assert record["stopped"] == {"gausscse": 8} and [r["step"] for r in record["readings"]] == [2, 4, 6, 8]
    import csv

    with (Path(trainer.log_dir) / "metrics.csv").open() as handle:
        logged = [r["dev/gausscse/sick-direction-hyp-not-shorter-train"] for r in csv.DictReader(handle)]
    read = [float(v) for v in logged if v and v != "nan"]
    assert read == [50.0, 60.0, 55.0, 60.0]  # logged at the readings only, not repeated between them


def test_without_patience_the_best_comes_back_at_the_last_step(tiny_bert_dir, tmp_path):
    module = _module(tiny_bert_dir)
    callback = Scripted([50.0, 70.0, 65.0], every_n_steps=3, patience=None)  # steps 2, 5 and the last (7)
    _fit(module, callback, tmp_path, steps=7)
    assert sorted(callback.states) == [2, 5, 7] and callback.stopped == {}
    assert _same(callback.states[5], module.objectives[0].state_dict())


def test_a_real_reading_is_the_panels_and_leaves_the_training_limit(tiny_bert_dir, tmp_path):
    root = tmp_path / "data"
    sick = root / "sts" / "sick"
    sick.mkdir(parents=True)
    pairs = [
        ("a man plays a guitar on a stage", "a man plays", "ENTAILMENT"),
        ("two dogs run", "two dogs run in a park together", "ENTAILMENT"),
        ("a woman cuts an onion", "a woman slices an onion", "ENTAILMENT"),
        ("a cat sleeps", "a dog barks", "CONTRADICTION"),
    ]
    rows = "".join(f"{i}\t{a}\t{b}\t3.0\t{label}\n" for i, (a, b, label) in enumerate(pairs))
    (sick / "SICK_train.txt").write_text(
        "pair_ID\tsentence_A\tsentence_B\trelatedness_score\tentailment_judgment\n" + rows
    )
    module = _module(tiny_bert_dir)
    callback = BestOnDev({"gausscse": "sick-direction-train"}, data_dir=str(root))
    score = callback._read(module, "sick-direction-train")
    assert module.encoder.config.max_length == 32
    expected = evaluate_panel(module.inference_model(), ["sick-direction-train"], root)["sick-direction-train"]
    assert score == pytest.approx(expected["score"]) and expected["n_pairs"] == 3
    assert min(abs(score - k * 100 / 3) for k in range(4)) < 1e-9  # a share of the three entailment pairs


def test_bad_settings_are_one_line(tiny_bert_dir, tmp_path):
    with pytest.raises(ValueError, match=r"'sick-direction-trian' is not a panel column \(did you mean"):
        BestOnDev({"gausscse": "sick-direction-trian"})
    with pytest.raises(ValueError, match="reads a checkpoint"):
        BestOnDev({"ease": "entity-top10"})
    with pytest.raises(ValueError, match="every_n_steps >= 1"):
        BestOnDev({"gausscse": "sick-direction-train"}, every_n_steps=0)
    module = _module(tiny_bert_dir)
    with pytest.raises(ValueError, match=r"BestOnDev.columns names 'gauss' \(did you mean 'gausscse'\?\)"):
        _fit(module, BestOnDev({"gauss": "sick-direction-train"}), tmp_path, steps=2)


def test_a_resumed_run_keeps_the_stop_and_the_best_parameters(tiny_bert_dir, tmp_path):
    module = _module(tiny_bert_dir)
    callback = Scripted([50.0, 40.0], every_n_steps=2, patience=1)  # best at 2, stopped at 4
    trainer = _fit(module, callback, tmp_path, steps=6)
    assert callback.stopped == {"gausscse": 4}
    path = tmp_path / "six.ckpt"
    trainer.save_checkpoint(path)
    best = {k: v.clone() for k, v in module.objectives[0].state_dict().items()}
    again = _module(tiny_bert_dir)
    resumed = Scripted([], every_n_steps=2, patience=1)  # no reading is due: gausscse stays stopped
    data = UnisentDataModule(
        train={"gausscse": str(SAMPLE_DIR / "nli_triples.jsonl"), "distill": str(SAMPLE_DIR / "sentences.txt")},
        batch_size=8,
    )
    L.Trainer(
        max_steps=9,
        logger=False,
        default_root_dir=tmp_path,  # without a logger the log dir is this: the best_on_dev.json and encoder go here
        enable_progress_bar=False,
        enable_checkpointing=False,
        callbacks=[resumed],
    ).fit(again, datamodule=data, ckpt_path=path)
    assert resumed.stopped == {"gausscse": 4} and resumed.best["gausscse"]["step"] == 2
    assert again.objective_weight(again.objectives[0], 6) == 0.0
    assert _same(best, again.objectives[0].state_dict())  # resting since step 4, through the resume
    assert _same(resumed.snapshots["gausscse"], best)
