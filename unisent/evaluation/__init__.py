"""Evaluation of sentence embeddings on public benchmarks.

Quick use::

    from unisent.evaluation import evaluate, format_markdown
    results = evaluate(model, ["stsb-test", "transfer"], "path/to/data")
    print(format_markdown(results))

``model`` is any object with ``encode(sentences, batch_size) -> (n, d)``. Tasks, data layout and
protocols: docs/evaluation.md; the unified panel (``evaluate_panel``): docs/results/unified.md.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING

from ..io.imports import lazy_exports

# Every name is imported on first use (PEP 562): `unisent evaluate --list` builds the task registry
# without torch, scikit-learn or Lightning (tests/test_errors.py checks it).
_LAZY: dict[str, str] = {
    "Embedder": "encoding",
    "SentenceModel": "encoding",
    "Similarity": "metrics.similarity",
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
    "BestOnDev": "best_on_dev",
    "PANEL_COLUMNS": "panel",
    "evaluate_panel": "panel",
}

if TYPE_CHECKING:
    from .best_on_dev import BestOnDev as BestOnDev  # not in __all__: it imports Lightning
    from .callback import EvaluationCallback as EvaluationCallback  # not in __all__: it imports Lightning
    from .encoding import Embedder, SentenceModel
    from .metrics import ProbeConfig, Similarity, kl_similarity, symmetric_kl_similarity
    from .panel import PANEL_COLUMNS, evaluate_panel
    from .runner import evaluate, format_markdown, list_tasks, merge_results
    from .tasks import GROUPS, TASKS, Source, Task, get_task, register_task
    from .tasks.task import DataFormatError

__all__ = [
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

__getattr__, __dir__ = lazy_exports(globals(), _LAZY, lambda sub: import_module(f".{sub}", __name__))
