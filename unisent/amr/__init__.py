"""AMR for sentence embeddings (Cai et al., 2022): linearisation, vocabulary extension, parsers and
translators as pluggable steps. The retrofitted model (``RetrofittedEncoder``) lives in
:mod:`unisent.models.retrofit` and is importable from here (loaded on first use, so that the model
layer is not imported with the AMR tools)."""

from .linearize import (
    AMRError,
    LinearizedAMR,
    PenmanBlock,
    iter_penman_blocks,
    linearize,
    linearize_blocks,
    linearize_file,
    linearize_string,
    linearize_tokens,
    parse_metadata,
)
from .parsing import (
    AmrlibParser,
    AMRParser,
    MarianTranslator,
    NotInLookupError,
    PreParsedAMR,
    PreTranslated,
    Translator,
)
from .vocab import (
    count_symbols,
    count_symbols_in_file,
    extend_vocabulary,
    is_frame,
    is_relation,
    read_counts,
    read_symbols,
    readable_form,
    select_symbols,
)

_RETROFIT = ("COMBINATIONS", "MissingGraphError", "RetrofittedEncoder", "combine", "is_penman")


def __getattr__(name: str):
    if name in _RETROFIT:
        from ..models import retrofit

        return getattr(retrofit, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "COMBINATIONS",
    "MissingGraphError",
    "RetrofittedEncoder",
    "combine",
    "is_penman",
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
    "is_frame",
    "is_relation",
    "iter_penman_blocks",
    "linearize",
    "linearize_blocks",
    "linearize_file",
    "linearize_string",
    "linearize_tokens",
    "parse_metadata",
    "read_counts",
    "read_symbols",
    "readable_form",
    "select_symbols",
]
