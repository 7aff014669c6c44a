"""``unisent encode``: embed a txt/jsonl/csv/tsv/parquet file into .npy or .parquet, streamed in chunks with
bounded memory; output row i is input row i (line i+1 of a txt/jsonl file)."""

from __future__ import annotations

import sys
import warnings
from functools import partial
from typing import TYPE_CHECKING, Literal

from .function_commands import UsageError, quiet_transformers, require_positive, run_command

if TYPE_CHECKING:
    from ..models.onnx_encoder import OnnxEncoder

__all__ = ["encode", "main"]


def encode(
    *,
    model: str,
    input: str,
    output: str,
    column: str = "text",
    batch_size: int = 64,
    chunk_size: int = 8192,
    normalize: bool = False,
    precision: Literal["auto", "fp32", "bf16"] = "auto",
    on_empty: Literal["error", "zero"] = "error",
    encoding: str = "utf-8",
    device: str | None = None,
    max_length: int | None = None,
    overwrite: bool = False,
    quiet: bool = False,
    backend: Literal["torch", "onnx"] = "torch",
    onnx_file: str | None = None,
    truncate_dim: int | None = None,
) -> None:
    """Embed a txt/jsonl/csv/tsv/parquet file into .npy or .parquet, streamed in chunks with bounded memory.

    Output row i is input row i (line i+1 of a txt/jsonl file). Inputs longer than the model's
    maximum length are truncated; one warning at the end says how many.

    Args:
        model: a preset (minilm-l6), a saved or exported directory, or a .ckpt, local or a URL
            (s3://bucket/run/version_0/encoder; pip install 'unisent[s3]')
        input: .txt (one sentence per line), .jsonl, .csv, .tsv or .parquet
        output: .npy (float32, rows x dim) or .parquet (columns row, embedding)
        column: text field of jsonl/csv/tsv/parquet input
        batch_size: sentences per forward pass
        chunk_size: rows read, length-sorted and encoded at a time; bounds the memory
        normalize: L2-normalise the embeddings
        precision: auto (bf16 where the device computes fast in bf16: GPUs with bf16, CPUs with
            AVX512-BF16 or AMX; fp32 elsewhere; the Python API's and training's default too), fp32, or
            bf16 (bfloat16 autocast; the output is float32). With --backend onnx: auto runs the int8 file
            where the export has one, fp32 the fp32 file
        on_empty: an empty line: error (names the line) or zero (write a zero vector)
        encoding: text encoding of the input
        device: cpu, cuda, cuda:1 ... (default: cpu)
        max_length: longest input in tokens (default: the model's own); longer inputs are truncated
        overwrite: replace --output if it exists
        quiet: no progress bars (encoding, loading the weights)
        backend: torch, or onnx: a directory of `unisent export --format onnx` run by onnxruntime
            (pip install 'unisent[onnx]')
        onnx_file: with --backend onnx: int8, fp32 or a file name in DIR/onnx (default: int8 where the
            export has it, else fp32)
        truncate_dim: keep the first D coordinates of each embedding (a Matryoshka-trained model);
            --normalize normalises after the cut
    """
    if quiet:
        quiet_transformers()
    from ..encoders.batching import TruncationWarning
    from ..export import EmptyInputError, OutputExistsError, encode_file
    from ..hardware import inference_precision

    run: str | OnnxEncoder = model  # a name, or the ONNX model loaded here
    if backend == "onnx":  # the loaded OnnxEncoder, and the words that tell the user
        from ..io.remote import localize
        from ..models.onnx_encoder import OnnxEncoder

        if precision == "bf16":
            raise UsageError("--precision bf16 is the torch backend's; --backend onnx runs an fp32 or int8 file")
        if device not in (None, "cpu"):
            raise UsageError(f"--backend onnx runs on the CPU (onnxruntime), not on {device}")
        run = OnnxEncoder(localize(model), onnx_file or ("fp32" if precision == "fp32" else None))
        said = f"backend onnx: {run.precision}, onnx/{run.path.name}"
    elif onnx_file is not None:
        raise UsageError("--onnx-file applies to --backend onnx")
    else:  # resolved once, here, for the device: the model encodes in what the line says
        bf16, said = inference_precision(precision, device)
        precision = "bf16" if bf16 else "fp32"
    require_positive(truncate_dim, "--truncate-dim", "dimensions")

    try:
        with warnings.catch_warnings():  # reported below, in one line
            warnings.simplefilter("ignore", TruncationWarning)
            summary = encode_file(
                run,
                input,
                output,
                column=column,
                batch_size=batch_size,
                chunk_size=chunk_size,
                normalize=normalize,
                precision=precision,
                on_empty=on_empty,
                encoding=encoding,
                device=device,
                progress=not quiet,
                max_length=max_length,
                overwrite=overwrite,
                truncate_dim=truncate_dim,
            )
    except (OutputExistsError, EmptyInputError) as err:
        raise UsageError(str(err)) from err
    rate = summary.rows / summary.seconds if summary.seconds > 0 else float("inf")
    zeros = f", {summary.empty_rows} empty rows as zero vectors" if summary.empty_rows else ""
    print(
        f"wrote {summary.rows} x {summary.dim} float32 embeddings to {summary.output} "
        f"({summary.seconds:.1f} s, {rate:.0f} sentences/s{zeros}; {said})"
    )
    if summary.truncated:
        from ..encoders.batching import truncation_message

        message = truncation_message(
            summary.truncated, summary.rows - summary.empty_rows, summary.max_length or 0, "pass --max-length"
        )
        print(f"unisent encode: warning: {message}", file=sys.stderr)


main = partial(run_command, encode, prog="unisent encode")
