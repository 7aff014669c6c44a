"""``unisent evaluate``: the papers' evaluation protocols on a checkpoint, a saved model or a preset."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

__all__ = ["main"]


def _parser() -> argparse.ArgumentParser:
    from ..data import SAMPLE_DIR

    p = argparse.ArgumentParser(prog="unisent evaluate", description=__doc__)
    p.add_argument("--model", help="a preset (minilm-l6), a saved encoder directory, a model directory or a .ckpt")
    p.add_argument("--tasks", default="stsb-dev", help="comma-separated task and group names (default: stsb-dev)")
    p.add_argument("--data-dir", default=str(SAMPLE_DIR),
                   help="root of the evaluation data (default: the bundled sample, which has STS-B dev and test)")
    p.add_argument("--output", help="write the results as JSON to this file")
    p.add_argument("--batch-size", type=int, default=128)
    p.add_argument("--similarity", default="cosine", choices=("cosine", "kl", "kl_mean", "kl_symmetric"),
                   help="pairwise similarity for STS/NLI tasks; kl* need a Gaussian model (GaussCSE)")
    p.add_argument("--device", default=None, help="cpu, cuda, cuda:1 ... (default: cpu)")
    p.add_argument("--list", action="store_true", help="list the tasks and groups (marked ok/missing for --data-dir)")
    p.add_argument("--quiet", action="store_true", help="no progress bars")
    return p


def main(argv: list[str]) -> None:
    args = _parser().parse_args(argv)
    from ..evaluation import evaluate, format_markdown, list_tasks

    if args.list:
        sys.stdout.write(list_tasks(args.data_dir))
        return
    if not args.model:
        _parser().error("--model is required (or --list)")
    import unisent

    try:
        model = unisent.load(args.model, device=args.device)
        from ..evaluation.similarities import get_similarity

        results = evaluate(model, args.tasks, args.data_dir, batch_size=args.batch_size, progress=not args.quiet,
                           similarity=get_similarity(args.similarity))
    except (FileNotFoundError, ValueError, OSError) as err:
        sys.exit(f"unisent evaluate: error: {err}")
    results["config"]["model"] = args.model
    sys.stdout.write(format_markdown(results))
    if args.output:
        Path(args.output).parent.mkdir(parents=True, exist_ok=True)
        Path(args.output).write_text(json.dumps(results, indent=2) + "\n")
        print(f"results written to {args.output}")
