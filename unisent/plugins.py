"""Plugins: modules imported before a command runs, so that what they register is there by name in every
command: the entry points of the group ``unisent.plugins`` (a callable one is called) and ``--import
MODULE`` (current directory on ``sys.path``). See docs/plugins.md. Only the standard library is used here."""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from importlib import import_module, metadata

__all__ = ["PluginError", "load_plugins", "reset", "split_imports"]

#: the entry-point group of installed plugins
ENTRY_POINT_GROUP = "unisent.plugins"
#: the command-line option that imports a module first
IMPORT_OPTION = "--import"
#: comma-separated modules to import first (set by ``--import`` for the processes a command starts)
IMPORT_ENV = "UNISENT_IMPORT"

_loaded_entry_points = False  # set by load_entry_points, cleared by reset


class PluginError(Exception):
    """A module of ``--import`` or an entry point of ``unisent.plugins`` could not be loaded (one line);
    ``status``: the exit status, 2 for a module named on the command line, 1 for an installed plugin."""

    def __init__(self, message: str, status: int = 2) -> None:
        super().__init__(message)
        self.status = status


def split_imports(argv: Sequence[str]) -> tuple[list[str], list[str]]:
    """``(modules, the other words)``: every ``--import MODULE`` / ``--import=MODULE`` taken out of ``argv``
    (not after a lone ``--``); a [`PluginError`][unisent.plugins.PluginError] for ``--import`` without a module name."""
    modules: list[str] = []
    rest: list[str] = []
    words = iter(argv)
    for word in words:
        if word == "--":
            rest += [word, *words]
            break
        if word == IMPORT_OPTION or word.startswith(f"{IMPORT_OPTION}="):
            value = next(words, "") if word == IMPORT_OPTION else word.split("=", 1)[1]
            if not value or value.startswith("-"):
                raise PluginError(f"{IMPORT_OPTION} needs a module name, e.g. {IMPORT_OPTION} my_plugins")
            modules.append(value)
        else:
            rest.append(word)
    return modules, rest


def load_entry_points() -> None:
    """Load every entry point of the group ``unisent.plugins`` (once per process). A failure
    is a [`PluginError`][unisent.plugins.PluginError] of status 1 naming the distribution."""
    global _loaded_entry_points
    if _loaded_entry_points:
        return
    _loaded_entry_points = True
    for entry in metadata.entry_points(group=ENTRY_POINT_GROUP):
        dist = getattr(entry, "dist", None)
        where = f"{dist.name} {dist.version}" if dist is not None else "an unknown distribution"
        try:
            loaded = entry.load()
            if callable(loaded):
                loaded()
        except Exception as err:
            raise PluginError(
                f"plugin {entry.name} = {entry.value!r} (entry point of {ENTRY_POINT_GROUP}, installed by {where}) "
                f"failed: {type(err).__name__}: {err} (fix it, or pip uninstall {dist.name if dist else 'it'})",
                status=1,
            ) from err


def reset() -> None:
    """Forget which entry points were loaded: the next command loads them again (for tests and long-lived
    processes that run several commands)."""
    global _loaded_entry_points
    _loaded_entry_points = False


def _import(name: str) -> None:
    try:
        import_module(name)
    except ModuleNotFoundError as err:
        if err.name and (name == err.name or name.startswith(f"{err.name}.")):
            raise PluginError(
                f"{IMPORT_OPTION} {name}: {err} (is its folder on PYTHONPATH, or the package installed?)"
            ) from err
        raise PluginError(f"{IMPORT_OPTION} {name}: importing it failed: {err} (a module it imports)") from err
    except Exception as err:
        raise PluginError(f"{IMPORT_OPTION} {name}: importing it failed: {type(err).__name__}: {err}") from err


def load_plugins(modules: Sequence[str] = ()) -> list[str]:
    """Load the installed plugins, then import ``modules`` and those of ``IMPORT_ENV`` (current
    directory on ``sys.path``); returns the modules imported, or raises [`PluginError`][unisent.plugins.PluginError].
    ``IMPORT_ENV`` and ``PYTHONPATH`` are then set so that child processes import them too."""
    load_entry_points()
    inherited = [m.strip() for m in os.environ.get(IMPORT_ENV, "").split(",") if m.strip()]
    names = list(dict.fromkeys([*inherited, *modules]))
    if not names:
        return []
    here = os.getcwd()
    if here not in sys.path and "" not in sys.path:
        sys.path.insert(0, here)
    for name in names:
        _import(name)
    os.environ[IMPORT_ENV] = ",".join(names)
    paths = os.environ.get("PYTHONPATH", "").split(os.pathsep)
    if here not in paths:
        os.environ["PYTHONPATH"] = os.pathsep.join([here, *[p for p in paths if p]])
    return names
