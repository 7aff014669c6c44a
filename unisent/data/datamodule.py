"""The DataModule: one training file and one dataloader per objective, tokenised once and cached."""

from __future__ import annotations

import hashlib
import json
import os
from functools import partial
from pathlib import Path
from typing import Any, Literal

import lightning as L
import torch
from torch.utils.data import DataLoader

from ..testing import fault_point
from .readers import DataSource, read_records
from .records import DataConfigError
from .sampling import ResumableSampler
from .schema import PREDICT_SCHEMA, BatchSchema

__all__ = ["UnisentDataModule", "default_cache_dir"]

_COMBINE_MODES = ("max_size_cycle", "min_size", "max_size", "sequential")


def default_cache_dir() -> Path:
    return Path(os.environ.get("UNISENT_CACHE", Path.home() / ".cache" / "unisent")) / "tokenized"


def _fingerprint(source: DataSource, schema: BatchSchema, tokenizer, max_length: int) -> str:
    path = Path(source.path).expanduser().resolve()
    stat = path.stat()
    parts = {
        "path": str(path),
        "mtime": stat.st_mtime_ns,
        "size": stat.st_size,
        "columns": source.columns,
        "max_records": source.max_records,
        "on_error": source.on_error,
        "keys": list(schema.batch_keys),
        "text_keys": list(schema.text_keys),
        "optional_keys": list(schema.optional_keys),
        "tokenizer": [getattr(tokenizer, "name_or_path", ""), len(tokenizer), type(tokenizer).__name__],
        # tokens added to a tokenizer (e.g. AMR's extended vocabulary) change the ids at equal length
        "added_tokens": hashlib.sha256("\n".join(sorted(getattr(tokenizer, "get_added_vocab", dict)())).encode()).hexdigest(),
        "max_length": max_length,
    }
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()[:20]


def _tokenize_column(encoder, texts: list, max_length: int) -> list:
    """Token ids of a text column; a null value (an optional text field) stays null."""
    present = [i for i, text in enumerate(texts) if text is not None]
    if len(present) == len(texts):
        return encoder.tokenize_ids(texts, max_length)
    column: list = [None] * len(texts)
    if present:
        for i, ids in zip(present, encoder.tokenize_ids([texts[i] for i in present], max_length)):
            column[i] = ids
    return column


class _TrainLoader(DataLoader):
    """A training loader over a :class:`ResumableSampler`.

    It has ``state_dict``/``load_state_dict`` so that Lightning treats it as resumable (and does not
    warn on a mid-epoch resume), but the position is kept by :meth:`UnisentDataModule.state_dict`:
    Lightning loads loader states only into loaders built after the checkpoint is read, and
    ``configure_optimizers`` (``trainer.estimated_stepping_batches``) builds them before
    (Lightning-AI/pytorch-lightning#20550). The DataModule's state is read before any loader exists.
    """

    def state_dict(self) -> dict[str, Any]:
        return {}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Nothing to do: see the class docstring."""


class UnisentDataModule(L.LightningDataModule):
    """Training data for every objective of the model.

    The model's objectives declare which fields they need; this module reads each objective's file
    (:class:`DataSource`), validates every record, tokenises the text fields once with the model's
    tokenizer through ``datasets.map`` (cached as Arrow under ``cache_dir``, so a second run skips
    reading and tokenising), and builds one dataloader per objective with dynamic padding. Lightning
    combines the loaders; each training step gets ``{objective name: batch}``.

    Args:
        train: ``{objective name: DataSource}``; every objective of the model needs an entry.
        batch_size: per-process batch size (an int, or ``{objective name: int}``).
        num_workers: dataloader workers.
        length_grouped: group sentences of similar length into batches (see
            :class:`~unisent.data.LengthGroupedSampler` for what it does to in-batch negatives).
            Either way the order comes from :class:`~unisent.data.ResumableSampler`: deterministic
            from ``seed`` and the epoch, sharded across processes, and resumed mid-epoch from a
            checkpoint (the DataModule saves the position of every loader; see :meth:`state_dict`).
            A bool for every objective, or ``{objective name: bool}`` (absent names: ``False``), e.g.
            length-grouped batches for AMR's graphs only.
        combine_mode: how loaders of several objectives are combined (Lightning's CombinedLoader
            modes); ``max_size_cycle`` cycles the shorter ones until the longest is exhausted.
        cache_dir: where tokenised data is cached; default ``$UNISENT_CACHE/tokenized`` or
            ``~/.cache/unisent/tokenized``.
        seed: seed of the shuffling.
        predict: sentences for ``unisent predict`` (field ``text``; a .txt file has one per line),
            embedded in file order by the model's inference model.
        predict_batch_size: batch size of prediction.
    """

    def __init__(
        self,
        train: dict[str, DataSource] | None = None,
        batch_size: int | dict[str, int] = 64,
        num_workers: int = 0,
        length_grouped: bool | dict[str, bool] = False,
        combine_mode: Literal["max_size_cycle", "min_size", "max_size", "sequential"] = "max_size_cycle",
        cache_dir: str | None = None,
        seed: int = 42,
        predict: DataSource | None = None,
        predict_batch_size: int = 128,
    ) -> None:
        super().__init__()
        self.train = {k: DataSource(v) if isinstance(v, str) else v for k, v in (train or {}).items()}
        self.batch_size = batch_size
        self.num_workers = num_workers
        self.length_grouped = length_grouped
        self.combine_mode = combine_mode
        self.cache_dir = Path(cache_dir) if cache_dir else default_cache_dir()
        self.seed = seed
        self.predict = DataSource(predict) if isinstance(predict, str) else predict
        self.predict_batch_size = predict_batch_size
        if combine_mode not in _COMBINE_MODES:
            raise ValueError(f"data.combine_mode must be one of {', '.join(_COMBINE_MODES)}, got {combine_mode!r}")
        self.datasets: dict[str, Any] = {}
        self.samplers: dict[str, ResumableSampler] = {}
        self._module = None
        self._resume: dict[str, Any] | None = None  # a checkpoint's data position (until training starts)
        self._loaded_after_build = False  # see load_state_dict

    def attach(self, module) -> UnisentDataModule:
        """Use ``module``'s encoder and objectives (done automatically when a Trainer runs)."""
        self._module = module
        return self

    @property
    def module(self):
        if self._module is not None:
            return self._module
        if self.trainer is None or self.trainer.lightning_module is None:
            raise RuntimeError("the DataModule needs a model: pass it to a Trainer or call attach(module)")
        return self.trainer.lightning_module

    def _batch_size(self, name: str) -> int:
        if isinstance(self.batch_size, int):
            return self.batch_size
        if name not in self.batch_size:
            raise DataConfigError(f"data.batch_size has no entry for objective {name!r} (has: {', '.join(self.batch_size)})")
        return self.batch_size[name]

    def _length_grouped(self, name: str) -> bool:
        if isinstance(self.length_grouped, dict):
            return bool(self.length_grouped.get(name, False))
        return bool(self.length_grouped)

    def setup(self, stage: str | None = None) -> None:
        if stage == "predict":
            if self.predict is None:
                raise ValueError("`unisent predict` needs data.predict: a file of sentences (field `text`)")
            self.datasets["__predict__"] = self.tokenized(self.predict, PREDICT_SCHEMA)
            return
        if stage not in (None, "fit") or self.datasets or not self.train:
            return
        objectives = {o.name: o for o in self.module.objectives}
        unknown = sorted(set(self.train) - set(objectives))
        missing = sorted(set(objectives) - set(self.train))
        if isinstance(self.length_grouped, dict) and (extra := sorted(set(self.length_grouped) - set(objectives))):
            raise DataConfigError(f"data.length_grouped names {', '.join(map(repr, extra))}, but the model's objectives are: {', '.join(objectives)}")
        if unknown:
            raise DataConfigError(f"data.train has {', '.join(map(repr, unknown))}, but the model's objectives are: {', '.join(objectives)}")
        if missing:
            raise DataConfigError(f"no training data for objective(s) {', '.join(map(repr, missing))}: add them under data.train")
        for name, source in self.train.items():
            self.datasets[name] = self.tokenized(source, objectives[name])
            # objectives whose state depends on the data (EASE's entity vocabulary) build it now,
            # before the optimiser exists and before a resumed checkpoint is loaded
            self.datasets[name] = objectives[name].setup_data(self.datasets[name]) or self.datasets[name]

    def tokenized(self, source: DataSource, schema: BatchSchema | Any):
        """Read, validate and tokenise ``source`` by ``schema`` (an objective's, or predict's), through
        the Arrow cache."""
        from datasets import Dataset, disable_progress_bars

        if not isinstance(schema, BatchSchema):  # an objective: its declared schema
            schema = schema.schema
        encoder = self.module.encoder
        max_length = schema.max_length or encoder.config.max_length
        cache = self.cache_dir / f"{_fingerprint(source, schema, encoder.tokenizer, max_length)}.arrow"
        if cache.is_file():
            return Dataset.from_file(str(cache))
        cache.parent.mkdir(parents=True, exist_ok=True)
        columns = read_records(source, schema.batch_keys, schema.text_keys, schema.optional_keys)
        disable_progress_bars()
        text_keys = list(schema.text_keys)

        def tokenize(rows: dict[str, list]) -> dict[str, list]:
            fault_point("cache_write")  # (benchmarks/soak.py: a kill while the Arrow cache is written)
            out = {k: _tokenize_column(encoder, rows[k], max_length) for k in text_keys}
            n = len(rows[text_keys[0]]) if text_keys else 0
            out["length"] = [max((len(out[k][i]) for k in text_keys if out[k][i] is not None), default=0) for i in range(n)]
            return out

        dataset = Dataset.from_dict(columns)
        features = None
        if set(text_keys) & set(schema.optional_keys):  # a batch of nulls must not fix a column's type
            from datasets import List, Value

            features = dataset.features.copy()
            features.update({k: List(Value("int64")) for k in text_keys} | {"length": Value("int64")})
        return dataset.map(
            tokenize, batched=True, batch_size=1000, cache_file_name=str(cache), new_fingerprint=cache.stem,
            features=features,
        )

    def _loader(self, name: str) -> DataLoader:
        dataset = self.datasets[name]
        objective = next(o for o in self.module.objectives if o.name == name)
        batch_size = self._batch_size(name)
        if len(dataset) < batch_size:
            raise ValueError(
                f"objective {name!r} has {len(dataset)} training records, fewer than one batch of {batch_size}"
            )
        trainer = self.trainer
        world, rank = (trainer.world_size, trainer.global_rank) if trainer is not None else (1, 0)
        if world > 1 and len(dataset) < batch_size * world:
            raise ValueError(
                f"objective {name!r} has {len(dataset)} training records, fewer than one global batch of "
                f"{batch_size} x {world} processes"
            )
        sampler = ResumableSampler(
            len(dataset), batch_size, seed=self.seed, num_replicas=world, rank=rank,
            lengths=dataset["length"] if self._length_grouped(name) else None,
        )
        self.samplers[name] = sampler
        collate = partial(objective.collate, pad_id=self.module.encoder.pad_token_id)
        columns = list(objective.batch_keys)
        return _TrainLoader(
            dataset.select_columns(columns).with_format(None),
            batch_size=batch_size,
            sampler=sampler,
            drop_last=True,  # contrastive losses gather equal-sized batches across processes
            collate_fn=collate,
            num_workers=self.num_workers,
            persistent_workers=self.num_workers > 0,
            # the loader's own generator: creating its iterators draws no number from the global
            # random state, which dropout uses (a resumed run replays the same dropout masks)
            generator=torch.Generator().manual_seed(self.seed),
        )

    def _evaluation_loader(self, tasks: list[str]):
        # The evaluation tasks read their own files; the loop needs one placeholder batch to run.
        # (its own generator: validation draws nothing from the global random state; see _loader)
        return DataLoader([0], batch_size=1, generator=torch.Generator()) if tasks else []

    def val_dataloader(self):
        return self._evaluation_loader(self.module.evaluation.val_tasks)

    def test_dataloader(self):
        return self._evaluation_loader(self.module.evaluation.test_tasks)

    def predict_dataloader(self):
        collate = partial(PREDICT_SCHEMA.collate, pad_id=self.module.encoder.pad_token_id)
        return DataLoader(self.datasets["__predict__"].select_columns(["text"]).with_format(None),
                          batch_size=self.predict_batch_size, shuffle=False, collate_fn=collate,
                          num_workers=self.num_workers)

    def train_dataloader(self):
        from lightning.pytorch.utilities import CombinedLoader

        loaders = {name: self._loader(name) for name in self.datasets}
        if self._resume is not None:
            self._apply_position(self._resume)
        return CombinedLoader(loaders, mode=self.combine_mode)

    # ------------------------------------------------------------------------------------ resume
    def positions(self, batches: int) -> dict[str, dict[str, int]]:
        """Where each training loader stands after ``batches`` training batches of an epoch:
        ``{objective name: {"pass", "batch"}}``, following ``combine_mode`` (``max_size_cycle``
        restarts a shorter loader, which begins a new pass with a new order)."""
        out = {}
        remaining = batches
        for name, sampler in self.samplers.items():
            n = sampler.num_batches
            if self.combine_mode in ("max_size_cycle", "min_size"):
                out[name] = {"pass": batches // n, "batch": batches % n}
            elif self.combine_mode == "max_size":
                out[name] = {"pass": 0, "batch": min(batches, n)}
            else:  # sequential: one loader after the other
                out[name] = {"pass": 0, "batch": min(remaining, n)}
                remaining -= out[name]["batch"]
        return out

    def state_dict(self) -> dict[str, Any]:
        """The data position, stored in every checkpoint: the epoch, the number of training batches the
        training loop has run in it (Lightning's ``batch_progress.current.processed``; at a checkpoint
        written after step n of the epoch it is n) and the resulting position of each loader.

        The count comes from the training loop, not from the loaders: what a loader has produced can be
        ahead of what was trained on (worker processes prefetch; Lightning's fetcher runs one batch
        ahead for loaders without a length), and resuming after the produced batches skips data. For
        these sized loaders without workers the two agree at n; resuming at n + 1 or n - 1 does not
        reproduce an uninterrupted run (tests/test_resume.py reproduces it exactly)."""
        trainer = self.trainer
        if trainer is None or not self.samplers:
            return {}
        batches = int(trainer.fit_loop.epoch_loop.batch_progress.current.processed)
        return {"epoch": int(trainer.current_epoch), "batches": batches, "seed": self.seed,
                "combine_mode": self.combine_mode, "positions": self.positions(batches)}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Resume the training loaders where a checkpoint left them.

        Called by Lightning when a checkpoint is restored. With the usual strategies this happens
        before the loaders exist, and :meth:`train_dataloader` starts them at the stored position.
        Strategies that restore after their setup (FSDP, DeepSpeed) have built the loaders, and maybe
        started their iterator (worker processes draw indices at once), by then: see
        :meth:`restart_position`.
        """
        if not state_dict:
            return
        self._resume = state_dict
        self._loaded_after_build = bool(self.samplers)
        if self.samplers:
            self._apply_position(state_dict)

    def restart_position(self) -> bool:
        """Called when training starts (by :class:`~unisent.resume.UnisentCheckpoint`). If the checkpoint
        was read after the training loaders were built, set its position on them again and return
        ``True``: the caller must then restart the training iterator."""
        state, self._resume = self._resume, None
        restart, self._loaded_after_build = self._loaded_after_build, False
        if state is None or not restart:
            return False
        self._apply_position(state)
        return True

    def _apply_position(self, state: dict[str, Any]) -> None:
        if state.get("seed", self.seed) != self.seed:
            raise ValueError(f"the checkpoint's data order was drawn with data.seed={state['seed']}, this run "
                             f"has data.seed={self.seed}: resuming would not continue the same order (resume with "
                             f"the same seed, or start a new run from the weights)")
        positions = state.get("positions", {})
        unknown = sorted(set(positions) - set(self.samplers))
        if unknown:
            raise ValueError(f"the checkpoint has data positions for {', '.join(unknown)}, "
                             f"this run's loaders are {', '.join(self.samplers)}")
        if state.get("combine_mode", self.combine_mode) != self.combine_mode:
            positions = self.positions(state["batches"])  # recompute for this run's mode
        for name, sampler in self.samplers.items():
            where = positions.get(name, {"pass": 0, "batch": 0})
            sampler.set_position(state["epoch"], where["pass"], min(where["batch"], sampler.num_batches))
