"""Evaluation of sentence embeddings on public benchmarks.

Quick use::

    from unisent.evaluation import evaluate, format_markdown
    results = evaluate(model, ["stsb-test", "transfer"], "path/to/data")
    print(format_markdown(results))

``model`` is any object with ``encode(sentences, batch_size) -> (n, d)``. See docs/evaluation.md for the
tasks, the data layout and the protocols.
"""

from __future__ import annotations

from .encoding import Embedder, SentenceModel
from .metrics import (
    COSINE,
    ProbeConfig,
    Similarity,
    cosine_similarity,
    kl_similarity,
    symmetric_kl_similarity,
)
from .readers import DataFormatError
from .runner import evaluate, format_markdown, list_tasks, merge_results
from .tasks import GROUPS, TASKS, Source, Task, get_task, register_task

__all__ = [
    "COSINE",
    "GROUPS",
    "TASKS",
    "DataFormatError",
    "Embedder",
    "ProbeConfig",
    "SentenceModel",
    "Similarity",
    "Source",
    "Task",
    "cosine_similarity",
    "evaluate",
    "format_markdown",
    "get_task",
    "kl_similarity",
    "list_tasks",
    "merge_results",
    "register_task",
    "symmetric_kl_similarity",
]


def __getattr__(name: str):
    # the Lightning callback is imported on first use: the evaluation itself does not need Lightning
    if name == "EvaluationCallback":
        from .callback import EvaluationCallback

        return EvaluationCallback
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
