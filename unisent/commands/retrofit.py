"""``unisent retrofit`` (Cai et al., 2022, Sec. 4.2): save a
[`RetrofittedEncoder`][unisent.models.RetrofittedEncoder]."""

from __future__ import annotations

from functools import partial
from typing import Any, Literal

from .function_commands import run_command

__all__ = ["main", "retrofit"]


def retrofit(
    *,
    text_encoder: str,
    amr_encoder: str,
    out: str,
    combination: Literal["concat", "sum", "norm_concat", "norm_sum"] = "norm_concat",
    parser_lookup: list[str] | None = None,
    amrlib: bool = False,
    amrlib_model: str | None = None,
    language: str = "en",
    parentheses: bool = True,
) -> None:
    """Combine a text encoder with an AMR encoder (Cai et al. 2022, Sec. 4.2) and save the model.

    unisent.load(OUT) and `unisent evaluate --model OUT` read it.

    Args:
        text_encoder: a preset, a saved unisent directory, a .ckpt, or a Sentence Transformers directory
        amr_encoder: the AMR encoder (e.g. <run>/encoder of an AMRSimCSE fit)
        out: directory to write
        combination: how the two embeddings are combined
        parser_lookup: pre-parsed graphs (PENMAN with # ::snt, or jsonl with text + penman); copied into OUT
        amrlib: parse with amrlib at encoding time (pip install 'unisent[amr]')
        amrlib_model: amrlib parse model directory
        language: language passed to the parser
        parentheses: the AMR encoder was trained with ( ) (--no-parentheses: without)
    """
    if parser_lookup and amrlib:
        raise ValueError("give either --parser-lookup or --amrlib")
    parser: Any = None
    if parser_lookup:
        parser = list(parser_lookup)
    elif amrlib:
        parser = {"class_path": "unisent.amr.parsing.AmrlibParser", "init_args": {"model_dir": amrlib_model}}
    from .. import load
    from ..models import RetrofittedEncoder

    # a .ckpt needs the training module to rebuild its heads: unisent.load (this layer) reads it
    text: Any = load(text_encoder) if text_encoder.endswith(".ckpt") else text_encoder
    amr: Any = load(amr_encoder) if amr_encoder.endswith(".ckpt") else amr_encoder
    try:
        model = RetrofittedEncoder(text, amr, combination, parser, language=language, parentheses=parentheses)
        saved = model.save_pretrained(out)
    except TypeError as err:  # a parser spec that does not fit: reported in one line as the others
        raise ValueError(str(err)) from err
    print(
        f"retrofitted model ({combination}, dimension {model.dimension}) saved to {saved}; "
        f"load it with unisent.load({str(saved)!r})"
    )


#: ``unisent retrofit``: build a retrofitted model and save it (``retrofit``).
main = partial(run_command, retrofit, prog="unisent retrofit")
