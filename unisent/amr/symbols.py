"""Symbol lists, as the AMR vocabulary extension and the authors' vocabulary read them."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

__all__ = ["read_counts", "read_symbols", "select_symbols"]


def read_counts(path: str | os.PathLike[str]) -> dict[str, int]:
    """Read a count list: one ``NAME COUNT`` per line (tab or spaces), e.g. MSE-AMR's ``predicates.txt``;
    a repeated name adds up, a line without an integer count is an error naming the file and line."""
    path = Path(path)
    counts: dict[str, int] = {}
    with path.open(encoding="utf-8") as fh:
        for lineno, line in enumerate(fh, 1):
            fields = line.split()
            if not fields:
                continue
            if len(fields) != 2 or not fields[1].lstrip("-").isdigit():
                raise ValueError(
                    f"{path}:{lineno}: expected 'NAME COUNT', got {line.rstrip()!r} "
                    "(a list without counts is read with read_symbols)"
                )
            counts[fields[0]] = counts.get(fields[0], 0) + int(fields[1])
    return counts


def read_symbols(path: str | os.PathLike[str]) -> list[str]:
    """Read a plain token list, one per line (e.g. MSE-AMR's ``additions.txt``); blank lines and
    repeats are dropped, the order is kept."""
    with Path(path).open(encoding="utf-8") as fh:
        return list(dict.fromkeys(line.strip() for line in fh if line.strip()))


def select_symbols(counts: Mapping[str, int], min_count: int = 5) -> list[str]:
    """Names with ``count >= min_count``, most frequent first (ties by name)."""
    return sorted((s for s, c in counts.items() if c >= min_count), key=lambda s: (-counts[s], s))
