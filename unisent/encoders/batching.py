"""How ``Encoder.encode`` batches and reports: truncation counting over chunks, Sentence Transformers'
reference batching, and the ordered thread map that encodes batches in parallel."""

from __future__ import annotations

import warnings
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from ..data.schema import pad_batch

__all__ = [
    "TokenIds",
    "TruncationCount",
    "TruncationWarning",
    "collect_truncation",
    "length_batches",
    "ordered_map",
    "reference_batching",
    "reference_batching_enabled",
    "report_truncation",
    "truncation_message",
]


class TruncationWarning(UserWarning):
    """Inputs of ``encode`` were longer than the model's maximum length and were truncated."""


@dataclass
class TruncationCount:
    """What ``collect_truncation`` collected: per encoder (``id``), ``[truncated, encoded, max_length]``."""

    per_encoder: dict[int, list[int]] = field(default_factory=dict)

    def add(self, encoder: object, truncated: int, encoded: int, max_length: int) -> None:
        entry = self.per_encoder.setdefault(id(encoder), [0, 0, max_length])
        entry[0] += truncated
        entry[1] += encoded

    @property
    def worst(self) -> tuple[int, int, int]:
        """``(truncated, encoded, max_length)`` of the encoder that truncated most (zeros if none ran)."""
        worst = max(self.per_encoder.values(), default=[0, 0, 0], key=lambda e: (e[0], e[1]))
        return worst[0], worst[1], worst[2]


_TRUNCATION: ContextVar[TruncationCount | None] = ContextVar("unisent_truncation", default=None)


@contextmanager
def collect_truncation() -> Iterator[TruncationCount]:
    """Inside the block, ``Encoder.encode`` adds its truncation counts to the yielded ``TruncationCount`` instead of
    warning: a caller that encodes in chunks (``unisent encode``, the evaluation) reports once for all of them."""
    count = TruncationCount()
    token = _TRUNCATION.set(count)
    try:
        yield count
    finally:
        _TRUNCATION.reset(token)


_REFERENCE: ContextVar[bool] = ContextVar("unisent_reference_batching", default=False)


@contextmanager
def reference_batching(enabled: bool = True) -> Iterator[None]:
    """Inside the block, ``Encoder.encode`` batches as ``SentenceTransformer.encode`` does: sentences in
    its order (character length, longest first), one batch at a time on all intra-op threads (unless
    ``workers`` is passed), through the backbone's own padded forward, not the unpadded one. The
    vectors are then bit-identical to Sentence Transformers' at the same batch size and thread count.

    Why it matters: a row's float rounding depends on its batch (the padded length attention runs
    over, the matrix shapes of the unpadded forward), so the default, faster batching (token-length
    order, unpadded) differs from Sentence Transformers by about 2e-7 per coordinate. Cosine tasks do not
    notice; K-means with k-means++ starts does: on the 20,000 Biomedical texts that difference moved
    all-MiniLM-L6-v2's accuracy from 51.29 to 50.32 (as does Sentence Transformers' own batch size 64
    against 128). The evaluation runs inside this block, so its numbers are those Sentence Transformers
    gives for the same model (an exported unisent model included). It costs what Sentence Transformers
    costs: 4,000 Biomedical abstracts took 11.1 s in the block, 7.2 s outside it and 10.7 s through
    Sentence Transformers (2 CPU threads; ``benchmarks/preset_parity.py vectors``).
    """
    token = _REFERENCE.set(enabled)
    try:
        yield
    finally:
        _REFERENCE.reset(token)


def truncation_message(truncated: int, total: int, max_length: int, hint: str = "set model.config.max_length") -> str:
    """``3 of 1,000 inputs were longer than 256 tokens and were truncated; <hint> to change``."""
    return (
        f"{truncated:,} of {total:,} inputs were longer than {max_length} tokens and were truncated; {hint} to change"
    )


def report_truncation(encoder: object, truncated: int, encoded: int, max_length: int) -> None:
    """Add the counts of one ``encode`` call to the innermost ``collect_truncation`` block (a caller that encodes in
    chunks reports once), or outside one, warn once for the call with the count (at the caller of ``encode``)."""
    collector = _TRUNCATION.get()
    if collector is not None:
        collector.add(encoder, truncated, encoded, max_length)
    elif truncated:
        warnings.warn(TruncationWarning(truncation_message(truncated, encoded, max_length)), stacklevel=4)


def reference_batching_enabled() -> bool:
    """Whether the caller is inside [`reference_batching`][unisent.encoders.reference_batching]."""
    return _REFERENCE.get()


def length_batches(
    ids: list[list[int]], batch_size: int, pad_id: int, texts: Sequence[str] | None = None, progress: bool = False
) -> Iterable[tuple[list[int], torch.Tensor, torch.Tensor]]:
    """``(row indices, input_ids, attention_mask)`` of up to ``batch_size`` rows of ``ids`` each, padded per batch: the
    rows in token length order, longest first (less padding than characters), or given ``texts``, in
    ``SentenceTransformer.encode``'s (numpy's default argsort of minus the characters). ``progress``: a tqdm bar."""
    if texts is not None:
        order = np.argsort([-len(text) for text in texts]).tolist()
    else:
        order = sorted(range(len(ids)), key=lambda i: len(ids[i]), reverse=True)
    chunks = (order[start : start + batch_size] for start in range(0, len(order), batch_size))
    batches = ((idx, *pad_batch([ids[i] for i in idx], pad_id)) for idx in chunks)
    if not progress:
        return batches
    from tqdm.auto import tqdm

    return tqdm(batches, total=-(-len(ids) // batch_size), desc="encode", unit="batch")


def ordered_map(fn, items: Iterable, workers: int, per_thread: int = 1) -> Iterator:
    """``map(fn, items)`` in ``workers`` threads, results in input order, at most ``2 * workers`` items
    in flight (the input is not read ahead further, so a long stream keeps bounded memory)."""
    if workers <= 1:
        yield from map(fn, items)
        return
    from collections import deque
    from concurrent.futures import ThreadPoolExecutor

    pending: deque = deque()
    with ThreadPoolExecutor(workers, initializer=torch.set_num_threads, initargs=(per_thread,)) as pool:
        for item in items:
            pending.append(pool.submit(fn, item))
            if len(pending) >= 2 * workers:
                yield pending.popleft().result()
        while pending:
            yield pending.popleft().result()


class TokenIds:
    """Tokenising for ``encode`` (the torch ``Encoder``'s and the ONNX runner's): the class has a ``tokenizer``
    and a ``config.max_length``."""

    tokenizer: Any
    config: Any

    def tokenize_ids(self, texts: Sequence[str], max_length: int | None = None) -> list[list[int]]:
        """Token ids per text, truncated, with special tokens and without padding."""
        return self.tokenizer(
            list(texts),
            truncation=True,
            max_length=max_length or self.config.max_length,
            padding=False,
            return_attention_mask=False,
            return_token_type_ids=False,
        )["input_ids"]

    def _special_suffix(self) -> int | None:
        """How many special tokens end a tokenised text (BERT's ``[SEP]``: 1), read once from the
        tokenizer's special-tokens mask; None when it truncates on the left or the mask says nothing."""
        side = getattr(self.tokenizer, "truncation_side", "right")
        cached = self.__dict__.get("_suffix_cache")
        if cached is not None and cached[0] is self.tokenizer and cached[1] == side:
            return cached[2]
        suffix: int | None = None
        if side == "right":
            mask = self.tokenizer("a b", return_special_tokens_mask=True)["special_tokens_mask"]
            content = [i for i, special in enumerate(mask) if not special]
            suffix = len(mask) - content[-1] - 1 if content else None
        self.__dict__["_suffix_cache"] = (self.tokenizer, side, suffix)
        return suffix

    def _tokenize_counting(self, texts: Sequence[str]) -> tuple[list[list[int]], int]:
        """``tokenize_ids`` at ``config.max_length``, and how many texts it
        truncated.

        Tokenised once with one token more than allowed: a text that reaches ``max_length + 1`` tokens
        was truncated (counted on the list lengths, no loop over tokens). Those rows lose their last
        content token by slicing, before the special tokens that end them, which is what truncating
        at ``max_length`` gives (tested); a tokenizer that truncates on the left tokenises them again."""
        limit = self.config.max_length
        ids = self.tokenize_ids(texts, limit + 1)
        lengths = np.fromiter(map(len, ids), dtype=np.int64, count=len(ids))
        over: list[int] = np.flatnonzero(lengths > limit).tolist()
        if over:
            suffix = self._special_suffix()
            if suffix is None:
                for i, row in zip(over, self.tokenize_ids([texts[i] for i in over], limit)):
                    ids[i] = row
            else:
                for i in over:
                    row = ids[i]
                    ids[i] = row[: limit - suffix] + row[len(row) - suffix :]
        return ids, len(over)
