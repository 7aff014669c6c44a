"""unisent.lightning_compat: each function returns what Lightning's private attribute holds, on real Lightning
objects; a missing attribute is one line naming the installed version, the attribute and the tested range; and
no other module of the package reads those private names."""

from __future__ import annotations

import re
import subprocess
import sys
from datetime import timedelta
from importlib.metadata import PackageNotFoundError
from pathlib import Path

import lightning as L
import lightning.fabric.utilities.distributed as fabric_distributed
import pytest
import torch
from lightning.fabric.connector import _PRECISION_INPUT
from lightning.fabric.plugins.environments import LightningEnvironment
from lightning.pytorch.demos.boring_classes import BoringModel
from lightning.pytorch.loggers import WandbLogger
from lightning.pytorch.strategies import DDPStrategy
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet

from unisent import lightning_compat as compat
from unisent.lightning_compat import LightningCompatError

PACKAGE = Path(compat.__file__).resolve().parent

#: the private names of Lightning the compatibility module reads (as attributes or imported names)
PRIVATE = re.compile(
    r"\.(_process_group_backend|_timeout|_should_accumulate|_data_fetcher|_wandb_init|_prefix|_accelerator_connector)\b"
    r"|\b(_PRECISION_INPUT|_get_default_process_group_backend_for_device)\b"
)


def _one_line_naming(error: pytest.ExceptionInfo, attribute: str) -> None:
    message = str(error.value)
    assert "\n" not in message
    assert f"lightning {compat.INSTALLED}" in message
    assert attribute in message
    assert f"lightning{compat.TESTED}" in message


def _trainer(**kwargs) -> L.Trainer:
    return L.Trainer(
        accelerator="cpu",
        devices=1,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        **kwargs,
    )


def test_the_installed_lightning_is_in_the_tested_range():
    assert compat.IN_TESTED_RANGE, f"lightning {compat.INSTALLED} is outside {compat.TESTED}: test it, then widen"


def test_the_tested_range_is_pyprojects_lightning_requirement_and_so_is_the_fallback(monkeypatch):
    tomllib = pytest.importorskip("tomllib")
    declared = tomllib.loads((PACKAGE.parent / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    lightning = [Requirement(line) for line in declared["dependencies"] if Requirement(line).name == "lightning"]
    assert [compat.TESTED] == [req.specifier for req in lightning], "stale metadata: reinstall unisent (pip -e .)"

    def no_metadata(name: str) -> None:
        raise PackageNotFoundError(name)

    monkeypatch.setattr(compat, "requires", no_metadata)
    assert [compat._tested_range()] == [req.specifier for req in lightning]


@pytest.mark.parametrize(
    ("installed", "where"),
    [("2.6.6", "within"), ("2.5.5", "within"), ("2.5.4", "outside"), ("2.7.0", "outside"), ("2.7.0rc1", "outside")],
)
def test_a_missing_attribute_names_the_installed_version_inside_or_outside_the_range(monkeypatch, installed, where):
    monkeypatch.setattr(compat, "TESTED", SpecifierSet(">=2.5.5,<2.7"))
    monkeypatch.setattr(compat, "INSTALLED", installed)
    message = str(compat._missing("X._y"))
    assert "\n" not in message
    assert f"lightning {installed} does not have" in message and "X._y" in message
    assert f"({where} the range unisent is tested with: lightning<2.7,>=2.5.5)" in message


def test_process_group_backend_and_timeout_are_the_strategys():
    given = DDPStrategy(process_group_backend="gloo", timeout=timedelta(minutes=7))
    assert compat.default_process_group_backend(given, torch.device("cpu")) == given._process_group_backend == "gloo"
    assert compat.process_group_timeout(given) == given._timeout == timedelta(minutes=7)
    default = DDPStrategy()
    assert default._process_group_backend is None
    expected = fabric_distributed._get_default_process_group_backend_for_device(torch.device("cpu"))
    assert compat.default_process_group_backend(default, torch.device("cpu")) == expected
    compat.set_process_group_backend(default, "gloo")
    assert default._process_group_backend == default.process_group_backend == "gloo"


def test_the_fit_loops_accumulation_and_data_fetcher_during_a_fit():
    seen = []

    class Record(L.Callback):
        def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
            seen.append(
                (
                    compat.should_accumulate(trainer),
                    trainer.fit_loop._should_accumulate(),
                    compat.data_fetcher(trainer) is trainer.fit_loop._data_fetcher is not None,
                )
            )

    trainer = _trainer(max_steps=2, accumulate_grad_batches=2, limit_val_batches=0, callbacks=[Record()])
    trainer.fit(BoringModel())
    assert [(mine, theirs) for mine, theirs, _ in seen] == [(True, True), (False, False), (True, True), (False, False)]
    assert all(same for _, _, same in seen)


def test_the_cluster_environment_and_the_precision_type_are_lightnings():
    trainer = _trainer()
    assert compat.cluster_environment(trainer) is trainer._accelerator_connector.cluster_environment
    assert isinstance(compat.cluster_environment(trainer), LightningEnvironment)
    assert compat.PrecisionInput is _PRECISION_INPUT


def test_the_wandb_loggers_init_settings_and_prefix(tmp_path):
    logger = WandbLogger(save_dir=str(tmp_path), offline=True, prefix="train", sync_tensorboard=False)
    assert compat.wandb_init_settings(logger) is logger._wandb_init
    assert compat.wandb_init_settings(logger)["sync_tensorboard"] is False
    assert compat.logger_prefix(logger) == logger._prefix == "train"


def test_a_missing_attribute_is_one_line_naming_it(monkeypatch, tmp_path):
    strategy = DDPStrategy()
    monkeypatch.delattr(strategy, "_process_group_backend")
    with pytest.raises(LightningCompatError) as error:
        compat.default_process_group_backend(strategy, torch.device("cpu"))
    _one_line_naming(error, "DDPStrategy._process_group_backend")
    with pytest.raises(LightningCompatError) as error:
        compat.set_process_group_backend(strategy, "gloo")
    _one_line_naming(error, "DDPStrategy._process_group_backend")
    monkeypatch.delattr(strategy, "_timeout")
    with pytest.raises(LightningCompatError) as error:
        compat.process_group_timeout(strategy)
    _one_line_naming(error, "DDPStrategy._timeout")

    monkeypatch.delattr(fabric_distributed, "_get_default_process_group_backend_for_device")
    with pytest.raises(LightningCompatError) as error:
        compat.default_process_group_backend(DDPStrategy(), torch.device("cpu"))
    _one_line_naming(error, "lightning.fabric.utilities.distributed._get_default_process_group_backend_for_device")

    trainer = _trainer()
    monkeypatch.delattr(type(trainer.fit_loop), "_should_accumulate")
    with pytest.raises(LightningCompatError) as error:
        compat.should_accumulate(trainer)
    _one_line_naming(error, "_FitLoop._should_accumulate")
    monkeypatch.delattr(trainer.fit_loop, "_data_fetcher")
    with pytest.raises(LightningCompatError) as error:
        compat.data_fetcher(trainer)
    _one_line_naming(error, "_FitLoop._data_fetcher")
    monkeypatch.delattr(trainer, "_accelerator_connector")
    with pytest.raises(LightningCompatError) as error:
        compat.cluster_environment(trainer)
    _one_line_naming(error, "Trainer._accelerator_connector")

    logger = WandbLogger(save_dir=str(tmp_path), offline=True)
    monkeypatch.delattr(logger, "_wandb_init")
    monkeypatch.delattr(logger, "_prefix")
    with pytest.raises(LightningCompatError) as error:
        compat.wandb_init_settings(logger)
    _one_line_naming(error, "WandbLogger._wandb_init")
    with pytest.raises(LightningCompatError) as error:
        compat.logger_prefix(logger)
    _one_line_naming(error, "WandbLogger._prefix")


@pytest.mark.integration
def test_a_missing_precision_type_fails_the_import_in_one_line():
    code = "import lightning.fabric.plugins.precision.precision as p\ndel p._PRECISION_INPUT\n"
    code += "import unisent.lightning_compat\n"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert done.returncode != 0
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("unisent.lightning_compat.LightningCompatError: ")
    assert "precision.precision._PRECISION_INPUT" in last and f"lightning {compat.INSTALLED}" in last


def test_no_other_module_reads_lightnings_private_names():
    found = [
        f"{path.relative_to(PACKAGE.parent)}:{n}: {line.strip()}"
        for path in sorted(PACKAGE.rglob("*.py"))
        if path.name != "lightning_compat.py"
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if PRIVATE.search(line)
    ]
    assert not found, "private names of Lightning outside unisent/lightning_compat.py:\n" + "\n".join(found)
