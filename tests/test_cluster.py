"""Runs on a cluster: a job preempted (SIGUSR1 before SLURM's time limit, SIGTERM on preemption or eviction)
finishes its step, saves one exact resume point, is requeued by rank 0 and continues as if never stopped;
a worker lost under ``torchrun --max-restarts`` is recovered from the newest complete resume point.

The SLURM tests launch 2 gloo processes as ``srun`` would (SLURM's variables, the sbatch script's command
with ``--ckpt_path last``) with a stand-in ``scontrol`` that records its calls; the launcher is
``benchmarks/cluster_soak.py``'s, whose soak repeats this 10 times (docs/scaling.md)."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

from unisent.commands.fitting import FitOutcome, requeue_if_preempted, requeue_lines
from unisent.resume import Interrupt, slurm_job_id

pytestmark = pytest.mark.integration  # the integration tier (bash scripts/test.sh; --fast leaves it out)

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("cluster_soak", ROOT / "benchmarks" / "cluster_soak.py")
soak = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(soak)

STEPS = 12  # 10 steps an epoch: the epoch ends (and validates) at step 10


@pytest.fixture(scope="module")
def cluster(tiny_bert_dir, tmp_path_factory):
    """The recipe, the environment, the stand-in scontrol and an uninterrupted 2-process run to compare with."""
    root = tmp_path_factory.mktemp("cluster")
    config = soak.recipe(root / "recipe.yaml", tiny_bert_dir, STEPS, every=4)
    env = soak.base_env(root / "cache")
    log = soak.scontrol_stub(root / "bin")
    reference = soak.srun(soak.fit_command(config, root / "reference"), env, stub=root / "bin")
    assert [r.returncode for r in reference] == [0, 0], reference[0].stdout[-3000:]
    assert soak.requeue_calls(log) == []  # a run that ends on its own requeues nothing
    return {"root": root, "config": config, "env": env, "log": log, "ref": root / "reference" / "run" / "version_0"}


def _assert_same_as_reference(cluster, run: Path) -> None:
    assert soak.differences(cluster["ref"], run) == []  # weights, optimiser moments, schedule, encoder: bitwise
    assert soak.metric_differences(cluster["ref"], run) == []  # every logged value at every step
    assert soak.twice(run) == []


@pytest.mark.distributed
@pytest.mark.parametrize(
    ("signal_name", "ranks", "step"),
    [
        # the default run keeps the one-rank SIGTERM case (a due validation, a signal to one rank); SIGUSR1 to
        # both ranks is the same path with another signal number
        pytest.param("SIGUSR1", (0, 1), 5, marks=pytest.mark.slow),
        ("SIGTERM", (1,), 10),
    ],
    ids=["sigusr1-time-limit-both-ranks", "sigterm-preemption-one-rank"],
)
def test_a_preempted_slurm_job_saves_its_step_requeues_once_and_continues_exactly(cluster, signal_name, ranks, step):
    """SLURM signals every task (SIGUSR1 here); a SIGTERM reaching one process alone stops the whole group at
    the same step too. The checkpoint is the signalled step's, not an earlier resume point (every 4 steps):
    no step is trained twice. Step 10 ends the epoch: its validation runs before the stop, and is logged once."""
    save_dir = cluster["root"] / signal_name
    command = soak.fit_command(cluster["config"], save_dir)
    before = len(soak.requeue_calls(cluster["log"]))
    faults = {rank: f"train_step@{step}={signal_name}" for rank in ranks}
    stopped = soak.srun(command, cluster["env"], stub=cluster["root"] / "bin", faults=faults)
    out = stopped[0].stdout
    assert [r.returncode for r in stopped] == [0, 0], out[-3000:]
    assert soak.requeue_calls(cluster["log"])[before:] == ["requeue 4242"]  # once, by rank 0
    run = save_dir / "run" / "version_0"
    last = run / "checkpoints" / "last.ckpt"
    assert f"interrupted ({signal_name}); saved {last} at step {step};" in out
    assert "unisent fit: requeued SLURM job 4242: its script runs again and continues this run" in out
    assert "requeued SLURM job" not in stopped[1].stdout  # rank 1 does not claim it
    assert not list(cluster["root"].rglob("hpc_ckpt_*.ckpt"))  # Lightning's mid-step save is off
    assert not (run / "encoder").exists()

    requeued = soak.srun(command, cluster["env"], stub=cluster["root"] / "bin")  # the same command, again
    assert [r.returncode for r in requeued] == [0, 0], requeued[0].stdout[-3000:]
    assert f"resuming {run} from checkpoints/last.ckpt (step {step}," in requeued[0].stdout
    assert soak.requeue_calls(cluster["log"])[before:] == ["requeue 4242"]
    assert [sorted(attempt) for attempt in soak.logged(run)] == [
        list(range(1, step + 1)),
        list(range(step + 1, STEPS + 1)),
    ]
    _assert_same_as_reference(cluster, run)


@pytest.mark.slow  # 45 s: join_elastic_group (torch's restart-key workaround) is then tested under -m slow only
@pytest.mark.distributed
def test_torchrun_restarts_a_group_that_lost_a_worker_from_the_newest_resume_point(cluster):
    """Rank 1 is SIGKILLed in its 7th step of the group's first start; torchrun restarts both workers with
    the same command, which resumes step 4's resume point and ends equal to the uninterrupted run."""
    save_dir = cluster["root"] / "torchrun"
    fit = soak.fit_command(cluster["config"], save_dir)
    command = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc-per-node=2",
        "--max-restarts=2",
        "--monitor-interval=0.5",
        "-m",
        *fit[2:],
    ]
    env = {**cluster["env"], "UNISENT_FAULT": "train_step@7=SIGKILL/rank=1/restart=0"}
    done = subprocess.run(command, env=env, cwd=ROOT, capture_output=True, text=True, timeout=900)
    out = done.stdout + done.stderr
    assert done.returncode == 0, out[-4000:]
    run = save_dir / "run" / "version_0"
    assert "Signal 9 (SIGKILL)" in out or "exitcode: -9" in out, out[-4000:]  # the worker was lost
    assert f"resuming {run} from checkpoints/last.ckpt (step 4," in out
    assert soak.differences(cluster["ref"], run) == []
    assert soak.metric_differences(cluster["ref"], run) == []


# ------------------------------------------------------------------------------------------ requeue, no launch
def _stub(tmp_path, monkeypatch, status: int, message: str = "") -> Path:
    tmp_path.joinpath("scontrol").write_text(
        f'#!/bin/sh\necho "$@" >> "{tmp_path}/calls"\necho "{message}" >&2\nexit {status}\n'
    )
    tmp_path.joinpath("scontrol").chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:{os.environ['PATH']}")
    return tmp_path / "calls"


def _clear_slurm(monkeypatch):
    for key in [k for k in os.environ if k.startswith("SLURM_") or k in ("RANK", "LOCAL_RANK")]:
        monkeypatch.delenv(key)


def test_the_job_to_requeue_is_read_from_slurms_variables(monkeypatch):
    _clear_slurm(monkeypatch)
    assert slurm_job_id() is None
    monkeypatch.setenv("SLURM_JOB_ID", "123")
    assert slurm_job_id() == "123"
    monkeypatch.setenv("SLURM_ARRAY_JOB_ID", "77")
    monkeypatch.setenv("SLURM_ARRAY_TASK_ID", "3")
    assert slurm_job_id() == "77_3"  # an array task is requeued as itself
    monkeypatch.setenv("SLURM_JOB_NAME", "interactive")
    assert slurm_job_id() is None  # `srun --job-name=interactive`: not a batch job (as Lightning reads it)
    monkeypatch.setenv("SLURM_JOB_NAME", "train")
    monkeypatch.delenv("SLURM_ARRAY_JOB_ID")
    monkeypatch.setenv("SLURM_JOB_ID", "12; rm -rf ~")
    assert slurm_job_id() is None  # never passed on to a command


def test_a_failed_requeue_is_one_line_and_status_1_and_only_preemption_signals_requeue(tmp_path, monkeypatch):
    _clear_slurm(monkeypatch)
    calls = _stub(tmp_path, monkeypatch, 1, "scontrol: error: Requested operation is presently disabled")
    stopped = FitOutcome("fit", interrupted=Interrupt(signal="SIGUSR1", step=3))
    assert requeue_if_preempted(stopped) == stopped and stopped.status == 138  # outside SLURM: 128 + SIGUSR1
    monkeypatch.setenv("SLURM_JOB_ID", "99")
    failed = requeue_if_preempted(stopped)
    assert failed.requeued == "99" and failed.status == 1
    assert failed.requeue_failed == (
        "scontrol requeue 99 exited with status 1: scontrol: error: Requested operation is presently disabled"
    )
    assert requeue_lines("unisent fit", ["fit", "--ckpt_path", "last"], failed) == [
        "unisent fit: could not requeue SLURM job 99: " + failed.requeue_failed
    ]
    ctrl_c = FitOutcome("fit", interrupted=Interrupt(signal="SIGINT", step=3))
    assert requeue_if_preempted(ctrl_c).requeued is None and ctrl_c.status == 130  # a person stopped it
    monkeypatch.setenv("SLURM_PROCID", "1")
    other_rank = requeue_if_preempted(FitOutcome("fit", interrupted=Interrupt(signal="SIGTERM", step=3)))
    assert other_rank.status == 0 and other_rank.requeue_failed is None
    assert calls.read_text().splitlines() == ["requeue 99"]  # rank 0 only, SIGUSR1/SIGTERM only


# ------------------------------------------------------------------------------------------ W&B
def _wandb_records(path: Path):
    """The records of a W&B transaction log (``run-<id>.wandb``): LevelDB's log format (32 KiB blocks, each
    record a 7-byte header of CRC, length and type, split across blocks as FIRST/MIDDLE/LAST) after W&B's
    7-byte file header. wandb ships no reader of its own any more."""
    import struct

    from wandb.proto import wandb_internal_pb2

    data = path.read_bytes()
    assert data[:4] == b":W&B", path
    pos, block, parts = 7, 32768, b""
    while pos + 7 <= len(data):
        left = block - pos % block
        _, length, kind = struct.unpack("<IHB", data[pos : pos + 7])
        if left < 7 or (kind == 0 and length == 0):  # a block's zero padding
            pos += left
            continue
        chunk, pos = data[pos + 7 : pos + 7 + length], pos + 7 + length
        parts = chunk if kind in (1, 2) else parts + chunk
        if kind in (1, 4):  # FULL or LAST: a whole record
            record = wandb_internal_pb2.Record()
            record.ParseFromString(parts)
            yield record


def _wandb_history(run_file: Path) -> tuple[set[str], list[tuple[int, int, bool]]]:
    """The run ids and the (``_step``, ``trainer/global_step``, whether it holds a training loss) of every
    history row of one attempt."""
    ids, rows = set(), []
    for record in _wandb_records(run_file):
        kind = record.WhichOneof("record_type")
        if kind == "run":
            ids.add(record.run.run_id)
        elif kind == "history":
            items = {item.key or "/".join(item.nested_key): item.value_json for item in record.history.item}
            rows.append((int(items["_step"]), int(items["trainer/global_step"]), "train/loss" in items))
    return ids, rows


@pytest.mark.distributed
def test_a_requeued_run_continues_the_same_wandb_run_with_steps_that_keep_increasing(cluster):
    """W&B offline (as on a cluster without internet, synced later): the requeued job's attempt logs to the same
    run id, and its rows continue the step numbers (W&B's own count would restart at 0 in a new process,
    and a server drops rows whose step does not increase)."""
    import yaml

    root = cluster["root"] / "wandb"
    root.mkdir()
    config = yaml.safe_load(cluster["config"].read_text())
    config["trainer"]["logger"] = {
        "class_path": "lightning.pytorch.loggers.WandbLogger",  # the recipe's (recipes/loggers/wandb.yaml)
        "init_args": {"save_dir": str(root / "runs"), "project": "cluster", "offline": True},
    }
    (root / "recipe.yaml").write_text(yaml.safe_dump(config))
    command = [sys.executable, "-m", "unisent.cli", "fit", "-c", str(root / "recipe.yaml"), "--ckpt_path", "last"]
    env = {**cluster["env"], "WANDB_MODE": "offline", "WANDB_SILENT": "true"}
    before = len(soak.requeue_calls(cluster["log"]))
    stopped = soak.srun(command, env, tasks=1, stub=cluster["root"] / "bin", faults={0: "train_step@4=SIGUSR1"})
    assert stopped[0].returncode == 0, stopped[0].stdout[-3000:]
    assert soak.requeue_calls(cluster["log"])[before:] == ["requeue 4242"]
    requeued = soak.srun(command, env, tasks=1, stub=cluster["root"] / "bin")
    assert requeued[0].returncode == 0, requeued[0].stdout[-3000:]

    attempts = sorted((root / "runs" / "wandb").glob("offline-run-*/run-*.wandb"))
    assert len(attempts) == 2
    (first_ids, first), (second_ids, second) = (_wandb_history(path) for path in attempts)
    assert len(first_ids | second_ids) == 1  # one W&B run
    (run_id,) = first_ids
    assert (root / "runs" / "cluster" / run_id / "checkpoints" / "last.ckpt").is_file()
    assert (root / "runs" / "cluster" / run_id / "encoder").is_dir()  # the run's own folder, not save_dir's
    steps = [step for step, _, _ in first + second]
    assert all(a < b for a, b in zip(steps, steps[1:])), steps  # strictly increasing across the requeue
    assert all(step == global_step for step, global_step, _ in first + second)
    trained = [step for step, _, loss in first + second if loss]
    assert trained == list(range(STEPS))  # every training step's row once: none lost, none repeated
    assert [step for step, _, loss in first if loss] == [0, 1, 2, 3]  # the stopped attempt: up to its saved step


def test_a_requeue_of_a_command_without_ckpt_path_last_warns_that_it_would_start_again(tmp_path, monkeypatch):
    """The requeued job runs the same command: without ``--ckpt_path last`` it starts a new run at step 0."""
    _clear_slurm(monkeypatch)
    _stub(tmp_path, monkeypatch, 0)
    monkeypatch.setenv("SLURM_JOB_ID", "7")
    outcome = requeue_if_preempted(FitOutcome("fit", interrupted=Interrupt(signal="SIGUSR1", step=3)))
    assert outcome.status == 0
    for words in (["fit", "-c", "r.yaml", "--ckpt_path", "last"], ["fit", "-c", "r.yaml", "--ckpt_path=last"]):
        assert requeue_lines("unisent fit", words, outcome) == [
            "unisent fit: requeued SLURM job 7: its script runs again and continues this run"
        ]
    (line,) = requeue_lines("unisent fit", ["fit", "-c", "r.yaml"], outcome)
    assert line.startswith("unisent fit: warning: requeued SLURM job 7, but this command has no --ckpt_path last")
    monkeypatch.setenv("SLURM_PROCID", "1")
    assert requeue_lines("unisent fit", ["fit"], outcome) == []  # rank 0 speaks for the job
