"""The DataModule: one training file and one dataloader per objective, tokenised once and cached."""

from __future__ import annotations

import hashlib
import json
import os
from functools import partial
from pathlib import Path
from typing import Any, Literal

import lightning as L
from torch.utils.data import DataLoader

from ..objectives.base import Objective
from .readers import DataSource, read_records
from .sampling import LengthGroupedSampler

__all__ = ["UnisentDataModule", "default_cache_dir"]


# The record schema of `unisent predict`: one text field, tokenised and padded like training data.
_PREDICT_SCHEMA = Objective(name="predict")
_PREDICT_SCHEMA.batch_keys = _PREDICT_SCHEMA.text_keys = ("text",)


def default_cache_dir() -> Path:
    return Path(os.environ.get("UNISENT_CACHE", Path.home() / ".cache" / "unisent")) / "tokenized"


def _fingerprint(source: DataSource, objective, tokenizer, max_length: int) -> str:
    path = Path(source.path).expanduser().resolve()
    stat = path.stat()
    parts = {
        "path": str(path),
        "mtime": stat.st_mtime_ns,
        "size": stat.st_size,
        "columns": source.columns,
        "max_records": source.max_records,
        "on_error": source.on_error,
        "keys": list(objective.batch_keys),
        "text_keys": list(objective.text_keys),
        "optional_keys": list(objective.optional_keys),
        "tokenizer": [getattr(tokenizer, "name_or_path", ""), len(tokenizer), type(tokenizer).__name__],
        "max_length": max_length,
    }
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()[:20]


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
        length_grouped: bool = False,
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
        self.datasets: dict[str, Any] = {}
        self._module = None

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
            raise ValueError(f"data.batch_size has no entry for objective {name!r} (has: {', '.join(self.batch_size)})")
        return self.batch_size[name]

    def setup(self, stage: str | None = None) -> None:
        if stage == "predict":
            if self.predict is None:
                raise ValueError("`unisent predict` needs data.predict: a file of sentences (field `text`)")
            self.datasets["__predict__"] = self.tokenized(self.predict, _PREDICT_SCHEMA)
            return
        if stage not in (None, "fit") or self.datasets or not self.train:
            return
        objectives = {o.name: o for o in self.module.objectives}
        unknown = sorted(set(self.train) - set(objectives))
        missing = sorted(set(objectives) - set(self.train))
        if unknown:
            raise ValueError(f"data.train has {', '.join(map(repr, unknown))}, but the model's objectives are: {', '.join(objectives)}")
        if missing:
            raise ValueError(f"no training data for objective(s) {', '.join(map(repr, missing))}: add them under data.train")
        for name, source in self.train.items():
            self.datasets[name] = self.tokenized(source, objectives[name])
            # objectives whose state depends on the data (EASE's entity vocabulary) build it now,
            # before the optimiser exists and before a resumed checkpoint is loaded
            self.datasets[name] = objectives[name].setup_data(self.datasets[name]) or self.datasets[name]

    def tokenized(self, source: DataSource, objective):
        """Read, validate and tokenise ``source`` for ``objective``, through the Arrow cache."""
        from datasets import Dataset, disable_progress_bars

        encoder = self.module.encoder
        max_length = objective.max_length or encoder.config.max_length
        cache = self.cache_dir / f"{_fingerprint(source, objective, encoder.tokenizer, max_length)}.arrow"
        if cache.is_file():
            return Dataset.from_file(str(cache))
        cache.parent.mkdir(parents=True, exist_ok=True)
        columns = read_records(source, objective.batch_keys, objective.text_keys, objective.optional_keys)
        disable_progress_bars()
        text_keys = list(objective.text_keys)

        def tokenize(rows: dict[str, list]) -> dict[str, list]:
            out = {k: encoder.tokenize_ids(rows[k], max_length) for k in text_keys}
            out["length"] = [max(len(out[k][i]) for k in text_keys) for i in range(len(rows[text_keys[0]]))] if text_keys else []
            return out

        return Dataset.from_dict(columns).map(
            tokenize, batched=True, batch_size=1000, cache_file_name=str(cache), new_fingerprint=cache.stem
        )

    def _loader(self, name: str) -> DataLoader:
        dataset = self.datasets[name]
        objective = next(o for o in self.module.objectives if o.name == name)
        batch_size = self._batch_size(name)
        if len(dataset) < batch_size:
            raise ValueError(
                f"objective {name!r} has {len(dataset)} training records, fewer than one batch of {batch_size}"
            )
        sampler = LengthGroupedSampler(dataset["length"], batch_size, seed=self.seed) if self.length_grouped else None
        collate = partial(objective.collate, pad_id=self.module.encoder.pad_token_id)
        columns = list(objective.batch_keys)
        return DataLoader(
            dataset.select_columns(columns).with_format(None),
            batch_size=batch_size,
            shuffle=sampler is None,
            sampler=sampler,
            drop_last=True,  # contrastive losses gather equal-sized batches across processes
            collate_fn=collate,
            num_workers=self.num_workers,
            persistent_workers=self.num_workers > 0,
        )

    def _evaluation_loader(self, tasks: list[str]):
        # The evaluation tasks read their own files; the loop needs one placeholder batch to run.
        return DataLoader([0], batch_size=1) if tasks else []

    def val_dataloader(self):
        return self._evaluation_loader(self.module.evaluation.val_tasks)

    def test_dataloader(self):
        return self._evaluation_loader(self.module.evaluation.test_tasks)

    def predict_dataloader(self):
        collate = partial(_PREDICT_SCHEMA.collate, pad_id=self.module.encoder.pad_token_id)
        return DataLoader(self.datasets["__predict__"].select_columns(["text"]).with_format(None),
                          batch_size=self.predict_batch_size, shuffle=False, collate_fn=collate,
                          num_workers=self.num_workers)

    def train_dataloader(self):
        from lightning.pytorch.utilities import CombinedLoader

        return CombinedLoader({name: self._loader(name) for name in self.datasets}, mode=self.combine_mode)
