"""The one resolver of names read from files: a class name in a model's files, a run's ``config.yaml``
(outside ``fit``/``validate``/``test``/``predict``) or a checkpoint's record becomes a class only through
``resolve``, and only when a closed registry holds it.

A registry is a table of classes already defined in this process (``subclasses``: unisent's, the plugins' and
``--import`` modules', the user program's) or a fixed table of a library's classes (``fixed_names``). Any other name is
refused in one line **before anything is imported**. Why not a library: ``instantiate_class`` and Sentence Transformers'
``import_from_string`` import whatever module the string names, which is the bug this module closes."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any, TypeVar

__all__ = ["RegistryError", "fixed_names", "qualified_name", "register_class", "resolve", "subclasses"]

T = TypeVar("T")

#: a dotted Python name (``package.module.Name``): what a registry key looks like
_DOTTED = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*")
#: how many registered names an error lists before "..."
_SHOWN = 12


class RegistryError(ValueError):
    """A name read from a file is not in the registry of its kind (one line: the file, the field, the name)."""


def qualified_name(cls: type) -> str:
    """``module.QualifiedName`` of a class: the key it is registered under."""
    return f"{cls.__module__}.{cls.__qualname__}"


def register_class(
    table: dict[str, Any], name: str, cls: Any, base: type, what: str, *, also: Mapping[str, Any] = {}
) -> Any:
    """``table[name] = cls`` for the register decorators (poolers, model types, export formats): a
    ``TypeError`` when ``cls`` is no subclass of ``base``, a ``ValueError`` when another class holds ``name``
    in ``table`` or ``also`` (the same class again, by its qualified name, is accepted). Returns ``cls``."""
    if not (isinstance(cls, type) and issubclass(cls, base)):
        raise TypeError(f"{cls!r} is not {'an' if base.__name__[0] in 'AEIOU' else 'a'} {base.__name__} subclass")
    previous = table.get(name) or also.get(name)
    if previous is not None and qualified_name(previous) != qualified_name(cls):
        raise ValueError(f"{what} {name!r} is already registered for {qualified_name(previous)}")
    table[name] = cls
    return cls


def _with_package_aliases(table: dict[str, Any], name: str, value: Any) -> None:
    """``a.b.c.Name`` also as ``a.b.Name`` and ``a.Name`` (a package that re-exports it), first come first kept."""
    table.setdefault(name, value)
    module, _, short = name.rpartition(".")
    parts = module.split(".")
    for i in range(len(parts) - 1, 0, -1):
        table.setdefault(".".join(parts[:i]) + "." + short, value)


def subclasses(base: type | tuple[type, ...], *, include_base: bool = False) -> dict[str, type]:
    """Every subclass of ``base`` defined in this process, by qualified name and by each package above its
    module (``unisent.objectives.SimCSE`` too); exact qualified names win over package aliases."""
    bases = base if isinstance(base, tuple) else (base,)
    seen: dict[type, None] = {}  # in the order found
    stack = list(bases)
    while stack:
        cls = stack.pop()
        if cls not in seen:
            seen[cls] = None
            stack.extend(cls.__subclasses__())
    found = [cls for cls in seen if include_base or cls not in bases]
    table: dict[str, type] = {qualified_name(cls): cls for cls in found}  # a function's own class too
    for cls in found:
        if "<locals>" not in cls.__qualname__:
            _with_package_aliases(table, qualified_name(cls), cls)
    return table


def fixed_names(prefix: str, classes: Iterable[type]) -> Mapping[str, type]:
    """A fixed table of a library's classes: a dotted name under ``prefix`` matches by its last part (the
    library moves classes between releases); the module part is checked, never imported."""
    return _PrefixTable(prefix, {cls.__name__: cls for cls in classes})


class _PrefixTable(dict[str, type]):
    """``prefix + short name`` -> class, and any other dotted name under ``prefix`` by its last part."""

    def __init__(self, prefix: str, by_short: dict[str, type]) -> None:
        super().__init__({f"{prefix}{short}": cls for short, cls in by_short.items()})
        self.prefix, self.by_short = prefix, by_short
        self.shown_names = [f"{prefix}*.{short}" for short in by_short]

    def __missing__(self, name: str) -> type:
        if not (name.startswith(self.prefix) and _DOTTED.fullmatch(name)):
            raise KeyError(name)
        return self.by_short[name.rpartition(".")[2]]


def resolve(name: Any, table: Mapping[str, T], *, source: str, field: str, what: str) -> T:
    """The entry of ``table`` (the closed registry of this kind, built before the file was read) that
    ``name`` names, as read from ``source`` at ``field`` (``modules[2].type``); ``what``: the kind, for
    the message. A ``RegistryError`` when it is not a string in ``table``: nothing is imported."""
    if isinstance(name, str):
        try:
            return table[name]
        except KeyError:
            pass
    shortest: dict[int, str] = dict(enumerate(getattr(table, "shown_names", ())))
    for key in () if shortest else table:  # a registered short name, else the class's own qualified name
        value = table[key]
        shown = str(key) if "." not in str(key) else qualified_name(value) if isinstance(value, type) else str(key)
        current = shortest.get(id(value))
        if current is None or "." not in shown or len(shown) < len(current) and "." in current:
            shortest[id(value)] = shown
    known = sorted(shortest.values())
    shown = ", ".join(known[:_SHOWN]) + (", ..." if len(known) > _SHOWN else "")
    raise RegistryError(
        f"{source}: {field} {name!r} is not a registered {what} ({shown or 'none registered'}); "
        "nothing named by the file was imported or run (a plugin's class is registered when its module is "
        "imported: --import MODULE, or an entry point of unisent.plugins)"
    )
