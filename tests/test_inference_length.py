"""Inference length apart from the training truncation (issue 39), runs without a logger in a folder of their
own, the bundled STS-B behind a custom data directory, and the progress bar of a run that max_steps ends."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
import yaml

from unisent.commands.fitting import fit
from unisent.resources import EVALUATION_DATA_DIR

SAMPLE_DIR = Path(__file__).resolve().parents[1] / "samples"
LONG = " ".join(["a man is playing a guitar on the street while a crowd of people watch him"] * 3)
SHORT = [("a man plays a guitar", "a man is playing a guitar"), ("a dog runs", "the cat sleeps on the mat")]

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def described_bert(tiny_bert_dir, tmp_path_factory) -> Path:
    """The tiny BERT with a tokenizer that declares its length, as a hub model's does (BERT: 512)."""
    directory = Path(shutil.copytree(tiny_bert_dir, tmp_path_factory.mktemp("described") / "bert"))
    config = json.loads((directory / "tokenizer_config.json").read_text())
    (directory / "tokenizer_config.json").write_text(json.dumps({**config, "model_max_length": 128}))
    return directory


def _recipe(path: Path, model: Path, root: Path, logger: bool = True, **encoder) -> Path:
    config = {
        "seed_everything": 3,
        "model": {
            "encoder": {"model": str(model), "pooler": "mean", "max_length": 8, **encoder},
            "objectives": [{"class_path": "unisent.objectives.SimCSE", "init_args": {"name": "unsup"}}],
            "evaluation": {"val_tasks": []},
        },
        "data": {"train": {"unsup": {"path": str(SAMPLE_DIR / "sentences.txt"), "max_records": 32}}, "batch_size": 8},
        "trainer": {
            "max_steps": 2,
            "max_epochs": -1,
            "enable_progress_bar": False,
            "accelerator": "cpu",
            "logger": (
                {
                    "class_path": "lightning.pytorch.loggers.CSVLogger",
                    "init_args": {"save_dir": str(root / "runs"), "name": "len"},
                }
                if logger
                else False
            ),
        },
    }
    path.write_text(yaml.safe_dump(config))
    return path


@pytest.fixture(scope="module")
def trained_run(described_bert, tmp_path_factory) -> Path:
    """A run trained 2 steps at max_length 8: its run directory."""
    root = tmp_path_factory.mktemp("trained")
    outcome = fit([_recipe(root / "recipe.yaml", described_bert, root)])
    assert outcome.run_dir is not None and (outcome.run_dir / "encoder").is_dir()
    return outcome.run_dir


def _sts_data(root: Path) -> Path:
    sts = root / "sts" / "stsbenchmark"
    sts.mkdir(parents=True)
    rows = [(4.5, *SHORT[0]), (0.5, *SHORT[1]), (3.8, LONG, "a man is playing a guitar"), (1.0, "the cat", LONG)]
    lines = [f"main-captions\tMSRvid\t2012test\t{i:04d}\t{s}\t{a}\t{b}" for i, (s, a, b) in enumerate(rows)]
    (sts / "sts-test.csv").write_text("\n".join(lines) + "\n")
    return root


def test_the_saved_encoder_and_the_checkpoint_keep_the_backbones_length(trained_run):
    import unisent

    saved = unisent.load(str(trained_run / "encoder"))
    assert saved.config.max_length == 128  # the tokenizer's (capped by the positions), not the training 8
    ckpt = unisent.load(str(trained_run / "checkpoints" / "last.ckpt"))
    assert ckpt.config.max_length == 128
    torch.testing.assert_close(saved.encode([LONG]), ckpt.encode([LONG]), atol=1e-5, rtol=0)


def test_evaluate_scores_whole_sentences_as_the_panel_and_max_length_cuts(trained_run, tmp_path, unisent_cli, capsys):
    from unisent.cli import main
    from unisent.evaluation.panel import evaluate_panel

    data = _sts_data(tmp_path / "data")
    out, cut = tmp_path / "full.json", tmp_path / "cut.json"
    model = str(trained_run / "encoder")
    unisent_cli("evaluate", "--model", model, "--tasks", "stsb-test", "--data-dir", str(data), "--output", str(out))
    score = json.loads(out.read_text())["tasks"]["stsb-test"]["score"]
    panel = evaluate_panel(model, ["stsb-test"], data)["stsb-test"]["score"]  # its own loader, at 256 tokens
    assert score == pytest.approx(panel)

    import unisent
    from unisent.inference.base import set_inference_length

    encoder = unisent.load(model)
    full = encoder.encode([LONG])
    assert set_inference_length(encoder, 8) == 8
    assert not torch.allclose(full, encoder.encode([LONG]), atol=1e-4)  # --max-length 8 changes the long one
    unisent_cli(
        "evaluate",
        "--model",
        model,
        "--tasks",
        "stsb-test",
        "--data-dir",
        str(data),
        "--max-length",
        "8",
        "--output",
        str(cut),
    )
    assert json.loads(cut.read_text())["tasks"]["stsb-test"]["metrics"]["n_pairs"] == 4
    capsys.readouterr()
    with pytest.raises(SystemExit):
        main(["evaluate", "--model", model, "--tasks", "stsb-test", "--max-length", "500"])
    assert "--max-length: a maximum length of 500 tokens exceeds the 128 positions" in capsys.readouterr().err


def test_inference_max_length_of_the_recipe_is_what_the_run_leaves(described_bert, tmp_path):
    import unisent
    from unisent.encoders import EncoderConfig

    with pytest.raises(ValueError, match="inference_max_length"):
        EncoderConfig(inference_max_length=0)
    outcome = fit([_recipe(tmp_path / "r.yaml", described_bert, tmp_path, inference_max_length=16)])
    assert unisent.load(str(outcome.run_dir / "encoder")).config.max_length == 16
    assert unisent.load(str(outcome.run_dir / "checkpoints" / "last.ckpt")).config.max_length == 16


@pytest.mark.integration
def test_runs_without_a_logger_get_a_folder_each(described_bert, tmp_path, monkeypatch, capsys):
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    recipe = _recipe(tmp_path / "nolog.yaml", described_bert, tmp_path, logger=False)
    fit([recipe])
    fit([recipe])
    runs = work / "runs" / "unisent"
    assert sorted(p.name for p in runs.iterdir()) == ["version_0", "version_1"]
    for run in runs.iterdir():
        assert (run / "config.yaml").is_file() and (run / "encoder").is_dir() and (run / "checkpoints").is_dir()
    assert list(work.iterdir()) == [work / "runs"]  # nothing else at the top of the working directory
    assert "writes config.yaml, checkpoints/ and encoder/ to runs/unisent/version_1" in capsys.readouterr().err


def test_python_evaluate_without_data_dir_and_the_bundled_fallback(tmp_path, caplog):
    from unisent.evaluation import evaluate, format_markdown

    class Lengths:
        def encode(self, sentences, batch_size=64, **_):
            return torch.tensor([[len(s), 1.0 + len(s.split()), 1.0] for s in sentences])

    default = evaluate(Lengths(), ["stsb-test"], None, progress=False)
    assert default["config"]["data_dir"] == str(EVALUATION_DATA_DIR) and "bundled_data" not in default["config"]
    own = tmp_path / "own"  # a custom data directory without STS-B: the bundled copy, said so
    own.mkdir()
    fallback = evaluate(Lengths(), ["stsb-test"], own, progress=False)
    assert fallback["tasks"]["stsb-test"]["score"] == pytest.approx(default["tasks"]["stsb-test"]["score"])
    assert fallback["config"]["bundled_data"] == {"stsb-test": str(EVALUATION_DATA_DIR)}
    assert "the bundled copy" in format_markdown(fallback) and "using the bundled copy" in caplog.text
    with pytest.raises(FileNotFoundError, match="sick"):  # a task that is not bundled still fails
        evaluate(Lengths(), ["sick-r"], own, progress=False, on_error="raise")


def test_the_rich_bar_of_a_run_that_max_steps_ends_shows_no_negative_epoch_limit():
    from lightning.pytorch import Trainer
    from lightning.pytorch.callbacks import RichProgressBar

    from unisent.commands.train import _epoch_without_limit

    for max_epochs, expected in ((-1, "Epoch 0"), (3, "Epoch 0/2")):
        bar = RichProgressBar()
        trainer = Trainer(max_epochs=max_epochs, max_steps=5, callbacks=[bar], logger=False, accelerator="cpu")
        _epoch_without_limit(trainer)
        assert bar._get_train_description(0).strip() == expected
