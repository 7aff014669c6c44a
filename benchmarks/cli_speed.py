"""The commands users run, against sentence-transformers at its defaults: ``unisent fit`` and ``unisent encode``.

``benchmarks/throughput.py`` times the inner loops in one process, both systems at the same precision.
This script times what a user waits for: whole commands in fresh processes, each system at its own
defaults (unisent: ``precision: auto`` as in its CPU recipes and ``unisent encode``; sentence-transformers:
fp32, its trainer's and ``encode``'s defaults), on the same model (the packaged all-MiniLM-L6-v2, mean
pooling) and data (STS-B train sentences, distinct, shuffled with seed 0).

A run's length includes start-up (imports, loading the model, Lightning's set-up); the cost of the work
itself is the difference between a long and a short run of the same command, so start-up cancels:

- **train**: unsupervised SimCSE, batch 64, max length 32, AdamW lr 3e-5. unisent: ``unisent fit -c``
  a recipe (written to a temporary folder) with ``--trainer.max_steps`` short and long;
  sentence-transformers: a script with ``SentenceTransformerTrainer`` + ``MultipleNegativesRankingLoss``
  (scale 20 = 1/0.05) on (anchor = positive) pairs, ``max_steps`` short and long. Rate = 64 x (long -
  short steps) / (long - short seconds).
- **encode**: ``unisent encode --model minilm-l6`` of a .txt file, against a script that loads
  ``SentenceTransformer`` and writes ``encode``'s output with ``numpy.save``; the long file holds more
  sentences than the short one. Rate = (long - short sentences) / (long - short seconds).

The systems alternate (the first system of each round alternates too), ``--rounds`` rounds; the ratio
of each round and the median are reported, with the CPU model and flags and the load average.

    python benchmarks/cli_speed.py                  # 3 rounds; prints the table
    python benchmarks/cli_speed.py --write          # also docs/benchmarks-cli.json (one entry per machine type)
    python benchmarks/cli_speed.py --quick          # a smoke run: 1 round, few steps and sentences
    python benchmarks/cli_speed.py --unisent-precision fp32 --write   # unisent in fp32 too (same precision)
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from throughput import _model_path, _sentence_source, _sentences  # noqa: E402

from unisent.hardware import choose_precision, cpu_description  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "docs" / "benchmarks-cli.json"

RECIPE = """\
seed_everything: 0
model:
  encoder: {{model: {model}, pooler: mean, max_length: 32}}
  objectives:
    - class_path: unisent.objectives.SimCSE
      init_args: {{supervised: false, temperature: 0.05}}
  optimizer:
    class_path: unisent.optim.AdamW
    init_args: {{lr: 3.0e-5, weight_decay: 0.0}}
  warmup_steps: 0
  schedule: constant
data:
  train:
    simcse: {{path: {data}}}
  batch_size: 64
trainer:
  max_epochs: 1
  precision: auto
  log_every_n_steps: 10
  enable_progress_bar: false
  logger:
    class_path: lightning.pytorch.loggers.CSVLogger
    init_args: {{save_dir: {runs}, name: bench}}
"""

ST_TRAIN = """\
import sys
from datasets import Dataset
from sentence_transformers import SentenceTransformer, SentenceTransformerTrainer
from sentence_transformers.losses import MultipleNegativesRankingLoss
from sentence_transformers.training_args import SentenceTransformerTrainingArguments

model_path, data, steps, out = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
lines = open(data, encoding="utf-8").read().splitlines()
model = SentenceTransformer(model_path)
model.max_seq_length = 32
args = SentenceTransformerTrainingArguments(
    output_dir=out, per_device_train_batch_size=64, max_steps=steps, learning_rate=3e-5,
    lr_scheduler_type="constant", report_to=[], save_strategy="no", disable_tqdm=True, seed=0,
)
trainer = SentenceTransformerTrainer(
    model=model, args=args, train_dataset=Dataset.from_dict({"anchor": lines, "positive": lines}),
    loss=MultipleNegativesRankingLoss(model, scale=20.0),
)
trainer.train()
model.save(out + "/model")
"""

ST_ENCODE = """\
import sys
import numpy as np
from sentence_transformers import SentenceTransformer

model_path, source, output = sys.argv[1:4]
lines = open(source, encoding="utf-8").read().splitlines()
np.save(output, SentenceTransformer(model_path).encode(lines))
"""


def _run(command: list[str], env: dict[str, str]) -> float:
    start = time.perf_counter()
    done = subprocess.run(command, env=env, capture_output=True, text=True)
    seconds = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(command)} failed ({done.returncode}):\n{done.stderr[-3000:]}")
    return seconds


def _unisent() -> str:
    script = Path(sys.executable).with_name("unisent")
    return str(script) if script.exists() else "unisent"


#: ``--unisent-precision fp32``: unisent's commands with an explicit fp32 (what ``auto`` gives on an AVX2-only CPU)
UNISENT_FP32 = {"train": ["--trainer.precision=32-true"], "encode": ["--precision", "fp32"]}


def commands(work: Path, task: str, system: str, size: int, fp32: bool = False) -> list[str]:
    """The command of one run: ``size`` is steps (train) or sentences (encode)."""
    extra = UNISENT_FP32[task] if fp32 else []
    if task == "train":
        if system == "unisent":
            return [_unisent(), "fit", "-c", str(work / "recipe.yaml"), f"--trainer.max_steps={size}", *extra]
        return [sys.executable, str(work / "st_train.py"), _model_path(), str(work / "train.txt"), str(size), str(work)]
    source = work / f"encode-{size}.txt"
    if system == "unisent":
        out = work / "unisent.npy"
        return [_unisent(), "encode", "--model", "minilm-l6", "--input", str(source), "--output", str(out)] + [
            "--quiet",
            "--overwrite",
            *extra,
        ]
    return [sys.executable, str(work / "st_encode.py"), _model_path(), str(source), str(work / "st.npy")]


def prepare(work: Path, args) -> None:
    (work / "train.txt").write_text("\n".join(_sentences(64 * max(args.train_steps) + 64)) + "\n", encoding="utf-8")
    recipe = RECIPE.format(model=_model_path(), data=work / "train.txt", runs=work / "runs")
    (work / "recipe.yaml").write_text(recipe)
    (work / "st_train.py").write_text(ST_TRAIN)
    (work / "st_encode.py").write_text(ST_ENCODE)
    for size in args.encode_sentences:
        (work / f"encode-{size}.txt").write_text("\n".join(_sentences(size)) + "\n", encoding="utf-8")


def measure(task: str, sizes: list[int], rounds: int, work: Path, env: dict[str, str], fp32: bool = False) -> dict:
    short, long = sizes
    units = (long - short) * (64 if task == "train" else 1)
    runs: dict[str, list[dict]] = {"unisent": [], "sentence-transformers": []}
    for round_ in range(rounds):
        order = list(runs) if round_ % 2 == 0 else list(reversed(runs))
        for system in order:
            seconds = {size: _run(commands(work, task, system, size, fp32), env) for size in (short, long)}
            cost = seconds[long] - seconds[short]
            runs[system].append(
                {"short_s": seconds[short], "long_s": seconds[long], "cost_s": cost, "sentences_per_s": units / cost}
            )
            print(f"{task} round {round_ + 1} {system}: {seconds} -> {units / cost:.1f} sentences/s", flush=True)
    ratios = [
        u["sentences_per_s"] / s["sentences_per_s"] for u, s in zip(runs["unisent"], runs["sentence-transformers"])
    ]
    return {"sizes": sizes, "runs": runs, "ratios": ratios, "median_ratio": statistics.median(ratios)}


def table(result: dict) -> str:
    rows = [
        f"- machine: {result['cpu']}, {result['threads']} threads, torch {result['torch']}, "
        f"load average {result['load_before']} before and {result['load_after']} after",
        f"- unisent: {result['unisent_precision']}; sentence-transformers: fp32 (its default)",
        f"- data: {result['data']}",
        "",
        "| command | sizes (short, long) | unisent sentences/s | sentence-transformers sentences/s | "
        "ratio per round | median ratio |",
        "|---|---|---|---|---|---:|",
    ]
    for task, label, unit in (
        ("train", "`unisent fit` vs `SentenceTransformerTrainer`", "steps"),
        ("encode", "`unisent encode` vs `SentenceTransformer.encode`", "sentences"),
    ):
        if task not in result:
            continue
        r = result[task]
        rates = {k: ", ".join(f"{x['sentences_per_s']:.1f}" for x in v) for k, v in r["runs"].items()}
        rows.append(
            f"| {label} | {r['sizes'][0]:,}, {r['sizes'][1]:,} {unit} | {rates['unisent']} | "
            f"{rates['sentence-transformers']} | {', '.join(f'{x:.2f}' for x in r['ratios'])} | "
            f"**{r['median_ratio']:.2f}** |"
        )
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--train-steps", type=int, nargs=2, default=[5, 25], metavar=("SHORT", "LONG"))
    parser.add_argument("--encode-sentences", type=int, nargs=2, default=[1000, 6000], metavar=("SHORT", "LONG"))
    parser.add_argument("--tasks", default="train,encode")
    parser.add_argument(
        "--unisent-precision",
        choices=["auto", "fp32"],
        default="auto",
        help="auto: unisent's default; fp32: an explicit fp32 (what auto gives on an AVX2-only CPU)",
    )
    parser.add_argument("--quick", action="store_true", help="1 round, 2/4 steps, 200/600 sentences")
    parser.add_argument("--write", action="store_true", help=f"add the result to {RESULTS.relative_to(ROOT)}")
    args = parser.parse_args(argv)
    if args.quick:
        args.rounds, args.train_steps, args.encode_sentences = 1, [2, 4], [200, 600]
    import torch

    env = {
        **os.environ,
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "TOKENIZERS_PARALLELISM": "false",
        "WANDB_MODE": "disabled",
    }
    result: dict = {
        "cpu": cpu_description(),
        "threads": torch.get_num_threads(),
        "torch": torch.__version__,
        "auto": choose_precision("cpu").line(),
        "unisent_precision": "fp32 (explicit: `--trainer.precision 32-true`, `--precision fp32`)"
        if args.unisent_precision == "fp32"
        else f"its default, {choose_precision('cpu').line()}",
        "data": _sentence_source(),
        "load_before": " ".join(f"{x:.2f}" for x in os.getloadavg()),
    }
    with tempfile.TemporaryDirectory(prefix="unisent-cli-speed-") as tmp:
        work = Path(tmp)
        prepare(work, args)
        for task in args.tasks.split(","):
            sizes = args.train_steps if task == "train" else args.encode_sentences
            result[task] = measure(task, sizes, args.rounds, work, env, args.unisent_precision == "fp32")
    result["load_after"] = " ".join(f"{x:.2f}" for x in os.getloadavg())
    print(table(result))
    if args.write and not args.quick:
        saved = json.loads(RESULTS.read_text()) if RESULTS.exists() else {}
        saved[result["cpu"] + ("" if args.unisent_precision == "auto" else ", unisent fp32")] = result
        RESULTS.write_text(json.dumps(saved, indent=2) + "\n")
        print(f"written to {RESULTS.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
