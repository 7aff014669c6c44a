"""What a retrofitted model is built from: its text encoder and AMR encoder (given as models or as what
loads them), and the parser that gives raw sentences their AMR graphs.
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from ..inference.model_types import load_saved
from ..io.model_files import ModelFileError, check_model_directory, inside
from ..io.registry import resolve

__all__ = [
    "MissingGraphError",
    "dimension_of",
    "is_penman",
    "is_sentence_transformer",
    "load_encoder",
    "resolve_parser",
    "resolve_paths",
]

_PENMAN = re.compile(r"\(\s*[^\s()/]+\s+/")


class MissingGraphError(ValueError):
    """A sentence has no AMR graph: no parser is configured, or the parser has none for it."""


def is_penman(graph: str) -> bool:
    """PENMAN text (``(w / want-01 ...``) rather than a linearised graph (``( want-01 ...``)."""
    return _PENMAN.search(graph) is not None


def is_sentence_transformer(model: Any) -> bool:
    module = sys.modules.get("sentence_transformers")
    return module is not None and isinstance(model, module.SentenceTransformer)


def _sentence_transformer(directory: str | os.PathLike):
    try:
        from sentence_transformers import SentenceTransformer
    except ImportError as err:
        raise ImportError(
            f"{directory} is a Sentence Transformers model: pip install sentence-transformers to load it"
        ) from err
    check_model_directory(directory)  # regular files only, no link out of it, before Sentence Transformers reads it
    return SentenceTransformer(str(directory), device="cpu", trust_remote_code=False)


def load_encoder(spec: Any, what: str = "a text encoder") -> Any:
    """A text encoder (or with ``what="an AMR encoder"``, the AMR encoder) from what the user gives.

    * a model object with ``encode`` (an ``unisent.load`` result, a ``SentenceTransformer``): as is;
    * a Sentence Transformers directory (``modules.json`` and no ``unisent_encoder.json``): loaded with
      ``SentenceTransformer`` (``unisent.load`` would read its backbone without its modules); a text encoder only;
    * anything else (a preset, a saved unisent directory, a hub id): read as ``unisent.load`` reads it;
      a ``.ckpt`` is refused with a message: pass ``unisent.load(ckpt)``, the loaded model (rebuilding a
      run's heads needs the training module, above this layer; ``unisent retrofit`` does that for you).
    """
    if not isinstance(spec, (str, os.PathLike)):
        if not callable(getattr(spec, "encode", None)):
            raise TypeError(f"{what} needs an encode(sentences, batch_size) method; got {type(spec).__name__}")
        return spec
    path = Path(spec).expanduser()
    text = what == "a text encoder"
    if text and path.is_dir() and (path / "modules.json").is_file() and not (path / "unisent_encoder.json").is_file():
        return _sentence_transformer(path)
    return load_saved(str(spec))


def dimension_of(model: Any) -> int | None:
    for name in ("get_embedding_dimension", "get_sentence_embedding_dimension"):  # Sentence Transformers
        get: Callable[[], int | None] | None = getattr(model, name, None)
        if callable(get):
            return get()
    size = getattr(model, "hidden_size", None)
    return size if isinstance(size, int) else None


def resolve_parser(parser: Any, source: str = "parser") -> tuple[Any, dict | None]:
    """``(parser object, spec to save or None)``; a ``{class_path, init_args}`` spec's class comes from the
    registry of parsers (``unisent.amr.parsing.parser_classes``), never from an import.

    Raises:
        RegistryError: the spec names a class outside the registry (the message names ``source``).
    """
    from ..amr.parsing import PreParsedAMR, parser_classes

    if parser is None:
        return None, None
    if isinstance(parser, Mapping) and "class_path" in parser:
        init_args = parser.get("init_args") or {}
        if not isinstance(init_args, Mapping):
            raise ValueError(f"{source}: parser.init_args must be a mapping, got {init_args!r:.80}")
        spec = {"class_path": parser["class_path"], "init_args": dict(init_args)}
        cls = resolve(spec["class_path"], parser_classes(), source=source, field="parser.class_path", what="AMR parser")
        return cls(**spec["init_args"]), spec
    if isinstance(parser, (str, os.PathLike, Mapping)) or (
        isinstance(parser, Sequence) and all(isinstance(p, (str, os.PathLike)) for p in parser)
    ):
        return PreParsedAMR(parser if isinstance(parser, Mapping) else parser), None
    if callable(getattr(parser, "parse", None)):
        return parser, None
    raise TypeError(
        f"parser must be an AMR parser (an object with parse(sentences, lang)), pre-parsed file(s), a dict "
        f"{{sentence: PENMAN}} or a {{class_path, init_args}} spec; got {type(parser).__name__}"
    )


def resolve_paths(init_args: Any, directory: Path, source: str | os.PathLike) -> dict[str, Any]:
    """The file names in a parser spec read from ``source`` (``retrofit.json``) -> paths in ``directory``.

    A string that names something in ``directory`` becomes its path there (``inside``:
    no link out of it); an absolute path, a ``~`` or ``..`` path, or a relative name that exists outside
    ``directory`` only (in the current directory) is refused: a model's files name files inside it. Any
    other string (a language, a model name) is kept as given.

    Raises:
        ModelFileError: naming ``source``, the argument and the path.
    """
    if not isinstance(init_args, Mapping):
        raise ModelFileError(f"{source}: parser.init_args must be a JSON object, got {init_args!r:.80}")

    def fix(value: Any, field: str) -> Any:
        if isinstance(value, list):
            return [fix(v, f"{field}[{i}]") for i, v in enumerate(value)]
        if not isinstance(value, str) or not value:
            return value
        climbs = ".." in Path(value.replace("\\", "/")).parts
        if os.path.lexists(directory / value) or os.path.isabs(value) or value.startswith("~") or climbs:
            return str(inside(directory, value, source=source, field=field))
        if os.path.lexists(value):
            raise ModelFileError(
                f"{source}: {field} {value!r:.200} names a file outside the model's directory {str(directory)!r} "
                "(in the current directory); a model's files name files inside it"
            )
        return value

    return {key: fix(value, f"parser.init_args.{key}") for key, value in init_args.items()}
