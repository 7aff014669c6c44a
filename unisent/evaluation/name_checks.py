"""The names of ``model.evaluation`` checked before the first training step: every task or group of
``val_tasks`` and ``test_tasks`` is registered, every panel column (``panel``, the values of ``panel_own``,
the keys of ``panel_targets``) is one of :data:`~unisent.evaluation.panel.PANEL_COLUMNS`, and the keys of
``panel_own`` are the model's objectives. Each mistake is one line (:class:`~unisent.training_config.
ModelConfigError`) naming the key and the value, with the closest valid name.

Nothing is loaded: the checks read the task registry and the panel's column names only. They run where a
run starts (``unisent fit|validate|test`` before the Trainer is built, :class:`~unisent.evaluation.
EvaluationCallback` when the Trainer sets up), so after the plugins that register tasks are imported, and
never where a checkpoint is loaded for inference (``UnisentModule.from_checkpoint``, ``unisent.load``).
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
    """A list of names; a comma-separated string too (as :func:`~unisent.evaluation.tasks.resolve_tasks`)."""
    if isinstance(value, str):
        value = value.split(",")
    return [str(name).strip() for name in value or () if str(name).strip()]


def check_task_names(key: str, names: Iterable[str] | str) -> None:
    """Every name of ``names`` (the setting ``key``) is a registered task or group.

    Raises:
        ModelConfigError: ``KEY: unknown task or group 'stsb-dve' (did you mean 'stsb-dev'?); ...``, with
            how to list the tasks and how to register one.
    """
    from .tasks.builtin_tasks import GROUPS, TASKS

    for name in _names(names):
        if name not in TASKS and name not in GROUPS:
            raise ModelConfigError(
                f"{key}: unknown task or group {name!r}{closest_hint(name, [*GROUPS, *TASKS])}; "
                f"`unisent evaluate --list` shows them all; {REGISTER_A_TASK}"
            )


def check_panel_columns(key: str, columns: Iterable[str] | str) -> None:
    """Every name of ``columns`` (the setting ``key``) is a panel column.

    Raises:
        ModelConfigError: ``KEY: unknown panel column 'stsb-tset' (did you mean 'stsb-test'?); valid: ...``.
    """
    from .panel import PANEL_COLUMNS

    for column in [columns] if isinstance(columns, str) else columns:
        if column not in PANEL_COLUMNS:
            raise ModelConfigError(unknown_name(key, "panel column", column, PANEL_COLUMNS))


def check_evaluation_names(
    config: EvaluationConfig, objectives: Sequence[str] | None = None, stage: str | None = "fit"
) -> None:
    """The names of ``config`` (``model.evaluation``) that ``stage`` uses: ``fit`` (or ``None``) every one,
    ``validate`` the ``val_tasks``, ``test`` the ``test_tasks``, ``predict`` none. The keys of ``panel_own``
    are checked against ``objectives`` (the model's objective names) when they are given.

    Raises:
        ModelConfigError: the first unknown name, in one line.
    """
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
