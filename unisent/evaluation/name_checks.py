"""Checks of the names in ``model.evaluation`` before the first training step: registered tasks and
groups, panel columns (``PANEL_COLUMNS``), and the model's objectives as the
keys of ``panel_own``. Each mistake is a one-line ``ModelConfigError`` with the closest valid name.

Nothing is loaded. The checks run where a run starts (the CLI before the Trainer is built, the
``EvaluationCallback`` at setup), after task plugins are imported, never when a checkpoint is loaded.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from ..io import closest_hint, unknown_name, unknown_objectives
from ..training_config import EvaluationConfig, ModelConfigError

__all__ = ["REGISTER_A_TASK", "check_evaluation_names", "check_panel_columns", "check_task_names"]

#: how a task of one's own is made known to the commands (the end of the error for an unknown task)
REGISTER_A_TASK = (
    "a task of your own: register it with unisent.evaluation.register_task in a module given by "
    "--import MODULE or by an entry point of group unisent.plugins"
)

#: the task lists each Lightning command runs (``None``: built in Python, as for ``fit``)
_TASKS_OF_STAGE: dict[str | None, tuple[str, ...]] = {
    None: ("val_tasks", "test_tasks"),
    "fit": ("val_tasks", "test_tasks"),
    "validate": ("val_tasks",),
    "test": ("test_tasks",),
}


def _names(value: Any) -> list[str]:
    """A list of names; a comma-separated string too (as ``resolve_tasks``)."""
    if isinstance(value, str):
        value = value.split(",")
    return [str(name).strip() for name in value or () if str(name).strip()]


def check_task_names(key: str, names: Iterable[str] | str) -> None:
    """Raise ``ModelConfigError`` (``KEY: unknown task or group 'stsb-dve' (did you mean 'stsb-dev'?); ...``)
    unless every name of the setting ``key`` is a registered task or group."""
    from .tasks.builtin_tasks import GROUPS, TASKS

    for name in _names(names):
        if name not in TASKS and name not in GROUPS:
            raise ModelConfigError(
                f"{key}: unknown task or group {name!r}{closest_hint(name, [*GROUPS, *TASKS])}; "
                f"`unisent evaluate --list` shows them all; {REGISTER_A_TASK}"
            )


def check_panel_columns(key: str, columns: Iterable[str] | str) -> None:
    """Raise ``ModelConfigError`` (``KEY: unknown panel column 'stsb-tset' (did you mean ...``) unless every
    name of the setting ``key`` is a panel column."""
    from .panel import PANEL_COLUMNS

    for column in [columns] if isinstance(columns, str) else columns:
        if column not in PANEL_COLUMNS:
            raise ModelConfigError(unknown_name(key, "panel column", column, PANEL_COLUMNS))


def check_evaluation_names(
    config: EvaluationConfig, objectives: Sequence[str] | None = None, stage: str | None = "fit"
) -> None:
    """Raise ``ModelConfigError`` at the first unknown name of ``config`` that ``stage`` uses: ``fit`` (or
    ``None``) every one, ``validate`` the ``val_tasks``, ``test`` the ``test_tasks``, ``predict`` none.
    ``panel_own``'s keys are checked against ``objectives`` (the model's objective names) when given."""
    stage = getattr(stage, "value", stage)  # Lightning's TrainerFn
    for field in _TASKS_OF_STAGE.get(stage, ()):
        check_task_names(f"model.evaluation.{field}", getattr(config, field, None) or ())
    if stage not in (None, "fit"):
        return
    check_panel_columns("model.evaluation.panel", config.panel or ())
    own = config.panel_own or {}
    for name, column in own.items():
        if objectives is not None and name not in objectives:
            raise ModelConfigError(unknown_objectives("model.evaluation.panel_own", [name], objectives))
        check_panel_columns(f"model.evaluation.panel_own.{name}", [column])
    check_panel_columns("model.evaluation.panel_targets", list(config.panel_targets or {}))
