"""Fault-injection soak: one `unisent fit` run killed again and again, resumed each time with the README's
command, compared with an uninterrupted run.

    python benchmarks/soak.py                      # 24 kills over a 60-step run of a tiny BERT (~6 min, 2 CPUs)
    python benchmarks/soak.py --kills 30 --steps 80 --seed 1 --out runs/soak

The run (unsupervised SimCSE, whose dropout draws from the random state, plus supervised SimCSE on a
shorter, cycled loader; resume points every 4 steps, STS-B dev validation every 5) is started with
`unisent fit -c recipe.yaml --ckpt_path last` and killed; the same command resumes it, until K kills have
landed, then it runs to its end. Each attempt is killed one way:

* SIGKILL or SIGINT, from outside at a random moment (import, tokenisation, training, validation, saving);
* SIGKILL or SIGINT in the middle of a training step, while a checkpoint is written (temporary file
  complete, not yet renamed), while the tokenisation cache is written (the cache is deleted before such an
  attempt) or after a validation's evaluation, before it is logged: the process signals itself through
  the `UNISENT_FAULT` hook (`unisent.testing.fault_point`), at a random occurrence.

Checked at the end: every weight and optimiser moment of the final `last.ckpt` and the saved encoder against
the uninterrupted run (bitwise), and the steps: each attempt's logged step numbers (metrics.csv, flushed
every step) must start right after the step of the checkpoint it resumed (else steps were lost or repeated),
the steps that reach the final weights must be 1..N once each, and each of them must have logged the
reference run's loss. Steps that a SIGKILLed attempt trained after its last checkpoint are counted apart
("recomputed": trained again by the next attempt, as designed); a SIGINT loses none. Writes
``<out>/soak.json`` and prints a table.
"""

from __future__ import annotations

import argparse
import csv
import importlib.util
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PHASES = ("anywhere", "train_step", "checkpoint_write", "cache_write", "evaluation")
KINDS = ("SIGKILL", "SIGINT")


def _tiny_model(directory: Path) -> Path:
    if (directory / "encoder").is_dir():
        return directory / "encoder"
    spec = importlib.util.spec_from_file_location("encode_memory", ROOT / "benchmarks" / "encode_memory.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return Path(module.build_tiny_model(directory))


def _recipe(path: Path, model: Path, steps: int) -> Path:
    import yaml

    sample = ROOT / "samples"
    path.write_text(
        yaml.safe_dump(
            {
                "seed_everything": 7,
                "model": {
                    "encoder": {"model": str(model), "pooler": "cls_mlp_train_only", "max_length": 32},
                    "objectives": [
                        {"class_path": "unisent.objectives.SimCSE", "init_args": {"name": "unsup"}},
                        {
                            "class_path": "unisent.objectives.SimCSE",
                            "init_args": {"name": "sup", "supervised": True, "weight": 0.5},
                        },
                    ],
                    "optimizer": {"class_path": "unisent.optim.AdamW", "init_args": {"lr": 1.0e-3}},
                    "train": {"schedule": {"warmup_steps": 3}},
                    "evaluation": {"val_tasks": ["stsb-dev"]},
                },
                "data": {
                    "train": {
                        "unsup": {"path": str(sample / "sentences.txt"), "max_records": 160},
                        "sup": {"path": str(sample / "nli_triples.jsonl"), "max_records": 64},
                    },
                    "batch_size": 16,
                },
                "trainer": {
                    "max_steps": steps,
                    "max_epochs": 1000,
                    "val_check_interval": 5,
                    "check_val_every_n_epoch": None,
                    "deterministic": True,
                    "accelerator": "cpu",
                    "enable_progress_bar": False,
                    "log_every_n_steps": 1,
                    "logger": {
                        "class_path": "lightning.pytorch.loggers.CSVLogger",
                        "init_args": {"save_dir": "runs", "name": "soak", "flush_logs_every_n_steps": 1},
                    },
                },
                "checkpoint": {"every_n_train_steps": 4},
            }
        )
    )
    return path


def _command(recipe: Path, save_dir: Path, *extra: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "unisent.cli",
        "fit",
        "-c",
        str(recipe),
        f"--trainer.logger.init_args.save_dir={save_dir}",
        *extra,
    ]


def _env(cache: Path, fault: str | None = None) -> dict[str, str]:
    env = {
        **os.environ,
        "OMP_NUM_THREADS": "1",
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "TOKENIZERS_PARALLELISM": "false",
        "UNISENT_CACHE": str(cache),
        "PYTHONPATH": os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p),
    }
    env.pop("UNISENT_FAULT", None)
    if fault:
        env["UNISENT_FAULT"] = fault
    return env


def _default_sigint() -> None:
    """In the child: SIGINT as in a terminal (a shell's background job, e.g. this soak under `&` or nohup,
    would pass SIGINT on as ignored, and `unisent fit` keeps an ignored SIGINT ignored)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _step_of(path: Path) -> int:
    import torch

    try:
        return int(torch.load(path, map_location="cpu", weights_only=True)["global_step"])
    except (OSError, EOFError, RuntimeError, KeyError):
        return 0


def _logged(metrics: Path) -> dict[int, str]:
    """global step (1-based) -> the train/loss it logged."""
    if not metrics.is_file():
        return {}
    logged = {}
    with open(metrics, newline="") as f:
        for row in csv.DictReader(f):
            try:
                if row.get("train/loss"):
                    logged[int(row["step"]) + 1] = row["train/loss"]
            except (TypeError, ValueError):  # a row cut by a SIGKILL
                continue
    return logged


def _plan(kills: int, rng: random.Random) -> list[tuple[str, str]]:
    combos = [(kind, phase) for phase in PHASES for kind in KINDS]
    plan = combos * (kills // len(combos)) + rng.sample(combos, kills % len(combos))
    rng.shuffle(plan)
    return plan


def _fault(phase: str, kind: str, rng: random.Random, first_step: float) -> tuple[str | None, float | None]:
    """The UNISENT_FAULT spec, or the delay of an outside kill: from 1 s to 2 s after the reference run's
    first step (``first_step`` seconds after its start), so that it lands in the start-up (imports, model,
    tokenisation) or in the first steps, and an attempt makes little progress."""
    if phase == "anywhere":
        return None, rng.uniform(1.0, first_step + 2.0)
    n = {"train_step": rng.randint(1, 3), "checkpoint_write": rng.randint(1, 2), "cache_write": 1, "evaluation": 1}[
        phase
    ]
    return f"{phase}@{n}={kind}", None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], allow_abbrev=False)
    parser.add_argument("--kills", type=int, default=24)
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=ROOT / "runs" / "soak-bench")
    args = parser.parse_args(argv)
    rng = random.Random(args.seed)
    out = args.out.resolve()
    shutil.rmtree(out / "reference", ignore_errors=True)
    shutil.rmtree(out / "soak", ignore_errors=True)
    out.mkdir(parents=True, exist_ok=True)
    model = _tiny_model(out / "tiny")
    recipe = _recipe(out / "recipe.yaml", model, args.steps)
    cache = out / "cache"
    shutil.rmtree(cache, ignore_errors=True)
    started = time.monotonic()

    print(f"reference: {args.steps} steps uninterrupted", flush=True)
    ref_run = out / "reference" / "soak" / "version_0"
    begin, first_step = time.monotonic(), None
    with open(out / "reference.log", "w") as handle:
        ref = subprocess.Popen(
            _command(recipe, out / "reference"), env=_env(cache), cwd=ROOT, stdout=handle, stderr=subprocess.STDOUT
        )
        while ref.poll() is None:
            if first_step is None and _logged(ref_run / "metrics.csv"):
                first_step = time.monotonic() - begin
            time.sleep(0.05)
    if ref.returncode or first_step is None:
        sys.exit(f"the reference run failed; see {out / 'reference.log'}")
    reference_losses = _logged(ref_run / "metrics.csv")

    run = out / "soak" / "soak" / "version_0"
    last = run / "checkpoints" / "last.ckpt"
    (out / "soak").mkdir()
    attempts: list[dict] = []
    plan = _plan(args.kills, rng)
    while True:
        landed_so_far = sum(a["killed"] for a in attempts)
        kind, phase = plan[landed_so_far] if landed_so_far < len(plan) else ("none", "none")
        fault, delay = _fault(phase, kind, rng, first_step) if kind != "none" else (None, None)
        if phase == "cache_write":
            shutil.rmtree(cache, ignore_errors=True)  # so that this attempt writes it
        resumed_from = _step_of(last) if last.is_file() else 0
        log = out / "soak" / f"attempt-{len(attempts):02d}.log"
        with open(log, "w") as handle:
            proc = subprocess.Popen(
                _command(recipe, out / "soak", "--ckpt_path", "last"),
                env=_env(cache, fault),
                cwd=ROOT,
                stdout=handle,
                stderr=subprocess.STDOUT,
                preexec_fn=_default_sigint,
            )
            try:
                proc.wait(timeout=delay)
            except subprocess.TimeoutExpired:
                proc.send_signal(getattr(signal, kind))
                proc.wait(timeout=600)
        rc = proc.returncode
        landed = (kind == "SIGKILL" and rc == -signal.SIGKILL) or (kind == "SIGINT" and rc in (130, -signal.SIGINT))
        logged = _logged(run / "metrics.csv")
        if (run / "metrics.csv").is_file():  # this attempt's log, out of the next attempt's way
            (run / "metrics.csv").rename(out / "soak" / f"attempt-{len(attempts):02d}-metrics.csv")
        attempts.append(
            {
                "kind": kind,
                "phase": phase,
                "fault": fault,
                "delay": delay,
                "returncode": rc,
                "killed": landed,
                "resumed_from": resumed_from,
                "logged": logged,
                "checkpoint_after": _step_of(last) if last.is_file() else 0,
            }
        )
        a = attempts[-1]
        print(
            f"attempt {len(attempts) - 1:2d}: {kind:7s} {phase:16s} rc={rc:4d} resumed at step {resumed_from:3d}, "
            f"logged {len(a['logged']):3d} steps, checkpoint now at step {a['checkpoint_after']}",
            flush=True,
        )
        if not landed and rc != 0:
            sys.exit(f"attempt {len(attempts) - 1} failed without a kill (rc {rc}); see {log}")
        if rc == 0:  # the run reached its end (the planned kill, if any, came too late)
            break

    # ---------------------------------------------------------------- steps
    lost, repeated, mismatched, recomputed = [], [], [], 0
    lineage: list[int] = []
    for i, a in enumerate(attempts):
        steps = sorted(a["logged"])
        end = attempts[i + 1]["resumed_from"] if i + 1 < len(attempts) else args.steps
        if steps and steps[0] != a["resumed_from"] + 1:  # the attempt did not start right after its checkpoint
            (lost if steps[0] > a["resumed_from"] + 1 else repeated).append((i, steps[0], a["resumed_from"]))
        kept = [s for s in steps if a["resumed_from"] < s <= end]
        if kept != list(
            range(a["resumed_from"] + 1, end + 1)
        ):  # the next attempt resumed from a step this one never logged
            lost.append((i, a["resumed_from"], end, kept[-1:] or None))
        recomputed += len([s for s in steps if s > end])
        lineage += kept
        mismatched += [(i, s) for s in kept if a["logged"][s] != reference_losses.get(s)]
    counts = Counter(lineage)
    repeated += [s for s, c in counts.items() if c > 1]
    lost += [s for s in range(1, args.steps + 1) if s not in counts]

    # ---------------------------------------------------------------- weights
    import torch
    from safetensors.torch import load_file

    a_ckpt = torch.load(ref_run / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=True)
    b_ckpt = torch.load(last, map_location="cpu", weights_only=True)
    differing = [k for k, t in a_ckpt["state_dict"].items() if not torch.equal(t, b_ckpt["state_dict"][k])]
    for k, state in a_ckpt["optimizer_states"][0]["state"].items():
        differing += [
            f"optimizer {k}.{n}"
            for n, v in state.items()
            if not torch.equal(v, b_ckpt["optimizer_states"][0]["state"][k][n])
        ]
    ea, eb = load_file(ref_run / "encoder" / "model.safetensors"), load_file(run / "encoder" / "model.safetensors")
    differing += [f"encoder {k}" for k in ea if not torch.equal(ea[k], eb[k])]

    kills = Counter((a["kind"], a["phase"]) for a in attempts if a["killed"])
    summary = {
        "steps": args.steps,
        "kills": sum(kills.values()),
        "kills_by_kind": {f"{k} {p}": n for (k, p), n in sorted(kills.items())},
        "final_step": int(b_ckpt["global_step"]),
        "differing_tensors": len(differing),
        "lost_steps": len(lost),
        "repeated_steps": len(repeated),
        "steps_with_another_loss": len(mismatched),
        "recomputed_after_sigkill": recomputed,
        "seconds": round(time.monotonic() - started),
        "command": " ".join(["python", "benchmarks/soak.py", *(argv if argv is not None else sys.argv[1:])]),
        "attempts": [
            {k: v for k, v in a.items() if k != "logged"} | {"logged_steps": sorted(a["logged"])} for a in attempts
        ],
        "details": {"lost": lost, "repeated": repeated, "mismatched": mismatched, "differing": differing[:20]},
    }
    (out / "soak.json").write_text(json.dumps(summary, indent=1, default=str))
    print("\n| kill | in | count |\n|---|---|---|")
    for (kind, phase), n in sorted(kills.items()):
        print(f"| {kind} | {phase} | {n} |")
    print(
        f"\n{summary['kills']} kills over one {args.steps}-step run "
        f"({len(attempts)} attempts, {summary['seconds']} s); "
        f"final step {summary['final_step']}; differing tensors (weights, optimiser, encoder): {len(differing)}; "
        f"lost steps: {len(lost)}; repeated steps: {len(repeated)}; steps whose loss differs from the reference: "
        f"{len(mismatched)}; steps recomputed after a SIGKILL (trained after the last checkpoint): {recomputed}"
    )
    ok = not (differing or lost or repeated or mismatched) and summary["final_step"] == args.steps
    return 0 if ok and summary["kills"] >= args.kills else 1


if __name__ == "__main__":
    sys.exit(main())
