"""Fault-tolerant training: a run killed with SIGKILL and resumed with ``--ckpt_path last`` ends with
exactly the weights of an uninterrupted run (data position, random states, optimiser, schedule)."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import lightning as L
import pytest
import torch
import yaml

from tests.conftest import run_cli
from unisent.data import DataSource, ResumableSampler, UnisentDataModule
from unisent.encoders import EncoderConfig
from unisent.lightning_module import UnisentModule
from unisent.objectives import SimCSE
from unisent.optim import AdamW
from unisent.resume import RNG_KEY, AtomicCheckpointIO, UnisentCheckpoint, settle_stopped_epoch
from unisent.run_progress import stopping_point_reached
from unisent.training_config import EvaluationConfig, ScheduleConfig, TrainConfig

#: the repository's training, benchmark and test samples (not in the wheel)
SAMPLE_DIR = Path(__file__).resolve().parents[1] / "samples"

ROOT = Path(__file__).resolve().parents[1]


# ------------------------------------------------------------------------------------------ sampler
def test_resumable_sampler_is_deterministic_sharded_and_skips_by_index():
    sampler = ResumableSampler(103, 4, seed=3)
    assert len(sampler) == 100 and sampler.num_batches == 25
    first = list(sampler)
    assert len(set(first)) == 100 and list(ResumableSampler(103, 4, seed=3)) == first
    assert list(sampler) != first  # the next pass (a cycled loader) has another order
    sampler.set_epoch(1)
    epoch1 = list(sampler)
    assert epoch1 != first
    sampler.set_position(1, 0, 7)
    assert list(sampler) == epoch1[7 * 4 :]  # resumed at batch 7: the rest of the same pass
    sampler.set_position(2, 0, 3)
    sampler.set_epoch(2)  # Lightning sets the epoch that the resume set already: no reset
    assert list(sampler) == ResumableSampler(103, 4, seed=3).batches(2)[3:].reshape(-1).tolist()
    # two processes: disjoint halves of each global batch, same number of batches
    shards = [ResumableSampler(103, 4, seed=3, num_replicas=2, rank=r) for r in (0, 1)]
    a, b = (list(s) for s in shards)
    assert len(a) == len(b) == 48 and not set(a) & set(b)
    assert a[:4] + b[:4] == ResumableSampler(103, 8, seed=3).global_order(0)[:8].tolist()


def test_resumable_sampler_groups_lengths_per_global_batch():
    lengths = torch.randint(3, 60, (960,)).tolist()
    shards = [ResumableSampler(960, 8, lengths=lengths, mega_batch_factor=10, num_replicas=2, rank=r) for r in (0, 1)]
    batches = [s.batches(0) for s in shards]
    spread = [max(lengths[i] for i in b.tolist()) - min(lengths[i] for i in b.tolist()) for b in batches[0]]
    assert sum(spread) < 0.3 * 56 * len(spread)
    covered = torch.cat([b.reshape(-1) for b in batches])
    assert len(set(covered.tolist())) == 960


def test_datamodule_positions_follow_the_combine_mode():
    dm = UnisentDataModule(combine_mode="max_size_cycle")
    dm.samplers = {"long": ResumableSampler(100, 10), "short": ResumableSampler(30, 10)}
    assert dm.positions(7) == {"long": {"pass": 0, "batch": 7}, "short": {"pass": 2, "batch": 1}}
    dm.combine_mode = "max_size"
    assert dm.positions(7)["short"] == {"pass": 0, "batch": 3}
    dm.combine_mode = "sequential"
    assert dm.positions(12) == {"long": {"pass": 0, "batch": 10}, "short": {"pass": 0, "batch": 2}}


# ------------------------------------------------------------------------------------------ files
def test_checkpoints_are_written_to_a_temporary_file_and_renamed(tmp_path, monkeypatch):
    replaced = []
    real_replace = os.replace

    def spy(src, dst):
        replaced.append((Path(src), Path(dst)))
        assert Path(src).parent == Path(dst).parent and Path(src).is_file()
        real_replace(src, dst)

    monkeypatch.setattr(os, "replace", spy)
    io = AtomicCheckpointIO()
    io.save_checkpoint({"w": torch.ones(3)}, tmp_path / "ckpts" / "last.ckpt")
    assert replaced and replaced[0][1] == tmp_path / "ckpts" / "last.ckpt"
    assert torch.equal(torch.load(tmp_path / "ckpts" / "last.ckpt")["w"], torch.ones(3))
    assert [p.name for p in (tmp_path / "ckpts").iterdir()] == ["last.ckpt"]
    # a temporary file left by a killed writer (a dead pid on this host) is removed, others are kept
    import socket

    from unisent.io import remove_stale_temporaries

    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    stale = tmp_path / "ckpts" / f".last.ckpt.{dead.stdout.strip()}@{socket.gethostname()}.tmp"
    live = tmp_path / "ckpts" / f".last.ckpt.{os.getpid()}@{socket.gethostname()}.tmp"
    stale.write_bytes(b"partial")
    live.write_bytes(b"in progress")
    assert remove_stale_temporaries(tmp_path / "ckpts") == [stale]
    assert live.is_file() and not stale.exists()


def test_ckpt_path_last_points_the_logger_at_the_newest_run(tmp_path):
    from jsonargparse import Namespace

    from unisent.commands.resume_discovery import continue_last_run

    def config(logger_args, ckpt_path="last"):
        logger = Namespace(class_path="lightning.pytorch.loggers.CSVLogger", init_args=Namespace(**logger_args))
        return Namespace(ckpt_path=ckpt_path, checkpoint=Namespace(dirpath=None), trainer=Namespace(logger=logger))

    fresh = config({"save_dir": str(tmp_path), "name": "run", "version": None})
    continue_last_run(fresh)  # nothing to resume: Lightning starts from scratch
    assert fresh.trainer.logger.init_args.version is None
    for version, age in (("version_0", 100), ("version_1", 10), ("version_2", None)):
        run = tmp_path / "run" / version
        (run / "checkpoints").mkdir(parents=True)
        (run / "metrics.csv").write_text("step\n1\n")
        if age is not None:
            last = run / "checkpoints" / "last.ckpt"
            # the smallest file of `unisent fit` (read as data before Lightning resumes from it)
            torch.save({"state_dict": {}, "global_step": 1, "unisent": {"encoder": {}, "objectives": []}}, last)
            os.utime(last, (time.time() - age, time.time() - age))
    resumed = config({"save_dir": str(tmp_path), "name": "run", "version": None})
    continue_last_run(resumed)
    assert resumed.trainer.logger.init_args.version == 1  # the newest last.ckpt, not the newest directory
    assert (tmp_path / "run/version_1/metrics-0.csv").is_file() and not (
        tmp_path / "run/version_1/metrics.csv"
    ).exists()
    pinned = config({"save_dir": str(tmp_path), "name": "run", "version": 0})
    continue_last_run(pinned)
    assert pinned.trainer.logger.init_args.version == 0
    other = config({"save_dir": str(tmp_path), "name": "run", "version": None}, ckpt_path=None)
    continue_last_run(other)
    assert other.trainer.logger.init_args.version is None


# ------------------------------------------------------------------------------------------ in process
class _Crash(L.Callback):
    def __init__(self, step: int) -> None:
        self.step = step

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        if trainer.global_step == self.step:
            raise RuntimeError("simulated crash")


class _LateRestore(L.pytorch.strategies.SingleDeviceStrategy):
    """Reads the checkpoint after its setup, as FSDP and DeepSpeed do (the loaders exist by then)."""

    @property
    def restore_checkpoint_after_setup(self) -> bool:
        return True


def _fit(
    model_dir,
    root,
    max_steps=8,
    callbacks=(),
    ckpt_path=None,
    strategy="auto",
    num_workers=0,
    schedule="linear",
    cache_chunk=None,
):
    L.seed_everything(5)
    module = UnisentModule(
        train=TrainConfig(schedule=ScheduleConfig(warmup_steps=2, decay=schedule), cache_chunk=cache_chunk),
        encoder=EncoderConfig(model=str(model_dir), pooler="cls_mlp_train_only"),
        objectives=[SimCSE(name="unsup"), SimCSE(supervised=True, name="sup", weight=0.5)],
        optimizer=lambda params: AdamW(params, lr=1e-3),
        evaluation=EvaluationConfig(val_tasks=[]),
    )
    data = UnisentDataModule(
        train={
            "unsup": DataSource(str(SAMPLE_DIR / "sentences.txt"), max_records=48),
            "sup": DataSource(str(SAMPLE_DIR / "nli_triples.jsonl"), max_records=32),
        },
        batch_size=8,
        seed=11,
        num_workers=num_workers,
    )
    checkpoint = UnisentCheckpoint(dirpath=root / "ckpt", every_n_train_steps=2, save_last=True, monitor=None)
    trainer = L.Trainer(
        default_root_dir=root,
        max_steps=max_steps,
        max_epochs=100,
        deterministic=True,
        strategy=strategy,
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        **({"accelerator": "cpu"} if strategy == "auto" else {}),
        callbacks=[checkpoint, *callbacks],
    )
    trainer.fit(module, datamodule=data, ckpt_path=ckpt_path)
    return module, trainer


@pytest.mark.integration
@pytest.mark.usefixtures("one_thread")
@pytest.mark.parametrize("late", [False, True], ids=["restore-before-setup", "restore-after-setup"])
def test_crash_and_resume_in_process_matches_an_uninterrupted_run(tiny_bert_dir, tmp_path, late):
    # a worker process draws indices from the sampler as soon as the loader's iterator exists: with a
    # strategy that reads the checkpoint after building it, the iterator must be restarted
    workers = 1 if late else 0
    strategy = _LateRestore(device=torch.device("cpu")) if late else "auto"
    reference, _ = _fit(tiny_bert_dir, tmp_path / "ref", strategy=strategy, num_workers=workers)
    strategy = _LateRestore(device=torch.device("cpu")) if late else "auto"
    with pytest.raises(RuntimeError, match="simulated crash"):
        _fit(tiny_bert_dir, tmp_path / "run", callbacks=[_Crash(step=5)], strategy=strategy, num_workers=workers)
    last = torch.load(tmp_path / "run" / "ckpt" / "last.ckpt", weights_only=False)
    assert last["global_step"] == 4 and RNG_KEY in last
    # 48 records / 8 = 6 batches per epoch: step 4 is mid-epoch; the 4-batch loader is in its 2nd pass
    assert last["UnisentDataModule"]["positions"] == {"unsup": {"pass": 0, "batch": 4}, "sup": {"pass": 1, "batch": 0}}
    strategy = _LateRestore(device=torch.device("cpu")) if late else "auto"
    resumed, trainer = _fit(tiny_bert_dir, tmp_path / "run", ckpt_path="last", strategy=strategy, num_workers=workers)
    assert trainer.global_step == 8
    for (name, a), b in zip(reference.state_dict().items(), resumed.state_dict().values()):
        assert torch.equal(a, b), name


@pytest.mark.integration
@pytest.mark.usefixtures("one_thread")
def test_a_cached_run_resumes_exactly(tiny_bert_dir, tmp_path):
    """GradCache (``cache_chunk``) keeps each chunk's random state for its replay only: a crash at step 5 and a
    resume give the uninterrupted run's weights bit for bit, and they are not the uncached run's (the cache
    draws the dropout masks chunk by chunk)."""
    reference, _ = _fit(tiny_bert_dir, tmp_path / "ref", cache_chunk=3)
    with pytest.raises(RuntimeError, match="simulated crash"):
        _fit(tiny_bert_dir, tmp_path / "run", callbacks=[_Crash(step=5)], cache_chunk=3)
    resumed, trainer = _fit(tiny_bert_dir, tmp_path / "run", ckpt_path="last", cache_chunk=3)
    assert trainer.global_step == 8
    for (name, a), b in zip(reference.state_dict().items(), resumed.state_dict().values()):
        assert torch.equal(a, b), name
    uncached, _ = _fit(tiny_bert_dir, tmp_path / "plain")
    assert not torch.equal(
        uncached.encoder.backbone.embeddings.word_embeddings.weight,
        resumed.encoder.backbone.embeddings.word_embeddings.weight,
    )


@pytest.mark.usefixtures("one_thread")
def test_a_run_stopped_by_max_steps_saves_its_last_step_and_resumes_inside_that_epoch(tiny_bert_dir, tmp_path):
    # issue 18: a first leg cut by max_steps, resumed with a longer run, went on as "epoch 1 at batch 5"
    # (constant learning rate: a linear decay is computed from each leg's own max_steps). A last.ckpt
    # left at an earlier resume point when validation saves are due: tests/test_first_hour.py
    reference, _ = _fit(tiny_bert_dir, tmp_path / "ref", max_steps=8, schedule="constant")
    _fit(tiny_bert_dir, tmp_path / "run", max_steps=5, schedule="constant")
    last = torch.load(tmp_path / "run" / "ckpt" / "last.ckpt", weights_only=False)
    assert last["global_step"] == 5
    # 6 batches an epoch: stopped inside epoch 0, which the checkpoint resumes (Lightning had counted it done)
    assert last["epoch"] == 0 and last["UnisentDataModule"]["epoch"] == 0
    assert progress_of(last) == (5, 0)
    resumed, trainer = _fit(tiny_bert_dir, tmp_path / "run", max_steps=8, ckpt_path="last", schedule="constant")
    assert trainer.global_step == 8
    for (name, a), b in zip(reference.state_dict().items(), resumed.state_dict().values()):
        assert torch.equal(a, b), name


@pytest.mark.integration
@pytest.mark.usefixtures("one_thread")
def test_two_resumes_across_an_epoch_boundary_match_an_uninterrupted_run(tiny_bert_dir, tmp_path):
    """A resume from a checkpoint saved at an epoch's last batch, then a second crash and resume inside
    the next epoch: the second resume must find the data where the uninterrupted run had it (the soak
    found the epoch recorded one behind after the first resume, so the second drew epoch 0's batches)."""
    reference, _ = _fit(tiny_bert_dir, tmp_path / "ref", max_steps=12)
    with pytest.raises(RuntimeError, match="simulated crash"):
        _fit(tiny_bert_dir, tmp_path / "run", max_steps=12, callbacks=[_Crash(step=7)])
    boundary = torch.load(tmp_path / "run" / "ckpt" / "last.ckpt", weights_only=False)
    assert boundary["global_step"] == 6  # 48 records / 8 = 6 batches: the epoch's last batch
    with pytest.raises(RuntimeError, match="simulated crash"):
        _fit(tiny_bert_dir, tmp_path / "run", max_steps=12, callbacks=[_Crash(step=9)], ckpt_path="last")
    inside = torch.load(tmp_path / "run" / "ckpt" / "last.ckpt", weights_only=False)
    assert inside["global_step"] == 8
    assert inside["UnisentDataModule"]["epoch"] == 1 and inside["UnisentDataModule"]["batches"] == 2
    resumed, trainer = _fit(tiny_bert_dir, tmp_path / "run", max_steps=12, ckpt_path="last")
    assert trainer.global_step == 12
    for (name, a), b in zip(reference.state_dict().items(), resumed.state_dict().values()):
        assert torch.equal(a, b), name


def progress_of(checkpoint: dict):
    import tempfile

    from unisent.run_progress import checkpoint_progress

    with tempfile.TemporaryDirectory() as d:
        torch.save(checkpoint, Path(d) / "c.ckpt")
        return checkpoint_progress(Path(d) / "c.ckpt")


def test_settle_stopped_epoch_only_touches_an_epoch_cut_short():
    def ckpt(epoch_progress, processed, is_last):
        counts = dict(zip(("ready", "started", "processed", "completed"), epoch_progress))
        return {
            "epoch": counts["completed"],
            "global_step": 5,
            "loops": {
                "fit_loop": {
                    "epoch_progress": {"current": dict(counts), "total": dict(counts)},
                    "epoch_loop.batch_progress": {"current": {"processed": processed}, "is_last_batch": is_last},
                }
            },
            "UnisentDataModule": {"epoch": counts["completed"], "batches": processed, "positions": {}},
        }

    cut = ckpt((1, 1, 1, 1), 5, False)  # written by on_train_end after max_steps=5 in a 16-batch epoch
    assert settle_stopped_epoch(cut) and cut["epoch"] == 0 and cut["UnisentDataModule"]["epoch"] == 0
    assert cut["loops"]["fit_loop"]["epoch_progress"]["current"] == {
        "ready": 1,
        "started": 1,
        "processed": 0,
        "completed": 0,
    }
    assert not settle_stopped_epoch(cut)  # idempotent
    for untouched in (
        ckpt((1, 1, 0, 0), 5, False),  # a resume point mid-epoch
        ckpt((2, 2, 2, 2), 16, True),  # the end of a finished epoch
        ckpt((2, 2, 2, 1), 16, True),
    ):  # on_train_epoch_end
        before = repr(untouched)
        assert not settle_stopped_epoch(untouched) and repr(untouched) == before


def test_stopping_point_follows_lightnings_limits():
    from unisent.run_progress import Progress

    assert stopping_point_reached(Progress(32, 2), None, 2) == "max_epochs=2"
    assert stopping_point_reached(Progress(5, 0), None, 2) is None
    assert stopping_point_reached(Progress(12, 1), 12, 100) == "max_steps=12"
    assert stopping_point_reached(Progress(12, 1), -1, None) is None  # no limit: Lightning's 1000 epochs
    assert stopping_point_reached(Progress(12, 1000), -1, None) == "max_epochs=1000"
    assert stopping_point_reached(Progress(12, 5), 20, None) is None  # max_steps alone: no epoch limit


def test_the_start_and_end_lines_name_the_limit_that_ends_the_run():
    from unisent.run_progress import limits_line, stop_line

    # issue 37: --trainer.max_steps=400 on a recipe with max_epochs: 2 (16 steps an epoch) ends at step 32
    assert (
        limits_line(400, 2, 16)
        == "training until max_epochs=2 (about 32 steps) or max_steps=400, whichever comes first"
    )
    assert stop_line(32, 2, 400, 2) == "stopped at step 32: max_epochs=2 reached (max_steps=400 not reached)"
    assert (
        limits_line(20, 2, 16) == "training until max_steps=20 or max_epochs=2 (about 32 steps), whichever comes first"
    )
    assert stop_line(20, 1, 20, 2) == "stopped at step 20: max_steps=20 reached (max_epochs=2 not reached)"
    assert (
        limits_line(32, 2, 16) == "training until max_steps=32 or max_epochs=2 (about 32 steps), whichever comes first"
    )
    assert stop_line(32, 2, 32, 2) == "stopped at step 32: max_steps=32 and max_epochs=2 reached"
    assert limits_line(400, -1, 16, global_step=7) == "training from step 7 until max_steps=400"
    assert limits_line(-1, 3, None) == "training until max_epochs=3"  # a stream: no epoch length
    assert limits_line(-1, None, 5) == "training until max_epochs=1000 (about 5000 steps)"  # Lightning's default
    assert (
        limits_line(-1, -1, 5) == "training with no step or epoch limit (trainer.max_steps=-1, trainer.max_epochs=-1)"
    )
    assert limits_line(10, -1, 5, max_time="00:01:00:00") == (
        "training until max_steps=10 or max_time=00:01:00:00, whichever comes first"
    )
    assert stop_line(7, 0, 10, 2, "max_time reached") == (
        "stopped at step 7: max_time reached (max_steps=10, max_epochs=2 not reached)"
    )


@pytest.mark.integration
@pytest.mark.usefixtures("one_thread")
def test_a_fit_says_which_limit_will_end_it_and_which_did(tiny_bert_dir, tmp_path, capsys):
    """The newcomer's run: max_steps=400 on a recipe whose max_epochs ends it first (10 steps an epoch)."""
    from unisent.cli import main

    config = _config(tmp_path, tiny_bert_dir)
    data = yaml.safe_load(config.read_text())
    data["trainer"].update(max_epochs=2, val_check_interval=None, check_val_every_n_epoch=None)
    data["model"]["evaluation"] = {"val_tasks": []}
    config.write_text(yaml.safe_dump(data))
    main(_command(config, tmp_path / "runs", "--trainer.max_steps=400")[3:])
    err = capsys.readouterr().err
    assert "unisent fit: training until max_epochs=2 (about 20 steps) or max_steps=400, whichever comes first\n" in err
    assert "unisent fit: stopped at step 20: max_epochs=2 reached (max_steps=400 not reached)\n" in err


def test_test_validate_predict_log_beside_the_training_run(tmp_path):
    from jsonargparse import Namespace

    from unisent.commands.resume_discovery import separate_from_training_run

    run = tmp_path / "runs" / "quickstart" / "20260101-000000"
    (run / "checkpoints").mkdir(parents=True)
    (run / "metrics.csv").write_text("step\n1\n")

    def config(version=None, ckpt_path=None):
        logger = Namespace(
            class_path="lightning.pytorch.loggers.CSVLogger",
            init_args=Namespace(save_dir=str(tmp_path / "runs"), name="quickstart", version=version),
        )
        return Namespace(ckpt_path=ckpt_path, trainer=Namespace(logger=logger, default_root_dir=None))

    by_ckpt = config(ckpt_path=str(run / "checkpoints" / "best.ckpt"))
    separate_from_training_run(by_ckpt, "test")
    args = by_ckpt.trainer.logger.init_args
    assert (args.save_dir, args.name, args.version) == (str(run.parent), "", "20260101-000000-test-0")
    (run.parent / "20260101-000000-test-0").mkdir()
    by_version = config(version="20260101-000000")  # the run's own config.yaml names its version
    separate_from_training_run(by_version, "validate")
    assert by_version.trainer.logger.init_args.version == "20260101-000000-validate-0"
    again = config(version="20260101-000000", ckpt_path=str(run / "checkpoints" / "best.ckpt"))
    separate_from_training_run(again, "test")
    assert again.trainer.logger.init_args.version == "20260101-000000-test-1"
    fresh = config(ckpt_path=str(tmp_path / "elsewhere.ckpt"))  # no training run named: a new version_N as usual
    separate_from_training_run(fresh, "test")
    assert fresh.trainer.logger.init_args.version is None and fresh.trainer.logger.init_args.name == "quickstart"


# ------------------------------------------------------------------------------------------ SIGKILL
def _config(tmp_path, model_dir, streaming: bool = False) -> Path:
    # unsupervised SimCSE (dropout: the random state matters) + supervised SimCSE on a shorter,
    # cycled loader; 160 / 16 = 10 batches per epoch, 12 steps: the kill is mid-epoch, the resumed
    # run crosses an epoch boundary; validation every 3 steps selects best.ckpt
    config = {
        "seed_everything": 7,
        "model": {
            "encoder": {"model": str(model_dir), "pooler": "cls_mlp_train_only", "max_length": 32},
            "objectives": [
                {"class_path": "unisent.objectives.SimCSE", "init_args": {"name": "unsup"}},
                {
                    "class_path": "unisent.objectives.SimCSE",
                    "init_args": {"name": "sup", "supervised": True, "weight": 0.5},
                },
            ],
            "optimizer": {"class_path": "unisent.optim.AdamW", "init_args": {"lr": 1.0e-3}},
            "train": {"schedule": {"warmup_steps": 2}},
        },
        "data": {
            "train": {
                "unsup": {
                    "path": str(SAMPLE_DIR / "sentences.txt"),
                    "max_records": 160,
                    # a stream: 10 batches a pass, shuffled in a buffer; the resumed run replays pass 0
                    **({"streaming": True, "shuffle_buffer": 32} if streaming else {}),
                },
                "sup": {"path": str(SAMPLE_DIR / "nli_triples.jsonl"), "max_records": 64},
            },
            "batch_size": 16,
        },
        "trainer": {
            "max_steps": 12,
            "max_epochs": 100,
            "val_check_interval": 3,
            "check_val_every_n_epoch": None,
            "deterministic": True,
            "accelerator": "cpu",
            "enable_progress_bar": False,
            "enable_model_summary": False,
            "log_every_n_steps": 1,
        },
        "checkpoint": {"every_n_train_steps": 2},
    }
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def _command(config: Path, save_dir: Path, *extra: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "unisent.cli",
        "fit",
        "-c",
        str(config),
        "--trainer.logger.class_path=lightning.pytorch.loggers.CSVLogger",
        "--trainer.logger.init_args.name=run",
        f"--trainer.logger.init_args.save_dir={save_dir}",
        *extra,
    ]


def _step_of(path: Path) -> int:
    try:
        return int(torch.load(path, map_location="cpu", weights_only=True)["global_step"])
    except (OSError, EOFError, RuntimeError, KeyError):
        return -1


@pytest.mark.integration
def test_sigkill_mid_run_then_ckpt_path_last_reproduces_the_uninterrupted_weights(tiny_bert_dir, tmp_path):
    _kill_and_resume(tiny_bert_dir, tmp_path)


@pytest.mark.slow
@pytest.mark.distributed
def test_sigkill_and_resume_with_two_ddp_processes(tiny_bert_dir, tmp_path):
    """Two gloo processes (per-process random states, sharded data order); 8 x 2 = the same global batch."""
    _kill_and_resume(
        tiny_bert_dir,
        tmp_path,
        "--trainer.devices=2",
        "--trainer.strategy=ddp_find_unused_parameters_true",
        "--data.batch_size=8",
    )


@pytest.mark.slow  # 37 s: the default run keeps the SIGKILL of a map-style run, the same resume
def test_sigkill_mid_stream_then_ckpt_path_last_reproduces_the_uninterrupted_weights(tiny_bert_dir, tmp_path):
    """The same with the unsupervised objective's data streamed (``streaming: true``): the position in the
    stream is in the checkpoint, and the resumed stream sees the same records in the same order."""
    _kill_and_resume(tiny_bert_dir, tmp_path, streaming=True)


def _kill_and_resume(tiny_bert_dir, tmp_path, *extra: str, streaming: bool = False) -> None:
    config = _config(tmp_path, tiny_bert_dir, streaming)
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    env.pop("UNISENT_FAULT", None)

    def run(command: list[str], **more: str) -> tuple[int, str]:
        """The exit status and the output of ``command``: one process is a fork of this one (run_cli); DDP (``extra``)
        starts its processes from ``sys.argv``, so it runs as a new process group, killed whole at the end."""
        if not extra:
            done = run_cli(command, env={**env, **more}, cwd=ROOT)
            return done.returncode, done.stdout + done.stderr
        kw = {"cwd": ROOT, "stdout": subprocess.PIPE, "stderr": subprocess.STDOUT, "text": True}
        process = subprocess.Popen(command, start_new_session=True, env={**env, **more}, **kw)
        out = process.communicate(timeout=600)[0]
        with contextlib.suppress(ProcessLookupError):  # a DDP process left waiting for the killed one
            os.killpg(process.pid, signal.SIGKILL)
        return process.returncode, out

    code, out = run(_command(config, tmp_path / "ref", *extra))
    assert code == 0, out[-3000:]
    # the victim SIGKILLs itself in the middle of its 6th training step (global step 5, UNISENT_FAULT; under
    # DDP every process at that step): the last resume point is step 4 (every 2 steps), mid-epoch. No race with
    # a poll: the kill happens at that step however loaded the machine is.
    code, out = run(_command(config, tmp_path / "run", *extra), UNISENT_FAULT="train_step@6=SIGKILL")
    assert code == -signal.SIGKILL, out[-3000:]
    last = tmp_path / "run" / "run" / "version_0" / "checkpoints" / "last.ckpt"
    killed_at = _step_of(last)
    assert killed_at == 4, f"resuming from step {killed_at}"  # mid-run, mid-epoch (10 steps an epoch)
    assert not (last.parent.parent / "encoder").exists()  # the run did not finish

    code, out = run(_command(config, tmp_path / "run", "--ckpt_path", "last", *extra))
    assert code == 0, out[-3000:]
    assert f"unisent fit: resuming {last.parent.parent} from checkpoints/last.ckpt (step {killed_at}," in out

    ref_dir = tmp_path / "ref" / "run" / "version_0"
    a = torch.load(ref_dir / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=True)
    b = torch.load(last, map_location="cpu", weights_only=True)
    assert a["global_step"] == b["global_step"] == 12
    for name, tensor in a["state_dict"].items():
        assert torch.equal(tensor, b["state_dict"][name]), name
    for k, state in a["optimizer_states"][0]["state"].items():
        for key, value in state.items():
            assert torch.equal(value, b["optimizer_states"][0]["state"][k][key]), (k, key)
    assert a["lr_schedulers"] == b["lr_schedulers"]
    from safetensors.torch import load_file

    ea, eb = (
        load_file(ref_dir / "encoder" / "model.safetensors"),
        load_file(last.parent.parent / "encoder" / "model.safetensors"),
    )
    assert all(torch.equal(ea[k], eb[k]) for k in ea)
    # the interrupted attempt's metrics are kept next to the resumed ones
    assert (last.parent.parent / "metrics-0.csv").is_file() and (last.parent.parent / "metrics.csv").is_file()


# ------------------------------------------------------------------------------------------ SIGINT / SIGTERM
def _tree_bytes(run: Path) -> dict[str, bytes]:
    return {str(p.relative_to(run)): p.read_bytes() for p in sorted(run.rglob("*")) if p.is_file()}


def _default_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)  # as in a terminal, also when the tests run in a background job


@pytest.mark.slow  # 95 s: the default run keeps test_cluster's SIGTERM save and resume; Ctrl-C's is slow only
def test_sigint_and_sigterm_save_the_running_run_and_ckpt_path_last_continues_that_run(tiny_bert_dir, tmp_path):
    """Run A finishes; run B gets SIGINT in the middle of step 3 and run C SIGTERM in the middle of step 5
    (sent by the process itself through the UNISENT_FAULT hook, so at a known moment). Each saves its own
    last.ckpt at the end of that step, says so with the exact path, and the README's `--ckpt_path last`
    continues it (not A, the newest finished run) to its end, with A's weights; A's files stay byte-identical."""
    config = _config(tmp_path, tiny_bert_dir)
    data = yaml.safe_load(config.read_text())
    data["trainer"].update(max_steps=8, val_check_interval=None, check_val_every_n_epoch=1)
    data["checkpoint"] = {"every_n_train_steps": 0}  # no resume points: the interrupt's save is the only one
    config.write_text(yaml.safe_dump(data))
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    env.pop("UNISENT_FAULT", None)
    kw = {"cwd": ROOT, "capture_output": True, "text": True}
    root = tmp_path / "runs"

    finished = subprocess.run(_command(config, root), env=env, **kw)
    assert finished.returncode == 0, finished.stderr[-3000:]
    run_a = root / "run" / "version_0"
    a_files = _tree_bytes(run_a)
    a = torch.load(run_a / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=True)
    assert a["global_step"] == 8

    for version, (signal_name, step, status) in enumerate((("SIGINT", 3, 130), ("SIGTERM", 5, 143)), start=1):
        run = root / "run" / f"version_{version}"
        last = run / "checkpoints" / "last.ckpt"
        stopped = subprocess.run(
            _command(config, root),
            env={**env, "UNISENT_FAULT": f"train_step@{step}={signal_name}"},
            preexec_fn=_default_sigint,
            **kw,
        )
        assert stopped.returncode == status, stopped.stderr[-3000:]
        assert f"interrupted ({signal_name}); saved {last} at step {step}; continue this run with:" in stopped.stderr
        assert stopped.stderr.rstrip().endswith(
            f"--trainer.logger.init_args.version=version_{version} --ckpt_path last"
        )
        assert _step_of(last) == step  # the step in progress was finished and saved, no later one
        assert not (run / "encoder").exists()  # the run did not finish
        logged = [int(line.split(",")[1]) for line in (run / "metrics.csv").read_text().splitlines()[1:]]
        assert logged == list(range(step))  # every step up to the saved one logged (Lightning counts from 0)

        resumed = subprocess.run(_command(config, root, "--ckpt_path", "last"), env=env, **kw)
        assert resumed.returncode == 0, resumed.stderr[-3000:]
        assert f"unisent fit: resuming {run} from checkpoints/last.ckpt (step {step}, 0 epoch(s) done)\n" in (
            resumed.stderr
        )
        # which limit ends the run (10 steps an epoch: max_steps, long before max_epochs), and which one did
        assert (
            f"unisent fit: training from step {step} until max_steps=8 or max_epochs=100 (about 1000 steps), "
            "whichever comes first\n" in resumed.stderr
        )
        assert "unisent fit: stopped at step 8: max_steps=8 reached (max_epochs=100 not reached)\n" in resumed.stderr
        b = torch.load(last, map_location="cpu", weights_only=True)
        assert b["global_step"] == 8 and (run / "encoder").is_dir()
        for name, tensor in a["state_dict"].items():
            assert torch.equal(tensor, b["state_dict"][name]), name
        logged = [int(line.split(",")[1]) for line in (run / "metrics.csv").read_text().splitlines()[1:]]
        assert logged == list(range(step, 8))  # the resumed attempt starts at the next step: none lost, none repeated
        assert _tree_bytes(run_a) == a_files  # run A untouched
