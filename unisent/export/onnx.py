"""``unisent export --format onnx [--quantize int8]``: a Sentence Transformers directory plus ONNX files.

The directory is a normal Sentence Transformers export (``SentenceTransformer(DIR)``, ``unisent.load(DIR)``)
with the ONNX files where Sentence Transformers' ONNX backend looks for them:

- ``onnx/model.onnx``: fp32, traced with eager attention (an SDPA export does not get through
  onnxruntime's shape inference when quantised), opset 17, dynamic batch and sequence axes; inputs
  ``input_ids``, ``attention_mask`` (and ``token_type_ids`` where the backbone has them). Outputs:
  ``last_hidden_state`` first (the token vectors Sentence Transformers' ONNX backend pools with the
  directory's own modules), then ``sentence_embedding``: the pooling, the model's normalisation and any
  head are **inside the graph**, so this output is the model's ``encode`` (a GaussCSE model adds ``mean`` and
  ``variance``). The model declares what is traced ([`onnx_graph`][unisent.inference.InferenceModel.onnx_graph]).
- ``onnx/model_qint8_<arch>.onnx`` with ``--quantize int8``: onnxruntime's dynamic quantisation (``quantize_dynamic``):
  int8 weights **per channel** (per output column; per tensor moved some sentence vectors far from fp32,
  docs/export.md), activations quantised per batch when it runs; 7-bit weights (``reduce_range``) on CPUs without VNNI.
  ``<arch>`` is the CPU it was made and checked on (``unisent.hardware.int8_arch``).
- ``onnx/unisent_onnx.json``: what unisent's runner ([`OnnxEncoder`][unisent.export.OnnxEncoder],
  ``unisent.load(DIR, backend="onnx")``) needs, and the checks' numbers.

The export checks itself, like every export, before anything is moved to ``--out``:

- the fp32 file against the torch model's ``encode`` (fp32) on the probe sentences: largest absolute
  difference at most ``ONNX_MAX_DIFF`` (1e-5), else refused;
- the int8 file against the fp32 file on the distinct sentences of the bundled STS-B test set: the
  smallest cosine between a sentence's two vectors and the STS-B test Spearman of both, printed; refused
  when the Spearman drops by more than ``INT8_MAX_STSB_DROP`` points or the smallest cosine is below
  ``INT8_MIN_COSINE``, unless ``force`` (``--force``).

No offline graph fusion (``onnxruntime.transformers.optimizer``): onnxruntime's own session-time
optimisations already apply, and on a Zen 4 CPU the fused graph (attention, LayerNorm, GELU) encoded
fewer sentences per CPU-second than the plain one, in fp32 (325 against 352) and in int8 (734 against
853; docs/export.md, "ONNX and int8").

onnx and onnxruntime are optional: ``pip install 'unisent[onnx]'``.
"""

from __future__ import annotations

import logging
import warnings
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from ..inference.base import ONNX, InferenceModel, OnnxGraph, max_abs_diff
from ..io import write_json
from ..models.onnx_encoder import ONNX_DIR, ONNX_FP32, ONNX_RECORD, OnnxEncoder, int8_file_name, require_onnx
from .api import ExportCheckError
from .exporters import model_format
from .formats import SentenceTransformersExporter

__all__ = [
    "INT8_MAX_STSB_DROP",
    "INT8_MIN_COSINE",
    "ONNX_MAX_DIFF",
    "OPSET",
    "OnnxExporter",
    "int8_quality",
    "quantize_int8",
    "stsb_test",
    "write_onnx",
]

#: the largest absolute difference of the fp32 file to the torch model's ``encode`` that the export accepts
ONNX_MAX_DIFF = 1e-5
#: the int8 file is refused (unless ``force``) when its STS-B test Spearman is this many points below fp32's
INT8_MAX_STSB_DROP = 0.5
#: ... or when a sentence's int8 vector has a cosine below this to its fp32 vector
INT8_MIN_COSINE = 0.9
OPSET = 17


@contextmanager
def eager_attention(module: nn.Module) -> Iterator[None]:
    """Context: every Hugging Face model inside ``module`` computes attention in plain operations
    (``eager``), restored afterwards; what the export traces."""
    changed = []
    for sub in module.modules():
        current = getattr(getattr(sub, "config", None), "_attn_implementation", None)
        setter = getattr(sub, "set_attn_implementation", None)
        if callable(setter) and current not in (None, "eager"):
            setter("eager")
            changed.append((setter, current))
    try:
        yield
    finally:
        for setter, current in reversed(changed):
            setter(current)


def write_onnx(graph: OnnxGraph, tokenizer, path: Path) -> list[str]:
    """Trace ``graph`` into the ONNX file ``path`` (one file, weights inside); returns the input names."""
    names = ["input_ids", "attention_mask"] + (["token_type_ids"] if graph.token_type_ids else [])
    module = graph.module.eval()
    # a padded batch of two sentences of different lengths to trace with
    batch = tokenizer(["A man is playing a guitar in the park.", "ok"], padding=True, return_tensors="pt")
    ids = batch["input_ids"]
    tensors = {"input_ids": ids, "attention_mask": batch["attention_mask"], "token_type_ids": torch.zeros_like(ids)}
    args = tuple(tensors[name].to(next(module.parameters()).device) for name in names)
    axes = {name: {0: "batch_size", 1: "sequence_length"} for name in names}
    for out in graph.outputs:
        axes[out] = {0: "batch_size", 1: "sequence_length"} if out == "last_hidden_state" else {0: "batch_size"}
    path.parent.mkdir(parents=True, exist_ok=True)
    export = partial(torch.onnx.export, module, args, str(path), input_names=names, output_names=list(graph.outputs))
    with eager_attention(module), torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the tracer's notes on Python values it records as constants
        try:
            export(dynamic_axes=axes, opset_version=OPSET, do_constant_folding=True, dynamo=False)
        except Exception:  # noqa: BLE001 - a torch without the TorchScript exporter: torch.export's
            _export_dynamo(export, names, path)
    return names


def _export_dynamo(export: Callable[..., Any], names: list[str], path: Path) -> None:
    import onnx

    batch, length = torch.export.Dim("batch_size"), torch.export.Dim("sequence_length")
    export(dynamic_shapes={name: {0: batch, 1: length} for name in names}, opset_version=max(OPSET, 18), dynamo=True)
    data = path.with_name(path.name + ".data")
    if data.exists():  # one file, as Sentence Transformers' ONNX backend and `--quantize` read it
        onnx.save(onnx.load(str(path)), str(path), save_as_external_data=False)
        data.unlink()


def quantize_int8(source: Path, target: Path, arch: str) -> dict[str, Any]:
    """Dynamic int8 quantisation of ``source`` into ``target`` (onnxruntime's ``quantize_dynamic``: int8
    weights, activations quantised at run time); returns its settings for the record."""
    import onnx
    from onnxruntime.quantization import QuantType, quantize_dynamic

    reduce_range = arch not in ("avx512_vnni", "arm64")  # u8 x s8 products saturate without VNNI's 32-bit sums
    root = logging.getLogger()  # onnxruntime's quantiser advises pre-processing through it on every call: not here
    level = root.level
    root.setLevel(logging.ERROR)
    try:
        quantize_dynamic(
            str(source),
            str(target),
            weight_type=QuantType.QInt8,
            per_channel=True,
            reduce_range=reduce_range,
            extra_options={"DefaultTensorType": onnx.TensorProto.FLOAT},
        )
    finally:
        root.setLevel(level)
    return {
        "method": "onnxruntime quantize_dynamic",
        "weights": "int8, per channel",
        "activations": "uint8, per batch at run time",
        "reduce_range": reduce_range,
        "arch": arch,
    }


def stsb_test() -> tuple[list[str], list[str], np.ndarray]:
    """The bundled STS-B test set: ``(first sentences, second sentences, gold scores)``."""
    from ..data.benchmark_readers import read_stsbenchmark
    from ..resources import EVALUATION_DATA_DIR

    data = read_stsbenchmark(Path(EVALUATION_DATA_DIR) / "sts" / "stsbenchmark" / "sts-test.csv")
    return list(data.sentences1), list(data.sentences2), np.asarray(data.scores, dtype=np.float64)


def int8_quality(directory: Path, batch_size: int = 32) -> dict[str, float]:
    """The int8 file against the fp32 file of the export in ``directory``, on the bundled STS-B test set:
    ``stsb_fp32``, ``stsb_int8`` (Spearman x 100 of the pairs' cosines, ``unisent.evaluation.metrics.sts_spearman``),
    ``min_cosine`` (the smallest between a sentence's two vectors) and ``sentences``."""
    from ..evaluation.metrics.similarity import cosine_similarity, sts_spearman

    first, second, gold = stsb_test()
    unique = list(dict.fromkeys(first + second))
    row = {sentence: i for i, sentence in enumerate(unique)}
    encoded = {file: OnnxEncoder(directory, file).encode(unique, batch_size) for file in ("fp32", "int8")}
    pairs = {file: (v[[row[s] for s in first]], v[[row[s] for s in second]]) for file, v in encoded.items()}
    return {
        "stsb_fp32": sts_spearman(*pairs["fp32"], gold.tolist()),
        "stsb_int8": sts_spearman(*pairs["int8"], gold.tolist()),
        "min_cosine": float(cosine_similarity(encoded["int8"], encoded["fp32"]).min()),
        "sentences": len(unique),
    }


@model_format
class OnnxExporter(SentenceTransformersExporter):
    """A Sentence Transformers directory plus ``onnx/model.onnx`` (and ``onnx/model_qint8_<arch>.onnx``),
    for every inference model that declares an ONNX graph (``onnx`` in ``export_formats``)."""

    format = ONNX
    tags = (*SentenceTransformersExporter.tags, "onnx")

    def __init__(self) -> None:
        self.quantize: str | None = None
        self.force = False
        self.arch: str | None = None
        #: lines for the user: the checks' numbers (``unisent export`` prints them)
        self.notes: list[str] = []
        self.record: dict[str, Any] = {}

    def configure(self, quantize: str | None = None, force: bool = False, arch: str | None = None) -> None:
        """``quantize``: None or ``int8``; ``force``: keep an int8 file that fails its gate; ``arch``: the
        int8 file's name (default: this CPU's, ``unisent.hardware.int8_arch``)."""
        if quantize not in (None, "int8"):
            raise ValueError(f"quantize must be one of int8, got {quantize!r}")
        self.quantize, self.force, self.arch = quantize, force, arch

    # ------------------------------------------------------------------------------ writing
    def write(self, model: InferenceModel, out: Path) -> None:
        require_onnx("onnx")
        require_onnx("onnxruntime")
        graph = model.onnx_graph()  # NotExportableError before any file is written
        super().write(model, out)
        inputs = write_onnx(graph, model.tokenizer, out / ONNX_DIR / ONNX_FP32)
        st_config = model.sentence_transformers_config()
        config: Any = model.config  # an encoder's settings: max_length (and normalize, where it has one)
        self.record = {
            "format_version": 1,
            "inputs": inputs,
            "outputs": list(graph.outputs),
            "token_type_ids": graph.token_type_ids,
            "max_length": int(config.max_length),
            "do_lower_case": bool(st_config.get("do_lower_case")),
            "normalize": bool(getattr(config, "normalize", False)),
            "similarity_fn_name": getattr(model, "similarity_fn_name", "cosine"),
            "opset": OPSET,
            "attention": "eager",
            "files": {"fp32": ONNX_FP32},
            "checks": {},
        }
        self._write_record(out)
        if self.quantize == "int8":
            self._write_int8(out)

    def _write_record(self, out: Path) -> None:
        write_json(out / ONNX_DIR / ONNX_RECORD, self.record)

    def _write_int8(self, out: Path) -> None:
        from ..hardware import int8_arch

        arch = self.arch or int8_arch()
        name = int8_file_name(arch)
        self.record["quantization"] = quantize_int8(out / ONNX_DIR / ONNX_FP32, out / ONNX_DIR / name, arch)
        self.record["files"]["int8"] = name
        self._write_record(out)
        quality = int8_quality(out)
        self.record["checks"]["int8"] = quality
        self._write_record(out)
        drop = quality["stsb_fp32"] - quality["stsb_int8"]
        line = (
            f"int8 ({name}, {self.record['quantization']['weights']}): STS-B test {quality['stsb_int8']:.2f} against "
            f"{quality['stsb_fp32']:.2f} in fp32 ({-drop:+.2f}); smallest cosine to fp32 {quality['min_cosine']:.4f} "
            f"over {quality['sentences']:,} sentences"
        )
        cosine = quality["min_cosine"]
        failed = [f"STS-B drops by {drop:.2f} (> {INT8_MAX_STSB_DROP:g})"] if drop > INT8_MAX_STSB_DROP else []
        failed += [f"a cosine of {cosine:.4f} (< {INT8_MIN_COSINE:g})"] if cosine < INT8_MIN_COSINE else []
        if failed and not self.force:
            raise ExportCheckError(
                f"the int8 file is too far from fp32: {line}; {' and '.join(failed)}. Nothing was written; "
                "export without --quantize, or pass --force to keep it anyway"
            )
        self.notes.append(line + (f" (kept with --force despite {' and '.join(failed)})" if failed else ""))

    # ------------------------------------------------------------------------------ checking
    def verify(self, model: InferenceModel, out: Path, sentences: Sequence[str]) -> tuple[float | None, str]:
        """The Sentence Transformers directory's checks, then the fp32 ONNX file against ``model.encode``
        (and ``encode_gaussian``), refused above ``ONNX_MAX_DIFF``."""
        diff, how = SentenceTransformersExporter().verify(model, out, sentences)  # with its export_checks
        runner = OnnxEncoder(out, "fp32")
        sentences = list(sentences)
        onnx_diff = max_abs_diff(runner.encode(sentences), model.encode(sentences, precision="fp32"))
        checked = "`unisent.load(DIR, backend='onnx')` (fp32 file)"
        gaussian: Callable[..., tuple[torch.Tensor, torch.Tensor]] | None = getattr(model, "encode_gaussian", None)
        if runner.gaussian and callable(gaussian):
            mu, var = gaussian(sentences, precision="fp32")
            mu2, var2 = runner.encode_gaussian(sentences)
            relative = float(((var2 - var).abs() / var.abs().clamp(min=1.0)).max())
            onnx_diff = max(onnx_diff, max_abs_diff(mu2, mu), relative)
            checked += " with its means and variances (relative)"
        self.record["checks"]["fp32_max_abs_diff"] = onnx_diff
        self._write_record(out)
        self.notes.insert(
            0,
            f"onnx fp32 (onnx/{ONNX_FP32}) against torch: largest absolute difference {onnx_diff:.2e} "
            f"on {len(sentences)} probe sentences (allowed {ONNX_MAX_DIFF:g})",
        )
        if not onnx_diff <= ONNX_MAX_DIFF:
            raise ExportCheckError(
                f"the ONNX file does not reproduce the model: {checked} differs by up to {onnx_diff:.3g} "
                f"(allowed {ONNX_MAX_DIFF:g}); nothing was written"
            )
        how = f"{how} and {checked} on {len(sentences)} sentences (ONNX: {onnx_diff:.2e})"
        return (onnx_diff if diff is None else max(diff, onnx_diff)), how

    # ------------------------------------------------------------------------------ model card
    def facts(self, model: InferenceModel) -> list[tuple[str, str]]:
        rows = super().facts(model)
        rows.append(
            (
                "ONNX",
                f"`onnx/{ONNX_FP32}` (fp32, opset {OPSET}, dynamic batch and length; outputs "
                f"{', '.join(f'`{o}`' for o in self.record.get('outputs', []))}: pooling"
                f"{' and normalisation' if self.record.get('normalize') else ''} inside the graph)",
            )
        )
        quality = self.record.get("checks", {}).get("int8")
        if quality:
            settings = self.record["quantization"]
            rows.append(
                (
                    "ONNX int8",
                    f"`onnx/{self.record['files']['int8']}` (dynamic quantisation; weights {settings['weights']}): "
                    f"STS-B test {quality['stsb_int8']:.2f} (fp32 {quality['stsb_fp32']:.2f}), smallest cosine to "
                    f"fp32 {quality['min_cosine']:.4f}",
                )
            )
        return rows

    def usage(self, model: InferenceModel) -> str:
        inputs = ", ".join(f'"{name}"' for name in self.record.get("inputs", ["input_ids", "attention_mask"]))
        gaussian = (
            '\nmu, var = model.encode_gaussian(["A man is playing a guitar."])'
            if "variance" in self.record.get("outputs", [])
            else ""
        )
        return f"""{super().usage(model)}
With ONNX Runtime through unisent (`pip install 'unisent[onnx]'`; the int8 file when there is one,
sentences batched by length as `encode` does):

```python
import unisent

model = unisent.load("path/to/this/directory", backend="onnx")  # onnx_file="fp32" for onnx/model.onnx
embeddings = model.encode(["A man is playing a guitar.", "Someone plays music."]){gaussian}
```

Or `unisent encode --model path/to/this/directory --backend onnx --input sentences.txt --output vectors.npy`.
The ONNX files take {inputs} (int64, batch x length) and give `sentence_embedding`: the embeddings
above, pooling included.
"""
