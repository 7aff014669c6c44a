"""Export trained models (Sentence Transformers, Hugging Face) with a model card, and encode files.

- [`export_model`][unisent.export.export_model]: a ``.ckpt``, a saved encoder directory or a preset -> a directory that
  ``SentenceTransformer(DIR)`` or ``transformers.AutoModel`` (plus the documented pooling) loads,
  with a README.md model card; ``unisent export`` on the command line.
- [`encode_file`][unisent.export.encode_file]: a txt/jsonl/csv/tsv/parquet file -> ``.npy`` or ``.parquet`` embeddings,
  streamed in chunks with bounded memory; ``unisent encode`` on the command line.
- ``unisent.export.hub``: what the card's front matter tells the Hub (base model, licence,
  language, datasets, ``model-index``), and the rule that keeps local paths out of it.
- ``onnx`` (``unisent.export.onnx``): a Sentence Transformers directory plus ``onnx/model.onnx`` and,
  with ``quantize="int8"``, ``onnx/model_qint8_<arch>.onnx``; [`OnnxEncoder`][unisent.export.OnnxEncoder] runs them
  (``unisent.load(DIR, backend="onnx")``; onnxruntime: ``pip install 'unisent[onnx]'``).
- the formats are written by the models themselves: every inference model declares in its own class how it exports
  ([`unisent.models`][unisent.models]); [`register_exporter`][unisent.export.register_exporter] adds a format, or an
  exporter for a class that is not a unisent inference model.
"""

from __future__ import annotations

from ..encoders.export_declarations import hf_usage_code
from ..models.onnx_encoder import OnnxEncoder, OnnxMissingError
from .api import ExportCheckError, ExportReport, export_model
from .card import default_name
from .exporters import (
    Exporter,
    NoExporterError,
    check_format,
    exporter_for,
    register_export_format,
    register_exporter,
    registered,
)
from .file_encoding import (
    EmptyInputError,
    EncodeInputError,
    EncodeSummary,
    OutputExistsError,
    encode_file,
    iter_texts,
)
from .formats import HuggingFaceExporter, SentenceTransformersExporter
from .onnx import OnnxExporter
from .source import ExportSource, ObjectiveRecord, TrainingRecord, load_export_source

__all__ = [
    "EmptyInputError",
    "EncodeInputError",
    "EncodeSummary",
    "ExportCheckError",
    "ExportReport",
    "ExportSource",
    "HuggingFaceExporter",
    "SentenceTransformersExporter",
    "Exporter",
    "NoExporterError",
    "ObjectiveRecord",
    "OnnxEncoder",
    "OnnxExporter",
    "OnnxMissingError",
    "OutputExistsError",
    "TrainingRecord",
    "check_format",
    "default_name",
    "encode_file",
    "export_model",
    "exporter_for",
    "hf_usage_code",
    "iter_texts",
    "load_export_source",
    "register_export_format",
    "register_exporter",
    "registered",
]
