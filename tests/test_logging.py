"""Weights & Biases through Lightning's WandbLogger, offline; logging happens on rank zero only."""

import lightning as L
import pytest

from unisent.data import SAMPLE_DIR, UnisentDataModule
from unisent.encoders import EncoderConfig
from unisent.module import UnisentModule

wandb = pytest.importorskip("wandb")


def test_wandb_offline_run_is_recorded(tiny_bert_dir, tmp_path, monkeypatch):
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_DIR", str(tmp_path))
    logger = L.pytorch.loggers.WandbLogger(project="unisent-test", save_dir=str(tmp_path))
    module = UnisentModule(encoder=EncoderConfig(model=str(tiny_bert_dir)))
    data = UnisentDataModule(train={"simcse": str(SAMPLE_DIR / "sentences.txt")}, batch_size=8)
    trainer = L.Trainer(max_steps=3, logger=logger, log_every_n_steps=1, enable_progress_bar=False,
                        enable_checkpointing=False, default_root_dir=tmp_path)
    trainer.fit(module, datamodule=data)
    run_dir = logger.experiment.dir
    summary = dict(logger.experiment.summary)
    wandb.finish()
    assert "train/simcse/contrastive" in summary and "train/loss" in summary
    assert list(tmp_path.rglob("*.wandb")), f"no offline run file under {tmp_path} ({run_dir})"
