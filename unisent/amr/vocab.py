"""Extend a tokenizer with AMR frame and relation names; initialise their embeddings from readable forms.

Cai et al. (2022), Section 4.1: ``:ARG2`` or ``belong-01`` are rare in text and split into less
meaningful subwords, so the vocabulary gets "all the relation and frame names occurring at least 5
times in the AMR sembank". As in the authors' ``amr/tokenization.py``, each new row is the mean of the
subword embeddings of its [`readable_form`][unisent.amr.readable_form]. Usage: docs/methods/amr.md.
"""

from __future__ import annotations

import os
import re
from collections import Counter
from collections.abc import Iterable
from typing import Any

import penman
import torch
from penman.exceptions import PenmanError

from ..data.file_checks import require_file
from ..data.records import iter_records
from .linearize import _walk
from .parsing import string_field
from .penman_blocks import AMRError, as_tree, block_error, iter_penman_blocks

__all__ = ["count_symbols", "count_symbols_in_file", "extend_vocabulary", "readable_form"]

_FRAME = re.compile(r"[^\s()\":/]*[A-Za-z][^\s()\":/]*-\d\d")
_RELATION = re.compile(r":[A-Za-z][^\s()\":/]*")
_PENMAN = re.compile(r"\(\s*[^\s()]+\s+/")


def is_frame(token: str) -> bool:
    """A concept with a sense number: ``want-01``, ``have-rel-role-91`` (not ``-01`` alone)."""
    return _FRAME.fullmatch(token) is not None


def is_relation(token: str) -> bool:
    """A role: ``:ARG0``, ``:ARG0-of``, ``:op1``, ``:mod``."""
    return _RELATION.fullmatch(token) is not None


def count_symbols(graphs: Iterable[str | penman.Tree], *, drop_wiki: bool = True) -> Counter[str]:
    """Frame and relation names in ``graphs`` (PENMAN text or trees, or linearised strings split
    on whitespace) with their number of occurrences as tokens of the linearisation: a re-entrant frame
    counts again; inverse roles count as written; ``:wiki`` only with ``drop_wiki=False`` (PENMAN only)."""
    counts: Counter[str] = Counter()
    for graph in graphs:
        if isinstance(graph, penman.Tree) or _PENMAN.search(graph):
            pairs = _walk(as_tree(graph), drop_wiki=drop_wiki, quote_strings=True)
            counts.update(
                text for kind, text in pairs if kind == "role" or (kind in ("concept", "reentrancy") and is_frame(text))
            )
        else:
            counts.update(t for t in graph.split() if is_relation(t) or is_frame(t))
    return counts


def count_symbols_in_file(
    path: str | os.PathLike, *, drop_wiki: bool = True, errors: list[AMRError] | None = None
) -> Counter[str]:
    """[`count_symbols`][unisent.amr.count_symbols] over a PENMAN file or a jsonl with a ``graph`` field (linearised
    graphs); a malformed PENMAN graph is appended to ``errors`` (raised when ``errors`` is None)."""
    path = require_file(path, "AMR file")
    if path.suffix == ".jsonl":
        records = iter_records(path, "jsonl", blank_lines="skip")
        return count_symbols([string_field(rec.data, ("graph",), path, rec.line) for rec in records])
    counts: Counter[str] = Counter()
    for block in iter_penman_blocks(path.read_text(encoding="utf-8"), str(path)):
        try:
            counts += count_symbols([as_tree(block.graph)], drop_wiki=drop_wiki)
        except (PenmanError, ValueError) as err:
            error = block_error(block, err)
            if errors is None:
                raise ValueError(str(error)) from err
            errors.append(error)
    return counts


def readable_form(symbol: str) -> str:
    """Words for a new token, whose subword embeddings are averaged to initialise it: the rules of the
    authors' ``reset_model_with_tokenizer``, plus inverse roles:

    * ``:ARGn`` -> ``relation argument n``; ``:opn`` -> ``relation operator n``; ``:sntn`` ->
      ``relation sentence n`` (``n`` without leading zeros);
    * any other relation: ``relation`` and its name split on ``-`` (``relation compared to``);
    * an inverse role ends in ``of``: ``:ARG0-of`` -> ``relation argument 0 of`` (the authors split
      ``-of`` off during linearisation instead, so their rule has no such case);
    * anything else is split on ``-``: ``cause-01`` -> ``cause 01``, ``-of`` -> ``of``.
    """
    if symbol.startswith(":") and len(symbol) > 1:
        name = symbol[1:]
        base, inverse = (name[: -len("-of")], True) if name.endswith("-of") else (name, False)
        for prefix, word in (("ARG", "argument"), ("op", "operator"), ("snt", "sentence")):
            number = base[len(prefix) :]
            if base.startswith(prefix) and number.isdigit():
                return " ".join(["relation", word, str(int(number))] + (["of"] if inverse else []))
        return " ".join(["relation"] + [part for part in name.split("-") if part])
    return " ".join(part for part in symbol.split("-") if part)


def extend_vocabulary(model: Any, symbols: Iterable[str], *, tokenizer: Any = None) -> list[str]:
    """Add ``symbols`` (``want-01``, ``:ARG0``) to the tokenizer as whole tokens and initialise their
    embedding rows; returns the added tokens in order (known symbols and repeats are skipped).

    ``model``: an unisent ``Encoder``, or a Hugging Face ``PreTrainedModel`` with its ``tokenizer``. Each symbol is one
    added token with ``single_word=True`` (``go-02`` does not match inside ``undergo-02``) and ``normalized=False`` (a
    lower-casing tokenizer keeps ``:ARG0``); its row is the mean embedding of
    [`readable_form`][unisent.amr.readable_form]'s subwords under the old tokenizer (``[UNK]`` included, as the authors
    do;
    none: the mean of all old rows). Extend before building an optimiser: resizing replaces the parameter.
    """
    from tokenizers import AddedToken

    if tokenizer is None:
        if not (hasattr(model, "backbone") and hasattr(model, "tokenizer")):
            raise TypeError("pass tokenizer= with a plain Hugging Face model (or give an unisent Encoder)")
        model, tokenizer = model.backbone, model.tokenizer
    vocab = tokenizer.get_vocab()
    new = []
    for symbol in dict.fromkeys(symbols):
        if not symbol or any(c.isspace() for c in symbol):
            raise ValueError(f"an AMR token cannot be empty or contain whitespace: {symbol!r}")
        if symbol not in vocab:
            new.append(symbol)
    if not new:
        return []
    # subword ids under the original tokenizer, before any token is added
    sources = {s: tokenizer(readable_form(s), add_special_tokens=False)["input_ids"] for s in new}
    old_len = len(tokenizer)
    tokenizer.add_tokens([AddedToken(s, single_word=True, normalized=False) for s in new])
    ids = dict(zip(new, tokenizer.convert_tokens_to_ids(new)))
    added = [s for s in new if ids[s] is not None and ids[s] >= old_len]

    old_rows = model.get_input_embeddings().weight.shape[0]
    if len(tokenizer) > old_rows:  # (transformers >= 4.46 takes mean_resizing; every new row is overwritten below)
        model.resize_token_embeddings(len(tokenizer), mean_resizing=False)
    weight = model.get_input_embeddings().weight
    with torch.no_grad():
        fallback = weight[: min(old_len, old_rows)].mean(0)
        for symbol in added:
            subwords = [i for i in sources[symbol] if i < old_rows]
            weight[ids[symbol]] = weight[subwords].mean(0) if subwords else fallback
    return added
