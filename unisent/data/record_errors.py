"""The errors every reader of [`unisent.data`][unisent.data] raises; how ``on_error: skip`` reports what it dropped."""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from pathlib import Path

__all__ = ["MAX_LISTED", "DataConfigError", "RecordError", "on_error_hint", "report_malformed", "skip_notice"]

#: how many malformed records an error or a skip notice lists (the count says how many more there are)
MAX_LISTED = 20


class RecordError(ValueError):
    """A record of a data file (or the file's layout) is malformed: ``<file>:line 12: <what is wrong>``
    (``unit="row"``: ``row 12``, for parquet files and datasets; ``line=0``: ``<file>: ...``, a problem of
    the whole file such as a missing column). The arguments are kept as attributes, ``message`` as ``reason``."""

    def __init__(
        self, path: str | os.PathLike, line: int, message: str, *, field: str | None = None, unit: str = "line"
    ) -> None:
        self.path, self.line, self.reason, self.field, self.unit = Path(path), line, message, field, unit
        where = f"{self.path}:{unit} {line}" if line else str(self.path)
        super().__init__(f"{where}: {message}")

    def __reduce__(self):  # picklable across process pools despite the keyword arguments
        return (type(self), (self.path, self.line, self.reason), {"field": self.field, "unit": self.unit})


def no_column(
    path: str | os.PathLike, missing: Sequence[str], columns: Iterable[str], renamed=None, where=""
) -> RecordError:
    """The error of a file (``path``) without the required columns ``missing``; ``renamed``: its columns after
    the renaming, if there is one."""
    found = ", ".join(columns) + ("" if renamed is None else f" renamed to {', '.join(renamed)}")
    return RecordError(
        path, 0, f"no column {', '.join(map(repr, missing))}{where} (columns: {found})", field=missing[0]
    )


class DataConfigError(ValueError):
    """The ``data`` section does not match the model: a name in ``data.train``, ``data.batch_size`` or
    ``data.length_grouped`` that is no objective's, or an objective without training data. The CLI
    reports it in one line."""


# ------------------------------------------------------------------------------------------ on_error
def on_error_hint(key: str | None = None) -> str:
    """How to get past malformed records, with the source's full key in the recipe when it is known
    (``data.train.simcse``: ``--data.train.simcse.on_error=skip``)."""
    if not key:
        return "Fix them, rename columns with `columns:`, or set `on_error: skip` to drop and count them."
    return (
        f"Fix them, rename columns with {key}.columns, or set {key}.on_error: skip "
        f"(--{key}.on_error=skip) to drop and count them."
    )


def skip_notice(label: str, skipped: int, kept: int, problems: Sequence[str], key: str | None = None) -> None:
    """What ``on_error: skip`` dropped, as one plain line on stderr: ``unisent: skipped 2 malformed record(s)
    of d.jsonl, kept 510 (data.train.simcse.on_error=skip): d.jsonl:line 3: field 'text' is missing; ...``
    (the first three problems, each on the same line)."""
    import sys

    shown = [" ".join(str(problem).split()) for problem in problems[:3]]
    more = f"; and {skipped - len(shown)} more" if skipped > len(shown) else ""
    setting = f"{key}.on_error=skip" if key else "on_error=skip"
    print(
        f"unisent: skipped {skipped} malformed record(s) of {label}, kept {kept} ({setting}): {'; '.join(shown)}{more}",
        file=sys.stderr,
        flush=True,
    )


def report_malformed(
    label: str, listed: Sequence[str], total: int, required: Sequence[str], on_error: str, kept: int, key: str | None
) -> None:
    """Raise (``on_error: raise``) a [`RecordError`][unisent.data.RecordError] listing the malformed records ``listed``
    (of ``total``) or say in one line (``skip``) how many were dropped; ``key``: the source's key in the recipe
    (``data.train.simcse``)."""
    if on_error == "raise":
        more = f"\n... and {total - len(listed)} more" if total > len(listed) else ""
        message = f"{total} malformed record(s) (fields needed: {', '.join(required)}):\n" + "\n".join(listed)
        raise RecordError(label, 0, f"{message}{more}\n{on_error_hint(key)}")
    skip_notice(label, total, kept, listed, key)
