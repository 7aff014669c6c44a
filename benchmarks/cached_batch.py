"""Peak memory and training throughput against batch size, with and without cached contrastive training.

Unsupervised SimCSE (two dropout views of each sentence, in-batch negatives, tau = 0.05) on all-MiniLM-L6-v2,
max length 32, fp32 (``trainer.precision: 32-true``), AdamW, on the 1,024 distinct sentences of
``samples/sentences.txt`` (a batch of 1,024 is the whole file: each epoch is one step, every sentence once).
Each configuration (a batch size, uncached or ``model.train.cache_chunk: N``: GradCache, see
:mod:`unisent.objectives.grad_cache`) runs ``unisent fit`` on a generated YAML for a few optimiser steps in a
fresh process, sequentially, and reports that process's peak resident memory (``VmHWM`` from
``/proc/self/status``, GB = 10^9 bytes) and the training throughput in sentences per second (rows of the
batch, not views: a step of batch B encodes 2B sequences) over the steps after the first (a warm-up step).
A callback records each step's wall time (``on_train_batch_start`` to ``on_train_batch_end``: forward,
gradients, optimiser step), its loss and ``VmHWM`` after it. The headline: the peak of cached batch 1,024 in
chunks of 64 over the peak of uncached batch 64.

    python benchmarks/cached_batch.py                                  # the real MiniLM (minutes)
    python benchmarks/cached_batch.py --only b64 b1024-c64             # just the headline pair
    python benchmarks/cached_batch.py --out table.md --json out.json   # also write the table and the results
    python benchmarks/cached_batch.py --steps 6 --threads 2            # more timed steps; torch threads

Configuration names: ``b<batch>`` (uncached) and ``b<batch>-c<chunk>`` (cached); ``--only`` takes any such
name, listed or not. ``--model`` swaps the backbone (a preset or a local model directory: the smoke test's
tiny BERT), ``--max-length`` the training length, ``--dropout`` overrides the backbone's dropout (0: the
cached and uncached losses must then be equal step for step; with dropout on, a cache whose chunks are
smaller than the 2B rows draws its masks chunk by chunk, so its losses differ slightly from the uncached
run's). Validation, checkpoints, the encoder save and evaluation are off: this measures training steps only.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from lightning.pytorch import Callback
from objective_memory import child, peak_rss_gb  # a sibling script: its fresh-process fit and VmHWM

ROOT = Path(__file__).resolve().parents[1]
SENTENCES = ROOT / "samples" / "sentences.txt"
#: the default configurations: uncached 64 ... 512, cached in chunks of 64 at 64 ... 1,024 (uncached 1,024, about
#: 10 GB on MiniLM, only with ``--only b1024``)
DEFAULT = ["b64", "b128", "b256", "b512", "b64-c64", "b256-c64", "b512-c64", "b1024-c64"]
BASELINE, HEADLINE, TARGET = "b64", "b1024-c64", 1.3

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def parse(name: str) -> tuple[int, int | None]:
    """``b256`` -> (256, None); ``b1024-c64`` -> (1024, 64)."""
    found = re.fullmatch(r"b(\d+)(?:-c(\d+))?", name)
    if not found or int(found[1]) < 1 or (found[2] is not None and int(found[2]) < 1):
        raise ValueError(f"a configuration is b<batch> or b<batch>-c<chunk>, got {name!r}")
    return int(found[1]), None if found[2] is None else int(found[2])


class StepTimer(Callback):
    """A Lightning callback (built by the CLI from the generated YAML): each training step's seconds, loss and
    ``VmHWM`` after it, and ``VmHWM`` when fitting starts (model loaded, before any step), written as JSON to
    ``out`` when training ends."""

    def __init__(self, out: str) -> None:
        super().__init__()
        self.out, self.steps, self.start_gb, self._t0 = out, [], 0.0, 0.0

    def on_fit_start(self, trainer, module) -> None:
        self.start_gb = peak_rss_gb()

    def on_train_batch_start(self, trainer, module, batch, batch_idx) -> None:
        self._t0 = time.perf_counter()

    def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx) -> None:
        seconds = time.perf_counter() - self._t0
        loss = outputs["loss"] if isinstance(outputs, dict) else outputs
        self.steps.append({"seconds": seconds, "loss": float(loss), "peak_gb": peak_rss_gb()})

    def on_train_end(self, trainer, module) -> None:
        Path(self.out).write_text(json.dumps({"start_gb": self.start_gb, "steps": self.steps}), encoding="utf-8")


def configuration(
    batch: int,
    chunk: int | None,
    steps: int,
    workdir: Path,
    timer_out: Path,
    model: str = "minilm-l6",
    max_length: int = 32,
    dropout: float | None = None,
    sentences: Path = SENTENCES,
) -> dict:
    """The ``unisent fit`` config of one measurement."""
    encoder = {"model": model, "pooler": "mean", "max_length": max_length}
    if dropout is not None:
        encoder["dropout"] = dropout
    model_config = {
        "encoder": encoder,
        "objectives": [{"class_path": "unisent.objectives.SimCSE", "init_args": {"temperature": 0.05}}],
        "optimizer": {"class_path": "unisent.optim.AdamW", "init_args": {"lr": 3.0e-5, "weight_decay": 0.0}},
        "train": {"save_encoder": False, "cache_chunk": chunk},
        "evaluation": {"val_tasks": [], "test_tasks": []},
    }
    return {
        "seed_everything": 42,
        "model": model_config,
        "data": {
            "train": {"simcse": {"path": str(sentences)}},
            "batch_size": batch,
            "cache_dir": str(workdir / "cache"),
        },
        "trainer": {
            "max_steps": steps,
            "max_epochs": -1,  # batch 1,024 is one step per epoch
            "precision": "32-true",
            "accelerator": "cpu",
            "devices": 1,
            "enable_checkpointing": False,
            "enable_progress_bar": False,
            "limit_val_batches": 0,
            "log_every_n_steps": 1,
            "logger": False,
            "callbacks": [{"class_path": "cached_batch.StepTimer", "init_args": {"out": str(timer_out)}}],
        },
    }


def measure(name: str, steps: int, workdir: Path, threads: int = 0, **settings) -> dict:
    """One configuration in a fresh process: its peak RSS, per-step record and throughput."""
    import yaml

    batch, chunk = parse(name)
    timer_out = workdir / f"{name}.steps.json"
    config = configuration(batch, chunk, steps, workdir, timer_out, **settings)
    path = workdir / f"{name}.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False), encoding="utf-8")
    here = str(Path(__file__).resolve().parent)  # StepTimer's module (cached_batch) for the child's CLI
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (os.environ.get("PYTHONPATH"), str(ROOT), here) if p)}
    command = [sys.executable, str(Path(__file__).resolve()), "--child", str(path), "--threads", str(threads)]
    load_before = os.getloadavg()[0]  # another job on the machine slows the timed steps: kept with the results
    done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} failed:\n{done.stderr[-4000:]}")
    result = json.loads(done.stdout.strip().splitlines()[-1])
    record = json.loads(timer_out.read_text(encoding="utf-8"))
    timed = record["steps"][1:]  # the first step is a warm-up
    seconds = sum(s["seconds"] for s in timed)
    return {
        "batch": batch,
        "cached": chunk is not None,
        "chunk": chunk,
        "peak_gb": result["peak_gb"],
        "start_gb": record["start_gb"],
        "sentences_per_s": batch * len(timed) / seconds if timed and seconds > 0 else None,
        "timed_steps": len(timed),
        "step_seconds": [s["seconds"] for s in record["steps"]],
        "losses": [s["loss"] for s in record["steps"]],
        "step_peak_gb": [s["peak_gb"] for s in record["steps"]],
        "process_seconds": result["seconds"],
        "threads": result["threads"],
        "load_average": [load_before, os.getloadavg()[0]],  # 1-minute load before and after the process
    }


def ratio(results: dict[str, dict], name: str, base: str = BASELINE) -> float | None:
    """``name``'s peak over ``base``'s (None if either was not measured)."""
    if name not in results or base not in results:
        return None
    return results[name]["peak_gb"] / results[base]["peak_gb"]


def table(results: dict[str, dict]) -> str:
    """The markdown table, one row per configuration in measurement order."""
    lines = [
        f"| batch | cached | chunk | peak RSS (GB) | sentences/s | peak / {BASELINE} uncached | first loss |",
        "|---:|:---:|---:|---:|---:|---:|---:|",
    ]
    for name, row in results.items():
        rate = "n/a" if row["sentences_per_s"] is None else f"{row['sentences_per_s']:.1f}"
        share = ratio(results, name)
        lines.append(
            f"| {row['batch']:,} | {'yes' if row['cached'] else 'no'} | {row['chunk'] or ''} | {row['peak_gb']:.2f} "
            f"| {rate} | {'n/a' if share is None else f'{share:.2f}x'} | {row['losses'][0]:.4f} |"
        )
    return "\n".join(lines) + "\n"


def headline(results: dict[str, dict]) -> str | None:
    """The issue's line: cached 1,024 in chunks of 64 against uncached 64 (None if either is missing)."""
    share = ratio(results, HEADLINE)
    if share is None:
        return None
    verdict = "holds" if share <= TARGET else "FAILS"
    return (
        f"peak RSS of {HEADLINE} / {BASELINE}: {results[HEADLINE]['peak_gb']:.3f} / {results[BASELINE]['peak_gb']:.3f}"
        f" GB = {share:.3f}x (target <= {TARGET}x: {verdict})"
    )


def run(
    only: list[str] | None = None,
    steps: int = 4,
    workdir: Path | None = None,
    threads: int = 0,
    **settings,
) -> dict[str, dict]:
    """Measure each configuration (``only``: these names, in this order; default :data:`DEFAULT`)."""
    names = list(only or DEFAULT)
    lines = sum(1 for line in Path(settings.get("sentences", SENTENCES)).open(encoding="utf-8") if line.strip())
    for name in names:  # a bad name, or a batch larger than the file (a short batch), fails before anything runs
        if parse(name)[0] > lines:
            raise ValueError(f"{name}: a batch of {parse(name)[0]} rows, but the training file has {lines} lines")
    results: dict[str, dict] = {}
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(workdir or tmp)
        work.mkdir(parents=True, exist_ok=True)
        for name in names:
            results[name] = row = measure(name, steps, work, threads, **settings)
            rate = row["sentences_per_s"]
            print(
                f"{name}: {row['peak_gb']:.2f} GB, {'n/a' if rate is None else f'{rate:.1f}'} sentences/s, "
                f"{row['process_seconds']:.0f} s",
                file=sys.stderr,
            )
    return results


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--only", nargs="*", help=f"configurations (default: {' '.join(DEFAULT)})")
    p.add_argument("--steps", type=int, default=4, help="optimiser steps per configuration; the first is not timed")
    p.add_argument("--model", default="minilm-l6", help="the backbone (a preset or a model directory)")
    p.add_argument("--max-length", type=int, default=32)
    p.add_argument("--dropout", type=float, help="override the backbone's dropout (default: its own, 0.1)")
    p.add_argument("--sentences", type=Path, default=SENTENCES, help="training sentences, one per line")
    p.add_argument("--workdir", type=Path, help="where configs, step records and caches go (default: a temp dir)")
    p.add_argument("--threads", type=int, default=0, help="torch threads of each run (0: torch's default)")
    p.add_argument("--out", type=Path, help="also write the markdown table (and the headline) here")
    p.add_argument("--json", type=Path, help="also write every result as JSON here")
    p.add_argument("--child", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.child:
        child(args.child, args.threads)
        return 0
    if args.steps < 2:
        p.error("--steps must be >= 2 (the first step is a warm-up, not timed)")
    settings = {
        "model": args.model,
        "max_length": args.max_length,
        "dropout": args.dropout,
        "sentences": args.sentences,
    }
    results = run(args.only, args.steps, args.workdir, args.threads, **settings)
    text = table(results)
    line = headline(results)
    print(text + (f"\n{line}\n" if line else ""))
    if args.out:
        args.out.write_text(text + (f"\n{line}\n" if line else ""), encoding="utf-8")
    if args.json:
        meta = {
            "steps": args.steps,
            "timed_steps": args.steps - 1,
            "precision": "32-true",
            "ratio": ratio(results, HEADLINE),
        }
        meta |= {k: str(v) if isinstance(v, Path) else v for k, v in settings.items()}
        args.json.write_text(json.dumps({"settings": meta, "results": results}, indent=2) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
