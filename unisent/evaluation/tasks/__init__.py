"""Evaluation tasks: the task classes and the registry of built-in tasks and groups."""

from __future__ import annotations

from .builtin_tasks import GROUPS, TASKS, get_task, register_task, resolve_tasks
from .clustering_tasks import BuccTask, ClusteringTask, TatoebaTask
from .nli_tasks import EntailmentDirectionTask, NLIThresholdTask
from .sts_tasks import AlignUniformTask, STSSubsetsTask, STSTask
from .task import Source, Task
from .transfer_tasks import CrossValidatedProbeTask, SplitProbeTask, ZeroShotProbeTask

__all__ = [
    "GROUPS",
    "TASKS",
    "AlignUniformTask",
    "BuccTask",
    "ClusteringTask",
    "CrossValidatedProbeTask",
    "EntailmentDirectionTask",
    "NLIThresholdTask",
    "STSSubsetsTask",
    "STSTask",
    "Source",
    "SplitProbeTask",
    "Task",
    "TatoebaTask",
    "ZeroShotProbeTask",
    "get_task",
    "register_task",
    "resolve_tasks",
]
