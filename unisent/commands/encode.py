"""``unisent encode``: embed a txt/jsonl/csv/tsv/parquet file into .npy or .parquet, streamed in chunks with
bounded memory; output row i is input row i (line i+1 of a txt/jsonl file)."""

from __future__ import annotations

import argparse
import sys

__all__ = ["main"]


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="unisent encode", description=__doc__)
    p.add_argument("--model", required=True, help="a preset (minilm-l6), a saved or exported directory, or a .ckpt")
    p.add_argument("--input", required=True, help=".txt (one sentence per line), .jsonl, .csv, .tsv or .parquet")
    p.add_argument("--output", required=True, help=".npy (float32, rows x dim) or .parquet (columns row, embedding)")
    p.add_argument("--column", default="text", help="text field of jsonl/csv/tsv/parquet input (default: text)")
    p.add_argument("--batch-size", type=int, default=64, help="sentences per forward pass (default: 64)")
    p.add_argument("--chunk-size", type=int, default=8192,
                   help="rows read, length-sorted and encoded at a time; bounds the memory (default: 8192)")
    p.add_argument("--normalize", action="store_true", help="L2-normalise the embeddings")
    p.add_argument("--bf16", action="store_true", help="bfloat16 autocast (GPUs, CPUs with AVX512-BF16/AMX)")
    p.add_argument("--on-empty", choices=["error", "zero"], default="error",
                   help="an empty line: error (default, names the line) or zero (write a zero vector)")
    p.add_argument("--encoding", default="utf-8", help="text encoding of the input (default: utf-8)")
    p.add_argument("--device", default=None, help="cpu, cuda, cuda:1 ... (default: cpu)")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    return p


def main(argv: list[str]) -> None:
    args = _parser().parse_args(argv)
    from ..export import encode_file

    try:
        summary = encode_file(
            args.model, args.input, args.output, column=args.column, batch_size=args.batch_size,
            chunk_size=args.chunk_size, normalize=args.normalize, bf16=args.bf16, on_empty=args.on_empty,
            encoding=args.encoding, device=args.device, progress=not args.quiet,
        )
    except (OSError, ValueError, ImportError) as err:
        sys.exit(f"unisent encode: error: {err}")
    rate = summary.rows / summary.seconds if summary.seconds > 0 else float("inf")
    zeros = f", {summary.empty_rows} empty rows as zero vectors" if summary.empty_rows else ""
    print(f"wrote {summary.rows} x {summary.dim} float32 embeddings to {summary.output} "
          f"({summary.seconds:.1f} s, {rate:.0f} sentences/s{zeros})")
