"""Evaluation as a Lightning callback: the dev and test tasks of ``model.evaluation``, the
best-checkpoint metric ``val/score`` and the W&B results table.

Under DDP every process runs the same tasks through a ``ShardedModel`` and scores the full set:
the scores equal those of one process (``tests/test_evaluation_callback.py``). Not torchmetrics: the
tasks score a task's whole embedding matrix, not per-batch statistics, so the work worth sharding is the
encoding, and one all-gather per ``encode`` call shards it for every task.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import partial
from typing import TYPE_CHECKING, Any, cast

import lightning as L
import torch
from torch import Tensor

from ..testing import fault_point
from ..training_config import EvaluationConfig
from .encoding import to_tensor

if TYPE_CHECKING:
    from ..lightning_module import UnisentModule

__all__ = ["EvaluationCallback", "ShardedModel", "add_evaluation_callback", "evaluate_config"]

Gather = Callable[[Tensor], Tensor]


def _dist_all_gather(tensor: Tensor) -> Tensor:
    """``(world, *shape)``: ``tensor`` of every process of the default group (torch.distributed)."""
    import torch.distributed as dist

    parts = [torch.empty_like(tensor) for _ in range(dist.get_world_size())]
    dist.all_gather(parts, tensor.contiguous())
    return torch.stack(parts)


class ShardedModel:
    """A sentence model whose ``encode`` (and ``encode_gaussian``) splits each list across processes.

    Every process must make the same calls with the same sentence lists, in order (as the tasks do).
    Process ``rank`` encodes ``sentences[rank::world_size]`` (strided: a share of the long and the short
    sentences of a length-sorted list), padded to ``ceil(n / world_size)`` rows; the rows are
    all-gathered and put back in input order.

    Args:
        gather: ``tensor -> (world_size, *tensor.shape)`` in rank order; default: torch.distributed's
            ``all_gather`` on the default group.
        device: where the rows are gathered (NCCL needs this process's GPU); default: CPU.
    """

    def __init__(
        self,
        model: Any,
        rank: int,
        world_size: int,
        gather: Gather | None = None,
        device: torch.device | str | None = None,
    ) -> None:
        if not 0 <= rank < world_size:
            raise ValueError(f"need 0 <= rank < world_size, got rank {rank} of {world_size}")
        self.model = model
        self.rank, self.world_size = rank, world_size
        self.gather = gather or _dist_all_gather
        self.device = torch.device(device) if device is not None else torch.device("cpu")
        if callable(getattr(model, "encode_gaussian", None)):  # Gaussian models (the evaluation protocol)
            self.encode_gaussian = partial(self._encode, "encode_gaussian")

    def encode(self, sentences: Sequence[str], batch_size: int = 64, **kwargs: Any) -> Tensor:
        """Embeddings (n, d) of ``sentences``, rows in input order, the same on every process."""
        return cast(Tensor, self._encode("encode", sentences, batch_size, **kwargs))  # one part for "encode"

    def _encode(
        self, method: str, sentences: Sequence[str], batch_size: int = 64, **kwargs: Any
    ) -> Tensor | tuple[Tensor, ...]:
        if isinstance(sentences, str):
            raise TypeError("pass a list of sentences, not a single string")
        sentences = list(sentences)
        n, world = len(sentences), self.world_size
        if n == 0:
            raise ValueError("cannot encode an empty list of sentences")
        rows = -(-n // world)
        mine = sentences[self.rank :: world]
        mine += [sentences[0]] * (rows - len(mine))  # padding rows, dropped after the gather
        output = getattr(self.model, method)(mine, batch_size=batch_size, **kwargs)
        parts = (output,) if method == "encode" else tuple(output)
        full = []
        for part in parts:
            local = to_tensor(part, rows, f"model.{method}").to(self.device)  # (rows, d)
            gathered = self.gather(local)  # (world, rows, d); process r's row k is sentence k * world + r
            full.append(gathered.transpose(0, 1).reshape(rows * world, -1)[:n].cpu())
        return full[0] if method == "encode" else tuple(full)


def evaluate_config(
    model: Any,
    tasks: Sequence[str],
    config: EvaluationConfig,
    *,
    rank: int = 0,
    world_size: int = 1,
    gather: Gather | None = None,
    device: torch.device | str | None = None,
    progress: bool = False,
) -> dict[str, Any]:
    """[`evaluate`][unisent.evaluation.evaluate] of ``tasks`` with ``config``'s data directory, batch size and
    similarity; with ``world_size > 1`` every process must call it (``ShardedModel``)."""
    from ..resources import EVALUATION_DATA_DIR
    from .runner import evaluate
    from .similarities import get_similarity

    if world_size > 1:
        model = ShardedModel(model, rank, world_size, gather=gather, device=device)
    return evaluate(
        model,
        list(tasks),
        config.data_dir or str(EVALUATION_DATA_DIR),
        batch_size=config.batch_size,
        progress=progress and rank == 0,
        similarity=get_similarity(config.similarity),
        on_error="raise",
    )  # a broken dev file must stop training, not drop out of val/score


class EvaluationCallback(L.Callback):
    """Runs the evaluation tasks in Lightning's validation and test loops and logs their scores.

    After validation it logs ``val/<task>`` (main score), ``val/<task>/<metric>`` and ``val/score`` (the
    mean main score, what ``checkpoint.monitor`` keeps the best of) for ``config.val_tasks``; after test
    the same for ``config.test_tasks`` under ``test/``; with a W&B logger also a table ``<prefix>/results``.

    The CLI adds one when ``model.evaluation`` names tasks; in Python pass it to the Trainer together with
    a [`UnisentDataModule`][unisent.data.UnisentDataModule] (whose placeholder val/test batch makes the loops run).

    Args:
        config: default: the module's ``evaluation`` (``model.evaluation`` in YAML).
        shard: split the encoding across processes; ``False`` evaluates on rank zero only while the
            others wait (for a model or task that cannot run the same calls on every process).
        progress: progress bars on rank zero.
    """

    def __init__(self, config: EvaluationConfig | None = None, shard: bool = True, progress: bool = False) -> None:
        self.config = config
        self.shard = shard
        self.progress = progress
        self.last_results: dict[str, dict[str, Any]] = {}

    def _config(self, pl_module: L.LightningModule) -> EvaluationConfig:
        config = self.config if self.config is not None else getattr(pl_module, "evaluation", None)
        if config is None:
            raise ValueError(
                f"EvaluationCallback has no tasks: pass config=EvaluationConfig(...) or use a module with an "
                f"`evaluation` attribute ({type(pl_module).__name__} has none)"
            )
        return config

    def setup(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        """Check the names of the settings ``stage`` uses before the first step (``name_checks``)."""
        from .name_checks import check_evaluation_names

        config = self.config if self.config is not None else getattr(pl_module, "evaluation", None)
        if config is not None:
            names = [o.name for o in getattr(pl_module, "objectives", None) or ()] or None
            check_evaluation_names(config, names, stage)

    def on_validation_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self.evaluate_and_log(trainer, pl_module, self._config(pl_module).val_tasks, "val")

    def on_test_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self.evaluate_and_log(trainer, pl_module, self._config(pl_module).test_tasks, "test")

    def run_tasks(
        self, trainer: L.Trainer, pl_module: L.LightningModule, tasks: Sequence[str]
    ) -> dict[str, Any] | None:
        """Evaluate the module's inference model on ``tasks``, sharded, or on rank zero only (``shard=False``:
        the other processes get ``None``)."""
        config = self._config(pl_module)
        model = cast("UnisentModule", pl_module).inference_model()
        world = trainer.world_size
        if world > 1 and self.shard:
            strategy = trainer.strategy
            return evaluate_config(
                model,
                tasks,
                config,
                rank=trainer.global_rank,
                world_size=world,
                gather=strategy.all_gather,
                device=strategy.root_device,
                progress=self.progress,
            )
        if trainer.is_global_zero:
            return evaluate_config(model, tasks, config, progress=self.progress)
        return None

    def evaluate_and_log(
        self, trainer: L.Trainer, pl_module: L.LightningModule, tasks: Sequence[str], prefix: str
    ) -> None:
        """Run ``tasks`` and log ``<prefix>/<task>``, ``<prefix>/<task>/<metric>`` and ``<prefix>/score``
        on every process (rank zero's values), and the W&B table from rank zero."""
        if not tasks:
            return
        results = self.run_tasks(trainer, pl_module, tasks)
        fault_point("evaluation")  # (benchmarks/soak.py: a kill after evaluating, before logging; no-op otherwise)
        scores: dict[str, float] = {}
        details: dict[str, float] = {}
        if trainer.is_global_zero and results is not None:  # (rank zero always has them)
            self.last_results[prefix] = results
            _log_results_table(trainer, prefix, results)
            scores = {name: float(r["score"]) for name, r in results["tasks"].items()}
            details = {
                f"{name}/{metric}": float(value)
                for name, r in results["tasks"].items()
                for metric, value in r["metrics"].items()
            }
        scores, details = trainer.strategy.broadcast((scores, details), src=0)
        for name, score in scores.items():  # every process logs the same values
            pl_module.log(f"{prefix}/{name}", score, prog_bar=True, batch_size=1)
        for key, value in details.items():  # e.g. val/snli-nli/pr_auc, GaussCSE's selection metric
            pl_module.log(f"{prefix}/{key}", value, batch_size=1)
        if scores:
            pl_module.log(f"{prefix}/score", sum(scores.values()) / len(scores), batch_size=1)


def _log_results_table(trainer: L.Trainer, prefix: str, results: dict[str, Any]) -> None:
    """Log the results to W&B as a table (task, metric, score) ``<prefix>/results``."""
    from lightning.pytorch.loggers import WandbLogger

    loggers = [logger for logger in trainer.loggers if isinstance(logger, WandbLogger)]
    if not loggers:
        return
    rows = [
        [task, metric, float(value)]
        for task, r in results["tasks"].items()
        for metric, value in r["metrics"].items()
        if isinstance(value, (int, float))
    ]
    for logger in loggers:
        logger.log_table(
            key=f"{prefix}/results", columns=["task", "metric", "score"], data=rows, step=trainer.global_step
        )


def add_evaluation_callback(trainer: L.Trainer, module: L.LightningModule) -> EvaluationCallback | None:
    """Add an ``EvaluationCallback`` to ``trainer`` when ``module.evaluation`` names validation or
    test tasks and the trainer has none yet (what the ``unisent`` CLI does); returns the one added."""
    config = getattr(module, "evaluation", None)
    if config is None or not (config.val_tasks or config.test_tasks):
        return None
    callbacks: list[L.Callback] = trainer.callbacks  # pyright: ignore[reportAttributeAccessIssue]  # set, not declared
    if any(isinstance(callback, EvaluationCallback) for callback in callbacks):
        return None
    callback = EvaluationCallback()
    callbacks.insert(0, callback)  # Lightning moves checkpoint callbacks to the end when it starts
    return callback
