"""The "did you mean" of every one-line error about a name (``difflib.get_close_matches``)."""

from __future__ import annotations

from collections.abc import Iterable

__all__ = ["closest_hint", "unknown_name", "unknown_objectives"]


def closest_hint(name: object, choices: Iterable[str], n: int = 1) -> str:
    """`` (did you mean 'x'?)`` with the closest of ``choices`` (up to ``n``, joined by "or"), or nothing."""
    import difflib

    close = difflib.get_close_matches(str(name), [str(c) for c in choices], n=n)
    return f" (did you mean {' or '.join(map(repr, close))}?)" if close else ""


def unknown_name(key: str, what: str, name: object, choices: Iterable[str]) -> str:
    """One line: ``KEY: unknown WHAT 'NAME' (did you mean 'X'?); valid: A, B, C``."""
    choices = list(choices)
    return f"{key}: unknown {what} {str(name)!r}{closest_hint(name, choices)}; valid: {', '.join(choices)}"


def unknown_objectives(key: str, names: Iterable[object], objectives: Iterable[str]) -> str:
    """One line for a setting keyed by objective name that names objectives the model lacks: ``KEY names
    'simcs' (did you mean 'simcse'?), but the model's objectives are: simcse, ease``."""
    objectives = list(objectives)
    named = ", ".join(f"{str(name)!r}{closest_hint(name, objectives)}" for name in names)
    return f"{key} names {named}, but the model's objectives are: {', '.join(objectives)}"
