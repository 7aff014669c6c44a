"""The sentence encoder: a Hugging Face backbone, a tokenizer and a pooler."""

from __future__ import annotations

import json
import os
import warnings
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager, nullcontext
from contextvars import ContextVar
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import torch
from torch import nn

from ..io import atomic_write
from ..models.encoder import EncoderModel
from ..models.registry import register_model
from .loading import load_backbone, load_tokenizer, resolve_model_location
from .packed import packed_forward, supports_packing
from .poolers import PoolerName, PoolerPath, build_pooler, pooler_class
from .presets import PRESETS

__all__ = ["Encoder", "EncoderConfig", "TruncationCount", "TruncationWarning", "collect_truncation", "pad_batch",
           "reference_batching", "truncation_message"]

UNISENT_CONFIG = "unisent_encoder.json"
POOLER_WEIGHTS = "pooler.pt"


class TruncationWarning(UserWarning):
    """Inputs of ``encode`` were longer than the model's maximum length and were truncated."""


@dataclass
class TruncationCount:
    """What :func:`collect_truncation` collected: per encoder (``id``), ``[truncated, encoded, max_length]``."""

    per_encoder: dict[int, list[int]] = field(default_factory=dict)

    def add(self, encoder: object, truncated: int, encoded: int, max_length: int) -> None:
        entry = self.per_encoder.setdefault(id(encoder), [0, 0, max_length])
        entry[0] += truncated
        entry[1] += encoded

    @property
    def worst(self) -> tuple[int, int, int]:
        """``(truncated, encoded, max_length)`` of the encoder that truncated most (zeros if none ran)."""
        return tuple(max(self.per_encoder.values(), default=[0, 0, 0], key=lambda e: (e[0], e[1])))


_TRUNCATION: ContextVar[TruncationCount | None] = ContextVar("unisent_truncation", default=None)


@contextmanager
def collect_truncation() -> Iterator[TruncationCount]:
    """Inside the block, ``Encoder.encode`` adds its truncation counts to the yielded
    :class:`TruncationCount` instead of warning: a caller that encodes in chunks (``unisent encode``,
    the evaluation) reports once for all of them."""
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
    return (f"{truncated:,} of {total:,} inputs were longer than {max_length} tokens and were truncated; "
            f"{hint} to change")


@dataclass
class EncoderConfig:
    """Which backbone to load and how to pool it.

    Attributes:
        model: a preset name (``minilm-l6``, ``bert-base-uncased``, ...), a local model directory or a
            Hugging Face hub id.
        pooler: ``cls``, ``cls_mlp``, ``cls_mlp_train_only``, ``mean``, ``max`` or ``avg_first_last``,
            a pooler's dotted class path (``my_pkg.poolers.MyPooler``, imported and so registered),
            or, from Python, any name registered with ``unisent.encoders.register_pooler``; unset for
            the preset's default (``cls`` for a plain directory or hub id).
        max_length: maximum tokens per sentence; 0 for the preset's default (32 otherwise).
        attn_implementation: attention kernel passed to ``from_pretrained`` (``sdpa`` or ``eager``).
        dropout: if set, overrides the backbone's hidden and attention dropout probabilities.
        unpad: skip padding tokens inside the backbone (:mod:`unisent.encoders.packed`): the same
            result, computed on real tokens only. Used for BERT-family backbones; others ignore it.
        normalize: L2-normalise the embeddings of ``encode`` as the model's last step (Sentence
            Transformers' ``Normalize`` module, which an export writes); unset for the preset's
            setting (true for ``minilm-l6``, as the published model), false otherwise. Inference
            only: the training losses and the heads on the encoder (GaussCSE's Gaussian head, CMLM's
            projection) see the pooler's vectors, as before (``forward``, ``encode_pooled``). For the
            cosine losses (InfoNCE, EASE's entity term) that makes no difference; inner-product
            losses and heads keep training on the unnormalised vectors.
    """

    model: str = "minilm-l6"
    pooler: PoolerName | PoolerPath | None = None
    max_length: int = 0
    attn_implementation: str = "sdpa"
    dropout: float | None = None
    unpad: bool = True
    normalize: bool | None = None

    def __post_init__(self) -> None:
        preset = PRESETS.get(self.model)
        if not self.pooler:
            self.pooler = preset.pooler if preset else "cls"
        if self.normalize is None:
            self.normalize = preset.normalize if preset else False
        if not isinstance(self.normalize, bool):
            raise ValueError(f"normalize must be true or false, got {self.normalize!r}")
        self.pooler = str(self.pooler)  # a plain string (the parser may give a str subclass)
        pooler_class(self.pooler)  # a clear error for an unknown pooler (it lists the registered ones)
        if not self.max_length:
            self.max_length = preset.max_length if preset else 32
        if self.max_length < 1:
            raise ValueError(f"max_length must be positive, got {self.max_length}")
        if self.dropout is not None and not 0.0 <= self.dropout < 1.0:
            raise ValueError(f"dropout must be in [0, 1), got {self.dropout}")


def pad_batch(sequences: Sequence[Sequence[int]], pad_id: int, length: int | None = None):
    """Right-pad token id lists into ``(input_ids, attention_mask)`` of shape (batch, length)."""
    length = length or max(len(s) for s in sequences)
    input_ids = torch.full((len(sequences), length), pad_id, dtype=torch.long)
    attention_mask = torch.zeros((len(sequences), length), dtype=torch.long)
    for row, seq in enumerate(sequences):
        input_ids[row, : len(seq)] = torch.as_tensor(seq, dtype=torch.long)
        attention_mask[row, : len(seq)] = 1
    return input_ids, attention_mask


@register_model("encoder")
class Encoder(EncoderModel):
    """Backbone + pooler. ``forward`` maps token ids to sentence vectors; ``encode`` maps strings.

    How it is exported and described (model card, Sentence Transformers modules, ``transformers``
    recipe) is declared by its base :class:`~unisent.models.encoder.EncoderModel` and its pooler.

    Args:
        config: an :class:`EncoderConfig`.
    """

    def __init__(self, config: EncoderConfig | None = None) -> None:
        super().__init__()
        self.config = config or EncoderConfig()
        location = resolve_model_location(self.config.model)
        overrides = {}
        if self.config.dropout is not None:
            overrides = {"hidden_dropout_prob": self.config.dropout, "attention_probs_dropout_prob": self.config.dropout}
        self.backbone = load_backbone(
            location, attn_implementation=self.config.attn_implementation, config_overrides=overrides
        )
        self.backbone.train()  # from_pretrained returns eval mode; nn.Modules start in training mode
        self.tokenizer = load_tokenizer(location)
        self.packs = self.config.unpad and supports_packing(self.backbone)
        self.pooler = build_pooler(self.config.pooler, self.hidden_size)
        self._saved_pooler = Path(location, POOLER_WEIGHTS)
        if self._saved_pooler.is_file():
            self.pooler.load_state_dict(torch.load(self._saved_pooler, map_location="cpu", weights_only=True))

    @property
    def hidden_size(self) -> int:
        return self.backbone.config.hidden_size

    @property
    def pad_token_id(self) -> int:
        pad = self.tokenizer.pad_token_id
        return 0 if pad is None else pad

    def forward(
        self,
        input_ids: torch.Tensor,  # (batch, seq)
        attention_mask: torch.Tensor,  # (batch, seq)
        unpad: bool | None = None,
        **backbone_kwargs,
    ) -> torch.Tensor:
        """Return pooled sentence vectors of shape (batch, hidden); ``unpad=False``: the backbone's own
        forward even where the unpadded one applies (``None``: ``config.unpad``)."""
        packs = self.packs if unpad is None else unpad and self.packs
        if packs and set(backbone_kwargs) <= {"token_type_ids"} and not self._checkpointing():
            last, states = packed_forward(
                self.backbone, input_ids, attention_mask, output_hidden_states=self.pooler.needs_hidden_states,
                **backbone_kwargs,
            )
            return self.pooler(last, attention_mask, states)
        out = self.backbone(
            input_ids=input_ids,
            attention_mask=attention_mask,
            output_hidden_states=self.pooler.needs_hidden_states,
            **backbone_kwargs,
        )
        return self.pooler(out.last_hidden_state, attention_mask, out.hidden_states)

    def _checkpointing(self) -> bool:
        flag = "is_activation_checkpointing" if hasattr(type(self.backbone), "is_activation_checkpointing") else (
            "is_gradient_checkpointing"
        )
        return self.training and bool(getattr(self.backbone, flag, False))

    # ----------------------------------------------------------------------------------- tokenising
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
        """:meth:`tokenize_ids` at ``config.max_length``, and how many texts it truncated.

        Tokenised once with one token more than allowed: a text that reaches ``max_length + 1`` tokens
        was truncated (counted on the list lengths, no loop over tokens). Those rows lose their last
        content token by slicing, before the special tokens that end them, which is what truncating
        at ``max_length`` gives (tested); a tokenizer that truncates on the left tokenises them again."""
        limit = self.config.max_length
        ids = self.tokenize_ids(texts, limit + 1)
        lengths = np.fromiter(map(len, ids), dtype=np.int64, count=len(ids))
        over = np.flatnonzero(lengths > limit).tolist()
        if over:
            suffix = self._special_suffix()
            if suffix is None:
                for i, row in zip(over, self.tokenize_ids([texts[i] for i in over], limit)):
                    ids[i] = row
            else:
                for i in over:
                    row = ids[i]
                    ids[i] = row[: limit - suffix] + row[len(row) - suffix:]
        return ids, len(over)

    # ----------------------------------------------------------------------------------- inference
    def _batches(
        self, texts: Sequence[str], ids: list[list[int]], batch_size: int, reference: bool = False
    ) -> Iterator[tuple[list[int], torch.Tensor, torch.Tensor]]:
        if reference:  # SentenceTransformer.encode's order: numpy's default argsort of minus the characters
            order = np.argsort([-len(text) for text in texts]).tolist()
        else:  # token length, longest first: less padding than characters
            order = sorted(range(len(ids)), key=lambda i: len(ids[i]), reverse=True)
        for start in range(0, len(order), batch_size):
            idx = order[start : start + batch_size]
            yield idx, *pad_batch([ids[i] for i in idx], self.pad_token_id)

    def encode(
        self,
        sentences: Sequence[str],
        batch_size: int = 64,
        *,
        normalize: bool = False,
        bf16: bool = False,
        show_progress_bar: bool = False,
        workers: int | None = None,
    ) -> torch.Tensor:
        """Embed ``sentences``; returns a float32 tensor (n, hidden) on the CPU, rows in input order.

        The model's embeddings: the pooler's vectors, L2-normalised when ``config.normalize`` is set
        (``normalize=True`` normalises in any case; ``False`` does not undo the model's own
        normalisation, as in Sentence Transformers). See :meth:`encode_pooled` for the arguments.
        """
        return self.encode_pooled(sentences, batch_size, normalize=normalize or self.config.normalize, bf16=bf16,
                                  show_progress_bar=show_progress_bar, workers=workers)

    def encode_pooled(
        self,
        sentences: Sequence[str],
        batch_size: int = 64,
        *,
        normalize: bool = False,
        bf16: bool = False,
        show_progress_bar: bool = False,
        workers: int | None = None,
    ) -> torch.Tensor:
        """The pooler's vectors of ``sentences`` without ``config.normalize``: what the training losses
        see and what a head on the encoder (GaussCSE, CMLM's projection) is trained on. A float32
        tensor (n, hidden) on the CPU, rows in input order; ``normalize``: L2-normalise them.

        Batches are formed from length-sorted sentences (less padding) and put back in order; inside
        :func:`reference_batching` they are Sentence Transformers' batches and vectors.
        ``workers``: on a CPU, batches run in this many threads at once, the intra-op threads
        (``torch.get_num_threads()``) split between them; small models waste less time in
        synchronising threads inside each small operation that way. Default: one worker per
        intra-op thread, at most 4, on CPU; 1 on accelerators. The thread setting is restored after.
        """
        if isinstance(sentences, str):
            raise TypeError("encode takes a list of sentences, not a single string")
        was_training = self.training
        self.eval()
        device = next(self.parameters()).device
        ids, truncated = self._tokenize_counting(sentences)
        collector = _TRUNCATION.get()  # a caller that encodes in chunks counts them and reports once
        if collector is not None:
            collector.add(self, truncated, len(ids), self.config.max_length)
        elif truncated:  # once per call, with the count
            warnings.warn(TruncationWarning(truncation_message(truncated, len(ids), self.config.max_length)),
                          stacklevel=3)
        out = torch.empty((len(ids), self.hidden_size), dtype=torch.float32)
        n_batches = -(-len(ids) // batch_size)
        threads = torch.get_num_threads()
        reference = _REFERENCE.get()
        if workers is None:
            workers = min(threads, 4) if device.type == "cpu" and not reference else 1
        workers = max(1, min(workers, n_batches))
        batches = self._batches(sentences, ids, batch_size, reference)
        if show_progress_bar:
            from tqdm.auto import tqdm

            batches = tqdm(batches, total=n_batches, desc="encode", unit="batch")

        def embed(batch) -> tuple[list[int], torch.Tensor]:
            idx, input_ids, attention_mask = batch
            # grad and autocast modes are per thread: set them in the thread that runs the batch
            autocast = torch.autocast(device.type, dtype=torch.bfloat16) if bf16 else nullcontext()
            with torch.inference_mode(), autocast:
                unpad = False if reference else None
                emb = self(input_ids.to(device), attention_mask.to(device), unpad=unpad).float()
                if normalize:
                    emb = nn.functional.normalize(emb, dim=-1)
                return idx, emb.cpu()

        try:
            for idx, emb in _ordered_map(embed, batches, workers, per_thread=max(1, threads // workers)):
                out[torch.as_tensor(idx)] = emb
        finally:
            torch.set_num_threads(threads)  # the workers set their share; restore the caller's setting
            self.train(was_training)
        return out

    # ----------------------------------------------------------------------------------- save/load
    def save_pretrained(self, directory: str | os.PathLike) -> Path:
        """Write backbone, tokenizer, pooler weights, the encoder settings and the model record to
        ``directory``.

        ``Encoder(EncoderConfig(model=directory))`` loads it back (pooler and max length included). A
        pooler from outside unisent is recorded by its class path, so loading imports (registers) it.
        """
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        self.backbone.save_pretrained(directory)
        self.tokenizer.save_pretrained(directory)
        if any(True for _ in self.pooler.parameters()):
            torch.save(self.pooler.state_dict(), directory / POOLER_WEIGHTS)
        # "model": "." (this directory; loading reads the directory it is in), never a machine's absolute path
        settings = asdict(self.config) | {"model": "."}
        pooler = type(self.pooler)
        if not pooler.__module__.startswith("unisent."):
            settings["pooler"] = f"{pooler.__module__}.{pooler.__qualname__}"
        with atomic_write(directory / UNISENT_CONFIG) as fh:
            fh.write(json.dumps(settings, indent=2) + "\n")
        self.write_model_record(directory)
        return directory

    @classmethod
    def from_pretrained(cls, directory: str | os.PathLike) -> Encoder:
        """Load an encoder saved by :meth:`save_pretrained` (or any model directory, pooled with ``cls``)."""
        settings_file = Path(directory, UNISENT_CONFIG)
        settings = json.loads(settings_file.read_text()) if settings_file.is_file() else {}
        settings["model"] = str(directory)
        return cls(EncoderConfig(**settings))


def _ordered_map(fn, items: Iterable, workers: int, per_thread: int = 1) -> Iterator:
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


def __getattr__(name: str):
    if name == "EncoderWrapper":  # moved to unisent.models; kept importable from here
        from ..models.wrapper import EncoderWrapper

        return EncoderWrapper
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
