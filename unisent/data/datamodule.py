"""The DataModule: one data source and one dataloader per objective (see
[`UnisentDataModule`][unisent.data.UnisentDataModule])."""

from __future__ import annotations

from dataclasses import replace
from functools import partial
from pathlib import Path
from typing import Any, Literal

import lightning as L
import torch
from torch.utils.data import DataLoader

from ..io import unknown_objectives
from .record_errors import DataConfigError
from .sampling import ResumableSampler
from .schema import PREDICT_SCHEMA, BatchSchema
from .sources import DataSource, load_source, resolve_source
from .token_cache import build_cache, cache_key, default_cache_dir
from .tokenized_stream import StreamLoader, TokenizedStream
from .tokenizing import RowTokenizer

__all__ = ["UnisentDataModule"]

_COMBINE_MODES = ("max_size_cycle", "min_size", "max_size", "sequential")


class _TrainLoader(StreamLoader):
    """A training loader over a [`ResumableSampler`][unisent.data.ResumableSampler] or a stream (``StreamLoader``'s
    resume), resumable to Lightning (no mid-epoch warning). Its position is kept by
    [`UnisentDataModule.state_dict`][unisent.data.UnisentDataModule.state_dict]: Lightning loads loader states only into
    loaders built after the checkpoint is read, and ``configure_optimizers`` builds them before
    (Lightning-AI/pytorch-lightning#20550)."""

    def state_dict(self) -> dict[str, Any]:
        return {}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Nothing to do: see the class docstring."""


class UnisentDataModule(L.LightningDataModule):
    """Training data for every objective of the model.

    Each objective's source ([`DataSource`][unisent.data.DataSource]) is loaded and checked against the fields its
    [`BatchSchema`][unisent.data.BatchSchema] declares, tokenised once per machine
    ([`prepare_data`][unisent.data.UnisentDataModule.prepare_data], cached as Arrow under ``cache_dir`` for the other
    processes and later runs) or, with ``streaming: true``, as it is trained on (``TokenizedStream``). Lightning
    combines the per-objective loaders (dynamic padding); each training step gets ``{objective name: batch}``.

    Args:
        train: ``{objective name: DataSource}``; every objective of the model needs an entry (a string
            is a path: ``DataSource(path)``).
        batch_size: per-process batch size (an int, or ``{objective name: int}``).
        num_workers: dataloader workers.
        length_grouped: group sentences of similar length into batches (see
            [`LengthGroupedSampler`][unisent.data.LengthGroupedSampler] for what it does to in-batch negatives). Either
            way the order comes from [`ResumableSampler`][unisent.data.ResumableSampler]: deterministic from ``seed``
            and the epoch, sharded across processes, and resumed mid-epoch from a checkpoint (the DataModule saves the
            position of every loader; see [`state_dict`][unisent.data.UnisentDataModule.state_dict]). A bool for every
            objective, or ``{objective name: bool}`` (absent names: ``False``), e.g. length-grouped batches for AMR's
            graphs only.
        combine_mode: how loaders of several objectives are combined (Lightning's CombinedLoader
            modes); ``max_size_cycle`` cycles the shorter ones until the longest is exhausted.
        cache_dir: where tokenised data is cached; default ``$UNISENT_CACHE/tokenized`` or
            ``~/.cache/unisent/tokenized``.
        seed: seed of the shuffling.
        predict: sentences for ``unisent predict`` (field ``text``; a .txt file has one per line),
            embedded in file order by the model's inference model.
        predict_batch_size: batch size of prediction.
        num_proc: processes that tokenise a map-style source (``datasets.map(num_proc=)``); default:
            the CPUs this process may use, one per 25,000 records at most.
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
        num_proc: int | None = None,
    ) -> None:
        super().__init__()
        self.train = {k: DataSource(v) if isinstance(v, str) else v for k, v in (train or {}).items()}
        self.batch_size = batch_size
        self.num_workers = num_workers
        self.length_grouped = length_grouped
        self.combine_mode: Literal["max_size_cycle", "min_size", "max_size", "sequential"] = combine_mode
        self.cache_dir = Path(cache_dir) if cache_dir else default_cache_dir()
        self.seed = seed
        self.predict = DataSource(predict) if isinstance(predict, str) else predict
        self.predict_batch_size = predict_batch_size
        if num_proc is not None and num_proc < 1:
            raise ValueError(f"data.num_proc must be >= 1, got {num_proc}")
        self.num_proc = num_proc
        self.tokenised_here: list[str] = []  # cache files this process wrote (tests: once per machine)
        if combine_mode not in _COMBINE_MODES:
            raise ValueError(f"data.combine_mode must be one of {', '.join(_COMBINE_MODES)}, got {combine_mode!r}")
        self.datasets: dict[str, Any] = {}
        self.samplers: dict[str, ResumableSampler] = {}
        self.streams: dict[str, TokenizedStream] = {}
        self._module: L.LightningModule | None = None
        self._resume: dict[str, Any] | None = None  # a checkpoint's data position (until training starts)
        self._loaded_after_build = False  # see load_state_dict

    def attach(self, module: L.LightningModule) -> UnisentDataModule:
        """Use ``module``'s encoder and objectives (done automatically when a Trainer runs)."""
        self._module = module
        return self

    @property
    def module(self) -> Any:  # a UnisentModule: a layer above the data, so not named here
        if self._module is not None:
            return self._module
        if self.trainer is None or self.trainer.lightning_module is None:
            raise RuntimeError("the DataModule needs a model: pass it to a Trainer or call attach(module)")
        return self.trainer.lightning_module

    def _batch_size(self, name: str) -> int:
        if isinstance(self.batch_size, int):
            return self.batch_size
        if name not in self.batch_size:
            raise DataConfigError(
                f"data.batch_size has no entry for objective {name!r} (has: {', '.join(self.batch_size)})"
            )
        return self.batch_size[name]

    def _length_grouped(self, name: str) -> bool:
        if isinstance(self.length_grouped, dict):
            return bool(self.length_grouped.get(name, False))
        return bool(self.length_grouped)

    def _objectives(self) -> dict[str, Any]:
        """The model's objectives by name, checked against the keys of ``data.train``, ``data.batch_size`` and
        ``data.length_grouped`` before anything is read."""
        objectives = {o.name: o for o in self.module.objectives}
        keyed = (
            ("data.train", self.train),
            ("data.batch_size", self.batch_size),
            ("data.length_grouped", self.length_grouped),
        )
        for key, value in keyed:
            if isinstance(value, dict) and (extra := sorted(set(value) - set(objectives))):
                raise DataConfigError(unknown_objectives(key, extra, objectives))
        if missing := [name for name in objectives if name not in self.train]:
            raise DataConfigError(
                f"no training data for objective(s) {', '.join(map(repr, missing))}: add them under data.train"
            )
        if isinstance(self.batch_size, dict) and (missing := [n for n in objectives if n not in self.batch_size]):
            raise DataConfigError(
                f"data.batch_size has no entry for objective(s) {', '.join(map(repr, missing))}: add them, or give "
                "one number for all"
            )
        return objectives

    def prepare_data(self) -> None:
        """Tokenise every map-style source into the cache (on local rank 0; the others read it in ``setup``)."""
        trainer = self.trainer
        fn = None if trainer is None else getattr(trainer.state.fn, "value", trainer.state.fn)
        if fn == "predict" and self.predict is not None:
            self.tokenized(self.predict, PREDICT_SCHEMA)
        elif fn in (None, "fit") and self.train:
            objectives = self._objectives()
            for name, source in self.train.items():
                if not source.streaming:
                    self.tokenized(source, objectives[name], name=name)

    def setup(self, stage: str | None = None) -> None:
        if stage == "predict":
            if self.predict is None:
                raise ValueError("`unisent predict` needs data.predict: a file of sentences (field `text`)")
            self.datasets["__predict__"] = self.tokenized(self.predict, PREDICT_SCHEMA)
            return
        if stage not in (None, "fit") or self.datasets or not self.train:
            return
        objectives = self._objectives()
        for name, source in self.train.items():
            if source.streaming:
                self.datasets[name] = self._stream(name, source, objectives[name])
                continue
            self.datasets[name] = self.tokenized(source, objectives[name], name=name)
            # data-dependent state (EASE's entity vocabulary), before the optimiser and any checkpoint load
            self.datasets[name] = objectives[name].setup_data(self.datasets[name]) or self.datasets[name]

    def _stream(self, name: str, source: DataSource, objective) -> TokenizedStream:
        schema = objective.schema
        if schema.needs_all_records:
            raise DataConfigError(
                f"objective {name!r} builds its state from all its training records before "
                "training (setup_data): its source cannot be streamed; set streaming: false"
            )
        if self.combine_mode not in ("max_size_cycle", "max_size"):
            raise DataConfigError(
                f"objective {name!r} streams its data, which has no end: data.combine_mode must "
                f"be max_size_cycle or max_size, got {self.combine_mode!r}"
            )
        trainer = self.trainer
        if trainer is not None and (trainer.max_steps is None or trainer.max_steps < 0):
            raise DataConfigError(
                f"objective {name!r} streams its data (streaming: true), which has no end: set trainer.max_steps"
            )
        world, rank = (trainer.world_size, trainer.global_rank) if trainer is not None else (1, 0)
        encoder = self.module.encoder
        max_length = schema.max_length or encoder.config.max_length
        stream = TokenizedStream(
            replace(resolve_source(source), key=f"data.train.{name}"),
            schema.batch_keys,
            schema.text_keys,
            schema.optional_keys,
            RowTokenizer(encoder.tokenizer, schema.text_keys, max_length),
            self._batch_size(name),
            seed=self.seed,
            rank=rank,
            world_size=world,
        )
        stream.check_columns()
        return stream

    def tokenized(self, source: DataSource, schema: BatchSchema | Any, name: str = "data"):
        """Load, check and tokenise ``source`` by ``schema`` (an objective's, or predict's), through the
        Arrow cache: the cached file when there is one, else it is built (and written atomically)."""
        from datasets import Dataset

        if not isinstance(schema, BatchSchema):  # an objective: its declared schema
            schema = schema.schema
        if isinstance(source, str):
            source = DataSource(source)
        encoder = self.module.encoder
        max_length = schema.max_length or encoder.config.max_length
        # named by the hints of malformed records (--data.train.<name>.on_error=skip)
        key = f"data.train.{name}" if name in self.train else "data.predict" if source is self.predict else None
        resolved = replace(resolve_source(source), key=key)
        dataset = None
        if resolved.kind in ("repo", "hub"):  # keyed by datasets' fingerprint of the loaded data
            dataset = load_source(resolved, schema.batch_keys, schema.text_keys, schema.optional_keys)
        cache = self.cache_dir / f"{cache_key(resolved, schema, encoder.tokenizer, max_length, dataset)}.arrow"
        if cache.is_file():
            return Dataset.from_file(str(cache))
        if dataset is None:
            dataset = load_source(resolved, schema.batch_keys, schema.text_keys, schema.optional_keys)
        build_cache(
            dataset, schema, RowTokenizer(encoder.tokenizer, schema.text_keys, max_length), cache, name, self.num_proc
        )
        self.tokenised_here.append(str(cache))
        return Dataset.from_file(str(cache))

    def _loader(self, name: str) -> DataLoader:
        dataset = self.datasets[name]
        objective = next(o for o in self.module.objectives if o.name == name)
        batch_size = self._batch_size(name)
        if isinstance(dataset, TokenizedStream):
            self.streams[name] = dataset
            workers = dataset.active_workers(self.num_workers) if self.num_workers else 0
            return self._train_loader(dataset, dataset.batch_size, objective, workers)
        if len(dataset) < batch_size:
            raise DataConfigError(
                f"objective {name!r} has {len(dataset)} training records, fewer than one batch of {batch_size}; "
                "lower data.batch_size or add records"
            )
        trainer = self.trainer
        world, rank = (trainer.world_size, trainer.global_rank) if trainer is not None else (1, 0)
        if world > 1 and len(dataset) < batch_size * world:
            raise DataConfigError(
                f"objective {name!r} has {len(dataset)} training records, fewer than one global batch of "
                f"{batch_size} x {world} processes"
            )
        sampler = ResumableSampler(
            len(dataset),
            batch_size,
            seed=self.seed,
            num_replicas=world,
            rank=rank,
            lengths=dataset["length"] if self._length_grouped(name) else None,
        )
        self.samplers[name] = sampler
        columns = list(objective.batch_keys)
        dataset = dataset.select_columns(columns).with_format(None)
        return self._train_loader(dataset, batch_size, objective, self.num_workers, sampler=sampler)

    def _train_loader(self, dataset, batch_size: int, objective, workers: int, **sampler) -> DataLoader:
        return _TrainLoader(
            dataset,
            batch_size=batch_size,
            drop_last=True,  # contrastive losses gather equal-sized batches across processes
            collate_fn=partial(objective.collate, pad_id=self.module.encoder.pad_token_id),
            num_workers=workers,
            persistent_workers=workers > 0,
            # its own generator: iterators draw nothing from the global random state that dropout uses
            generator=torch.Generator().manual_seed(self.seed),
            **sampler,
        )

    def _evaluation_loader(self, tasks: list[str]):
        # the tasks read their own files; the loop needs one placeholder batch (own generator: see _loader); a list is
        # a map-style dataset, which torch's annotation (Dataset) does not admit
        return DataLoader([0], batch_size=1, generator=torch.Generator()) if tasks else []  # pyright: ignore[reportArgumentType]

    def val_dataloader(self):
        return self._evaluation_loader(self.module.evaluation.val_tasks)

    def test_dataloader(self):
        return self._evaluation_loader(self.module.evaluation.test_tasks)

    def predict_dataloader(self):
        collate = partial(PREDICT_SCHEMA.collate, pad_id=self.module.encoder.pad_token_id)
        return DataLoader(
            self.datasets["__predict__"].select_columns(["text"]).with_format(None),
            batch_size=self.predict_batch_size,
            shuffle=False,
            collate_fn=collate,
            num_workers=self.num_workers,
        )

    def train_dataloader(self):
        from lightning.pytorch.utilities import CombinedLoader

        loaders = {name: self._loader(name) for name in self.datasets}
        self._order = list(loaders)
        if self._resume is not None:
            self._apply_position(self._resume)
        return CombinedLoader(loaders, mode=self.combine_mode)

    # ------------------------------------------------------------------------------------ resume
    def _loader_names(self) -> list[str]:
        """The training loaders in the order they are combined."""
        order = getattr(self, "_order", None) or [*self.samplers, *self.streams]
        return [name for name in order if name in self.samplers or name in self.streams]

    def positions(self, batches: int) -> dict[str, dict[str, int]]:
        """``{objective name: {"pass", "batch"}}`` after ``batches`` training batches of an epoch, following
        ``combine_mode`` (``max_size_cycle`` restarts a shorter loader: a new pass with a new order)."""
        out = {}
        remaining = batches
        for name in self._loader_names():
            if name in self.streams:  # an endless stream: its batches since the start
                out[name] = {"pass": 0, "batch": batches}
                continue
            sampler = self.samplers[name]
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
        """The data position, stored in every checkpoint: the epoch, the training batches the loop has run
        in it (``batch_progress.current.processed``, not what the loaders produced, which can be ahead:
        docs/operations.md) and each loader's resulting position."""
        trainer = self.trainer
        if trainer is None or not (self.samplers or self.streams):
            return {}
        current = trainer.fit_loop.epoch_loop.batch_progress.current  # a _ProcessedTracker (typed as its base)
        batches = int(current.processed)  # pyright: ignore[reportAttributeAccessIssue]
        return {
            "epoch": int(trainer.current_epoch),
            "batches": batches,
            "seed": self.seed,
            "combine_mode": self.combine_mode,
            "positions": self.positions(batches),
        }

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Resume the training loaders where a checkpoint left them: usually called before they exist
        (``train_dataloader`` starts them there); strategies that restore after their setup (FSDP, DeepSpeed) may have
        built and started them: see [`restart_position`][unisent.data.UnisentDataModule.restart_position]."""
        if not state_dict:
            return
        self._resume = state_dict
        self._loaded_after_build = bool(self.samplers or self.streams)
        if self._loaded_after_build:
            self._apply_position(state_dict)

    def restart_position(self) -> bool:
        """At the start of training (``UnisentCheckpoint``): if the checkpoint was read
        after the loaders were built, set its position again and return ``True`` (restart the iterator)."""
        state, self._resume = self._resume, None
        restart, self._loaded_after_build = self._loaded_after_build, False
        if state is None or not restart:
            return False
        self._apply_position(state)
        return True

    def _apply_position(self, state: dict[str, Any]) -> None:
        if state.get("seed", self.seed) != self.seed:
            raise ValueError(
                f"the checkpoint's data order was drawn with data.seed={state['seed']}, this run "
                f"has data.seed={self.seed}: resuming would not continue the same order (resume with "
                f"the same seed, or start a new run from the weights)"
            )
        positions = state.get("positions", {})
        unknown = sorted(set(positions) - set(self._loader_names()))
        if unknown:
            raise ValueError(
                f"the checkpoint has data positions for {', '.join(unknown)}, "
                f"this run's loaders are {', '.join(self._loader_names())}"
            )
        if state.get("combine_mode", self.combine_mode) != self.combine_mode:
            positions = self.positions(state["batches"])  # recompute for this run's mode
        for name, stream in self.streams.items():
            stream.set_position(positions.get(name, {"batch": 0})["batch"])
        for name, sampler in self.samplers.items():
            where = positions.get(name, {"pass": 0, "batch": 0})
            sampler.set_position(state["epoch"], where["pass"], min(where["batch"], sampler.num_batches))
