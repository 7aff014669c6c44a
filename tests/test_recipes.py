"""Every recipe BUILDS: the real CLI instantiates its model (encoder swapped for the tiny BERT, every
objective constructed with the recipe's own settings), its DataModule and its Trainer; the training
files (the recipe's own where they exist, bundled samples where they do not) are read, validated and
tokenised by the objectives' schemas, and one collated batch goes through every objective's forward.

``--print_config`` (tests/test_cli.py) only parses; here an objective that rejects its own settings
(GaussCSE ``sets: [foo]``, an unknown AMR form, a vocabulary file that is not there), a data file whose
fields do not match the objective, or an unknown evaluation task fails the default test run.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch
import yaml

from .conftest import recipe_files

ROOT = Path(__file__).resolve().parents[1]
RECIPES = recipe_files()

pytestmark = pytest.mark.usefixtures("one_thread")


def _build(config_path: Path, tmp_path: Path, monkeypatch):
    from unisent.commands.train import TRAINER_DEFAULTS, UnisentCLI
    from unisent.data import UnisentDataModule
    from unisent.lightning_module import UnisentModule

    monkeypatch.setattr(sys, "argv", ["unisent"])  # LightningCLI warns when pytest's own arguments are there
    return UnisentCLI(
        UnisentModule,
        UnisentDataModule,
        trainer_defaults=TRAINER_DEFAULTS,
        auto_configure_optimizers=False,
        save_config_callback=None,
        run=False,
        args=[
            "-c",
            str(config_path),
            "--trainer.logger=false",
            f"--trainer.default_root_dir={tmp_path}",
            "--trainer.enable_progress_bar=false",
            "--data.batch_size=4",
        ],
    )


@pytest.mark.integration
@pytest.mark.parametrize("recipe", RECIPES, ids=lambda p: str(p.relative_to(ROOT / "recipes")))
def test_recipe_instantiates_its_model_and_data(recipe, tiny_recipe, tmp_path, monkeypatch):
    from unisent.evaluation.tasks.builtin_tasks import resolve_tasks
    from unisent.lightning_module import UnisentModule
    from unisent.objectives import Objective, ObjectiveOutput

    raw = yaml.safe_load(recipe.read_text(encoding="utf-8"))
    evaluation = raw["model"].get("evaluation") or {}
    for key in ("val_tasks", "test_tasks"):  # the recipe's own tasks exist (the run below uses the STS sample)
        if evaluation.get(key):
            resolve_tasks(evaluation[key])

    cli = _build(tiny_recipe(recipe, max_records=64), tmp_path, monkeypatch)
    module, datamodule = cli.model, cli.datamodule
    assert isinstance(module, UnisentModule)
    # every objective of the recipe, with the recipe's own settings, built by its constructor
    assert len(module.objectives) == len(raw["model"]["objectives"])
    for objective, spec in zip(module.objectives, raw["model"]["objectives"]):
        assert isinstance(objective, Objective) and type(objective).__name__ == spec["class_path"].rsplit(".", 1)[-1]
        recorded = objective.config()["init_args"]
        for key, value in (spec.get("init_args") or {}).items():
            if key == "own_layers":  # set to 1 for the tiny model's two layers (tiny_recipe_config)
                assert recorded[key] == 1 and len(objective.head.layers) == 1
            elif isinstance(value, (int, float, bool)) or key in ("mode", "sets", "languages", "forms", "name"):
                assert recorded[key] == value, (key, recorded[key], value)
        if (spec.get("init_args") or {}).get("symbol_counts"):  # AMR: the vocabulary files were read
            vocabulary = module.encoder.tokenizer.get_vocab()
            assert objective.added_symbols and all(name in vocabulary for name in objective.added_symbols)

    # the data: read, validated against each objective's schema, tokenised; one batch per objective
    datamodule.attach(module)
    datamodule.setup("fit")
    assert set(datamodule.datasets) == {o.name for o in module.objectives}
    batch, _, _ = next(iter(datamodule.train_dataloader()))
    assert set(batch) == set(datamodule.datasets)
    module.train()
    with torch.no_grad():
        for objective in module.objectives:
            out = ObjectiveOutput.of(objective(module.encoder, batch[objective.name]))
            assert out.terms and torch.isfinite(objective.total(out.terms)), (objective.name, out)
