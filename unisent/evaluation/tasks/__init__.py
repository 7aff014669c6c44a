"""Evaluation tasks: the task classes and the registry of built-in tasks and groups."""

from __future__ import annotations

from .builtin_tasks import GROUPS, TASKS, get_task, register_task, resolve_tasks, task_names_summary
from .clustering_tasks import BuccTask, ClusteringTask, TatoebaTask
from .nli_tasks import EntailmentDirectionTask, NLIThresholdTask
from .sts_tasks import AlignUniformTask, STSSubsetsTask, STSTask, score_pairs
from .task import LoadedData, Source, Task, use_loaded
from .transfer_tasks import CrossValidatedProbeTask, SplitProbeTask, ZeroShotProbeTask, features_of

__all__ = [
    "GROUPS",
    "TASKS",
    "AlignUniformTask",
    "BuccTask",
    "ClusteringTask",
    "CrossValidatedProbeTask",
    "EntailmentDirectionTask",
    "LoadedData",
    "NLIThresholdTask",
    "STSSubsetsTask",
    "STSTask",
    "Source",
    "SplitProbeTask",
    "Task",
    "TatoebaTask",
    "ZeroShotProbeTask",
    "features_of",
    "get_task",
    "register_task",
    "resolve_tasks",
    "score_pairs",
    "task_names_summary",
    "use_loaded",
]
