"""Streaming sources (``streaming: true``): tokenised on the fly, sharded, shuffled, resumed exactly (docs/training.md).
``datasets`` reads, shards (``split_dataset_by_node``) and shuffles (files and a buffer); ``TokenizedStream`` adds:

* **Passes without end**, each shuffled with its own seed (``set_epoch(pass)``): no process waits on
  another at an epoch's end, and a run is measured in ``trainer.max_steps``.
* **Exact resume.** The position is the number of batches trained; a resumed stream replays the same
  passes and skips the records before it untokenised. (``IterableDataset.state_dict`` is not used: it
  drops the shuffle buffer's content on resume, which changes the order.)
* **Checks** of every record as map-style data has them; a bad one is a
  [`RecordError`][unisent.data.RecordError] showing the record, or with ``on_error: skip`` dropped and counted.

Workers: ``datasets`` gives worker ``w`` of ``W`` the files ``w, w + W, ...`` and the loader takes their
batches in turn, worker 0 first, so a resumed loader starts at the last full round of workers and
``StreamLoader`` drops the batches of that round already trained on."""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any, cast

import torch

from .record_errors import MAX_LISTED, RecordError, skip_notice
from .sources import ResolvedSource, open_dataset
from .tokenizing import RowTokenizer

if TYPE_CHECKING:
    from datasets import IterableDataset

__all__ = ["StreamLoader", "TokenizedStream", "worker_batches"]


def worker_batches(batches: int, worker: int, workers: int) -> int:
    """How many of the first ``batches`` batches of a loader came from ``worker`` when ``workers``
    workers make batches in turn (worker 0 the first)."""
    return max(0, (batches - worker + workers - 1) // workers)


class TokenizedStream(torch.utils.data.IterableDataset):
    """The endless, sharded, shuffled, tokenised record stream of one process (see the module docstring).
    ``required``, ``text_keys``, ``optional``: the objective's fields; records are tokenised, and skipped on
    resume, ``batch_size`` (per process) at a time; pass ``p`` is shuffled with ``seed`` and epoch ``p``."""

    def __init__(
        self,
        resolved: ResolvedSource,
        required: Sequence[str],
        text_keys: Sequence[str],
        optional: Sequence[str],
        tokenizer: RowTokenizer,
        batch_size: int,
        seed: int = 0,
        rank: int = 0,
        world_size: int = 1,
    ) -> None:
        super().__init__()
        self.resolved = resolved
        self.source = resolved.source
        self.required, self.text_keys, self.optional = list(required), list(text_keys), list(optional)
        self.tokenizer = tokenizer
        self.batch_size = batch_size
        self.seed = seed
        self.rank, self.world_size = rank, world_size
        self.start = 0  # batches of this loader already trained on (set_position)
        inverse = {new: old for old, new in self.source.columns.items()}
        self.column_of = {key: inverse.get(key, key) for key in self.required}  # field -> column
        self._base: IterableDataset | None = None

    # ------------------------------------------------------------------------------- the datasets part
    def base(self) -> IterableDataset:
        """The source as a ``datasets.IterableDataset`` (opened once per process)."""
        if self._base is None:
            dataset = cast("IterableDataset", open_dataset(self.resolved, streaming=True))
            if self.source.max_records:
                dataset = dataset.take(self.source.max_records)
            self._base = dataset
        return self._base

    def check_columns(self) -> None:
        """Check the first record for the required columns, when training is set up (not at the first batch)."""
        first = next(iter(self.base()), None)
        if first is None:
            raise RecordError(self.resolved.label, 0, f"no records (fields needed: {', '.join(self.required)})")
        missing = [k for k, column in self.column_of.items() if k not in self.optional and column not in first]
        if missing:
            renamed = f" (renamed by columns: {self.source.columns})" if self.source.columns else ""
            raise RecordError(
                self.resolved.label,
                0,
                f"no column {', '.join(map(repr, missing))} (columns: {', '.join(first)}){renamed}",
                field=missing[0],
            )

    def pass_dataset(self, pass_: int) -> IterableDataset:
        """Pass ``pass_`` of this process's share: shuffled (files and buffer) with the seed and the pass."""
        from datasets.distributed import split_dataset_by_node

        dataset = self.base()
        if self.source.shuffle_buffer:
            dataset = dataset.shuffle(seed=self.seed, buffer_size=self.source.shuffle_buffer)
        if self.world_size > 1:
            dataset = split_dataset_by_node(dataset, rank=self.rank, world_size=self.world_size)
        dataset.set_epoch(pass_)
        return dataset

    def active_workers(self, workers: int) -> int:
        """How many of ``workers`` dataloader workers ``datasets`` gives files to."""
        shards = self.base().num_shards
        if self.world_size > 1 and shards % self.world_size == 0:
            shards //= self.world_size
        return max(1, min(workers, shards))

    # ------------------------------------------------------------------------------- resume
    def set_position(self, batches: int) -> None:
        """Make the next iteration start after the first ``batches`` batches of this loader."""
        if batches < 0:
            raise ValueError(f"a stream position must be >= 0, got {batches}")
        self.start = batches

    # ------------------------------------------------------------------------------- records
    def _problem(self, example: dict[str, Any]) -> str | None:
        for key, column in self.column_of.items():
            value = example.get(column)
            if value is None:
                if key in self.optional:
                    continue
                return f"field {key!r} is missing" + (" (null)" if column in example else "")
            if key in self.text_keys:
                if not isinstance(value, str):
                    return f"field {key!r} must be a string, got {type(value).__name__}"
                if not value.strip():
                    return f"field {key!r} is an empty sentence"
        return None

    def _records(self, skip: int) -> Iterator[dict[str, Any]]:
        """Checked records of this worker, pass after pass; the first ``skip`` are left out untokenised."""
        for pass_ in itertools.count():
            seen = kept = 0
            problems: list[str] = []
            n_problems = 0
            for example in self.pass_dataset(pass_):
                seen += 1
                problem = self._problem(example)
                if problem is not None:
                    n_problems += 1
                    shown = repr({k: example.get(c) for k, c in self.column_of.items()})[:300]
                    detail = (
                        f"a streamed record (pass {pass_}, record {seen} of this process's share) {problem}: {shown}"
                    )
                    if self.source.on_error == "raise":
                        raise RecordError(self.resolved.label, 0, detail)
                    if len(problems) < MAX_LISTED:
                        problems.append(f"{self.resolved.label}: {detail}")
                    continue
                kept += 1
                if skip:
                    skip -= 1
                    continue
                yield {key: example.get(column) for key, column in self.column_of.items()}
            if n_problems:
                label = f"{self.resolved.label} in pass {pass_}"
                skip_notice(label, n_problems, kept, problems, self.resolved.key)
            if kept == 0:
                if seen == 0 and pass_ == 0:
                    return  # a dataloader worker without files (datasets stops it too)
                raise RecordError(
                    self.resolved.label,
                    0,
                    f"no usable records in this process's share (fields needed: {', '.join(self.required)})",
                )

    def __iter__(self) -> Iterator[dict[str, Any]]:
        info = torch.utils.data.get_worker_info()
        worker, workers = (info.id, info.num_workers) if info is not None else (0, 1)
        active = self.active_workers(workers)
        if worker >= active:
            return
        round_start = self.start - self.start % active  # StreamLoader drops the rest of the round
        skip = worker_batches(round_start, worker, active) * self.batch_size
        chunk: list[dict[str, Any]] = []
        for record in self._records(skip):
            chunk.append(record)
            if len(chunk) == self.batch_size:  # tokenised a batch at a time
                rows = {key: [r[key] for r in chunk] for key in self.required}
                rows.update(self.tokenizer(rows))
                yield from ({key: rows[key][i] for key in self.required} for i in range(len(chunk)))
                chunk = []


class StreamLoader(torch.utils.data.DataLoader):
    """A ``DataLoader`` over a ``TokenizedStream`` that resumes at the stream's position with any
    number of workers (see the module docstring)."""

    def __iter__(self):
        iterator = super().__iter__()
        stream = self.dataset
        if isinstance(stream, TokenizedStream) and self.num_workers:
            for _ in range(stream.start % stream.active_workers(self.num_workers)):
                next(iterator)
        return iterator
