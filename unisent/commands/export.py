"""``unisent export``: a checkpoint, a saved encoder or a preset as a Sentence Transformers or Hugging Face
directory with a model card (objectives, citations, training data, base model, evaluation results)."""

from __future__ import annotations

import argparse
import sys

__all__ = ["main"]


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="unisent export", description=__doc__)
    p.add_argument("source", help="a .ckpt of `unisent fit`, a saved encoder directory (<run>/encoder) or a preset")
    p.add_argument("--format", required=True, choices=["sentence-transformers", "huggingface"],
                   help="sentence-transformers: SentenceTransformer(DIR) loads it; huggingface: "
                        "transformers.AutoModel loads it, the card documents the pooling")
    p.add_argument("--out", required=True, help="directory to create")
    p.add_argument("--results", help="JSON of `unisent evaluate --output` to list in the model card")
    p.add_argument("--training-data", action="append", default=[], metavar="TEXT",
                   help="a line describing the training data for the card (repeatable)")
    p.add_argument("--title", help="heading of the model card (default: the --out directory name)")
    p.add_argument("--overwrite", action="store_true", help="replace --out if it holds a previous export")
    p.add_argument("--no-verify", action="store_true",
                   help="do not load the export back to check that it reproduces the embeddings")
    return p


def main(argv: list[str]) -> None:
    args = _parser().parse_args(argv)
    from ..export import ExportCheckError, NoExporterError, export_model

    try:
        report = export_model(
            args.source, args.out, args.format, results=args.results, training_data=args.training_data,
            title=args.title, overwrite=args.overwrite, verify=not args.no_verify,
        )
    except (OSError, ValueError, ImportError, NoExporterError, ExportCheckError) as err:
        sys.exit(f"unisent export: error: {err}")
    print(f"exported {args.source} as {report.format} to {report.out} ({len(report.files)} files, model card README.md)")
    if report.max_diff is None:
        print(f"check: {report.check}")
    else:
        print(f"check: {report.check}: largest absolute difference {report.max_diff:.2e}")
