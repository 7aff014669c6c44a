"""Distill: embedding distillation to a frozen teacher, and the frozen sub-module pattern it uses
(never in the optimiser, eval mode, in no checkpoint, rebuilt exactly on resume, no warning)."""

from __future__ import annotations

import warnings
from pathlib import Path

import lightning as L
import pytest
import torch
import torch.nn.functional as F

from unisent.data import DataSource, UnisentDataModule
from unisent.encoders import Encoder, EncoderConfig
from unisent.io import load_checkpoint
from unisent.lightning_module import UnisentModule
from unisent.objectives import Distill, Frozen, SimCSE
from unisent.optim import AdamW
from unisent.resume import UnisentCheckpoint
from unisent.training_config import EvaluationConfig, ScheduleConfig, TrainConfig

SAMPLE_DIR = Path(__file__).resolve().parents[1] / "samples"


def _module(model_dir, teacher=None, loss="mse") -> UnisentModule:
    return UnisentModule(
        encoder=EncoderConfig(model=str(model_dir)),
        objectives=[SimCSE(), Distill(teacher=teacher, loss=loss)],
        optimizer=lambda params: AdamW(params, lr=1e-3),
        evaluation=EvaluationConfig(val_tasks=[]),
    )


def _batch(encoder: Encoder, sentences: list[str]) -> dict:
    ids = encoder.tokenizer(sentences, padding=True, return_tensors="pt")
    return {"text": {"input_ids": ids["input_ids"], "attention_mask": ids["attention_mask"]}}


SENTENCES = ["A man is playing a guitar.", "Two dogs run on the beach in the evening sun.", "Rain."]


def test_the_default_teacher_is_the_starting_encoder_and_the_loss_is_the_mean_squared_distance(tiny_bert_dir):
    torch.manual_seed(0)
    module = _module(tiny_bert_dir)
    distill = module.objectives[1]
    batch = _batch(module.encoder, SENTENCES)
    module.encoder.eval()  # no dropout: the student is still the teacher
    assert distill(module.encoder, batch)["mse"].item() == 0.0
    with torch.no_grad():  # move the student away: the loss is the hand-computed MSE to the starting vectors
        start = module.encoder(**batch["text"])
        for p in module.encoder.parameters():
            p.add_(0.01 * torch.randn_like(p))
        moved = module.encoder(**batch["text"])
    assert not torch.allclose(start, moved)
    loss = distill(module.encoder, batch)["mse"]
    assert loss.item() == pytest.approx(((moved - start) ** 2).mean().item(), rel=1e-5)
    cosine = Distill(loss="cosine")
    cosine.setup_for(Encoder(EncoderConfig(model=str(tiny_bert_dir))))
    out = cosine(module.encoder, batch)["cosine"]
    assert out.item() == pytest.approx((1 - F.cosine_similarity(moved, start)).mean().item(), rel=1e-5)


def test_the_teacher_is_outside_the_module_tree_the_optimiser_and_the_checkpoint(tiny_bert_dir):
    module = _module(tiny_bert_dir)
    teacher = module.objectives[1]._teacher
    assert isinstance(teacher, Frozen)
    teacher_params = {id(p) for p in teacher.module.parameters()}
    assert not teacher_params & {id(p) for p in module.parameters()}
    grouped = {id(p) for g in module.optimizer_groups() for p in g["params"]}
    assert not teacher_params & grouped
    assert not any("teacher" in k for k in module.state_dict())
    assert len(module.state_dict()) == len(_module(tiny_bert_dir).state_dict())
    module.train()  # what Lightning does after each validation: the teacher keeps its dropout off
    assert not teacher.module.training
    assert all(not p.requires_grad for p in teacher.module.parameters())
    with pytest.raises(ValueError, match="training checkpoint; export it first"):
        Distill(teacher="runs/x/last.ckpt")
    with pytest.raises(ValueError, match="loss must be 'mse' or 'cosine'"):
        Distill(loss="l1")


def test_a_teacher_of_another_vocabulary_reads_the_sentences(tiny_bert_dir, tiny_cased_bert_dir):
    student = Encoder(EncoderConfig(model=str(tiny_bert_dir)))
    other = Distill(teacher=str(tiny_cased_bert_dir))
    other.setup_for(student)
    assert not other._same_vocabulary
    batch = _batch(student, SENTENCES)
    teacher = Encoder(EncoderConfig(model=str(tiny_cased_bert_dir))).eval()
    # the teacher embeds the sentences as the student's tokenizer read them (lower case: an uncased student)
    expected = teacher.encode([s.lower() for s in SENTENCES], batch_size=3)
    got = other.targets(batch["text"]["input_ids"], batch["text"]["attention_mask"])
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-5)
    same = Distill(teacher=str(tiny_bert_dir))
    same.setup_for(student)
    assert same._same_vocabulary


def test_a_teacher_of_another_size_is_refused_in_one_line(tiny_bert_dir, tmp_path):
    import shutil

    from transformers import BertConfig, BertModel

    config = BertConfig.from_pretrained(tiny_bert_dir)
    config.hidden_size, config.intermediate_size = 48, 96
    wide = tmp_path / "wide"
    BertModel(config).save_pretrained(wide)
    for name in tiny_bert_dir.iterdir():
        if "token" in name.name or name.name == "vocab.txt":
            shutil.copy(name, wide / name.name)
    distill = Distill(teacher=str(wide))
    with pytest.raises(ValueError, match="48-dimensional vectors and the student 32"):
        distill.setup_for(Encoder(EncoderConfig(model=str(tiny_bert_dir))))


class _Crash(L.Callback):
    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        if trainer.global_step == 3:
            raise RuntimeError("simulated crash")


def _fit(model_dir, root, callbacks=(), ckpt_path=None) -> UnisentModule:
    L.seed_everything(5)
    module = UnisentModule(
        encoder=EncoderConfig(model=str(model_dir)),
        objectives=[SimCSE(), Distill(fields=["anchor", "positive"], name="lwf")],
        optimizer=lambda params: AdamW(params, lr=1e-3),
        evaluation=EvaluationConfig(val_tasks=[]),
        train=TrainConfig(schedule=ScheduleConfig(decay="constant")),
    )
    data = UnisentDataModule(
        train={
            "simcse": DataSource(str(SAMPLE_DIR / "sentences.txt"), max_records=48),
            "lwf": DataSource(str(SAMPLE_DIR / "nli_triples.jsonl"), max_records=48),
        },
        batch_size=8,
        seed=11,
    )
    trainer = L.Trainer(
        default_root_dir=root,
        max_steps=6,
        max_epochs=100,
        deterministic=True,
        accelerator="cpu",
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        callbacks=[UnisentCheckpoint(dirpath=root / "ckpt", every_n_train_steps=1, save_last=True), *callbacks],
    )
    trainer.fit(module, datamodule=data, ckpt_path=ckpt_path)
    return module


@pytest.mark.usefixtures("one_thread")
def test_a_run_with_a_frozen_teacher_resumes_exactly_without_warnings_or_teacher_weights(tiny_bert_dir, tmp_path):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        reference = _fit(tiny_bert_dir, tmp_path / "ref")
    assert not [w for w in caught if "eval mode" in str(w.message)]
    start = Encoder(EncoderConfig(model=str(tiny_bert_dir)))
    teacher = reference.objectives[1]._teacher.module
    for a, b in zip(teacher.state_dict().values(), start.state_dict().values(), strict=True):
        assert torch.equal(a, b)  # six steps later the teacher is still the starting encoder
    with pytest.raises(RuntimeError, match="simulated crash"):
        _fit(tiny_bert_dir, tmp_path / "run", callbacks=[_Crash()])
    saved = load_checkpoint(tmp_path / "run" / "ckpt" / "last.ckpt")
    assert set(saved["state_dict"]) == set(reference.state_dict())  # no teacher key in the file
    resumed = _fit(tiny_bert_dir, tmp_path / "run", ckpt_path="last")
    for key, value in reference.state_dict().items():
        torch.testing.assert_close(resumed.state_dict()[key], value, atol=0, rtol=0, msg=key)


def test_a_checkpoint_loads_for_inference_without_its_objectives_classes(tiny_bert_dir, tmp_path, capsys):
    import unisent

    _fit(tiny_bert_dir, tmp_path / "run")
    path = tmp_path / "run" / "ckpt" / "last.ckpt"
    full = unisent.load(path)
    ckpt = load_checkpoint(path)
    ckpt["unisent"]["objectives"][0]["class_path"] = "my_gone_objectives.Vanished"  # not importable here
    gone = tmp_path / "gone.ckpt"
    torch.save(ckpt, gone)
    model = unisent.load(gone)
    assert "skipped objective(s) my_gone_objectives.Vanished" in capsys.readouterr().err
    torch.testing.assert_close(model.encode(SENTENCES), full.encode(SENTENCES), atol=0, rtol=0)
    ckpt["unisent"]["objectives"][1]["class_path"] = "os.system"  # importable but no objective: never called
    torch.save(ckpt, gone)
    unisent.load(gone)
    assert "skipped objective(s) my_gone_objectives.Vanished, os.system" in capsys.readouterr().err


def test_the_documented_frozen_pattern_equals_distill(tiny_bert_dir):
    """docs/new-objective.md's StayNear (the Frozen pattern in 15 lines) and its YAML: the same loss as Distill."""
    import re

    import yaml

    text = (Path(__file__).resolve().parents[1] / "docs" / "new-objective.md").read_text(encoding="utf-8")
    block = next(b for b in re.findall(r"```python\n(.*?)```", text, flags=re.S) if "class StayNear" in b)
    namespace: dict = {}
    exec(compile(block, "new-objective.md", "exec"), namespace)
    config = yaml.safe_load(next(b for b in re.findall(r"```yaml\n(.*?)```", text, flags=re.S) if "Distill" in b))
    spec = config["model"]["objectives"][1]
    torch.manual_seed(0)
    encoder = Encoder(EncoderConfig(model=str(tiny_bert_dir)))
    mine, builtin = namespace["StayNear"](), Distill(**spec["init_args"])
    mine.setup_for(encoder)
    builtin.setup_for(encoder)
    assert builtin.text_keys == ("anchor", "positive")
    with torch.no_grad():
        for p in encoder.parameters():
            p.add_(0.01 * torch.randn_like(p))
    encoder.eval()
    batch = _batch(encoder, SENTENCES)
    both = {"anchor": batch["text"], "positive": batch["text"]}  # the same sentences twice: the same mean
    assert mine(encoder, batch)["mse"].item() == pytest.approx(builtin(encoder, both)["mse"].item(), rel=1e-6)
    assert mine(encoder, batch)["mse"].item() > 0
