"""Extend a tokenizer with AMR frame and relation names; initialise their embeddings from readable forms.

Cai et al. (2022), Section 4.1: tokens such as ``:ARG2`` or ``belong-01`` are rare in text and a
subword tokenizer splits them into less meaningful pieces, so the vocabulary is extended with "all the
relation and frame names occurring at least 5 times in the AMR sembank". The authors' code
(jcyk/MSE-AMR, ``amr/tokenization.py``) initialises each new embedding row as the mean of the
embeddings of the subwords of a readable form of the token; :func:`readable_form` gives the same
forms (rules in its docstring).

Typical use::

    counts = read_counts("predicates.txt")                  # "cause-01<TAB>4563" lines
    symbols = select_symbols(counts, min_count=5) + read_symbols("additions.txt")
    added = extend_vocabulary(encoder, symbols)             # an unisent Encoder, or
    added = extend_vocabulary(hf_model, symbols, tokenizer=hf_tokenizer)
    encoder.save_pretrained("amr-encoder")                  # model and tokenizer saved together

Counts can also come from a corpus: :func:`count_symbols` (graphs as PENMAN or linearised strings)
and :func:`count_symbols_in_file` (a PENMAN file or the jsonl of ``unisent data amr-linearize``).
"""

from __future__ import annotations

import inspect
import os
import re
from collections import Counter
from collections.abc import Iterable
from pathlib import Path

import penman
import torch
from penman.exceptions import PenmanError

from ..data.records import iter_records
from .linearize import _walk
from .penman_blocks import AMRError, as_tree, block_error, iter_penman_blocks
from .symbols import read_counts, read_symbols, select_symbols

__all__ = [
    "count_symbols",
    "count_symbols_in_file",
    "extend_vocabulary",
    "is_frame",
    "is_relation",
    "read_counts",
    "read_symbols",
    "readable_form",
    "select_symbols",
]

_FRAME = re.compile(r"[^\s()\":/]*[A-Za-z][^\s()\":/]*-\d\d")
_RELATION = re.compile(r":[A-Za-z][^\s()\":/]*")
_PENMAN = re.compile(r"\(\s*[^\s()]+\s+/")


def is_frame(token: str) -> bool:
    """A concept with a sense number: ``want-01``, ``have-rel-role-91`` (not ``-01`` alone)."""
    return _FRAME.fullmatch(token) is not None


def is_relation(token: str) -> bool:
    """A role: ``:ARG0``, ``:ARG0-of``, ``:op1``, ``:mod``."""
    return _RELATION.fullmatch(token) is not None


# ------------------------------------------------------------------------------------------ counts
def count_symbols(graphs: Iterable[str | penman.Tree], *, drop_wiki: bool = True) -> Counter[str]:
    """Frame and relation names in ``graphs`` with their number of occurrences.

    Each graph is PENMAN text (or a ``penman.Tree``), read exactly, or a linearised string (told apart
    by the ``(var /`` of PENMAN), split on whitespace, where a token is a relation when it starts
    with ``:`` and a frame when it ends in a sense number (a string literal that looks like one
    counts too). Occurrences are tokens of the linearisation: a re-entrant frame counts again;
    ``:wiki`` is not counted unless ``drop_wiki=False`` (PENMAN input only). Inverse roles count as
    they are written (``:ARG0-of``).
    """
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
    """:func:`count_symbols` over a PENMAN file or a jsonl with a ``graph`` field (linearised graphs).

    A malformed PENMAN graph is skipped and appended to ``errors`` (or raised when ``errors`` is None).
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"AMR file {str(path)!r} does not exist")
    if path.suffix == ".jsonl":
        graphs = []
        for rec in iter_records(path, "jsonl", blank_lines="skip"):
            lineno, record = rec.line, rec.data
            if not isinstance(record, dict) or not isinstance(record.get("graph"), str):
                found = sorted(record) if isinstance(record, dict) else type(record).__name__
                raise ValueError(f"{path}:{lineno}: no string field 'graph' in {found}")
            graphs.append(record["graph"])
        return count_symbols(graphs)
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


# ------------------------------------------------------------------------------ readable forms
def readable_form(symbol: str) -> str:
    """Words for a new token, whose subword embeddings are averaged to initialise it.

    The rules of the authors' ``reset_model_with_tokenizer``, plus inverse roles:

    * ``:ARGn`` -> ``relation argument n``; ``:opn`` -> ``relation operator n``; ``:sntn`` ->
      ``relation sentence n`` (``n`` without leading zeros);
    * any other relation: ``relation`` and its name split on ``-`` (``:compared-to`` ->
      ``relation compared to``, ``:mod`` -> ``relation mod``);
    * an inverse role ends in ``of``: ``:ARG0-of`` -> ``relation argument 0 of``, ``:location-of``
      -> ``relation location of`` (the authors split ``-of`` off during linearisation and add ``-of``
      as a token of its own instead; their rule for ``:ARGn`` has no case for ``-of``);
    * anything else (frames, concepts, suffixes) is split on ``-``: ``cause-01`` -> ``cause 01``,
      ``have-rel-role-91`` -> ``have rel role 91``, ``-of`` -> ``of``.
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


# ------------------------------------------------------------------------------ vocabulary
def _resize(model, rows: int) -> None:
    kwargs = {}
    if "mean_resizing" in inspect.signature(model.resize_token_embeddings).parameters:
        kwargs["mean_resizing"] = False  # every new row is overwritten below
    model.resize_token_embeddings(rows, **kwargs)


def extend_vocabulary(model, symbols: Iterable[str], *, tokenizer=None) -> list[str]:
    """Add ``symbols`` to the tokenizer as whole tokens and initialise their embedding rows.

    Each symbol becomes one added token (``single_word=True``: it is matched only between non-word
    characters, so ``go-02`` does not match inside ``undergo-02`` nor ``:ARG1`` inside ``:ARG10``;
    ``normalized=False``: matched on the raw text, so a lower-casing tokenizer keeps ``:ARG0``).
    The input embeddings are resized (when the matrix has too few rows) and the row of each new
    token is set to the mean of the embeddings of the subword ids of :func:`readable_form` under
    the tokenizer as it was before the extension (unknown subwords contribute the ``[UNK]`` row, as in
    the authors' code; a readable form without any subword takes the mean of all old rows).
    Symbols already in the vocabulary and repeats are skipped. Extend before an optimiser (or an
    ``UnisentModule``) is built from the model: resizing replaces the embedding parameter.

    Args:
        model: an unisent ``Encoder`` (its ``backbone`` and ``tokenizer`` are extended; leave
            ``tokenizer`` unset) or a Hugging Face ``PreTrainedModel`` (then pass ``tokenizer``).
        symbols: token strings such as ``want-01``, ``:ARG0``.
        tokenizer: the Hugging Face tokenizer of a plain model.

    Returns:
        The added tokens, in the order of ``symbols``.
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
    # subword ids of the readable forms under the original tokenizer, before any token is added
    sources = {s: tokenizer(readable_form(s), add_special_tokens=False)["input_ids"] for s in new}
    old_len = len(tokenizer)
    tokenizer.add_tokens([AddedToken(s, single_word=True, normalized=False) for s in new])
    ids = dict(zip(new, tokenizer.convert_tokens_to_ids(new)))
    added = [s for s in new if ids[s] is not None and ids[s] >= old_len]

    old_rows = model.get_input_embeddings().weight.shape[0]
    if len(tokenizer) > old_rows:
        _resize(model, len(tokenizer))
    weight = model.get_input_embeddings().weight
    with torch.no_grad():
        fallback = weight[: min(old_len, old_rows)].mean(0)
        for symbol in added:
            subwords = [i for i in sources[symbol] if i < old_rows]
            weight[ids[symbol]] = weight[subwords].mean(0) if subwords else fallback
    return added
