"""Weights & Biases through Lightning's WandbLogger, offline; logging happens on rank zero only."""

import json
from pathlib import Path

import lightning as L
import pytest
import wandb  # in the dev extra: a missing install fails these tests instead of skipping them

from unisent.data import UnisentDataModule
from unisent.encoders import EncoderConfig
from unisent.lightning_module import UnisentModule

#: the repository's training, benchmark and test samples (not in the wheel)
SAMPLE_DIR = Path(__file__).resolve().parents[1] / "samples"


@pytest.mark.integration
def test_wandb_offline_run_is_recorded(tiny_bert_dir, tmp_path, monkeypatch):
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_DIR", str(tmp_path))
    logger = L.pytorch.loggers.WandbLogger(project="unisent-test", save_dir=str(tmp_path))
    module = UnisentModule(encoder=EncoderConfig(model=str(tiny_bert_dir)))
    data = UnisentDataModule(train={"simcse": str(SAMPLE_DIR / "sentences.txt")}, batch_size=8)
    trainer = L.Trainer(
        max_steps=3,
        logger=logger,
        log_every_n_steps=1,
        enable_progress_bar=False,
        enable_checkpointing=False,
        default_root_dir=tmp_path,
    )
    trainer.fit(module, datamodule=data)
    run_dir = logger.experiment.dir
    summary = dict(logger.experiment.summary)
    wandb.finish()
    assert "train/simcse/contrastive" in summary and "train/loss" in summary
    assert list(tmp_path.rglob("*.wandb")), f"no offline run file under {tmp_path} ({run_dir})"


def test_evaluation_callback_logs_the_results_table_to_wandb(tiny_bert_dir, tmp_path, monkeypatch):
    from unisent.evaluation.callback import EvaluationCallback

    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_DIR", str(tmp_path))
    logger = L.pytorch.loggers.WandbLogger(project="unisent-test", save_dir=str(tmp_path))
    module = UnisentModule(encoder=EncoderConfig(model=str(tiny_bert_dir)))
    trainer = L.Trainer(
        logger=logger,
        enable_progress_bar=False,
        default_root_dir=tmp_path,
        accelerator="cpu",
        callbacks=[EvaluationCallback()],
    )
    [scores] = trainer.validate(module, datamodule=UnisentDataModule())
    run_dir = logger.experiment.dir
    wandb.finish()
    tables = list(tmp_path.rglob("media/table/val/results_*.table.json"))
    assert tables, f"no results table under {tmp_path} ({run_dir})"
    table = json.loads(tables[0].read_text())
    assert table["columns"] == ["task", "metric", "score"]
    rows = {(task, metric): score for task, metric, score in table["data"]}
    assert rows[("stsb-dev", "spearman")] == pytest.approx(scores["val/stsb-dev"], abs=1e-4)
