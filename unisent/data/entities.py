"""Entity tables for EASE: entity id -> Wikipedia title (``entities.tsv``) and Wikipedia2Vec vectors.

In the data layer so that the EASE objective imports them lazily and ``unisent.objectives`` does not
import ``unisent.data`` (which imports the objectives) when it is loaded."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np

from .records import iter_records

__all__ = ["read_entity_records", "read_entity_titles", "read_wikipedia2vec"]


def read_entity_records(
    path: str | Path, vocabulary: Sequence[str] | set[str] | None = None
) -> tuple[list[str], list[str]]:
    """``(sentences, gold entity ids)`` of an EASE records file (``{"text", "entity", ...}`` per line, as
    ``unisent data ease-*`` writes it), for entity retrieval. Empty sentences, non-string ids and (with
    ``vocabulary``, e.g. a trained objective's ``entities``) unknown ids are errors naming the line."""
    known = set(vocabulary) if vocabulary is not None else None
    texts: list[str] = []
    entities: list[str] = []
    for record in iter_records(path, "jsonl", fields=("text", "entity")):
        text, entity = record.data["text"], record.data["entity"]
        if not isinstance(text, str) or not text.strip():
            raise record.error(f"field 'text' must be a non-empty string, got {text!r}", field="text")
        if not isinstance(entity, str) or not entity:
            raise record.error(f"field 'entity' must be a non-empty string, got {entity!r}", field="entity")
        if known is not None and entity not in known:
            raise record.error(
                f"field 'entity': {entity!r} is not in the entity table ({len(known)} ids)", field="entity"
            )
        texts.append(text)
        entities.append(entity)
    if not texts:
        raise ValueError(f"{path}: no records")
    return texts, entities


def read_entity_titles(path: str | Path) -> dict[str, str]:
    """``{entity id: Wikipedia title}`` from a tsv ``id<TAB>title[<TAB>...]`` (a header line
    starting with ``id`` is skipped), as ``unisent data ease-*`` writes it (``entities.tsv``)."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"entity title file {str(path)!r} does not exist")
    titles: dict[str, str] = {}
    for record in iter_records(path, "tsv", header=False, quoting=False, blank_lines="keep"):
        row = record.data or []
        if record.line == 1 and row and row[0] == "id":
            continue
        if len(row) < 2 or not row[0] or not row[1]:
            raise ValueError(f"{path}:{record.line}: expected `id<TAB>title`, got {row!r}")
        titles[row[0]] = row[1]
    return titles


def _vector(values: Sequence[str], where: str, dim: int | None) -> np.ndarray:
    try:
        vector = np.asarray(values, dtype=np.float32)
    except ValueError as err:
        raise ValueError(f"{where}: the vector is not numeric ({err})") from None
    if dim is not None and vector.shape[0] != dim:
        raise ValueError(f"{where}: vector of size {vector.shape[0]}, expected {dim}")
    return vector


def read_wikipedia2vec(path: str | Path, titles: set[str] | None = None) -> tuple[dict[str, np.ndarray], int]:
    """Entity vectors of a Wikipedia2Vec model: ``({title: vector}, dim)``; word vectors are skipped. Streams
    the text formats of ``wikipedia2vec save_text`` (``default``: ``ENTITY/Title<TAB>v1 v2 ...``;
    ``word2vec``: a ``count dim`` header, then ``ENTITY/Title_With_Underscores v1 ...``; ``glove``: the
    same without header), which the ``wikipedia2vec`` package cannot read; a binary ``.pkl`` model is
    read through that package. With ``titles``, only those entities are kept (a full model has millions)."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"Wikipedia2Vec file {str(path)!r} does not exist")
    if path.suffix == ".pkl":
        try:
            from wikipedia2vec import Wikipedia2Vec  # pyright: ignore[reportMissingImports]  # the optional ease extra
        except ImportError:
            raise ImportError(
                f"{path} is a binary Wikipedia2Vec model: `pip install wikipedia2vec` to read it, or convert it "
                "with `wikipedia2vec save_text MODEL OUT.txt`"
            ) from None
        model = Wikipedia2Vec.load(str(path))
        wanted = titles if titles is not None else [e.title for e in model.dictionary.entities()]
        vectors = {}
        for title in wanted:
            entity = model.get_entity(title)
            if entity is not None:
                vectors[title] = np.asarray(model.get_vector(entity), dtype=np.float32)
        return vectors, int(model.syn0.shape[1])
    vectors: dict[str, np.ndarray] = {}
    dim: int | None = None
    with path.open(encoding="utf-8") as fh:
        for line_no, line in enumerate(fh, start=1):
            line = line.rstrip("\n")
            if line_no == 1:
                head = line.split(" ")
                if len(head) == 2 and all(h.isdigit() for h in head):  # word2vec header
                    dim = int(head[1])
                    continue
            if not line.startswith("ENTITY/"):
                continue
            if "\t" in line:  # default format: titles keep their spaces
                name, _, rest = line.partition("\t")
                values = rest.split(" ")
                title = name[len("ENTITY/") :]
            else:  # word2vec / glove: spaces in titles became underscores
                parts = line.split(" ")
                if dim is None:
                    dim = _infer_dim(parts)
                name, values = " ".join(parts[: len(parts) - dim]), parts[len(parts) - dim :]
                title = name[len("ENTITY/") :].replace("_", " ")
            if titles is not None and title not in titles:
                if dim is None:
                    dim = len(values)
                continue
            vector = _vector(values, f"{path}:{line_no}", dim)
            dim = vector.shape[0]
            vectors[title] = vector
    if dim is None:
        raise ValueError(f"{path}: no ENTITY/ vectors found; is it a Wikipedia2Vec text file?")
    return vectors, dim


def _infer_dim(parts: list[str]) -> int:
    n = 0
    for token in reversed(parts):
        try:
            float(token)
        except ValueError:
            break
        n += 1
    return n
