"""``precision: auto``: compute in bf16 where this machine's matmuls are fast in bf16, in fp32 elsewhere.

bf16 is not a safe default on CPUs. Measured with torch 2.13 on 2 threads (docs/benchmarks.md): an AMD
EPYC with AVX2 only multiplies bf16 matrices at about 0.9 GFLOP/s against 157 in fp32 (oneDNN has
no bf16 kernel for it and falls back to a slow path), while an AMD EPYC Zen 5 with AVX512-BF16 ran
1024 x 1024 bf16 matmuls about 4x faster than fp32, and `unisent fit` 1.8x and `unisent encode` 2.4x
faster; the issue behind this module reports 6.6x for an Intel Xeon with AMX.

The decision reads the CPU's flags (``/proc/cpuinfo``) rather than timing a probe: a probe
of a few milliseconds on a shared 2-core machine is at the mercy of whatever else runs, and a wrong
pick costs 50x; the flags say whether the bf16 instructions exist, which is what the 50x turns on.
On CUDA, bf16 is chosen where the GPU supports it (``torch.cuda.is_bf16_supported()``, Ampere and
later). Elsewhere (other accelerators, Arm, macOS) ``auto`` is fp32.

**One word** (docs/training.md#precision): ``precision`` is ``auto``, ``fp32`` or ``bf16`` everywhere a
user names it: ``unisent encode --precision``, ``model.encode(..., precision=...)`` and training
(``UnisentTrainer``, ``trainer.precision``; Lightning's own names pass through). ``auto`` is the default
of each and is resolved where it is used, for the device it runs on: ``inference_precision`` for
``encode``, ``resolve_precision`` for Lightning. Nothing is ambient: a caller that wants fp32 (the
scores of ``unisent evaluate``, the evaluation callback, MTEB, the export checks) passes ``"fp32"``.
"""

from __future__ import annotations

import functools
import platform
from dataclasses import dataclass
from pathlib import Path

__all__ = [
    "BF16_CPU_FLAGS",
    "LIGHTNING_PRECISIONS",
    "PRECISIONS",
    "PrecisionChoice",
    "choose_precision",
    "cpu_flags",
    "cpu_info",
    "inference_precision",
    "int8_arch",
    "resolve_precision",
]

#: a CPU with one of these flags multiplies bf16 matrices faster than fp32 (oneDNN's bf16 kernels)
BF16_CPU_FLAGS = ("amx_bf16", "avx512_bf16")

#: what ``auto`` resolves to, for the Lightning Trainer and for inference (``encode``/``evaluate``)
BF16, FP32 = "bf16-mixed", "32-true"
#: the one vocabulary users write (the CLI, the Python API, the exports, recipes)
PRECISIONS = ("auto", "fp32", "bf16")
#: Lightning's own names, which a recipe's ``trainer.precision`` may also use (tests/test_precision.py holds this
#: to Lightning's list)
LIGHTNING_PRECISIONS = (
    "32-true",
    "bf16-mixed",
    "bf16-true",
    "16-mixed",
    "16-true",
    "64-true",
    "transformer-engine",
    "transformer-engine-float16",
    "64",
    "32",
    "16",
    "bf16",
)


@dataclass(frozen=True)
class PrecisionChoice:
    """What ``auto`` picked and why."""

    precision: str  # "bf16-mixed" or "32-true" (Lightning's names)
    reason: str

    @property
    def bf16(self) -> bool:
        return self.precision == BF16

    def line(self) -> str:
        """One line for the user, e.g. ``precision auto: bf16-mixed (the CPU has avx512_bf16)``."""
        return f"precision auto: {self.precision} ({self.reason})"


@functools.cache
def cpu_info(path: str = "/proc/cpuinfo") -> dict[str, str]:
    """The fields of the first processor in ``path`` (``model name``, ``cpu family``, ``flags`` ...); empty where
    it cannot be read (e.g. macOS)."""
    try:
        text = Path(path).read_text(errors="replace")
    except OSError:
        return {}
    fields: dict[str, str] = {}
    for line in text.splitlines():
        if not line.strip():
            if fields:
                break  # the first processor's block is enough
            continue
        key, _, value = line.partition(":")
        fields.setdefault(key.strip(), value.strip())
    return fields


def cpu_flags() -> frozenset[str]:
    """The CPU's feature flags (``/proc/cpuinfo``; empty where it cannot be read, e.g. macOS)."""
    return frozenset(cpu_info().get("flags", "").split())


def choose_precision(device: str = "cpu", flags: frozenset[str] | None = None) -> PrecisionChoice:
    """bf16 or fp32 for ``device`` (``cpu``, ``cuda``, ``cuda:1``, ``gpu``, ``mps`` ...).

    ``flags``: the CPU flags to decide by (default: this machine's, ``cpu_flags``).
    """
    kind = str(device).split(":")[0].lower()
    if kind in ("cuda", "gpu"):
        import torch

        if torch.cuda.is_available() and torch.cuda.is_bf16_supported():
            return PrecisionChoice(BF16, f"{torch.cuda.get_device_name()} supports bf16")
        return PrecisionChoice(FP32, "no CUDA device with bf16")
    if kind != "cpu":
        return PrecisionChoice(FP32, f"no bf16 rule for {kind!r} devices")
    flags = cpu_flags() if flags is None else flags
    found = [flag for flag in BF16_CPU_FLAGS if flag in flags]
    if found:
        return PrecisionChoice(BF16, f"the CPU has {found[0]}")
    return PrecisionChoice(FP32, "the CPU has no AVX512-BF16 or AMX: bf16 would be ~50x slower")


def resolve_precision(precision: str | int | None, device: str = "cpu") -> tuple[str | int | None, str | None]:
    """Lightning's precision for ``precision``: ``auto`` -> the choice for ``device``, ``fp32``/``bf16`` ->
    ``32-true``/``bf16-mixed``, Lightning's own names as given.

    Returns ``(precision, line)``: ``line`` says what ``auto`` picked (None for an explicit precision).
    """
    if not (isinstance(precision, str) and precision.lower() == "auto"):
        return {"fp32": FP32, "bf16": BF16}.get(precision, precision), None  # type: ignore[call-overload]
    choice = choose_precision(device)
    return choice.precision, choice.line()


def inference_precision(precision: str, device: str | None = None) -> tuple[bool, str]:
    """``precision`` of ``encode`` (``auto``, ``fp32`` or ``bf16``) on ``device`` -> ``(bf16, said)``: whether
    to encode under bf16 autocast, and the words that tell the user, e.g. ``precision auto: bf16, the CPU has
    avx512_bf16``.

    Raises:
        ValueError: ``precision`` is not one of ``PRECISIONS``.
    """
    if precision not in PRECISIONS:
        raise ValueError(f"precision must be one of {', '.join(PRECISIONS)}, got {precision!r}")
    if precision != "auto":
        return precision == "bf16", precision
    choice = choose_precision(device or "cpu")
    return choice.bf16, f"precision auto: {'bf16' if choice.bf16 else 'fp32'}, {choice.reason}"


def int8_arch(flags: frozenset[str] | None = None, machine: str | None = None) -> str:
    """The instruction set an int8 ONNX file is named for, as Sentence Transformers names its files
    (``model_qint8_<arch>.onnx``): ``avx512_vnni``, ``avx512``, ``avx2`` or ``arm64``. Dynamic int8
    runs on any of them (onnxruntime picks its kernels when it runs); the name records where it was made
    and checked, and whether 7-bit weights were used (``reduce_range``: on CPUs without VNNI)."""
    machine = (machine or platform.machine()).lower()
    if machine in ("arm64", "aarch64"):
        return "arm64"
    flags = cpu_flags() if flags is None else flags
    if "avx512_vnni" in flags or "avx512vnni" in flags:
        return "avx512_vnni"
    if "avx512f" in flags:
        return "avx512"
    return "avx2"
