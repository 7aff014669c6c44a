"""Preemption soak on a simulated SLURM cluster: a 2-process `unisent fit` (gloo) stopped again and again by
SIGUSR1 or SIGTERM at random steps, requeued, resumed, and compared with an uninterrupted run.

    python benchmarks/cluster_soak.py         # 10 preemptions of a 50-step run (~4 min: 2-core EPYC Zen 3, fp32)
    python benchmarks/cluster_soak.py --preemptions 20 --steps 60 --seed 1 --out runs/cluster-soak

Each attempt is launched as `srun` launches a job's tasks: one process per rank with SLURM's variables
(``SLURM_JOB_ID``, ``SLURM_PROCID``, ``SLURM_NTASKS`` ...), the same command every time (the sbatch
script's: ``unisent fit -c recipe.yaml --ckpt_path last``) and a stand-in ``scontrol`` first on ``PATH``
that records each call. An attempt is stopped the way a scheduler stops it: SIGUSR1 (the time-limit
warning) or SIGTERM (preemption), sent to both ranks or to one, in the middle of a training step chosen at
random (``UNISENT_FAULT``, so the step is known however loaded the machine is).

Checked: every attempt but the last exits 0 after exactly one ``scontrol requeue <job>`` from rank 0; the
final ``last.ckpt`` (every weight and optimiser moment) and the saved encoder equal the uninterrupted run's
bitwise; each logged step appears once over all attempts (``steps trained twice``), with the reference
run's loss. Writes ``<out>/cluster-soak.json`` and prints a line per attempt.

The launcher functions are also what ``tests/test_cluster.py`` runs.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import random
import shutil
import socket
import stat
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SAMPLE = ROOT / "samples"
DDP = ("--trainer.devices=2", "--trainer.strategy=ddp_find_unused_parameters_true", "--data.batch_size=8")


def recipe(path: Path, model: Path, steps: int, every: int = 4) -> Path:
    """Unsupervised SimCSE (dropout: random states matter) + supervised SimCSE on a shorter, cycled loader;
    a CSV logger flushed every step; resume points every ``every`` steps."""
    import yaml

    config = {
        "seed_everything": 7,
        "model": {
            "encoder": {"model": str(model), "pooler": "cls_mlp_train_only", "max_length": 32},
            "objectives": [
                {"class_path": "unisent.objectives.SimCSE", "init_args": {"name": "unsup"}},
                {"class_path": "unisent.objectives.SimCSE", "init_args": {"name": "sup", "supervised": True}},
            ],
            "optimizer": {"class_path": "unisent.optim.AdamW", "init_args": {"lr": 1.0e-3}},
            "train": {"schedule": {"warmup_steps": 2}},
        },
        "data": {
            "train": {
                "unsup": {"path": str(SAMPLE / "sentences.txt"), "max_records": 160},
                "sup": {"path": str(SAMPLE / "nli_triples.jsonl"), "max_records": 64},
            },
            "batch_size": 16,
        },
        "trainer": {
            "max_steps": steps,
            "max_epochs": 1000,
            "deterministic": True,
            "accelerator": "cpu",
            "enable_progress_bar": False,
            "enable_model_summary": False,
            "log_every_n_steps": 1,
            "logger": {
                "class_path": "lightning.pytorch.loggers.CSVLogger",
                "init_args": {"save_dir": "runs", "name": "run", "flush_logs_every_n_steps": 1},
            },
        },
        "checkpoint": {"every_n_train_steps": every},
    }
    path.write_text(yaml.safe_dump(config))
    return path


def scontrol_stub(directory: Path) -> Path:
    """A stand-in ``scontrol`` in ``directory`` that appends its arguments to ``directory/scontrol.log``."""
    directory.mkdir(parents=True, exist_ok=True)
    stub = directory / "scontrol"
    stub.write_text(f'#!/bin/sh\necho "$@" >> "{directory / "scontrol.log"}"\n')
    stub.chmod(stub.stat().st_mode | stat.S_IEXEC)
    return directory / "scontrol.log"


def requeue_calls(log: Path) -> list[str]:
    return log.read_text().splitlines() if log.is_file() else []


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def base_env(cache: Path) -> dict[str, str]:
    env = {
        **os.environ,
        "OMP_NUM_THREADS": "1",
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "TOKENIZERS_PARALLELISM": "false",
        "UNISENT_CACHE": str(cache),
        "PYTHONPATH": os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p),
    }
    # a job's own: not this process's launcher variables, nor its W&B service (a run id would be "in use" there)
    for key in [k for k in env if k.startswith(("SLURM_", "TORCHELASTIC_")) or k in ("RANK", "LOCAL_RANK")]:
        del env[key]
    env.pop("WANDB_SERVICE", None)
    env.pop("UNISENT_FAULT", None)
    return env


def srun(
    command: list[str],
    env: dict[str, str],
    *,
    job: str = "4242",
    tasks: int = 2,
    stub: Path | None = None,
    faults: dict[int, str] | None = None,
    timeout: float = 900,
) -> list[subprocess.CompletedProcess]:
    """Run ``command`` as ``srun`` starts a job's tasks on one node: ``tasks`` processes with SLURM's
    variables, ``stub`` (the stand-in scontrol's folder) first on ``PATH``, ``faults[rank]`` as that
    rank's ``UNISENT_FAULT``; their results by rank."""
    port = str(_free_port())
    procs = []
    for rank in range(tasks):
        task_env = {
            **env,
            "SLURM_JOB_ID": job,
            "SLURM_JOB_NAME": "unisent-cluster-test",
            "SLURM_NTASKS": str(tasks),
            "SLURM_NTASKS_PER_NODE": str(tasks),
            "SLURM_NNODES": "1",
            "SLURM_NODEID": "0",
            "SLURM_NODELIST": "127.0.0.1",
            "SLURM_PROCID": str(rank),
            "SLURM_LOCALID": str(rank),
            "MASTER_ADDR": "127.0.0.1",
            "MASTER_PORT": port,
        }
        if stub is not None:
            task_env["PATH"] = f"{stub}{os.pathsep}{env.get('PATH', '')}"
        if faults and faults.get(rank):
            task_env["UNISENT_FAULT"] = faults[rank]
        procs.append(
            subprocess.Popen(
                command, env=task_env, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
            )
        )
    results = []
    for proc in procs:
        try:
            out = proc.communicate(timeout=timeout)[0]
        except subprocess.TimeoutExpired:
            for other in procs:
                other.kill()
            raise
        results.append(subprocess.CompletedProcess(command, proc.returncode, out, None))
    return results


def fit_command(config: Path, save_dir: Path, *extra: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "unisent.cli",
        "fit",
        "-c",
        str(config),
        f"--trainer.logger.init_args.save_dir={save_dir}",
        *DDP,
        *extra,
        "--ckpt_path",
        "last",
    ]


#: logged columns that measure wall-clock time, not training (the share of forward time per objective)
TIMED = ("forward_share",)


def logged(run: Path) -> list[dict[int, dict[str, str]]]:
    """Each attempt's logged metrics (global step, 1-based -> column -> value; the wall-clock columns left
    out), in the order the attempts ran: ``metrics-0.csv``, ``metrics-1.csv`` ... (the interrupted attempts'
    files, kept by ``--ckpt_path last``), then ``metrics.csv``."""
    files = sorted(run.glob("metrics-*.csv"), key=lambda p: int(p.stem.split("-")[1])) + [run / "metrics.csv"]
    attempts = []
    for path in files:
        rows: dict[int, dict[str, str]] = {}
        if path.is_file():
            with open(path, newline="") as f:
                for row in csv.DictReader(f):
                    kept = {k: v for k, v in row.items() if v and k not in ("step",) and not k.endswith(TIMED)}
                    rows.setdefault(int(row["step"]) + 1, {}).update(kept)
        attempts.append(rows)
    return attempts


def metric_differences(reference: Path, run: Path) -> list[str]:
    """The steps whose metrics over all of ``run``'s attempts are not the uninterrupted run's, column by column
    (a step missing or logged twice counts too)."""
    expected = logged(reference)[-1]
    merged: dict[int, dict[str, str]] = {}
    for attempt in logged(run):
        for step, row in attempt.items():
            merged.setdefault(step, {}).update(row)
    found = [f"step {s}: missing" for s in expected if s not in merged]
    found += [f"step {s}: not in the reference" for s in merged if s not in expected]
    for step in sorted(set(expected) & set(merged)):
        found += [
            f"step {step} {k}"
            for k in expected[step].keys() | merged[step].keys()
            if expected[step].get(k) != merged[step].get(k)
        ]
    return found


def differences(reference: Path, run: Path) -> list[str]:
    """What differs between two runs' final ``last.ckpt`` (weights, optimiser moments, schedule, step) and
    saved encoders, bitwise: an empty list when nothing does."""
    import torch
    from safetensors.torch import load_file

    a = torch.load(reference / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=True)
    b = torch.load(run / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=True)
    found = [] if a["global_step"] == b["global_step"] else [f"global_step {a['global_step']} != {b['global_step']}"]
    found += [name for name, t in a["state_dict"].items() if not torch.equal(t, b["state_dict"].get(name, t + 1))]
    for k, state in a["optimizer_states"][0]["state"].items():
        other = b["optimizer_states"][0]["state"].get(k, {})
        found += [f"optimizer {k}.{key}" for key, v in state.items() if not torch.equal(v, other.get(key, v + 1))]
    if a["lr_schedulers"] != b["lr_schedulers"]:
        found.append("lr_schedulers")
    ea, eb = (load_file(r / "encoder" / "model.safetensors") for r in (reference, run))
    found += [f"encoder {k}" for k in ea if k not in eb or not torch.equal(ea[k], eb[k])]
    return found


def twice(run: Path) -> list[int]:
    """The steps whose training loss more than one attempt logged (trained twice)."""
    seen: dict[int, int] = {}
    for attempt in logged(run):
        for step, row in attempt.items():
            seen[step] = seen.get(step, 0) + ("train/loss" in row)
    return sorted(step for step, n in seen.items() if n > 1)


def _step_of(path: Path) -> int:
    """The global step of a ``last.ckpt`` (0 when there is none yet)."""
    import torch

    return int(torch.load(path, map_location="cpu", weights_only=True)["global_step"]) if path.is_file() else 0


def _tiny_model(directory: Path) -> Path:
    import importlib.util

    if (directory / "encoder").is_dir():
        return directory / "encoder"
    spec = importlib.util.spec_from_file_location("encode_memory", ROOT / "benchmarks" / "encode_memory.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return Path(module.build_tiny_model(directory))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], allow_abbrev=False)
    parser.add_argument("--preemptions", type=int, default=10)
    parser.add_argument("--steps", type=int, default=50)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=ROOT / "runs" / "cluster-soak")
    args = parser.parse_args(argv)
    rng = random.Random(args.seed)
    out = args.out.resolve()
    for part in ("reference", "soak", "bin", "cache"):
        shutil.rmtree(out / part, ignore_errors=True)
    out.mkdir(parents=True, exist_ok=True)
    config = recipe(out / "recipe.yaml", _tiny_model(out / "tiny"), args.steps)
    env = base_env(out / "cache")
    log = scontrol_stub(out / "bin")
    started = time.monotonic()
    reference = srun(fit_command(config, out / "reference"), env, stub=out / "bin")
    if any(r.returncode for r in reference):
        print(reference[0].stdout[-3000:], file=sys.stderr)
        return 1
    attempts, ok = [], True
    for i in range(args.preemptions + 1):
        last = i == args.preemptions
        left = args.steps - _step_of(out / "soak" / "run" / "version_0" / "checkpoints" / "last.ckpt")
        if not last and left < 2:
            print(f"the run has {left} step(s) left: no room for preemption {i + 1}; use more --steps", file=sys.stderr)
            return 1
        sig, step = rng.choice(("SIGUSR1", "SIGTERM")), rng.randint(1, min(6, left - 1))
        ranks = rng.choice(((0, 1), (0,), (1,)))
        faults = None if last else {r: f"train_step@{step}={sig}" for r in ranks}
        calls = len(requeue_calls(log))
        results = srun(fit_command(config, out / "soak"), env, stub=out / "bin", faults=faults)
        codes = [r.returncode for r in results]
        requeued = requeue_calls(log)[calls:]
        fine = codes == [0, 0] and requeued == ([] if last else ["requeue 4242"])
        ok &= fine
        what = "to the end" if last else f"{sig} to rank(s) {','.join(map(str, ranks))} in step {step} of the attempt"
        print(f"attempt {i + 1}: {what}: exit {codes}, scontrol calls {requeued}{'' if fine else '  <-- WRONG'}")
        attempts.append({"signal": None if last else sig, "ranks": list(ranks), "step": step, "exit": codes})
        if not fine:
            print(results[0].stdout[-3000:], file=sys.stderr)
            break
    run, ref = out / "soak" / "run" / "version_0", out / "reference" / "run" / "version_0"
    diffs = differences(ref, run) if ok else ["an attempt failed"]
    repeated = twice(run) if ok else []
    metrics_differ = metric_differences(ref, run) if ok else []
    report = {
        "preemptions": args.preemptions,
        "steps": args.steps,
        "seed": args.seed,
        "attempts": attempts,
        "differences": diffs,
        "steps_trained_twice": repeated,
        "metric_differences": metrics_differ,
        "seconds": round(time.monotonic() - started, 1),
    }
    (out / "cluster-soak.json").write_text(json.dumps(report, indent=1) + "\n")
    print(
        f"{args.preemptions} preemptions, {len(diffs)} differences, {len(repeated)} steps trained twice, "
        f"{len(metrics_differ)} logged metrics differing ({report['seconds']} s)"
    )
    return 0 if ok and not diffs and not repeated and not metrics_differ else 1


if __name__ == "__main__":
    sys.exit(main())
