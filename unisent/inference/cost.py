"""What a model costs beside its start: parameters per part (the shared encoder, a head's own tower, the heads),
the files it is saved in, and the encode time of each output (vectors, Gaussians). ``unisent evaluate --cost``
measures it and the model card of ``unisent export`` shows it (docs/merging.md, "What the merged model costs")."""

from __future__ import annotations

import os
import statistics
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from torch import nn

__all__ = [
    "PART_NAMES",
    "cost_table",
    "encode_seconds",
    "file_sizes",
    "model_cost",
    "parameter_parts",
]

#: parameter-name prefixes (the first that matches wins) and what they are; anything else is named by its prefix
PART_NAMES = (
    ("head.layers.", "own top layers (a head's own tower)"),
    ("head.", "head"),
    ("encoder.", "shared encoder"),
)


def parameter_parts(model: nn.Module) -> dict[str, int]:
    """Parameters of ``model`` per part (``PART_NAMES``; a plain encoder is all ``shared encoder``), each
    tensor counted once however often it is shared."""
    parts: dict[str, int] = {}
    plain = not any(name.startswith("encoder.") for name, _ in model.named_parameters())
    for name, tensor in model.named_parameters():
        label = (
            "shared encoder" if plain else next((v for k, v in PART_NAMES if name.startswith(k)), name.split(".")[0])
        )
        parts[label] = parts.get(label, 0) + tensor.numel()
    return parts


def file_sizes(folder: str | os.PathLike[str]) -> dict[str, int]:
    """Bytes of each regular file below ``folder`` (relative names), largest first."""
    root = Path(folder)
    sizes = {str(p.relative_to(root)): p.stat().st_size for p in root.rglob("*") if p.is_file() and not p.is_symlink()}
    return dict(sorted(sizes.items(), key=lambda item: -item[1]))


def encode_seconds(
    model: Any, sentences: Sequence[str], batch_size: int = 64, repeats: int = 3, precision: str = "fp32"
) -> dict[str, float]:
    """Median seconds over ``repeats`` (after one warm-up batch) to encode ``sentences`` at ``precision`` into each
    output the model has: ``vectors`` (``encode``) and, for a Gaussian model, ``gaussians`` (``encode_gaussian``)."""
    outputs: dict[str, Any] = {"vectors": model.encode}
    if callable(getattr(model, "encode_gaussian", None)):
        outputs["gaussians"] = model.encode_gaussian
    seconds: dict[str, float] = {}
    for name, encode in outputs.items():
        encode(list(sentences[:batch_size]), batch_size=batch_size, precision=precision)
        times: list[float] = []
        for _ in range(repeats):
            start = time.perf_counter()
            encode(list(sentences), batch_size=batch_size, precision=precision)
            times.append(time.perf_counter() - start)
        seconds[name] = round(statistics.median(times), 4)
    return seconds


def model_cost(
    model: Any,
    folder: str | os.PathLike[str] | None,
    sentences: Sequence[str] | None = None,
    start: Any = None,
    batch_size: int = 64,
    precision: str = "fp32",
) -> dict[str, Any]:
    """``{parameters, total_parameters, files, total_bytes}`` of ``model`` saved in ``folder`` and, with
    ``sentences``, ``encode_seconds`` per output; with a ``start`` model (the one it was trained from), the same
    for it under ``start`` and the model's extra parameters and time per output as ratios (``vs_start``)."""
    parts = parameter_parts(model)
    cost: dict[str, Any] = {"parameters": parts, "total_parameters": sum(parts.values())}
    if folder is not None and Path(folder).is_dir():
        cost["files"] = file_sizes(folder)
        cost["total_bytes"] = sum(cost["files"].values())
    if sentences:
        cost["sentences"] = len(sentences)
        measured = encode_seconds(model, sentences, batch_size, precision=precision)
        cost |= {"encode_seconds": measured, "precision": precision}
    if start is not None:
        measured: dict[str, float] = cost.get("encode_seconds") or {}
        base = model_cost(start, None, sentences, batch_size=batch_size, precision=precision)
        cost["start"] = base
        ratios = {"parameters": cost["total_parameters"] / base["total_parameters"]}
        for name, seconds in measured.items():
            ratios[f"{name}_seconds"] = seconds / base["encode_seconds"]["vectors"]
        cost["vs_start"] = {k: round(v, 3) for k, v in ratios.items()}
    return cost


def cost_table(cost: dict[str, Any]) -> list[str]:
    """Markdown lines of ``model_cost``'s record: one row per part, the files, the encode time per output."""
    lines = ["| part | parameters |", "|---|---:|"]
    lines += [f"| {part} | {n:,} |" for part, n in cost["parameters"].items()]
    lines.append(f"| total | {cost['total_parameters']:,} |")
    start = cost.get("start")
    if start:
        lines.append(f"| the start | {start['total_parameters']:,} (x{cost['vs_start']['parameters']:.2f} here) |")
    if cost.get("files"):
        big = [f"`{name}` {size / 1e6:.1f} MB" for name, size in cost["files"].items() if size >= 1e6]
        lines += ["", f"Files: {cost['total_bytes'] / 1e6:.1f} MB in all" + (f" ({', '.join(big)})." if big else ".")]
    if cost.get("encode_seconds"):
        times = [f"{name} {s:.3f} s" for name, s in cost["encode_seconds"].items()]
        line = f"Encode time of {cost['sentences']:,} sentences ({cost['precision']}): {', '.join(times)}"
        if start:
            vs_start = cost["vs_start"]
            ratios = [f"{k.removesuffix('_seconds')} x{v:.2f}" for k, v in vs_start.items() if k != "parameters"]
            line += f"; the start's vectors {start['encode_seconds']['vectors']:.3f} s ({', '.join(ratios)})"
        lines += ["", line + "."]
    return lines
