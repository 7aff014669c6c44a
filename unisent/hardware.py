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

An explicit precision always wins: ``auto`` is resolved only where it is written.

**One rule** (docs/training.md#precision): ``auto`` is the default of ``unisent encode``
(``--precision``), of the Python API (``model.encode(...)``, ``precision=None`` means ``auto``; an
explicit ``bf16=True/False`` or ``precision="fp32"/"bf16"`` wins) and of training (``UnisentTrainer``
and a recipe without ``trainer.precision``). Scores are the exception: ``unisent evaluate``, the
evaluation callback, the MTEB wrapper and the export checks encode in fp32 unless asked
(:func:`precision_scope`), so that a score compares with published fp32 numbers on any machine.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from pathlib import Path

__all__ = [
    "BF16_CPU_FLAGS",
    "PrecisionChoice",
    "choose_precision",
    "cpu_description",
    "cpu_flags",
    "encode_bf16",
    "inference_precision",
    "int8_arch",
    "precision_scope",
    "resolve_precision",
]

#: a CPU with one of these flags multiplies bf16 matrices faster than fp32 (oneDNN's bf16 kernels)
BF16_CPU_FLAGS = ("amx_bf16", "avx512_bf16")

#: what ``auto`` resolves to, for the Lightning Trainer and for inference (``encode``/``evaluate``)
BF16, FP32 = "bf16-mixed", "32-true"


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
def _cpuinfo(path: str = "/proc/cpuinfo") -> tuple[str, frozenset[str]]:
    """``(model, flags)`` of the first processor in ``path``; the model with its family (``AMD EPYC, family 26
    model 2``: the family tells a Zen 5 from a Zen 3 where a virtual machine names only ``AMD EPYC``)."""
    try:
        text = Path(path).read_text(errors="replace")
    except OSError:
        return "", frozenset()
    fields: dict[str, str] = {}
    for line in text.splitlines():
        if not line.strip():
            if fields:
                break  # the first processor's block is enough
            continue
        key, _, value = line.partition(":")
        fields.setdefault(key.strip(), value.strip())
    model = fields.get("model name", "")
    if model and "cpu family" in fields:
        model += f", family {fields['cpu family']} model {fields.get('model', '?')}"
    return model, frozenset(fields.get("flags", "").split())


def cpu_flags() -> frozenset[str]:
    """The CPU's feature flags (``/proc/cpuinfo``; empty where it cannot be read, e.g. macOS)."""
    return _cpuinfo()[1]


def cpu_description() -> str:
    """CPU model, family and the flags that decide the precision, e.g. ``AMD EPYC, family 26 model 2 (avx2,
    avx512f, avx512_bf16)``: what every benchmark figure is recorded with."""
    import platform

    model, flags = _cpuinfo()
    model = model or platform.processor() or platform.machine()
    shown = [f for f in ("avx2", "avx512f", "avx512_bf16", "amx_tile", "amx_bf16") if f in flags]
    return f"{model} ({', '.join(shown) or 'no AVX2/AVX-512/AMX flags'})"


def choose_precision(device: str = "cpu", flags: frozenset[str] | None = None) -> PrecisionChoice:
    """bf16 or fp32 for ``device`` (``cpu``, ``cuda``, ``cuda:1``, ``gpu``, ``mps`` ...).

    ``flags``: the CPU flags to decide by (default: this machine's, :func:`cpu_flags`).
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
    """``precision`` as given, or for ``"auto"`` the choice for ``device``.

    Returns ``(precision, line)``: ``line`` says what ``auto`` picked (None for an explicit precision).
    """
    if not (isinstance(precision, str) and precision.lower() == "auto"):
        return precision, None
    choice = choose_precision(device)
    return choice.precision, choice.line()


def inference_precision(precision: str, device: str | None = None) -> tuple[bool, str]:
    """``unisent encode``/``evaluate``'s ``--precision`` (``auto``, ``fp32`` or ``bf16``) -> ``(bf16, said)``:
    whether to encode under bf16 autocast, and the words that tell the user, e.g. ``precision auto: bf16,
    the CPU has avx512_bf16``."""
    if precision != "auto":
        return precision == "bf16", precision
    choice = choose_precision(device or "cpu")
    return choice.bf16, f"precision auto: {'bf16' if choice.bf16 else 'fp32'}, {choice.reason}"


#: the precision ``encode`` uses when its caller names none (:func:`precision_scope`); ``auto`` outside any scope
_DEFAULT_PRECISION: ContextVar[str] = ContextVar("unisent_default_precision", default="auto")
_INFERENCE_PRECISIONS = ("auto", "fp32", "bf16")


@contextmanager
def precision_scope(precision: str) -> Iterator[None]:
    """Context: ``encode`` calls that name no precision (no ``bf16=``/``precision=``) use ``precision``
    (``auto``, ``fp32`` or ``bf16``) instead of ``auto``. What scores are computed under (``unisent
    evaluate``, the export checks: fp32 unless asked), so that a model's own ``encode`` needs no argument."""
    if precision not in _INFERENCE_PRECISIONS:
        raise ValueError(f"precision must be one of {', '.join(_INFERENCE_PRECISIONS)}, got {precision!r}")
    token = _DEFAULT_PRECISION.set(precision)
    try:
        yield
    finally:
        _DEFAULT_PRECISION.reset(token)


def encode_bf16(bf16: bool | None = None, precision: str | None = None, device: str = "cpu") -> bool:
    """Whether ``encode`` runs under bf16 autocast on ``device``: an explicit ``bf16`` wins, then an
    explicit ``precision`` (``auto``, ``fp32``, ``bf16``), then the enclosing :func:`precision_scope`, and
    ``auto`` (:func:`choose_precision`) where none is given: the rule ``unisent encode`` follows.

    Raises:
        ValueError: an unknown ``precision``.
    """
    if bf16 is not None:
        return bool(bf16)
    chosen = _DEFAULT_PRECISION.get() if precision is None else str(precision).lower()
    if chosen not in _INFERENCE_PRECISIONS:
        raise ValueError(f"precision must be one of {', '.join(_INFERENCE_PRECISIONS)}, got {precision!r}")
    if chosen == "auto":
        return choose_precision(device).bf16
    return chosen == "bf16"


def int8_arch(flags: frozenset[str] | None = None, machine: str | None = None) -> str:
    """The instruction set an int8 ONNX file is named for, as Sentence Transformers names its files
    (``model_qint8_<arch>.onnx``): ``avx512_vnni``, ``avx512``, ``avx2`` or ``arm64``. Dynamic int8
    runs on any of them (onnxruntime picks its kernels when it runs); the name records where it was made
    and checked, and whether 7-bit weights were used (``reduce_range``: on CPUs without VNNI)."""
    import platform

    machine = (machine or platform.machine()).lower()
    if machine in ("arm64", "aarch64"):
        return "arm64"
    flags = cpu_flags() if flags is None else flags
    if "avx512_vnni" in flags or "avx512vnni" in flags:
        return "avx512_vnni"
    if "avx512f" in flags:
        return "avx512"
    return "avx2"
