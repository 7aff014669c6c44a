"""A user's first hour (issue 18): the README's commands in order, on a temporary copy of the quickstart
recipe (the tiny BERT of conftest instead of MiniLM, 96 triples, batch 16: 6 steps an epoch, 12 in all).

* ``test``/``evaluate``/``export``/``encode`` change no file of the training run (every file hashed);
  ``test`` logs into ``<run>-test-<k>`` beside it;
* a first leg cut short with ``--trainer.max_steps`` and resumed with ``--ckpt_path last`` and the full
  recipe ends at the recipe's step with the same weights as an uninterrupted run; resuming a finished
  run says so in one line and exits non-zero, without creating or changing a run directory; raising
  ``max_epochs`` trains on;
* ``trainer.enable_checkpointing: false`` trains without a checkpoint callback.

Everything runs in this process (``unisent.cli.main``): about 30 s on a 2-core CPU.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
import yaml

from tests.conftest import fit_recipe
from unisent.cli import main
from unisent.resources import EVALUATION_DATA_DIR  # noqa: E402

#: the repository's training, benchmark and test samples (not in the wheel)
SAMPLE_DIR = Path(__file__).resolve().parents[1] / "samples"

ROOT = Path(__file__).resolve().parents[1]
STEPS = 12  # 96 records / batch 16 = 6 steps an epoch, max_epochs: 2

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture
def recipe(tiny_recipe, tmp_path) -> Path:
    """recipes/quickstart.yaml on the tiny BERT. The learning rate is constant after a fixed warm-up:
    the quickstart's linear decay is computed from the run's length, so a first leg cut short with
    max_steps=5 decays to 0 at its step 5 and cannot match an uninterrupted run's first 5 steps."""
    config = yaml.safe_load(tiny_recipe(ROOT / "recipes/quickstart.yaml", max_records=96).read_text(encoding="utf-8"))
    config["data"]["batch_size"] = 16
    config["model"]["train"] = {"schedule": {"decay": "constant", "warmup_steps": 2}}
    config["model"]["optimizer"]["init_args"]["lr"] = 1.0e-3
    config["trainer"].update(enable_progress_bar=False, enable_model_summary=False, deterministic=True)
    assert config["trainer"]["max_epochs"] == 2
    path = tmp_path / "quickstart.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False), encoding="utf-8")
    return path


def _hashes(directory: Path) -> dict[str, str]:
    return {
        str(p.relative_to(directory)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(directory.rglob("*"))
        if p.is_file()
    }


def _ckpt(path: Path) -> dict:
    return torch.load(path, map_location="cpu", weights_only=True)


def _deleted_warnings(recwarn) -> list[str]:
    """Lightning's "Previous log files in this directory will be deleted" warnings so far."""
    return [str(w.message) for w in recwarn if "will be deleted" in str(w.message)]


@pytest.mark.integration
def test_readme_commands_change_no_file_of_the_training_run(recipe, tmp_path, recwarn):
    runs = tmp_path / "runs"
    fit_recipe(recipe, runs)  # unisent fit -c recipes/quickstart.yaml
    run = runs / "quickstart" / "version_0"
    best = run / "checkpoints" / "best.ckpt"
    before = _hashes(run)
    assert {"metrics.csv", "config.yaml", "hparams.yaml", "checkpoints/best.ckpt", "checkpoints/last.ckpt"} <= set(
        before
    )

    main(["test", "-c", str(run / "config.yaml"), "--ckpt_path", str(best)])  # unisent test -c <run>/config.yaml ...
    assert _hashes(run) == before  # the training curves, config and hparams survive
    tested = runs / "quickstart" / "version_0-test-0"
    assert "test/score" in pd.read_csv(tested / "metrics.csv").columns
    assert {"config.yaml", "hparams.yaml"} <= {p.name for p in tested.iterdir()}
    main(["test", "-c", str(run / "config.yaml"), "--ckpt_path", str(best)])  # again: a new directory
    assert (runs / "quickstart" / "version_0-test-1" / "metrics.csv").is_file()
    # a validate from the run's config alone (its logger names the run's version) stays out of it too
    main(["validate", "-c", str(run / "config.yaml"), "--ckpt_path", str(run / "checkpoints" / "last.ckpt")])
    assert (runs / "quickstart" / "version_0-validate-0" / "metrics.csv").is_file()

    main(
        [
            "evaluate",
            "--model",
            str(run / "encoder"),
            "--tasks",
            "stsb-test",
            "--data-dir",
            str(EVALUATION_DATA_DIR),
            "--output",
            str(tmp_path / "eval.json"),
            "--quiet",
        ]
    )  # unisent evaluate
    assert json.loads((tmp_path / "eval.json").read_text())
    main(["export", str(best), "--format", "sentence-transformers", "--out", str(tmp_path / "exported")])
    main(
        [
            "encode",
            "--model",
            str(tmp_path / "exported"),
            "--input",
            str(SAMPLE_DIR / "sentences.txt"),
            "--output",
            str(tmp_path / "vectors.npy"),
        ]
    )
    assert np.load(tmp_path / "vectors.npy").shape[0] > 0
    assert _hashes(run) == before
    # the next `fit --ckpt_path last` still finds the training run, not an evaluation directory
    from unisent.run_progress import latest_run

    assert latest_run(runs / "quickstart") == run
    assert not _deleted_warnings(recwarn)


@pytest.mark.integration
def test_a_run_cut_short_with_max_steps_resumes_to_the_recipe_end(recipe, tmp_path, recwarn):
    fit_recipe(recipe, tmp_path / "ref")
    reference = _ckpt(tmp_path / "ref" / "quickstart" / "version_0" / "checkpoints" / "last.ckpt")
    assert reference["global_step"] == STEPS

    runs = tmp_path / "runs"
    fit_recipe(recipe, runs, "--trainer.max_steps=5", "--checkpoint.every_n_train_steps=4")
    run = runs / "quickstart" / "version_0"
    first = _ckpt(run / "checkpoints" / "last.ckpt")  # the final step 5, not the resume point of step 4
    # the epoch was cut at batch 5: the checkpoint resumes epoch 0 there, not "epoch 1 at batch 5"
    assert first["global_step"] == 5 and first["epoch"] == 0
    assert first["UnisentDataModule"]["epoch"] == 0 and first["UnisentDataModule"]["batches"] == 5

    fit_recipe(recipe, runs, "--ckpt_path", "last")  # the full recipe
    resumed = _ckpt(run / "checkpoints" / "last.ckpt")
    assert resumed["global_step"] == STEPS
    for name, tensor in reference["state_dict"].items():
        assert torch.equal(tensor, resumed["state_dict"][name]), name
    for k, state in reference["optimizer_states"][0]["state"].items():
        for key, value in state.items():
            assert torch.equal(value, resumed["optimizer_states"][0]["state"][k][key]), (k, key)
    assert sorted(p.name for p in (runs / "quickstart").iterdir()) == ["version_0"]
    assert (run / "metrics-0.csv").is_file() and (run / "metrics.csv").is_file()

    # the run is finished: resuming it again says so and exits non-zero, touching nothing
    before = _hashes(run)
    for ckpt_path in ("last", str(run / "checkpoints" / "last.ckpt")):  # (best.ckpt may be an earlier step)
        with pytest.raises(SystemExit) as exit_:
            fit_recipe(recipe, runs, "--ckpt_path", ckpt_path)
        message = str(exit_.value.code)
        assert message.startswith("unisent fit: error: nothing to train:") and "\n" not in message, message
        assert "already reached max_epochs=2" in message and "--trainer.max_epochs=3" in message
        assert f"step {STEPS}" in message
        assert sorted(p.name for p in (runs / "quickstart").iterdir()) == ["version_0"]  # no empty version_1
        assert _hashes(run) == before

    # extended, it trains on from where it stopped
    fit_recipe(recipe, runs, "--ckpt_path", "last", "--trainer.max_epochs=3")
    assert _ckpt(run / "checkpoints" / "last.ckpt")["global_step"] == STEPS + 6
    assert not _deleted_warnings(recwarn)  # resuming keeps metrics.csv as metrics-<k>.csv: nothing is deleted


def test_enable_checkpointing_false_trains_without_a_checkpoint_callback(recipe, tmp_path, capfd):
    runs = tmp_path / "runs"
    fit_recipe(recipe, runs, "--trainer.enable_checkpointing=false", "--trainer.max_steps=2")
    run = runs / "quickstart" / "version_0"
    assert (run / "encoder").is_dir() and not (run / "checkpoints").exists()
    out = capfd.readouterr()
    assert "this run writes no checkpoints" in out.out + out.err  # and what that means for --ckpt_path last
    assert "--ckpt_path last" in out.out + out.err
