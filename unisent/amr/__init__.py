"""AMR for sentence embeddings (Cai et al., 2022): linearisation, vocabulary extension, parsers and
translators as pluggable steps. The retrofitted model (``RetrofittedEncoder``) is a trained model:
``unisent.models.retrofitted_encoder``; its command line is ``unisent retrofit``."""

from .linearize import LinearizedAMR, linearize, linearize_blocks, linearize_file, linearize_string, linearize_tokens
from .parsing import (
    AmrlibParser,
    AMRParser,
    MarianTranslator,
    NotInLookupError,
    PreParsedAMR,
    PreTranslated,
    Translator,
)
from .penman_blocks import AMRError, PenmanBlock, iter_penman_blocks
from .symbols import read_counts, read_symbols, select_symbols
from .vocab import count_symbols, count_symbols_in_file, extend_vocabulary, readable_form

__all__ = [
    "AMRError",
    "AMRParser",
    "AmrlibParser",
    "LinearizedAMR",
    "MarianTranslator",
    "NotInLookupError",
    "PenmanBlock",
    "PreParsedAMR",
    "PreTranslated",
    "Translator",
    "count_symbols",
    "count_symbols_in_file",
    "extend_vocabulary",
    "iter_penman_blocks",
    "linearize",
    "linearize_blocks",
    "linearize_file",
    "linearize_string",
    "linearize_tokens",
    "read_counts",
    "read_symbols",
    "readable_form",
    "select_symbols",
]
