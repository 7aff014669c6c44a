"""Run tasks on a model, and render results and the task list as text."""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from tqdm.auto import tqdm

from .encoding import Embedder, SentenceModel
from .metrics.similarity import Similarity
from .tasks.registry import GROUPS, TASKS, resolve_tasks

__all__ = ["evaluate", "format_markdown", "list_tasks", "merge_results"]

AGGREGATE_EXCLUDED = ("all",)
THREE_DECIMALS = ("threshold", "alignment", "uniformity")


def evaluate(
    model: SentenceModel,
    tasks: Sequence[str] | str,
    data_dir: str | Path,
    batch_size: int = 64,
    progress: bool = True,
    similarity: Similarity | None = None,
) -> dict[str, Any]:
    """Evaluate a model on tasks and groups of tasks.

    All files are checked before anything is encoded. Optional tasks (STS12-16, STS17, BUCC) reached
    through a group are skipped when their files are absent; every other missing file is an error.

    Args:
        model: any object with ``encode(sentences, batch_size) -> (n, d)`` (and ``encode_gaussian`` for
            a Gaussian similarity).
        tasks: task and group names (``["stsb-test", "transfer"]``) or a comma-separated string.
        data_dir: root of the data layout (see docs/evaluation.md).
        batch_size: encoding batch size.
        progress: show progress bars and one line per finished task on stderr.
        similarity: pairwise similarity for STS and NLI tasks; cosine of ``encode`` by default.

    Returns:
        A JSON-serialisable dict::

            {"tasks": {name: {"group", "main_metric", "score", "metrics": {...}, "seconds"}},
             "groups": {group: {"main_metric", "score", "n_tasks", "tasks"}},
             "skipped": {name: reason},
             "config": {"data_dir", "batch_size", "similarity"}}

        ``groups`` holds the mean score of each group of which at least two tasks ran, when they share
        their main metric.

    Raises:
        ValueError: an unknown task or group name (the message lists the valid ones).
        FileNotFoundError: the data directory or a data file of a requested task is missing.
    """
    data_dir = Path(data_dir).expanduser()
    if not data_dir.is_dir():
        raise FileNotFoundError(f"data directory not found: {data_dir}")
    selected = resolve_tasks(tasks)
    runnable, skipped = [], {}
    for task, explicit in selected:
        missing = task.missing_files(data_dir)
        if not missing:
            runnable.append(task)
        elif task.optional and not explicit:
            skipped[task.name] = f"missing data file {missing[0]}"
        else:
            task.check_files(data_dir)
    embedder = Embedder(model, batch_size=batch_size, similarity=similarity, progress=progress)
    results: dict[str, Any] = {
        "tasks": {},
        "groups": {},
        "skipped": skipped,
        "config": {
            "data_dir": str(data_dir),
            "batch_size": batch_size,
            "similarity": embedder.similarity.name,
        },
    }
    for task in tqdm(runnable, desc="tasks", unit="task", disable=not progress):
        start = time.perf_counter()
        metrics = task.evaluate(embedder, data_dir)
        seconds = time.perf_counter() - start
        results["tasks"][task.name] = {
            "group": task.group,
            "main_metric": task.main_metric,
            "score": metrics[task.main_metric],
            "metrics": metrics,
            "seconds": round(seconds, 2),
        }
        if progress:
            tqdm.write(f"{task.name}: {task.main_metric} {metrics[task.main_metric]:.2f} ({seconds:.1f} s)")
    results["groups"] = _group_scores(results["tasks"])
    return results


def merge_results(*parts: dict[str, Any]) -> dict[str, Any]:
    """Combine the outputs of several :func:`evaluate` calls (runs split by group) into one.

    Later parts win for a task present in several; group means are recomputed; ``config`` is the first
    part's.

    Args:
        parts: dicts returned by :func:`evaluate` (or loaded from their JSON).

    Returns:
        A dict of the same shape.
    """
    merged: dict[str, Any] = {"tasks": {}, "groups": {}, "skipped": {}, "config": {}}
    for part in parts:
        merged["tasks"].update(part.get("tasks", {}))
        merged["skipped"].update(part.get("skipped", {}))
        merged["config"] = merged["config"] or dict(part.get("config", {}))
    for name in merged["tasks"]:
        merged["skipped"].pop(name, None)
    merged["groups"] = _group_scores(merged["tasks"])
    return merged


def _group_scores(task_results: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    scores = {}
    for group, members in GROUPS.items():
        ran = [name for name in members if name in task_results]
        metrics = {task_results[name]["main_metric"] for name in ran}
        if group in AGGREGATE_EXCLUDED or len(ran) < 2 or len(metrics) != 1:
            continue
        scores[group] = {
            "main_metric": metrics.pop(),
            "score": sum(task_results[name]["score"] for name in ran) / len(ran),
            "n_tasks": len(ran),
            "tasks": ran,
        }
    return scores


def _format_value(name: str, value: float) -> str:
    if name.startswith("n_") or name == "n":
        return str(int(value))
    if name == "C":
        return f"{value:g}"
    if name in THREE_DECIMALS:
        return f"{value:.3f}"
    if math.isnan(value):
        return "nan"
    return f"{value:.2f}"


def format_markdown(results: dict[str, Any]) -> str:
    """Render the output of :func:`evaluate` as Markdown: one table per task family, then group means.

    Args:
        results: the dict returned by :func:`evaluate` (or loaded back from its JSON).

    Returns:
        Markdown text.
    """
    lines: list[str] = []
    config = results.get("config", {})
    if config:
        lines.append(
            f"Data: `{config.get('data_dir')}`, batch size {config.get('batch_size')}, "
            f"similarity: {config.get('similarity')}."
        )
        lines.append("")
    families: dict[str, list[str]] = {}
    for name, entry in results.get("tasks", {}).items():
        families.setdefault(entry["group"], []).append(name)
    for family, names in families.items():
        lines += [
            f"### {family}",
            "",
            "| task | metric | score | other metrics | seconds |",
            "|---|---|---:|---|---:|",
        ]
        for name in names:
            entry = results["tasks"][name]
            main = entry["main_metric"]
            others = ", ".join(f"{k} {_format_value(k, v)}" for k, v in entry["metrics"].items() if k != main)
            score = _format_value(main, entry["score"])
            lines.append(f"| {name} | {main} | {score} | {others} | {entry['seconds']:.1f} |")
        lines.append("")
    if results.get("groups"):
        lines += ["### group means", "", "| group | metric | mean | tasks |", "|---|---|---:|---:|"]
        for group, entry in results["groups"].items():
            lines.append(f"| {group} | {entry['main_metric']} | {entry['score']:.2f} | {entry['n_tasks']} |")
        lines.append("")
    if results.get("skipped"):
        lines += ["### skipped", ""]
        lines += [f"- {name}: {reason}" for name, reason in results["skipped"].items()]
        lines.append("")
    return "\n".join(lines).rstrip() + "\n"


def list_tasks(data_dir: str | Path | None = None) -> str:
    """The groups and tasks, with their main metric and description, as plain text.

    Args:
        data_dir: if given, each task is marked ``ok`` or ``missing`` for its data files there.

    Returns:
        Text for a terminal.
    """
    lines = ["Groups:"]
    for group, members in sorted(GROUPS.items()):
        lines.append(f"  {group:<14} {len(members):>3} tasks")
    lines += ["", "Tasks:"]
    width = max(len(name) for name in TASKS)
    for name, task in TASKS.items():
        flags = []
        if task.optional:
            flags.append("optional")
        if data_dir is not None:
            flags.append("missing" if task.missing_files(data_dir) else "ok")
        flag = f" [{', '.join(flags)}]" if flags else ""
        lines.append(f"  {name:<{width}}  {task.group:<10} {task.main_metric:<13} {task.description}{flag}")
    return "\n".join(lines) + "\n"
