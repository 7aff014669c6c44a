"""``unisent evaluate``: the papers' evaluation protocols on a checkpoint, a saved model or a preset."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Literal

from ._cli import CommandFailed, UsageError, run_command

__all__ = ["evaluate", "main"]


def evaluate(
    *,
    model: str | None = None,
    tasks: str = "stsb-dev",
    data_dir: str | None = None,
    output: str | None = None,
    batch_size: int = 128,
    similarity: Literal["cosine", "kl", "kl_mean", "kl_symmetric", "kl_symmetric_mean", "kl_avg_sim"] = "cosine",
    device: str | None = None,
    list: bool = False,
    quiet: bool = False,
) -> None:
    """The papers' evaluation protocols on a checkpoint, a saved model or a preset.

    Prints a markdown table of the scores (x100) and optionally writes them as JSON. Every file of
    every selected task is read and checked before anything is encoded; a task that fails (a
    malformed file, an error while scoring) is listed under "failed" with its error, the other tasks
    are still run and reported, and the command then exits with status 1.

    Args:
        model: a preset (minilm-l6), a saved encoder directory, a model directory or a .ckpt
        tasks: comma-separated task and group names
        data_dir: root of the evaluation data (default: the bundled sample, which has STS-B dev and test)
        output: write the results as JSON to this file
        batch_size: sentences per forward pass
        similarity: pairwise similarity for STS/NLI tasks; kl* need a Gaussian model (GaussCSE)
        device: cpu, cuda, cuda:1 ... (default: cpu)
        list: list the tasks and groups (marked ok/missing for --data-dir)
        quiet: no progress bars
    """
    import sys

    from ..data import SAMPLE_DIR
    from ..evaluation import evaluate as run_evaluation
    from ..evaluation import format_markdown, list_tasks

    data_dir = str(SAMPLE_DIR) if data_dir is None else data_dir
    if list:
        sys.stdout.write(list_tasks(data_dir))
        return
    if not model:
        raise UsageError("--model is required (or --list)")
    import unisent

    from ..evaluation.similarities import get_similarity

    loaded = unisent.load(model, device=device)
    results = run_evaluation(loaded, tasks, data_dir, batch_size=batch_size, progress=not quiet,
                             similarity=get_similarity(similarity))
    results["config"]["model"] = model
    sys.stdout.write(format_markdown(results))
    if output:
        from ..io import atomic_write

        with atomic_write(output) as handle:
            handle.write(json.dumps(results, indent=2) + "\n")
        print(f"results written to {output}")
    if results["failed"]:
        names = ", ".join(results["failed"])
        raise CommandFailed(f"{len(results['failed'])} of {len(results['failed']) + len(results['tasks'])} "
                            f"tasks failed: {names} (the others are reported above)")


def main(argv: Sequence[str]) -> None:
    run_command(evaluate, argv, "unisent evaluate")
