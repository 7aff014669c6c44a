"""Tokenising records by a [`BatchSchema`][unisent.data.BatchSchema] (``RowTokenizer``)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, cast

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

__all__ = ["RowTokenizer"]


class RowTokenizer:
    """``rows -> rows`` with every text field of ``text_keys`` replaced by its token ids (a null stays
    null) and a ``length`` column (the longest text field of the record, in tokens). ``tokenizer``: the
    encoder's, with any added tokens; ``max_length`` includes special tokens.

    Picklable, for the map-style cache (``datasets.map(num_proc=)``) and streams: it holds the tokenizer's
    Rust backend (a small JSON when pickled), not the encoder, so worker processes receive kilobytes, not
    the model. The ids equal ``tokenizer(texts, truncation=True, max_length=n)``'s
    (``tests/test_data_sources.py``); a slow tokenizer is called as it is.
    """

    def __init__(self, tokenizer: PreTrainedTokenizerBase, text_keys: Sequence[str], max_length: int) -> None:
        self.text_keys = list(text_keys)
        self.max_length = max_length
        backend = getattr(tokenizer, "backend_tokenizer", None) if getattr(tokenizer, "is_fast", False) else None
        if backend is not None:
            from tokenizers import Tokenizer

            backend = Tokenizer.from_str(backend.to_str())  # a copy: the encoder's own settings stay
            backend.enable_truncation(max_length, direction=getattr(tokenizer, "truncation_side", "right"))
            backend.no_padding()
            self._backend, self._tokenizer = backend, None
        else:
            self._backend, self._tokenizer = None, tokenizer

    def ids(self, texts: Sequence[str]) -> list[list[int]]:
        """Token ids of non-null texts."""
        if self._backend is not None:
            encode = getattr(self._backend, "encode_batch_fast", self._backend.encode_batch)
            return [encoding.ids for encoding in encode(list(texts))]
        return cast("PreTrainedTokenizerBase", self._tokenizer)(  # set where there is no backend
            list(texts),
            truncation=True,
            max_length=self.max_length,
            padding=False,
            return_attention_mask=False,
            return_token_type_ids=False,
        )["input_ids"]

    def column(self, texts: Sequence[str | None]) -> list[list[int] | None]:
        present = [text for text in texts if text is not None]
        ids = iter(self.ids(present) if present else [])
        return [None if text is None else next(ids) for text in texts]

    def __call__(self, rows: dict[str, list[Any]]) -> dict[str, list[Any]]:
        out: dict[str, list[Any]] = {key: self.column(rows[key]) for key in self.text_keys}
        n = len(rows[self.text_keys[0]]) if self.text_keys else len(next(iter(rows.values()), []))
        out["length"] = [
            max((len(out[k][i]) for k in self.text_keys if out[k][i] is not None), default=0) for i in range(n)
        ]
        return out
