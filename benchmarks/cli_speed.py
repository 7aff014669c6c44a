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

- **settings** (issue 41): every system at **every** setting, in one process, on the STS-B test set
  (sentences1 + sentences2: 2,758 sentences; ``--quick``: the first 150 pairs), all-MiniLM-L6-v2:
  sentence-transformers fp32 and after ``.bfloat16()`` (batch 32, its default); a plain ONNX Runtime
  runner (no unisent code: ``transformers.AutoModel`` exported by ``torch.onnx.export`` with eager
  attention, ``onnxruntime.InferenceSession``, the tokenizer, length-sorted batches of 32, mean pooling
  and normalisation in numpy) in fp32 and int8 (``quantize_dynamic`` per tensor, its default, and per
  channel); unisent torch (``unisent.load("minilm-l6").encode``, fp32 and bf16) and unisent onnx
  (``unisent export --format onnx --quantize int8``, then ``unisent.load(DIR, backend="onnx")``, fp32 and
  int8), both at unisent's default batch (64). Sentences/s is the median of ``--rounds`` interleaved
  rounds (the order reverses every round); STS-B test Spearman x 100 of the cosines and the smallest
  cosine of each sentence's vector to sentence-transformers' fp32 vector come from the first round. The
  best of each side is its fastest setting whose STS-B is within 0.5 of the side's fp32; the ratios of
  unisent's best to the others' best are the issue's lines (>= 1.5x sentence-transformers, >= 1.2x
  plain ONNX Runtime int8). bf16 settings are skipped on a CPU without AVX512-BF16 or AMX (bf16 is ~50x
  slower there; ``--bf16-anyway`` runs them).

    python benchmarks/cli_speed.py                  # 3 rounds; prints the table
    python benchmarks/cli_speed.py --write          # also docs/benchmarks-cli.json (one entry per machine type)
    python benchmarks/cli_speed.py --quick          # a smoke run: 1 round, few steps and sentences
    python benchmarks/cli_speed.py --unisent-precision fp32 --write   # unisent in fp32 too (same precision)
    python benchmarks/cli_speed.py --tasks settings --write   # every system at every setting (needs unisent[onnx])
    python benchmarks/cli_speed.py --tasks settings --quick   # a smoke run of it: 300 sentences, 1 round
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

from throughput import _model_path, _sentence_source, _sentences, cpu_description  # noqa: E402

from unisent.hardware import choose_precision, cpu_flags  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "docs" / "benchmarks-cli.json"
#: the flags that decide how int8 and bf16 run, recorded with the settings table
SETTINGS_FLAGS = frozenset(
    {"avx2", "avx512f", "avx512_vnni", "avx512_bf16", "avx_vnni", "amx_tile", "amx_int8", "amx_bf16"}
)

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
  train:
    schedule: {{warmup_steps: 0, decay: constant}}
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


# ------------------------------------------------------------------------------------------ settings
#: a side's settings count for its best only within this many STS-B points of the side's fp32
BEST_WITHIN = 0.5


def stsb_pairs(quick: bool = False) -> tuple[list[str], list[str], list[float]]:
    """The bundled STS-B test set (1,379 pairs; ``quick``: the first 150)."""
    from unisent.export.onnx import stsb_test

    first, second, gold = stsb_test()
    n = 150 if quick else len(first)
    return first[:n], second[:n], [float(g) for g in gold[:n]]


def _mean_pool(last, mask):
    import numpy as np

    weights = mask[..., None].astype(np.float32)
    pooled = (last * weights).sum(1) / np.clip(weights.sum(1), 1e-9, None)
    return pooled / np.linalg.norm(pooled, axis=1, keepdims=True).clip(1e-12)


def plain_onnx_files(work: Path) -> dict[str, Path]:
    """all-MiniLM-L6-v2 as a plain user exports it, without unisent: ``torch.onnx.export`` of
    ``AutoModel`` (eager attention; SDPA does not quantise), and ``quantize_dynamic`` per tensor (its
    default) and per channel."""
    import torch
    from onnxruntime.quantization import QuantType, quantize_dynamic
    from transformers import AutoModel, AutoTokenizer

    folder = work / "plain-onnx"
    folder.mkdir(exist_ok=True)
    files = {"fp32": folder / "model.onnx", "int8": folder / "int8.onnx", "int8-pc": folder / "int8-pc.onnx"}
    if all(f.exists() for f in files.values()):
        return files
    backbone = AutoModel.from_pretrained(_model_path(), attn_implementation="eager").eval()

    class Plain(torch.nn.Module):  # keyword arguments: the model's forward has more positional ones
        def __init__(self) -> None:
            super().__init__()
            self.backbone = backbone

        def forward(self, input_ids, attention_mask, token_type_ids):
            out = self.backbone(input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids)
            return out.last_hidden_state

    model = Plain().eval()
    tokenizer = AutoTokenizer.from_pretrained(_model_path())
    batch = tokenizer(["A man is playing a guitar.", "ok"], padding=True, return_tensors="pt")
    names = ["input_ids", "attention_mask", "token_type_ids"]
    axes = {n: {0: "batch", 1: "sequence"} for n in [*names, "last_hidden_state"]}
    with torch.no_grad():
        torch.onnx.export(
            model,
            tuple(batch[n] for n in names),
            str(files["fp32"]),
            input_names=names,
            output_names=["last_hidden_state"],
            dynamic_axes=axes,
            opset_version=17,
            dynamo=False,
        )
    quantize_dynamic(str(files["fp32"]), str(files["int8"]), weight_type=QuantType.QInt8)
    quantize_dynamic(str(files["fp32"]), str(files["int8-pc"]), weight_type=QuantType.QInt8, per_channel=True)
    return files


def plain_onnx_runner(path: Path, batch_size: int = 32):
    """``encode(sentences)`` with a plain ``onnxruntime.InferenceSession``: tokenizer, length-sorted
    batches, mean pooling and normalisation in numpy."""
    import numpy as np
    import onnxruntime as ort
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(_model_path())
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])

    def encode(sentences: list[str]):
        order = sorted(range(len(sentences)), key=lambda i: len(sentences[i]), reverse=True)
        out = np.empty((len(sentences), 384), dtype=np.float32)
        for start in range(0, len(order), batch_size):
            idx = order[start : start + batch_size]
            batch = tokenizer([sentences[i] for i in idx], padding=True, truncation=True, max_length=256)
            feed = {k: np.asarray(v, dtype=np.int64) for k, v in batch.items()}
            (last,) = session.run(["last_hidden_state"], feed)
            out[idx] = _mean_pool(last, feed["attention_mask"])
        return out

    return encode


def settings_systems(work: Path, bf16: bool, unisent_batch: int = 64) -> dict[str, tuple[str, object]]:
    """``{setting: (side, encode(sentences) -> (n, d) array)}``, every system at every setting."""
    from sentence_transformers import SentenceTransformer

    import unisent
    from unisent.export import export_model

    systems: dict[str, tuple[str, object]] = {}
    st = SentenceTransformer(_model_path(), device="cpu")
    systems["sentence-transformers fp32"] = ("sentence-transformers", lambda s: st.encode(s, batch_size=32))
    if bf16:
        st16 = SentenceTransformer(_model_path(), device="cpu").bfloat16()
        systems["sentence-transformers bf16"] = ("sentence-transformers", lambda s: st16.encode(s, batch_size=32))
    files = plain_onnx_files(work)
    for key, label in (("fp32", "fp32"), ("int8", "int8 per tensor"), ("int8-pc", "int8 per channel")):
        systems[f"ONNX Runtime {label}"] = ("plain ONNX Runtime", plain_onnx_runner(files[key]))
    model = unisent.load("minilm-l6")

    def torch_encode(precision: str):
        return lambda s: model.encode(s, unisent_batch, precision=precision).numpy()

    systems["unisent torch fp32"] = ("unisent", torch_encode("fp32"))
    if bf16:
        systems["unisent torch bf16"] = ("unisent", torch_encode("bf16"))
    exported = work / "unisent-onnx"
    if not exported.exists():
        report = export_model("minilm-l6", exported, "onnx", quantize="int8")
        print("\n".join(report.notes), flush=True)
    for file in ("fp32", "int8"):
        runner = unisent.load(str(exported), backend="onnx", onnx_file=file)
        systems[f"unisent onnx {file}"] = ("unisent", lambda s, r=runner: r.encode(s, unisent_batch).numpy())
    return systems


def best_of_sides(rows: dict[str, dict]) -> dict[str, str]:
    """``{side: its fastest setting}`` among the settings within :data:`BEST_WITHIN` STS-B points of
    the side's fp32 setting (the setting whose name ends in ``fp32``)."""
    best: dict[str, str] = {}
    for side in dict.fromkeys(row["side"] for row in rows.values()):
        mine = {name: row for name, row in rows.items() if row["side"] == side}
        reference = max(row["stsb"] for name, row in mine.items() if name.endswith("fp32"))
        kept = {name: row for name, row in mine.items() if row["stsb"] >= reference - BEST_WITHIN}
        best[side] = max(kept, key=lambda name: kept[name]["median"])
    return best


def measure_settings(rounds: int, work: Path, quick: bool = False, bf16: bool = True) -> dict:
    import numpy as np
    from scipy.stats import spearmanr

    first, second, gold = stsb_pairs(quick)
    sentences = first + second
    systems = settings_systems(work, bf16)
    for encode in (s[1] for s in systems.values()):  # warm-up: first-call costs (threads, allocations) not timed
        encode(sentences[:64])
    rates: dict[str, list[float]] = {name: [] for name in systems}
    vectors: dict[str, np.ndarray] = {}
    for round_ in range(rounds):
        order = list(systems) if round_ % 2 == 0 else list(reversed(systems))
        for name in order:
            start = time.perf_counter()
            out = np.asarray(systems[name][1](sentences), dtype=np.float32)
            rates[name].append(len(sentences) / (time.perf_counter() - start))
            vectors.setdefault(name, out)
            print(f"settings round {round_ + 1} {name}: {rates[name][-1]:.1f} sentences/s", flush=True)
    reference = vectors["sentence-transformers fp32"]
    rows = {}
    for name, out in vectors.items():
        unit = out / np.linalg.norm(out, axis=1, keepdims=True).clip(1e-12)
        ref = reference / np.linalg.norm(reference, axis=1, keepdims=True).clip(1e-12)
        n = len(first)
        cosine = (unit[:n] * unit[n:]).sum(1)
        rows[name] = {
            "side": systems[name][0],
            "rates": rates[name],
            "median": statistics.median(rates[name]),
            "stsb": float(spearmanr(cosine, gold).statistic * 100),
            "min_cosine": float((unit * ref).sum(1).min()),
        }
    best = best_of_sides(rows)
    unisent_best = rows[best["unisent"]]["median"]
    ratios = {side: unisent_best / rows[name]["median"] for side, name in best.items() if side != "unisent"}
    return {"sentences": len(sentences), "rows": rows, "best": best, "ratios": ratios, "skipped_bf16": not bf16}


def settings_table(result: dict) -> str:
    r = result["settings"]
    lines = [
        f"- machine: {result['cpu']}, {result['threads']} threads, torch {result['torch']}, "
        f"load average {result['load_before']} before and {result['load_after']} after",
        f"- CPU flags that decide int8 and bf16: {', '.join(result.get('flags', [])) or 'none of them'}",
        f"- {r['sentences']:,} STS-B test sentences; sentences/s: median of the rounds (each round's in brackets)",
        *(["- bf16 settings skipped: the CPU has no AVX512-BF16 or AMX"] if r["skipped_bf16"] else []),
        "",
        "| system and setting | sentences/s | STS-B test | min cosine to fp32 |",
        "|---|---:|---:|---:|",
    ]
    for name, row in r["rows"].items():
        mark = "**" if name in r["best"].values() else ""
        rounds = ", ".join(f"{x:.0f}" for x in row["rates"])
        lines.append(
            f"| {mark}{name}{mark} | {mark}{row['median']:.0f}{mark} ({rounds}) | {row['stsb']:.2f} | "
            f"{row['min_cosine']:.5f} |"
        )
    lines.append("")
    lines.append(
        "Best of each side (fastest within 0.5 STS-B of its fp32): "
        + "; ".join(f"{side}: {name}" for side, name in r["best"].items())
    )
    lines.append("unisent's best against: " + "; ".join(f"{side} {ratio:.2f}x" for side, ratio in r["ratios"].items()))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--train-steps", type=int, nargs=2, default=[5, 25], metavar=("SHORT", "LONG"))
    parser.add_argument("--encode-sentences", type=int, nargs=2, default=[1000, 6000], metavar=("SHORT", "LONG"))
    parser.add_argument("--tasks", default="train,encode", help="train, encode and/or settings (comma-separated)")
    parser.add_argument("--bf16-anyway", action="store_true", help="settings: run bf16 on a CPU without bf16 too")
    parser.add_argument(
        "--unisent-precision",
        choices=["auto", "fp32"],
        default="auto",
        help="auto: unisent's default; fp32: an explicit fp32 (what auto gives on an AVX2-only CPU)",
    )
    parser.add_argument(
        "--quick", action="store_true", help="1 round, 2/4 steps, 200/600 sentences; settings: 300 sentences"
    )
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
            if task == "settings":
                bf16 = args.bf16_anyway or choose_precision("cpu").bf16
                result["flags"] = sorted(cpu_flags() & SETTINGS_FLAGS)
                result[task] = measure_settings(args.rounds, work, args.quick, bf16)
                continue
            sizes = args.train_steps if task == "train" else args.encode_sentences
            result[task] = measure(task, sizes, args.rounds, work, env, args.unisent_precision == "fp32")
    result["load_after"] = " ".join(f"{x:.2f}" for x in os.getloadavg())
    if "train" in result or "encode" in result:
        print(table(result))
    if "settings" in result:
        print(settings_table(result))
    if args.write and not args.quick:
        saved = json.loads(RESULTS.read_text()) if RESULTS.exists() else {}
        key = result["cpu"] + ("" if args.unisent_precision == "auto" else ", unisent fp32")
        if args.tasks == "settings":  # beside the train/encode entry of the same machine, not over it
            key = result["cpu"] + ", settings"
        saved[key] = result
        RESULTS.write_text(json.dumps(saved, indent=2) + "\n")
        print(f"written to {RESULTS.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
