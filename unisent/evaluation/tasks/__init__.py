"""Evaluation tasks: the task classes and the registry of built-in tasks and groups."""

from __future__ import annotations

from .base import LoadedData, Source, Task, use_loaded
from .clustering import BuccTask, ClusteringTask, TatoebaTask
from .nli import EntailmentDirectionTask, NLIThresholdTask
from .registry import GROUPS, TASKS, get_task, register_task, resolve_tasks, task_names_summary
from .sts import AlignUniformTask, STSSubsetsTask, STSTask, score_pairs
from .transfer import CrossValidatedProbeTask, SplitProbeTask, ZeroShotProbeTask, features_of

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
