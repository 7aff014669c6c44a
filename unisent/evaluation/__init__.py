"""Evaluation of sentence embeddings on public benchmarks.

Quick use::

    from unisent.evaluation import evaluate, format_markdown
    results = evaluate(model, ["stsb-test", "transfer"], "path/to/data")
    print(format_markdown(results))

``model`` is any object with ``encode(sentences, batch_size) -> (n, d)``. See docs/evaluation.md for the
tasks, the data layout and the protocols; ``evaluate_panel`` (:mod:`.panel`) scores the unified panel's
columns (docs/results/unified.md).
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

# Every name is imported on first use (PEP 562): `unisent evaluate --list` builds the task registry
# without torch, scikit-learn or Lightning (tests/test_errors.py checks it).
_LAZY: dict[str, str] = {
    "Embedder": "encoding",
    "SentenceModel": "encoding",
    "COSINE": "metrics.similarity",
    "Similarity": "metrics.similarity",
    "cosine_similarity": "metrics.similarity",
    "kl_similarity": "metrics.similarity",
    "symmetric_kl_similarity": "metrics.similarity",
    "ProbeConfig": "metrics.probe_config",
    "DataFormatError": "tasks.task",
    "evaluate": "runner",
    "format_markdown": "runner",
    "list_tasks": "runner",
    "merge_results": "runner",
    "GROUPS": "tasks",
    "TASKS": "tasks",
    "Source": "tasks",
    "Task": "tasks",
    "get_task": "tasks",
    "register_task": "tasks",
    "EvaluationCallback": "callback",
    "PANEL_COLUMNS": "panel",
    "evaluate_panel": "panel",
}

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
    from .panel import PANEL_COLUMNS, evaluate_panel
    from .runner import evaluate, format_markdown, list_tasks, merge_results
    from .tasks import GROUPS, TASKS, Source, Task, get_task, register_task
    from .tasks.task import DataFormatError

__all__ = [
    "COSINE",
    "GROUPS",
    "PANEL_COLUMNS",
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
    "evaluate_panel",
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
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *_LAZY})
