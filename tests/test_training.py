"""Training through the module and DataModule on a tiny model: several objectives, bf16, checkpoints."""

import json
from pathlib import Path

import lightning as L
import pandas as pd
import pytest
import torch

import unisent
from unisent.data import DataSource, LengthGroupedSampler, UnisentDataModule
from unisent.encoders import EncoderConfig
from unisent.lightning_module import UnisentModule
from unisent.objectives import SimCSE
from unisent.optim import AdamW
from unisent.training_config import ScheduleConfig, TrainConfig

#: the repository's training, benchmark and test samples (not in the wheel)
SAMPLE_DIR = Path(__file__).resolve().parents[1] / "samples"


def _module(model_dir, **kw):
    objectives = kw.pop("objectives", None) or [
        SimCSE(name="unsup"),
        SimCSE(supervised=True, name="sup", weight=0.5, hard_negative_weight=0.2),
    ]
    return UnisentModule(
        encoder=EncoderConfig(model=str(model_dir), pooler="cls_mlp_train_only"), objectives=objectives, **kw
    )


def _data(**kw):
    train = {
        "unsup": DataSource(str(SAMPLE_DIR / "sentences.txt")),
        "sup": DataSource(str(SAMPLE_DIR / "nli_triples.jsonl")),
    }
    return UnisentDataModule(train=train, batch_size=kw.pop("batch_size", 16), **kw)


def _trainer(tmp_path, **kw):
    return L.Trainer(
        default_root_dir=tmp_path,
        logger=L.pytorch.loggers.CSVLogger(tmp_path, name="run"),
        log_every_n_steps=1,
        enable_progress_bar=False,
        enable_model_summary=False,
        accelerator="cpu",
        **kw,
    )


def test_two_objectives_train_and_every_term_is_logged(tiny_model_dir, tmp_path):
    module = _module(
        tiny_model_dir,
        train=TrainConfig(schedule=ScheduleConfig(warmup_steps=2)),
        optimizer=lambda params: AdamW(params, lr=2e-3),
    )
    trainer = _trainer(tmp_path, max_steps=12)
    trainer.fit(module, datamodule=_data())
    metrics = pd.read_csv(next(tmp_path.glob("run/version_*/metrics.csv")))
    for col in ("train/loss", "train/unsup/contrastive", "train/sup/contrastive"):
        assert metrics[col].notna().sum() == 12, col
    total = metrics["train/unsup/contrastive"] + 0.5 * metrics["train/sup/contrastive"]
    assert (total - metrics["train/loss"]).abs().max() < 1e-4
    sup = metrics["train/sup/contrastive"].to_numpy()
    assert sup[-3:].mean() < sup[:3].mean()  # the supervised loss falls on this easy data
    saved = tmp_path / "run" / "version_0" / "encoder"
    assert (saved / "unisent_encoder.json").is_file()
    assert json.loads((saved / "unisent_encoder.json").read_text())["pooler"] == "cls_mlp_train_only"


def test_checkpoint_rebuilds_the_same_encoder(tiny_model_dir, tmp_path):
    module = _module(tiny_model_dir)
    trainer = _trainer(tmp_path, max_steps=3)
    trainer.fit(module, datamodule=_data())
    ckpt = tmp_path / "model.ckpt"
    trainer.save_checkpoint(ckpt)
    loaded = unisent.load(str(ckpt))
    sents = ["a man plays a guitar .", "two dogs run on the grass ."]
    torch.testing.assert_close(loaded.encode(sents), module.encoder.encode(sents))
    assert [o.name for o in UnisentModule.from_checkpoint(ckpt).objectives] == ["unsup", "sup"]


def test_bf16_mixed_trains_without_nan(tiny_model_dir, tmp_path):
    module = _module(tiny_model_dir, objectives=[SimCSE(name="unsup"), SimCSE(supervised=True, name="sup")])
    before = [p.detach().clone() for p in module.encoder.parameters()]
    trainer = _trainer(tmp_path, max_steps=3, precision="bf16-mixed")
    trainer.fit(module, datamodule=_data(batch_size=8))
    metrics = pd.read_csv(next(tmp_path.glob("run/version_*/metrics.csv")))
    assert metrics["train/loss"].dropna().map(float).apply(lambda v: v == v and abs(v) < 1e4).all()
    assert any(not torch.equal(a, b) for a, b in zip(before, module.encoder.parameters()))


def test_any_torch_optimizer_and_schedule(tiny_model_dir, tmp_path):
    module = _module(
        tiny_model_dir,
        optimizer=lambda params: torch.optim.SGD(params, lr=0.1),
        train=TrainConfig(schedule=ScheduleConfig(warmup_ratio=0.5)),
    )
    trainer = _trainer(tmp_path, max_steps=4)
    trainer.fit(module, datamodule=_data())
    opt = trainer.optimizers[0]
    assert isinstance(opt, torch.optim.SGD)
    # warm-up for 2 of 4 steps, then linear decay to zero
    assert trainer.lr_scheduler_configs[0].scheduler.get_last_lr()[0] == pytest.approx(0.0, abs=1e-9)


def test_datamodule_validates_names_caches_and_pads_dynamically(tiny_model_dir, tmp_path):
    module = _module(tiny_model_dir)
    with pytest.raises(ValueError, match="data.train names 'other'.*objectives are: unsup, sup"):
        UnisentDataModule(train={"other": str(SAMPLE_DIR / "sentences.txt")}).attach(module).setup("fit")
    with pytest.raises(ValueError, match="no training data for objective\\(s\\) 'sup'"):
        UnisentDataModule(train={"unsup": str(SAMPLE_DIR / "sentences.txt")}).attach(module).setup("fit")
    dm = _data(cache_dir=str(tmp_path / "c")).attach(module)
    dm.setup("fit")
    assert len(list((tmp_path / "c").glob("*.arrow"))) == 2
    again = _data(cache_dir=str(tmp_path / "c")).attach(module)
    again.setup("fit")  # served from the Arrow cache
    assert again.datasets["sup"].cache_files[0]["filename"] == dm.datasets["sup"].cache_files[0]["filename"]
    loader = dm._loader("sup")
    batch = next(iter(loader))
    ids, mask = batch["anchor"]["input_ids"], batch["anchor"]["attention_mask"]
    longest = max(int(batch[k]["attention_mask"].sum(1).max()) for k in ("anchor", "positive", "negative"))
    assert ids.shape[1] == longest  # padded to the batch's longest sentence, not to max_length
    assert batch["negative"]["input_ids"].shape == ids.shape and mask.dtype == torch.long


def test_length_grouped_sampler_groups_lengths_and_covers_everything():
    lengths = torch.randint(3, 60, (1000,)).tolist()
    sampler = LengthGroupedSampler(lengths, batch_size=10, mega_batch_factor=20, seed=1)
    order = list(sampler)
    assert sorted(order) == list(range(1000))
    spread = [
        max(lengths[i] for i in order[k : k + 10]) - min(lengths[i] for i in order[k : k + 10])
        for k in range(0, 1000, 10)
    ]
    random_spread = [max(lengths[k : k + 10]) - min(lengths[k : k + 10]) for k in range(0, 1000, 10)]
    assert sum(spread) < 0.3 * sum(random_spread)
    sampler.set_epoch(1)
    assert list(sampler) != order


def test_predict_embeds_sentences_in_file_order(tiny_model_dir, tmp_path):
    sentences = ["a man plays a guitar .", "two dogs run on the grass in the park .", "rain ."]
    path = tmp_path / "s.txt"
    path.write_text("\n".join(sentences) + "\n")
    module = _module(tiny_model_dir, objectives=[SimCSE()])
    data = UnisentDataModule(predict=DataSource(str(path)), predict_batch_size=2)
    out = _trainer(tmp_path).predict(module, datamodule=data)
    torch.testing.assert_close(torch.cat(out), module.encoder.encode(sentences), rtol=1e-4, atol=1e-5)
    with pytest.raises(ValueError, match="needs data.predict"):
        _trainer(tmp_path).predict(module, datamodule=UnisentDataModule())


def test_weight_schedule_switches_objectives_on_and_off_at_the_listed_steps(tiny_model_dir, tmp_path):
    schedule = {"sup": [[0, 0.0], [3, 0.5], [5, 0.0]], "unsup": [[4, 2.0]]}
    module = _module(tiny_model_dir, train=TrainConfig(weight_schedule=schedule))
    assert [module.objective_weight(module.objectives[1], s) for s in range(7)] == [0, 0, 0, 0.5, 0.5, 0, 0]
    trainer = _trainer(tmp_path, max_steps=6)
    trainer.fit(module, datamodule=_data())
    metrics = pd.read_csv(next(tmp_path.glob("run/version_*/metrics.csv"))).set_index("step")
    assert metrics["train/sup/weight"].dropna().tolist() == [0, 0, 0, 0.5, 0.5, 0]
    assert metrics["train/unsup/weight"].dropna().tolist() == [1, 1, 1, 1, 2, 2]
    # a switched-off objective is not computed at all
    assert metrics["train/sup/contrastive"].dropna().index.tolist() == [3, 4]
    total = 2.0 * metrics["train/unsup/contrastive"] + 0.5 * metrics["train/sup/contrastive"].fillna(0)
    assert abs(total.loc[4] - metrics["train/loss"].loc[4]) < 1e-4


def test_weight_schedule_errors_name_the_entry(tiny_model_dir):
    with pytest.raises(ValueError, match="weight_schedule names 'bitext'"):
        _module(tiny_model_dir, train=TrainConfig(weight_schedule={"bitext": [[0, 1.0]]}))
    with pytest.raises(ValueError, match=r"weight_schedule.sup\[1\]"):
        _module(tiny_model_dir, train=TrainConfig(weight_schedule={"sup": [[0, 1.0], [5]]}))
