"""Run tasks on a model, and render results and the task list as text."""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from tqdm.auto import tqdm

from .tasks.task import LoadedData, Source, Task, use_loaded

if TYPE_CHECKING:  # torch is imported when a model is evaluated, not by `evaluate --list`
    from .encoding import SentenceModel
    from .metrics.similarity import Similarity
from .tasks.builtin_tasks import GROUPS, TASKS, resolve_tasks

log = logging.getLogger(__name__)

__all__ = ["evaluate", "format_markdown", "list_tasks", "merge_results"]

THREE_DECIMALS = ("threshold", "alignment", "uniformity")


def evaluate(
    model: SentenceModel,
    tasks: Sequence[str] | str,
    data_dir: str | Path | None = None,
    batch_size: int = 64,
    progress: bool = True,
    similarity: Similarity | str | None = None,
    on_error: Literal["report", "raise"] = "report",
    precision: Literal["fp32", "auto", "bf16"] = "fp32",
) -> dict[str, Any]:
    """Evaluate a model on tasks and groups of tasks.

    The run has two passes. First every file of every selected task is checked to exist and is read
    in full, so that a missing file or a malformed row anywhere stops or fails its task in the first
    seconds, before anything is encoded; then the tasks that read cleanly are run, each reusing the
    data read in the first pass (a file shared by several tasks is read once). Optional tasks (STS12-16,
    STS17, BUCC, GoogleNews) reached through a group are skipped when their files are absent; every
    other missing file is an error.

    A task that fails (a malformed file, or an error while it is scored) does not stop the others:
    with ``on_error="report"`` it is named under ``failed`` with its error in one line (and logged at
    once), and the results of the other tasks are returned as usual.

    Args:
        model: any object with ``encode(sentences, batch_size) -> (n, d)`` (and ``encode_gaussian`` for
            a Gaussian similarity).
        tasks: task and group names (``["stsb-test", "transfer"]``) or a comma-separated string.
        data_dir: root of the data layout (see docs/evaluation.md); ``None``: the bundled data
            (``unisent.resources.EVALUATION_DATA_DIR``: STS-B dev and test), as ``unisent evaluate``.
            A task whose files are not in ``data_dir`` but are bundled (STS-B) is read from the bundled
            copy, with a warning, and ``config["bundled_data"]`` names it.
        batch_size: encoding batch size.
        progress: show progress bars and one line per finished task on stderr.
        similarity: pairwise similarity for STS and NLI tasks (a ``Similarity`` or its name: ``"kl"``,
            ...; see ``unisent.evaluation.similarities``), for every task. By default cosine of ``encode``,
            except that a task with a ``gaussian_similarity`` (entailment direction: ``kl``) uses that on a model
            with ``encode_gaussian``; ``config["similarity_by_task"]`` then names those tasks.
        on_error: ``"report"`` a failed task under ``failed`` and go on, or ``"raise"`` its error (a
            malformed file then raises before anything is encoded).
        precision: ``fp32`` (the protocols'), ``bf16`` (bfloat16 while encoding) or ``auto`` (resolved for the
            model's device); ``config.precision`` records what ran ([`Embedder`][unisent.evaluation.Embedder]).

    Returns:
        A JSON-serialisable dict::

            {"tasks": {name: {"group", "main_metric", "score", "metrics": {...}, "seconds"}},
             "groups": {group: {"main_metric", "score", "n_tasks", "tasks"}},
             "skipped": {name: reason},
             "failed": {name: "ErrorType: message"},
             "config": {"data_dir", "batch_size", "similarity", "precision"}}

        ``groups`` holds the mean score of each group of which at least two tasks ran, when they share
        their main metric.

    Raises:
        ValueError: an unknown task or group name (the message lists the valid ones).
        FileNotFoundError: the data directory or a data file of a requested task is missing.
        Exception: with ``on_error="raise"``, the first error of a task.
    """
    if on_error not in ("report", "raise"):
        raise ValueError(f"on_error must be 'report' or 'raise', got {on_error!r}")
    from ..resources import EVALUATION_DATA_DIR

    bundled = Path(EVALUATION_DATA_DIR)
    data_dir = bundled if data_dir is None else Path(data_dir).expanduser()
    if not data_dir.is_dir():
        raise FileNotFoundError(f"data directory not found: {data_dir}")
    present, skipped, dirs = _present_tasks(resolve_tasks(tasks), data_dir, bundled)
    failed: dict[str, str] = {}

    def fail(task: Task, error: Exception, stage: str) -> None:
        if on_error == "raise":
            raise error
        failed[task.name] = _one_line(error)
        log.error("task %s failed while %s: %s", task.name, stage, failed[task.name])

    loaded, runnable = _read_data(present, dirs, fail)  # pass 1: every file read (and checked) first
    from .encoding import Embedder

    if isinstance(similarity, str):
        from .similarities import get_similarity

        similarity = get_similarity(similarity)
    embedder = Embedder(model, batch_size=batch_size, similarity=similarity, progress=progress, precision=precision)
    config = {"data_dir": str(data_dir), "batch_size": batch_size, "similarity": embedder.similarity.name}
    results: dict[str, Any] = {"tasks": {}, "groups": {}, "skipped": skipped, "failed": failed}
    results["config"] = config | {"precision": embedder.precision}
    own = {} if similarity is not None else {t.name: sim for t in runnable if (sim := t.own_similarity(model))}
    if own:
        results["config"]["similarity_by_task"] = {name: sim.name for name, sim in own.items()}
    fallbacks = {task.name: str(bundled) for task in present if dirs[task.name] != data_dir}
    if fallbacks:
        results["config"]["bundled_data"] = fallbacks
    with use_loaded(loaded):  # pass 2: encode and score
        _score_tasks(runnable, dirs, loaded, embedder, fail, results["tasks"], progress, own)
    results["groups"] = _group_scores(results["tasks"])
    return results


def _present_tasks(
    selected: list[tuple[Task, bool]], data_dir: Path, bundled: Path
) -> tuple[list[Task], dict[str, str], dict[str, Path]]:
    """``(tasks with their files, {skipped optional task: why}, {task: data_dir or the bundled copy})``."""
    present, skipped = [], {}
    dirs: dict[str, Path] = {}
    for task, explicit in selected:
        missing = task.missing_files(data_dir)
        dirs[task.name] = data_dir
        if missing and data_dir.resolve() != bundled.resolve() and not task.missing_files(bundled):
            log.warning("task %s: %s not found; using the bundled copy in %s", task.name, missing[0], bundled)
            dirs[task.name], missing = bundled, []
        if not missing:
            present.append(task)
        elif task.optional and not explicit:
            skipped[task.name] = f"missing data file {missing[0]}"
        else:
            task.check_files(data_dir)
    return present, skipped, dirs


def _read_data(present: list[Task], dirs: dict[str, Path], fail) -> tuple[LoadedData, list[Task]]:
    """Pass 1: every file read once, a task whose file fails ``fail``-ed: ``(the data, the tasks that can run)``."""
    loaded: LoadedData = {}
    bad_sources: dict[Source, Exception] = {}
    runnable = []
    for task in present:
        try:
            for source in task.sources():
                key = (source, dirs[task.name])
                if key in loaded:
                    continue
                if source in bad_sources:  # a file shared with a task that already failed on it
                    raise bad_sources[source]
                try:
                    loaded[key] = source.read(dirs[task.name])
                except Exception as error:
                    bad_sources[source] = error
                    raise
        except Exception as error:
            fail(task, error, "reading its data")
            continue
        runnable.append(task)
    return loaded, runnable


def _score_tasks(
    runnable, dirs, loaded: LoadedData, embedder, fail, scores: dict[str, Any], progress: bool, own: dict
) -> None:
    """Pass 2: each task encoded and scored into ``scores``; each file's data freed after the last task using it.
    ``own``: the tasks scored with a similarity of their own (``{task: Similarity}``), the others the embedder's."""
    last_use = {key: i for i, task in enumerate(runnable) for key in _keys(task, dirs[task.name])}
    bar = tqdm(runnable, desc="tasks", unit="task", disable=not progress)
    shared = embedder.similarity
    for i, task in enumerate(bar):
        bar.set_description(f"task {task.name}")  # the bar names the task it is on
        embedder.label = f"encoding {task.name}"
        embedder.similarity = own.get(task.name, shared)  # the encodings are cached by method, not similarity
        start = time.perf_counter()
        try:
            metrics = task.evaluate(embedder, dirs[task.name])
            score = metrics[task.main_metric]
        except Exception as error:
            fail(task, error, "being scored")
            continue
        finally:
            embedder.similarity = shared
            for key in _keys(task, dirs[task.name]):
                if last_use.get(key) == i:
                    loaded.pop(key, None)
        seconds = time.perf_counter() - start
        scores[task.name] = {"group": task.group, "main_metric": task.main_metric, "score": score, "metrics": metrics}
        scores[task.name]["seconds"] = round(seconds, 2)
        if progress:
            tqdm.write(f"{task.name}: {task.main_metric} {score:.2f} ({seconds:.1f} s)")


def _keys(task: Task, data_dir: Path) -> list[tuple[Source, Path]]:
    return [(source, data_dir) for source in task.sources()]


def _one_line(error: BaseException) -> str:
    """``ErrorType: first line of the message`` (a data error already names its file and line)."""
    message = str(error).strip().splitlines()
    return f"{type(error).__name__}: {message[0]}" if message else type(error).__name__


def merge_results(*parts: dict[str, Any]) -> dict[str, Any]:
    """Combine the outputs of several [`evaluate`][unisent.evaluation.evaluate] calls (runs split by group) into one.

    Later parts win for a task present in several (a task that failed in one part and ran in a later
    one is no longer failed, and the other way round); group means are recomputed; ``config`` is the
    first part's.

    Args:
        parts: dicts returned by [`evaluate`][unisent.evaluation.evaluate] (or loaded from their JSON).

    Returns:
        A dict of the same shape.
    """
    merged: dict[str, Any] = {"tasks": {}, "groups": {}, "skipped": {}, "failed": {}, "config": {}}
    for part in parts:
        for name, entry in part.get("tasks", {}).items():
            merged["tasks"][name] = entry
            merged["failed"].pop(name, None)
        for name, error in part.get("failed", {}).items():
            merged["failed"][name] = error
            merged["tasks"].pop(name, None)
        merged["skipped"].update(part.get("skipped", {}))
        merged["config"] = merged["config"] or dict(part.get("config", {}))
    for name in (*merged["tasks"], *merged["failed"]):
        merged["skipped"].pop(name, None)
    merged["groups"] = _group_scores(merged["tasks"])
    return merged


def _group_scores(task_results: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    scores = {}
    for group, members in GROUPS.items():
        ran = [name for name in members if name in task_results]
        metrics = {task_results[name]["main_metric"] for name in ran}
        if group == "all" or len(ran) < 2 or len(metrics) != 1:
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
    """Render the output of [`evaluate`][unisent.evaluation.evaluate] as Markdown: one table per task family, then group
    means, the skipped tasks and the failed ones (with their error).

    Args:
        results: the dict returned by [`evaluate`][unisent.evaluation.evaluate] (or loaded back from its JSON).

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
        for name, similarity in (config.get("similarity_by_task") or {}).items():
            lines.append(
                f"{name}: scored with {similarity} (the model's Gaussian head; --similarity sets every task's)."
            )
        for name, where in (config.get("bundled_data") or {}).items():
            lines.append(f"{name}: its files are not in the data directory; the bundled copy in `{where}` was used.")
        lines.append("")
    families: dict[str, list[str]] = {}
    for name, entry in results.get("tasks", {}).items():
        families.setdefault(entry["group"], []).append(name)
    for family, names in families.items():
        lines += [f"### {family}", "", "| task | metric | score | other metrics | seconds |", "|---|---|---:|---|---:|"]
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
    if results.get("failed"):
        lines += ["### failed", ""]
        lines += [f"- {name}: {error}" for name, error in results["failed"].items()]
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
