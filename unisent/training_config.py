"""The ``model`` section's plain-data settings and their checks (evaluation, weight schedule)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from .io import unknown_objectives

__all__ = ["EvaluationConfig", "ModelConfigError", "check_weight_schedule"]


@dataclass
class EvaluationConfig:
    """Evaluation tasks of Lightning's validation and test loops (``model.evaluation``), run by
    :class:`unisent.evaluation.EvaluationCallback` (the CLI adds it; in Python, pass it to the Trainer).

    ``val_tasks`` log ``val/<task>`` and ``val/score`` (the mean main score, which selects
    ``checkpoints/best.ckpt``) whenever Lightning validates; ``unisent test`` runs ``test_tasks``.

    Attributes:
        val_tasks: task names or groups (see ``unisent evaluate --list``); empty = no validation.
        test_tasks: task names or groups for ``unisent test``.
        data_dir: root of the evaluation data; default (``None``): the bundled sample (STS-B dev and test).
        panel: the columns of :func:`unisent.evaluation.panel.evaluate_panel` that ``unisent ablate``
            scores this recipe's runs on (empty: ``test_tasks``).
        panel_own: ``{objective name: panel column}``: what each objective is for; ``unisent ablate``
            compares it in the combination against the objective alone.
        panel_targets: ``{panel column: minimum}``: ``unisent ablate`` reports, per balancer, whether the
            mean over seeds meets each, and by how much.
        similarity: ``cosine``, or for Gaussian models a KL score (:mod:`unisent.evaluation.similarities`):
            ``kl`` (asymmetric, the paper), ``kl_symmetric`` (the authors' STS score), ...
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
    """A ``model`` section value the module refuses; the CLI reports it in one line."""


def check_weight_schedule(schedule: dict[str, Any], names: list[str]) -> dict[str, list[tuple[int, float]]]:
    """``model.weight_schedule`` checked against ``names``: ``{name: [(step, weight), ...]}``, steps
    increasing, steps and weights >= 0.

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
