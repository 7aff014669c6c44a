"""Runs the example of docs/new-objective.md: a user's objective in their own package, used from YAML."""

import os
import re
from pathlib import Path

import pandas as pd
import pytest
import yaml

from tests.conftest import run_cli

ROOT = Path(__file__).resolve().parents[1]


def _blocks(lang: str) -> list[str]:
    text = (ROOT / "docs" / "new-objective.md").read_text()
    return re.findall(rf"```{lang}\n(.*?)```", text, flags=re.S)


@pytest.mark.integration
def test_documented_objective_trains_from_yaml(tmp_path, tiny_bert_dir):
    (tmp_path / "my_objectives.py").write_text(_blocks("python")[0])
    config = yaml.safe_load(_blocks("yaml")[0])
    config["model"]["encoder"]["model"] = str(tiny_bert_dir)
    config["data"]["train"]["align_uniform"]["path"] = str(ROOT / config["data"]["train"]["align_uniform"]["path"])
    config["data"]["batch_size"] = 8
    config["trainer"].update(
        max_steps=4,
        log_every_n_steps=1,
        enable_progress_bar=False,
        default_root_dir=str(tmp_path),
        logger={"class_path": "lightning.pytorch.loggers.CSVLogger", "init_args": {"save_dir": str(tmp_path / "runs")}},
    )
    (tmp_path / "align-uniform.yaml").write_text(yaml.safe_dump(config))
    env = dict(os.environ, PYTHONPATH=str(tmp_path))
    done = run_cli(["fit", "-c", "align-uniform.yaml"], cwd=tmp_path, env=env, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    metrics = pd.read_csv(next((tmp_path / "runs").rglob("metrics.csv")))
    align, uniform = (
        metrics["train/align_uniform/alignment"].dropna(),
        metrics["train/align_uniform/uniformity"].dropna(),
    )
    assert len(align) == 4 and len(uniform) == 4
    assert (align >= 0).all() and (uniform <= 0).all()  # squared distances >= 0; log-mean-exp(-t d^2) <= 0
    assert ((align + uniform) - metrics["train/loss"].dropna()).abs().max() < 1e-4
