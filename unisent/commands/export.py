"""``unisent export``: a checkpoint, saved encoder or preset as a Sentence Transformers / Hugging Face directory."""

from __future__ import annotations

from functools import partial
from typing import Literal

from .function_commands import CommandFailed, UsageError, require_positive, run_command

__all__ = ["export", "main"]


def export(
    source: str,
    *,
    format: str,
    out: str,
    results: str | None = None,
    training_data: list[str] | None = None,
    name: str | None = None,
    max_seq_length: int | None = None,
    license: str | None = None,
    language: list[str] | None = None,
    overwrite: bool = False,
    verify: bool = True,
    push_to: str | None = None,
    private: bool = False,
    quantize: Literal["int8"] | None = None,
    force: bool = False,
    truncate_dim: int | None = None,
) -> None:
    """Export a checkpoint, a saved encoder or a preset as a Sentence Transformers or Hugging Face directory.

    With a model card (objectives, citations, training data, base model, results); loaded back to check
    its embeddings. It keeps the backbone's maximum length (256 for minilm-l6), not the recipe's.

    Args:
        source: a .ckpt of `unisent fit`, a saved encoder directory (<run>/encoder) or a preset; the first
            two local or a URL (s3://bucket/run/version_0/encoder; pip install 'unisent[s3]')
        format: sentence-transformers (for SentenceTransformer(DIR)); huggingface (transformers.AutoModel, the
            card documents the pooling); onnx (sentence-transformers plus onnx/model.onnx with the pooling, for
            `unisent encode --backend onnx`; pip install 'unisent[onnx]'); or a plugin's (--import MODULE)
        out: directory to create
        results: JSON of `unisent evaluate --output` to list in the model card (and its model-index)
        training_data: lines describing the training data for the card (repeatable)
        name: the model's name, the card's heading (default: backbone + training methods)
        max_seq_length: longest input in tokens (default: the backbone's own, e.g. 256 for minilm-l6)
        license: the card's license (default: the backbone's where known, else other)
        language: the card's languages, e.g. en (default: the backbone's where known)
        overwrite: replace --out if it holds a previous export
        verify: load the export back to check that it reproduces the embeddings (--no-verify: skip)
        push_to: then upload the directory to this Hugging Face Hub repository, ORG/NAME (token: hf auth login)
        private: create the --push-to repository as private
        quantize: int8: with --format onnx, also onnx/model_qint8_<arch>.onnx, refused when it scores over 0.5
            below fp32 on the STS-B test set or a sentence's cosine to fp32 is below 0.9
        force: keep an int8 file that fails its check (the numbers are printed either way)
        truncate_dim: SentenceTransformer(DIR).encode returns the first D coordinates (a Matryoshka model;
            sentence-transformers and onnx formats)
    """
    from ..export import ExportCheckError, NoExporterError, check_format, export_model

    try:  # the registered formats: built-in and those of plugins (loaded before the command runs)
        check_format(format)
    except ValueError as err:
        raise UsageError(f"--format: {err}") from None
    if push_to:  # a name the Hub refuses ('../x', 'org/a..b'): one line before anything is written or sent
        from ..export.hub import PushError, check_repo_id

        try:
            check_repo_id(push_to)
        except PushError as err:
            raise CommandFailed(f"{err}; nothing was exported") from None
    require_positive(truncate_dim, "--truncate-dim", "dimensions")
    from ..io.remote import localize

    local = localize(source)  # a URL (s3://...): its local copy, the run's config.yaml beside it, checked as local
    try:
        report = export_model(
            local,
            out,
            format,
            results=results,
            training_data=list(training_data or []),
            name=name,
            max_seq_length=max_seq_length,
            license=license,
            language=list(language) if language else None,
            overwrite=overwrite,
            verify=verify,
            quantize=quantize,
            force=force,
            truncate_dim=truncate_dim,
        )
    except (NoExporterError, ExportCheckError) as err:
        raise CommandFailed(str(err)) from err
    print(f"exported {source} as {report.format} to {report.out} ({len(report.files)} files, model card README.md)")
    if report.max_seq_length is not None:
        trained = (
            f" (trained with {report.trained_max_length}; --max-seq-length to change)"
            if report.trained_max_length != report.max_seq_length
            else ""
        )
        print(f"max sequence length: {report.max_seq_length} tokens{trained}")
    diff = "" if report.max_diff is None else f": largest absolute difference {report.max_diff:.2e}"
    print(f"check: {report.check}{diff}")
    if truncate_dim is not None:
        print(f"truncate_dim: {truncate_dim} (SentenceTransformer(DIR).encode returns {truncate_dim} dimensions)")
    for note in report.notes:  # the onnx format's own checks: ONNX against torch, int8 against fp32
        print(f"check: {note}")
    if push_to:
        from ..export.hub import PushError, push_to_hub

        try:
            url = push_to_hub(report.out, push_to, private=private)
        except PushError as err:
            raise CommandFailed(str(err)) from None
        print(f"pushed to https://huggingface.co/{push_to} ({url})")


main = partial(run_command, export, prog="unisent export")
