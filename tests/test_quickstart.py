"""The quickstart (scripts/quickstart.sh, recipes/gausscse/quickstart.yaml) on the tiny BERT of conftest:

* :class:`unisent.callbacks.FreezeEncoder` keeps every encoder weight as loaded (and the encoder in eval
  mode while training) while the Gaussian head trains;
* the script's "before" model (one step at learning rate 0) is the initial model exactly, and
  ``unisent evaluate --similarity kl --tasks snli-direction-sample`` measures it and the trained model
  with the bundled held-out pairs;
* the script runs the commands it documents (checked against its text).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import torch
import yaml
from lightning.pytorch.callbacks import Callback

import unisent
from tests.conftest import fit_recipe
from unisent.cli import main

ROOT = Path(__file__).resolve().parents[1]
RECIPE = ROOT / "recipes/gausscse/quickstart.yaml"
#: the script's "before" model: steps at learning rate 0, no checkpoint
AT_LR_0 = ("--model.optimizer.init_args.lr=0", "--trainer.enable_checkpointing=false")

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(autouse=True)
def _no_pytest_argv(monkeypatch):
    monkeypatch.setattr(sys, "argv", ["unisent"])  # LightningCLI warns when pytest's own arguments are there


@pytest.fixture
def recipe(tiny_recipe, tmp_path) -> Path:
    config = yaml.safe_load(tiny_recipe(RECIPE, max_records=48).read_text(encoding="utf-8"))
    config["data"]["batch_size"] = 16
    config["trainer"].update(max_epochs=2, enable_progress_bar=False, enable_model_summary=False)
    path = tmp_path / "quickstart.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False), encoding="utf-8")
    return path


def _weights(directory: Path) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]:
    model = unisent.load(directory)
    return (
        {k: v.clone() for k, v in model.encoder.state_dict().items()},
        {k: v.clone() for k, v in model.head.state_dict().items()},
    )


def _same(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


class _Modes(Callback):
    def __init__(self) -> None:
        self.encoder_training: list[bool] = []

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        self.encoder_training.append(pl_module.encoder.training or any(m.training for m in pl_module.encoder.modules()))


@pytest.mark.integration
def test_freeze_encoder_trains_the_head_only(recipe, tmp_path, tiny_bert_dir):
    from unisent.callbacks import FreezeEncoder

    config = yaml.safe_load(RECIPE.read_text(encoding="utf-8"))
    assert {"class_path": "unisent.callbacks.FreezeEncoder"} in config["trainer"]["callbacks"]
    runs = tmp_path / "runs"
    step0 = fit_recipe(recipe, runs, "--trainer.max_steps=1", *AT_LR_0, version="step0") / "encoder"
    step0_again = fit_recipe(recipe, runs, "--trainer.max_steps=3", *AT_LR_0, version="step0-3") / "encoder"
    trained = fit_recipe(recipe, runs, version="trained") / "encoder"
    (enc0, head0), (enc0b, head0b), (enc1, head1) = _weights(step0), _weights(step0_again), _weights(trained)
    # learning rate 0 changes nothing: the step-0 model is the initial model, whatever the steps
    assert _same(enc0, enc0b) and _same(head0, head0b)
    # training moved the head and left every encoder weight as loaded (the tiny BERT's own)
    assert not _same(head0, head1)
    assert _same(enc0, enc1)
    from transformers import AutoModel

    published = AutoModel.from_pretrained(tiny_bert_dir).state_dict()
    backbone = {k.split("backbone.", 1)[1]: v for k, v in enc1.items() if "backbone." in k}
    assert backbone and all(torch.equal(v, published[k]) for k, v in backbone.items() if k in published)
    # the optimiser holds only the head, and the encoder runs in eval mode (no dropout) while training
    modes = _Modes()
    from unisent.commands.train import TRAINER_DEFAULTS, UnisentCLI
    from unisent.data import UnisentDataModule
    from unisent.lightning_module import UnisentModule

    cli = UnisentCLI(
        UnisentModule,
        UnisentDataModule,
        trainer_defaults=TRAINER_DEFAULTS,
        auto_configure_optimizers=False,
        save_config_callback=None,
        run=False,
        args=[
            "-c",
            str(recipe),
            "--trainer.logger=false",
            f"--trainer.default_root_dir={tmp_path}",
            "--trainer.max_steps=2",
            "--trainer.enable_checkpointing=false",
        ],
    )
    assert any(isinstance(c, FreezeEncoder) for c in cli.trainer.callbacks)
    cli.trainer.callbacks.append(modes)
    cli.trainer.fit(cli.model, cli.datamodule)
    held = {id(p) for group in cli.trainer.optimizers[0].param_groups for p in group["params"]}
    assert held == {id(p) for p in cli.model.objectives.parameters()}
    assert modes.encoder_training == [False, False]


@pytest.mark.integration
def test_evaluate_measures_before_and_after_on_the_held_out_pairs(recipe, tmp_path, capsys):
    runs = tmp_path / "runs"
    step0 = fit_recipe(recipe, runs, "--trainer.max_steps=1", *AT_LR_0, version="step0") / "encoder"
    trained = fit_recipe(recipe, runs, version="trained") / "encoder"
    results = {}
    for name, model in (("before", step0), ("after", trained)):
        out = tmp_path / f"{name}.json"
        main(
            [
                "evaluate",
                "--model",
                str(model),
                "--similarity",
                "kl",
                "--tasks",
                "snli-direction-sample",
                "--output",
                str(out),
                "--quiet",
            ]
        )
        results[name] = json.loads(out.read_text())["tasks"]["snli-direction-sample"]
    for entry in results.values():
        assert entry["metrics"]["n_pairs"] == 1000
        assert 0 <= entry["metrics"]["direction_sim"] <= 100 and 0 <= entry["metrics"]["direction_var"] <= 100
    assert "snli-direction-sample" in capsys.readouterr().out


def test_the_script_runs_the_documented_commands():
    script = (ROOT / "scripts/quickstart.sh").read_text(encoding="utf-8")
    assert "RECIPE=recipes/gausscse/quickstart.yaml" in script
    for command in (
        "--model.optimizer.init_args.lr 0",
        "--similarity kl --tasks snli-direction-sample",
        "--model minilm-l6 --tasks stsb-test",
        'unisent export "$OUT/encoder"',
        "HF_HUB_DISABLE_PROGRESS_BARS=1",
    ):
        assert command in script, command
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert "bash scripts/quickstart.sh" in readme and "docs/results/quickstart.md" in readme
