"""Evaluation of sentence embeddings on public benchmarks.

Quick use::

    from unisent.evaluation import evaluate, format_markdown
    results = evaluate(model, ["stsb-test", "transfer"], "path/to/data")
    print(format_markdown(results))

``model`` is any object with ``encode(sentences, batch_size) -> (n, d)``. See docs/evaluation.md for the
tasks, the data layout and the protocols.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

# Every name is imported on first use (PEP 562): `unisent evaluate --list` builds the task registry
# without torch, scikit-learn or Lightning (tests/test_errors.py checks it).
_LAZY: dict[str, str] = {
    **dict.fromkeys(("Embedder", "SentenceModel"), "encoding"),
    **dict.fromkeys(("COSINE", "Similarity", "cosine_similarity", "kl_similarity", "symmetric_kl_similarity"),
                    "metrics.similarity"),
    "ProbeConfig": "metrics.probe_config",
    "DataFormatError": "readers",
    **dict.fromkeys(("evaluate", "format_markdown", "list_tasks", "merge_results"), "runner"),
    **dict.fromkeys(("GROUPS", "TASKS", "Source", "Task", "get_task", "register_task"), "tasks"),
    "EvaluationCallback": "callback",  # the Lightning callback: the evaluation itself needs no Lightning
}

_SUBMODULES = ("callback", "encoding", "metrics", "readers", "runner", "similarities", "tasks")

if TYPE_CHECKING:
    from .callback import EvaluationCallback as EvaluationCallback  # not in __all__: it imports Lightning
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


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        value = getattr(import_module(f".{_LAZY[name]}", __name__), name)
        globals()[name] = value
        return value
    if name in _SUBMODULES:  # `unisent.evaluation.metrics` without importing it first, as before
        return import_module(f".{name}", __name__)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *_LAZY})
