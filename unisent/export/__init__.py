"""Export trained models (Sentence Transformers, Hugging Face) with a model card, and encode files.

- :func:`export_model`: a ``.ckpt``, a saved encoder directory or a preset -> a directory that
  ``SentenceTransformer(DIR)`` or ``transformers.AutoModel`` (plus the documented pooling) loads,
  with a README.md model card; ``unisent export`` on the command line.
- :func:`encode_file`: a txt/jsonl/csv/tsv/parquet file -> ``.npy`` or ``.parquet`` embeddings,
  streamed in chunks with bounded memory; ``unisent encode`` on the command line.
- :func:`register_exporter`: how a model type (e.g. a Gaussian or retrofitted model) adds its own
  exporter.
"""

from __future__ import annotations

from .api import ExportCheckError, ExportReport, export_model
from .card import read_results, render_card
from .encoder import (  # registers them
    EncoderHuggingFaceExporter,
    EncoderSentenceTransformersExporter,
    hf_usage_code,
)
from .gaussian import GaussianSentenceTransformersExporter  # registers it
from .pcr import PCRSentenceTransformersExporter  # registers it
from .registry import (
    PROBE_SENTENCES,
    Exporter,
    NoExporterError,
    available_formats,
    exporter_for,
    register_exporter,
    registered,
)
from .retrofit import RetrofittedSentenceTransformersExporter  # registers it
from .source import ExportSource, ObjectiveRecord, TrainingRecord, load_source
from .streaming import (
    SUPPORTED_INPUTS,
    SUPPORTED_OUTPUTS,
    EncodeInputError,
    EncodeSummary,
    encode_file,
    iter_texts,
    scan_input,
)

__all__ = [
    "PROBE_SENTENCES",
    "SUPPORTED_INPUTS",
    "SUPPORTED_OUTPUTS",
    "EncodeInputError",
    "EncodeSummary",
    "EncoderHuggingFaceExporter",
    "EncoderSentenceTransformersExporter",
    "ExportCheckError",
    "ExportReport",
    "ExportSource",
    "GaussianSentenceTransformersExporter",
    "PCRSentenceTransformersExporter",
    "Exporter",
    "NoExporterError",
    "ObjectiveRecord",
    "RetrofittedSentenceTransformersExporter",
    "TrainingRecord",
    "available_formats",
    "encode_file",
    "export_model",
    "exporter_for",
    "hf_usage_code",
    "iter_texts",
    "load_source",
    "read_results",
    "register_exporter",
    "registered",
    "render_card",
    "scan_input",
]
