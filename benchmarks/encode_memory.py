"""Peak memory of ``unisent encode`` on a large file vs a small one, and row alignment on sampled rows.

Generates a 200,000-line text file and a 20,000-line one (more than two chunks, so both reach the
per-chunk peak), encodes each in a fresh process with :func:`unisent.export.encode_file` to ``.npy``,
and reports each process's peak RSS (``resource.getrusage``) after loading the model and after
encoding. Bounded memory means the large file's peak equals the small file's although it has 10x the
rows. ``--in-memory`` adds ``unisent.load(...).encode(all lines)`` for comparison. Finally it
re-encodes randomly sampled lines one by one and compares them with the rows of the output.

    python benchmarks/encode_memory.py                      # tiny random BERT (see docs/export.md for timings)
    python benchmarks/encode_memory.py --threads 1          # faster on a CPU shared with other jobs
    python benchmarks/encode_memory.py --model minilm-l6    # all-MiniLM-L6-v2 (slow on a CPU: try --lines 20000)
    python benchmarks/encode_memory.py --in-memory          # also time unisent.load(...).encode(all lines)

``--model tiny`` (default) builds a 2-layer, 32-dim BERT with a WordPiece tokenizer trained on the
bundled sentences (random weights: this measures memory and alignment, not quality).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

#: the repository's training, benchmark and test samples (not in the wheel)
SAMPLE_DIR = Path(__file__).resolve().parents[1] / "samples"

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def _peak_rss_mb() -> float:
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak / 2**20 if sys.platform == "darwin" else peak / 2**10  # bytes on macOS, KiB on Linux


def build_tiny_model(directory: Path) -> Path:
    """A tiny BERT encoder (mean pooling) saved with ``save_pretrained``; returns its directory."""
    import torch
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, processors, trainers
    from transformers import BertConfig, BertModel, BertTokenizerFast

    from unisent.encoders import Encoder, EncoderConfig

    backbone = directory / "backbone"
    special = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    tok = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    tok.normalizer = normalizers.BertNormalizer(lowercase=True)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    sentences = (SAMPLE_DIR / "sentences.txt").read_text(encoding="utf-8").splitlines()
    tok.train_from_iterator(sentences, trainers.WordPieceTrainer(vocab_size=600, special_tokens=special))
    cls_id, sep_id = tok.token_to_id("[CLS]"), tok.token_to_id("[SEP]")
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B [SEP]", special_tokens=[("[CLS]", cls_id), ("[SEP]", sep_id)]
    )
    fast = BertTokenizerFast(
        tokenizer_object=tok,
        unk_token="[UNK]",
        pad_token="[PAD]",
        cls_token="[CLS]",
        sep_token="[SEP]",
        mask_token="[MASK]",
    )
    config = BertConfig(
        vocab_size=tok.get_vocab_size(),
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=128,
    )
    torch.manual_seed(0)
    BertModel(config).save_pretrained(backbone)
    fast.save_pretrained(backbone)
    encoder = Encoder(EncoderConfig(model=str(backbone), pooler="mean", max_length=64))
    return encoder.save_pretrained(directory / "encoder")


def write_lines(path: Path, n: int, seed: int = 0) -> Path:
    """``n`` distinct lines: 1 to 3 bundled sentences joined, numbered (lengths vary widely)."""

    pool = [s for s in (SAMPLE_DIR / "sentences.txt").read_text(encoding="utf-8").splitlines() if s.strip()]
    rng = random.Random(seed)
    with path.open("w", encoding="utf-8") as fh:
        for i in range(n):
            fh.write(" ".join(rng.choice(pool) for _ in range(rng.randint(1, 3))) + f" (#{i})\n")
    return path


def child(args: argparse.Namespace) -> None:
    """Runs in a fresh process: load, encode, print the peaks as JSON."""
    import torch

    import unisent
    from unisent.export import encode_file

    if args.threads:
        torch.set_num_threads(args.threads)
    model = unisent.load(args.model)
    loaded = _peak_rss_mb()
    start = time.perf_counter()
    if args.in_memory:
        import numpy as np

        lines = Path(args.input).read_text(encoding="utf-8").splitlines()
        np.save(args.output, model.encode(lines, args.batch_size).numpy())
        rows = len(lines)
    else:
        rows = encode_file(
            model, args.input, args.output, batch_size=args.batch_size, chunk_size=args.chunk_size, progress=False
        ).rows
    print(
        json.dumps(
            {
                "rows": rows,
                "rss_loaded_mb": loaded,
                "rss_peak_mb": _peak_rss_mb(),
                "seconds": time.perf_counter() - start,
            }
        )
    )


def _run_child(args: argparse.Namespace, model: str, source: Path, output: Path, in_memory: bool = False) -> dict:
    command = [
        sys.executable,
        __file__,
        "--child",
        "--model",
        model,
        "--input",
        str(source),
        "--output",
        str(output),
        "--batch-size",
        str(args.batch_size),
        "--chunk-size",
        str(args.chunk_size),
        "--threads",
        str(args.threads),
    ]
    done = subprocess.run(command + (["--in-memory"] if in_memory else []), check=True, capture_output=True, text=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def _check_alignment(model_spec: str, source: Path, output: Path, samples: int, seed: int = 1) -> tuple[int, float]:
    import numpy as np

    import unisent

    emb = np.load(output, mmap_mode="r")
    rng = random.Random(seed)
    picked = sorted(rng.sample(range(emb.shape[0]), min(samples, emb.shape[0])))
    wanted, texts = set(picked), {}
    with source.open(encoding="utf-8") as fh:
        for i, line in enumerate(fh):
            if i in wanted:
                texts[i] = line.rstrip("\n")
    model = unisent.load(model_spec)
    singles = np.concatenate([model.encode([texts[i]]).numpy() for i in picked])
    return len(picked), float(np.abs(emb[picked] - singles).max())


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="tiny", help="'tiny' (built here) or anything unisent.load takes")
    p.add_argument("--lines", type=int, default=200_000)
    p.add_argument("--small-lines", type=int, default=20_000)
    p.add_argument("--chunk-size", type=int, default=8192)
    p.add_argument("--batch-size", type=int, default=128)
    p.add_argument("--samples", type=int, default=200, help="rows re-encoded one by one for the alignment check")
    p.add_argument("--workdir", help="where files go (default: a temporary directory, removed at the end)")
    p.add_argument("--in-memory", action="store_true", help="also encode the large file in memory, for comparison")
    p.add_argument(
        "--threads",
        type=int,
        default=0,
        help="torch intra-op threads of the encoding processes (default 0: torch's default)",
    )
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--input", help=argparse.SUPPRESS)
    p.add_argument("--output", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child:
        child(args)
        return

    with tempfile.TemporaryDirectory() as tmp:
        work = Path(args.workdir or tmp)
        work.mkdir(parents=True, exist_ok=True)
        model = str(build_tiny_model(work / "tiny")) if args.model == "tiny" else args.model
        small, large = write_lines(work / "small.txt", args.small_lines), write_lines(work / "large.txt", args.lines)
        runs = {
            "small": _run_child(args, model, small, work / "small.npy"),
            "large": _run_child(args, model, large, work / "large.npy"),
        }
        if args.in_memory:
            runs["large, in memory"] = _run_child(args, model, large, work / "large_mem.npy", in_memory=True)
        n_checked, diff = _check_alignment(model, large, work / "large.npy", args.samples)
        dim = int(__import__("numpy").load(work / "large.npy", mmap_mode="r").shape[1])
        sources = {"small": small, "large": large, "large, in memory": large}

        threads = args.threads or __import__("torch").get_num_threads()
        print(
            f"model: {args.model}   chunk size: {args.chunk_size}   batch size: {args.batch_size}   "
            f"torch threads: {threads}"
        )
        print(
            "| file | lines | input MB | peak RSS after load MB | peak RSS MB | growth over load MB | seconds "
            "| sentences/s |"
        )
        print("|---|---|---|---|---|---|---|---|")
        for name, r in runs.items():
            size = sources[name].stat().st_size / 2**20
            print(
                f"| {name} | {r['rows']:,} | {size:.1f} | {r['rss_loaded_mb']:.0f} | {r['rss_peak_mb']:.0f} | "
                f"{r['rss_peak_mb'] - r['rss_loaded_mb']:.0f} | {r['seconds']:.1f} | {r['rows'] / r['seconds']:,.0f} |"
            )
        print(f"embeddings of the large file: {args.lines:,} x {dim} float32 = {args.lines * dim * 4 / 2**20:.1f} MB")
        print(f"peak RSS, large minus small: {runs['large']['rss_peak_mb'] - runs['small']['rss_peak_mb']:+.0f} MB")
        ok = runs["large"]["rows"] == args.lines and diff <= 1e-4
        print(
            f"alignment: {n_checked} sampled rows re-encoded one by one, largest difference {diff:.2e} "
            f"-> {'OK' if ok else 'MISMATCH'}"
        )
        if not ok:
            sys.exit(1)


if __name__ == "__main__":
    main()
