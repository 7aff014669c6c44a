"""The ``model`` section's settings that are plain data, and their checks: the evaluation a run's
validation and test loops run and the panel ``unisent ablate`` scores the run on (:class:`EvaluationConfig`,
``model.evaluation`` in YAML: the training module holds it, the evaluation layer reads it), the weight
schedule (:func:`check_weight_schedule`), and the error for a value the module refuses
(:class:`ModelConfigError`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from .io import unknown_objectives

__all__ = ["EvaluationConfig", "ModelConfigError", "check_weight_schedule"]


@dataclass
class EvaluationConfig:
    """Evaluation tasks run by Lightning's validation and test loops.

    The work is done by :class:`unisent.evaluation.EvaluationCallback`, which the ``unisent`` CLI adds
    when these settings ask for tasks (in Python, pass it in the Trainer's ``callbacks``); this
    dataclass is only the settings, kept with the model (``model.evaluation`` in YAML). ``unisent fit``
    runs ``val_tasks`` whenever Lightning validates (``trainer.val_check_interval``:
    every N training steps, as the papers evaluate STS-B dev every 125 to 250 steps), logs
    ``val/<task>`` and ``val/score`` (the mean main score, the selection metric that the default
    checkpoint callback keeps the best of as ``checkpoints/best.ckpt``). ``unisent test`` runs
    ``test_tasks`` and logs ``test/<task>``.

    Attributes:
        val_tasks: task names or groups (see ``unisent evaluate --list``); empty = no validation.
        test_tasks: task names or groups for ``unisent test``.
        data_dir: root of the evaluation data; default (``None``): the bundled sample (STS-B dev and test).
        batch_size: encoding batch size.
        panel: the columns of :func:`unisent.evaluation.panel.evaluate_panel` that ``unisent ablate``
            scores every run of this recipe on (empty: ``test_tasks``).
        panel_own: ``{objective name: panel column}``: the column that measures what each objective is
            for; ``unisent ablate`` compares it inside the combination against the objective alone.
        panel_targets: ``{panel column: minimum}``: ``unisent ablate`` reports, for every balancer, whether
            the mean over seeds reaches each (and by how much it is met or missed).
        similarity: ``cosine``, or for Gaussian models ``kl`` (asymmetric, the paper), ``kl_mean``,
            ``kl_symmetric`` (the authors' symmetric STS score), ``kl_symmetric_mean``, ``kl_avg_sim``
            (see :mod:`unisent.evaluation.similarities`).
    """

    val_tasks: list[str] = field(default_factory=lambda: ["stsb-dev"])
    test_tasks: list[str] = field(default_factory=lambda: ["stsb-test"])
    data_dir: str | None = None
    batch_size: int = 128
    similarity: Literal["cosine", "kl", "kl_mean", "kl_symmetric", "kl_symmetric_mean", "kl_avg_sim"] = "cosine"
    panel: list[str] = field(default_factory=list)
    panel_own: dict[str, str] = field(default_factory=dict)
    panel_targets: dict[str, float] = field(default_factory=dict)


class ModelConfigError(ValueError):
    """A ``model`` section value the module refuses (``head_lr``, ``conflict_every``, ``weight_schedule``,
    warm-up, objective names). The CLI reports it in one line."""


def check_weight_schedule(schedule: dict[str, Any], names: list[str]) -> dict[str, list[tuple[int, float]]]:
    """``model.weight_schedule`` checked against the objectives' ``names``: ``{name: [(step, weight), ...]}``
    with steps increasing, steps and weights >= 0.

    Raises:
        ModelConfigError: an unknown objective, a malformed entry or steps out of order.
    """
    unknown = sorted(set(schedule) - set(names))
    if unknown:
        raise ModelConfigError(unknown_objectives("model.weight_schedule", unknown, names))
    checked = {}
    for name, entries in schedule.items():
        pairs = []
        for i, entry in enumerate(entries):
            if len(entry) != 2 or float(entry[0]) < 0 or float(entry[1]) < 0:
                raise ModelConfigError(
                    f"model.weight_schedule.{name}[{i}] must be [step >= 0, weight >= 0], got {entry!r}"
                )
            pairs.append((int(entry[0]), float(entry[1])))
        if [p[0] for p in pairs] != sorted(p[0] for p in pairs):
            raise ModelConfigError(f"model.weight_schedule.{name}: steps must increase, got {[p[0] for p in pairs]}")
        checked[name] = pairs
    return checked
