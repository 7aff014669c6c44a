"""The EASE Wikipedia tables (Wikidata map, types, redirects, counts) and the hard-negative sampler."""

from __future__ import annotations

import random
import re
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

from ...data.records import iter_records
from .wikitext import normalize_title

__all__ = [
    "read_title_map",
    "read_types",
    "read_redirects",
    "read_counts",
    "resolver",
    "pick_candidate",
    "HardNegativeSampler",
]


def _tsv_rows(path: str | Path, what: str, header: set[tuple[str, ...]]) -> Iterator[tuple[int, list[str]]]:
    """``(line number, [field1, field2])`` of a two-column tsv, skipping blanks, ``#`` comments and a ``header``."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{what} not found: {path}")
    records = iter_records(path, "tsv", header=False, quoting=False, blank_lines="skip")
    for record in records:
        fields = [f.rstrip("\r") for f in record.data]
        line = "\t".join(fields)
        if not line.strip() or line.startswith("#"):
            continue
        if record.line == 1 and tuple(f.strip().lower() for f in fields) in header:
            continue
        if len(fields) != 2 or not fields[0].strip() or not fields[1].strip():
            raise ValueError(
                f"{what} {path}, line {record.line}: expected two tab-separated non-empty fields, got {line[:200]!r}"
            )
        yield record.line, [fields[0].strip(), fields[1].strip()]


def read_title_map(path: str | Path) -> dict[str, str]:
    """``title<TAB>QID`` lines (optional header ``title<TAB>qid``) -> ``{normalised title: QID}``."""
    mapping: dict[str, str] = {}
    header = {("title", "qid"), ("title", "id"), ("title", "wikidata")}
    for lineno, (title, qid) in _tsv_rows(path, "wikidata map", header):
        if not re.fullmatch(r"Q[1-9][0-9]*", qid):
            raise ValueError(f"wikidata map {path}, line {lineno}: field 2 (QID) is {qid!r}, expected e.g. 'Q42'")
        mapping.setdefault(normalize_title(title), qid)
    return mapping


def read_types(path: str | Path, normalize: bool = False) -> dict[str, list[str]]:
    """``entity<TAB>type`` lines -> ``{entity: [types in file order]}``; ``normalize``: entities are titles."""
    types: dict[str, list[str]] = {}
    for _, (entity, typ) in _tsv_rows(path, "types file", {("entity", "type"), ("id", "type")}):
        entity = normalize_title(entity) if normalize else entity
        lst = types.setdefault(entity, [])
        if typ not in lst:
            lst.append(typ)
    return types


def pick_candidate(rng: random.Random, pool: list[str], entity: str, excluded: set[str]) -> str | None:
    """A uniform draw from ``pool`` minus ``entity`` and ``excluded`` (or ``None``): rejection first, then exact."""
    for _ in range(16):
        c = pool[rng.randrange(len(pool))]
        if c != entity and c not in excluded:
            return c
    valid = [c for c in pool if c != entity and c not in excluded]
    return valid[rng.randrange(len(valid))] if valid else None


class HardNegativeSampler:
    """A hard negative: an entity of the positive's type (a random one of several; types without a
    candidate passed over), neither the positive nor in ``excluded`` (same page or sentence); or ``None``."""

    def __init__(self, types: dict[str, list[str]], allowed: Iterable[str] | None, seed: int):
        allowed_set = None if allowed is None else set(allowed)
        self.types = {e: ts for e, ts in types.items() if allowed_set is None or e in allowed_set}
        self.members: dict[str, list[str]] = {}
        for entity, ts in self.types.items():
            for t in ts:
                self.members.setdefault(t, []).append(entity)
        self.rng = random.Random(seed)

    def __call__(self, entity: str, excluded: set[str]) -> str | None:
        ts = self.types.get(entity)
        if not ts:
            return None
        order = ts if len(ts) == 1 else self.rng.sample(ts, len(ts))
        for t in order:
            c = pick_candidate(self.rng, self.members[t], entity, excluded)
            if c is not None:
                return c
        return None


def read_redirects(path: str | Path) -> dict[str, str]:
    """``redirects.tsv`` (``source<TAB>target``, no header) -> ``{source: target}`` (self-redirects dropped)."""
    redirects = {}
    for record in iter_records(path, "tsv", header=False, quoting=False, blank_lines="skip"):
        src, dst = (record.data + ["", ""])[:2]
        if src and dst and src != dst:
            redirects[src] = dst
    return redirects


def read_counts(path: str | Path) -> dict[str, int]:
    """``counts.tsv`` (header ``title<TAB>count``) -> ``{title: count}`` in file order (most linked first)."""
    return {
        r.data["title"]: int(r.data["count"])
        for r in iter_records(path, "tsv", fields=("title", "count"), quoting=False)
    }


def resolver(redirects: dict[str, str]) -> Callable[[str], str]:
    """``title -> title`` following redirects (at most 8 hops; a cycle stops where it closes)."""

    def resolve(title: str) -> str:
        seen = {title}
        while title in redirects and len(seen) < 8:
            title = redirects[title]
            if title in seen:
                break
            seen.add(title)
        return title

    return resolve
