"""``export_model``: a checkpoint, encoder directory or preset -> a shareable directory with a model card."""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from torch import nn

from ..inference.base import MODEL_RECORD, NotExportableError, share_files
from ..io import write_json
from .card import default_name, read_results, render_card
from .exporters import PROBE_SENTENCES, NoExporterError, exporter_for, max_length_context
from .source import ExportSource, TrainingRecord, load_export_source

__all__ = ["ExportCheckError", "ExportReport", "export_model"]

#: What ``export_model`` requires of a directory before ``overwrite`` may replace it (the model
#: record of every export, and the files of exports written before the record existed).
EXPORT_MARKERS = (MODEL_RECORD, "unisent_encoder.json", "retrofit.json")


class ExportCheckError(RuntimeError):
    """The exported files, loaded back, do not reproduce the model's embeddings."""


@dataclass
class ExportReport:
    """What [`export_model`][unisent.export.export_model] wrote.

    Attributes:
        out: the export directory.
        format: the format name.
        files: the written files, relative to ``out``.
        max_diff: largest absolute difference of the reloaded export to ``model.encode`` on
            ``PROBE_SENTENCES`` (None if not checked).
        check: how the export was checked (or why not).
        max_seq_length: the export's maximum length in tokens (None for a model without one).
        trained_max_length: the model's length before the export (the training recipe's).
        name: the model's name (the card's heading).
        notes: lines for the user from the format's own checks (``onnx``: the ONNX file against torch,
            the int8 file against fp32).
    """

    out: Path
    format: str
    files: list[str]
    max_diff: float | None
    check: str
    max_seq_length: int | None = None
    trained_max_length: int | None = None
    name: str = ""
    notes: list[str] = field(default_factory=list)


def _prepare_out(out: Path, overwrite: bool) -> None:
    if out.exists() and not out.is_dir():
        raise FileExistsError(f"{out} exists and is not a directory")
    if out.is_dir() and any(out.iterdir()):
        if not overwrite:
            raise FileExistsError(f"{out} exists and is not empty; choose another --out or pass --overwrite")
        if not any((out / marker).is_file() for marker in EXPORT_MARKERS):
            raise FileExistsError(
                f"refusing to replace {out}: it is not empty and does not look like a unisent export "
                f"(no {', '.join(EXPORT_MARKERS)})"
            )


def _retarget_settings(out: Path, tmp: Path) -> None:
    """``save_pretrained`` records its directory in unisent_encoder.json: the temporary one, now ``out``
    (also in sub-directories, e.g. the two encoders of a retrofitted model)."""
    for settings_file in [out / "unisent_encoder.json", *sorted(out.glob("*/unisent_encoder.json"))]:
        if not settings_file.is_file():
            continue
        settings = json.loads(settings_file.read_text(encoding="utf-8"))
        recorded = str(settings.get("model", ""))
        if recorded == str(tmp) or recorded.startswith(str(tmp) + os.sep):
            settings["model"] = str(out) + recorded[len(str(tmp)) :]
            write_json(settings_file, settings)


def _write_truncate_dim(directory: Path, format: str, dim: int) -> None:
    """Add ``truncate_dim`` to the export's ``config_sentence_transformers.json``, where Sentence
    Transformers reads it when loading (``SentenceTransformer._parse_model_config``)."""
    config_file = directory / "config_sentence_transformers.json"
    if not config_file.is_file():
        raise ValueError(
            f"--truncate-dim applies to exports with a config_sentence_transformers.json "
            f"(--format sentence-transformers or onnx), not to --format {format}"
        )
    config = json.loads(config_file.read_text(encoding="utf-8"))
    config["truncate_dim"] = dim
    write_json(config_file, config)


def export_model(
    source: str | os.PathLike | nn.Module | ExportSource,
    out: str | os.PathLike,
    format: str = "sentence-transformers",
    *,
    results: str | os.PathLike | None = None,
    training_data: list[str] | None = None,
    name: str | None = None,
    max_seq_length: int | None = None,
    license: str | None = None,
    language: list[str] | None = None,
    overwrite: bool = False,
    verify: bool = True,
    atol: float = 1e-4,
    title: str | None = None,
    quantize: str | None = None,
    force: bool = False,
    truncate_dim: int | None = None,
) -> ExportReport:
    """Export a model to ``out`` in ``format``, with a README.md model card.

    The files are written to a temporary sibling directory, checked (unless ``verify=False``: the
    export is loaded back as a user would and compared with ``model.encode``), and only then moved
    to ``out``; a failed export leaves nothing behind. Every file gets the usual permissions
    (``0o666`` minus the umask).

    The export keeps the backbone's own maximum length (its Sentence Transformers configuration's,
    e.g. 256 for ``minilm-l6``, else the tokenizer's ``model_max_length``, capped by the backbone's
    positions; see ``unisent.encoders.export_declarations.EncoderModel.native_max_length``), not the training
    recipe's, unless ``max_seq_length`` is given; the card records both.

    Args:
        source: a ``.ckpt`` of ``unisent fit``, a saved encoder directory, a preset or model id, an
            in-memory model, or an [`ExportSource`][unisent.export.ExportSource].
        out: the directory to create.
        format: ``sentence-transformers`` or ``huggingface`` (see ``available_formats``).
        results: a JSON file of ``unisent evaluate --output`` to list in the card (and its
            ``model-index``).
        training_data: lines describing the training data, listed first in the card.
        name: the model's name, the card's heading (default: the backbone and the training
            methods, e.g. ``all-MiniLM-L6-v2 + SimCSE``).
        max_seq_length: the export's maximum length in tokens (default: the backbone's own).
        license: the card's ``license`` (default: the backbone's where known, else ``other``).
        language: the card's ``language`` list (default: the backbone's where known).
        overwrite: replace ``out`` if it holds a previous export.
        verify: check the export by loading it back.
        atol: the largest absolute difference the check accepts.
        title: former name of ``name``.
        quantize: ``int8``: with ``format="onnx"``, also a dynamically quantised ONNX file, checked against
            the fp32 one on the STS-B test set (``unisent.export.onnx``).
        force: keep an int8 file whose check fails (its numbers are reported either way).
        truncate_dim: written as ``truncate_dim`` to ``config_sentence_transformers.json`` (the
            ``sentence-transformers`` and ``onnx`` formats), where ``SentenceTransformer(DIR)`` reads it: its
            ``encode`` then returns the first ``truncate_dim`` coordinates (a Matryoshka-trained model). The
            check compares the full vectors before it is written; ``unisent.load(DIR)`` honours it too.

    The checks encode in fp32 (``precision="fp32"``), whatever ``auto`` is here.

    Raises:
        FileExistsError: ``out`` is not empty (and ``overwrite`` is off or it is not an export).
        ExportCheckError: the check found different embeddings.
        NoExporterError: the model cannot be exported in ``format`` (it declares no such export).
        ValueError: ``max_seq_length`` is not positive or longer than the backbone's positions;
            ``truncate_dim`` not positive, above the model's dimension, or for a format
            without ``config_sentence_transformers.json``.
    """
    from ..encoders.batching import collect_truncation
    from ..inference.truncation import check_truncate_dim

    out = Path(out).expanduser()
    _prepare_out(out, overwrite)
    results_data: dict[str, Any] | None = read_results(results) if results is not None else None
    if isinstance(source, ExportSource):
        src = replace(source, record=replace(source.record, settings=list(source.record.settings)))
    elif isinstance(source, nn.Module):
        base = getattr(getattr(source, "config", None), "model", None)  # the backbone of an in-memory encoder
        src = ExportSource(
            source.eval(),
            "in-memory model",
            type(source).__name__,
            TrainingRecord(base_model=base if isinstance(base, str) and base else None, data=list(training_data or [])),
        )
    else:
        src = load_export_source(source, training_data)
    exporter = exporter_for(src.model, format)
    if quantize is not None or force:
        configure = getattr(exporter, "configure", None)
        if configure is None:
            raise ValueError(f"quantize and force apply to the onnx format, not to {format}")
        configure(quantize=quantize, force=force)
    lengths_context = max_length_context(src.model, max_seq_length, src.record.base_model)
    truncate_dim = truncate_dim if truncate_dim is not None else src.truncate_dim
    full_dim = check_truncate_dim(src.model, truncate_dim) if truncate_dim is not None else None

    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.parent / f".{out.name}.partial-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    try:
        # the probe sentences are truncated on purpose: no truncation warning while checking
        with lengths_context as lengths, collect_truncation():
            exporter.write(src.model, tmp)
            check = exporter.verify(src.model, tmp, PROBE_SENTENCES) if verify else (None, "skipped (--no-verify)")
            diff = check[0]
            if diff is not None and not diff <= atol:
                raise ExportCheckError(
                    f"the exported {format} files do not reproduce the model: {check[1]} differ by up to {diff:.3g} "
                    f"(allowed {atol:g}); nothing was written to {out}"
                )
            if truncate_dim is not None:
                _write_truncate_dim(tmp, format, truncate_dim)
                src.record.settings.append(
                    ("embedding dimension at inference", f"{truncate_dim} of {full_dim} (`truncate_dim`)")
                )
            if lengths is not None and (lengths[0] != lengths[1] or src.kind in ("checkpoint", "encoder directory")):
                src.record.settings.append(
                    ("max sequence length in training", f"{lengths[0]} tokens (this export: {lengths[1]})")
                )
            card = render_card(
                exporter,
                src,
                title=name or title,
                results=results_data,
                results_name=Path(results).name if results is not None else "",
                check=check,
                license=license,
                language=list(language) if language else None,
                folder=tmp,
            )
        (tmp / "README.md").write_text(card, encoding="utf-8")
        share_files(tmp, every_file=True)
        if out.exists():
            shutil.rmtree(out)
        tmp.rename(out)
        _retarget_settings(out, tmp)
    except BaseException as err:
        shutil.rmtree(tmp, ignore_errors=True)
        if isinstance(err, NotExportableError):  # the model (or its pooler or head) declares no such export
            raise NoExporterError(f"cannot export {type(src.model).__name__} as {format}: {err}") from err
        raise
    files = sorted(str(p.relative_to(out)) for p in out.rglob("*") if p.is_file())
    return ExportReport(
        out=out,
        format=format,
        files=files,
        max_diff=check[0],
        check=check[1],
        max_seq_length=lengths[1] if lengths else None,
        trained_max_length=lengths[0] if lengths else None,
        name=name or title or default_name(src),
        notes=list(getattr(exporter, "notes", [])),
    )
