"""Every command of ``unisent`` (the table is ``unisent.cli``).

Every command's YAML (``--config`` files, recipes, option values) is read with bounds on what it expands to.
YAML aliases let a few lines name billions of values (the "billion laughs"): PyYAML builds them cheaply
as shared references, but jsonargparse copies and walks every value, taking minutes and gigabytes."""

from __future__ import annotations

from typing import Any

import yaml
from jsonargparse import set_loader
from jsonargparse._loaders_dumpers import yaml_load

__all__ = ["MAX_VALUES", "bounded_load", "expanded_size"]

#: the most values (mappings, lists, scalars, keys) a YAML document may expand to; recipes have hundreds
MAX_VALUES = 100_000


def expanded_size(value: Any, limit: int = MAX_VALUES) -> int:
    """How many values a loaded YAML document expands to, an aliased value counted at each use (computed
    once); stops past ``limit``. ``ValueError`` for a recursive alias."""
    sizes: dict[int, int] = {}
    open_: set[int] = set()

    def size(node: Any) -> int:
        if not isinstance(node, (dict, list)):
            return 1
        key = id(node)
        if key in sizes:
            return sizes[key]
        if key in open_:
            raise ValueError("an alias refers to the value that holds it (a recursive document)")
        open_.add(key)
        total = 1
        for item in [v for pair in node.items() for v in pair] if isinstance(node, dict) else node:
            total += size(item)
            if total > limit:
                break
        open_.discard(key)
        sizes[key] = total
        return total

    return size(value)


def bounded_load(stream: Any) -> Any:
    """jsonargparse's YAML loader, refusing too big, recursive or too deep a document (``yaml.YAMLError``)."""
    try:
        value = yaml_load(stream)
        size = expanded_size(value)
    except RecursionError:
        raise yaml.YAMLError("the YAML nests too deeply (thousands of levels); a recipe is a few levels deep") from None
    except ValueError as err:
        raise yaml.YAMLError(f"the YAML is refused: {err}") from None
    if size > MAX_VALUES:
        raise yaml.YAMLError(
            f"the YAML expands to more than {MAX_VALUES:,} values (its aliases, *name, repeat values that "
            "repeat others: an alias bomb?); a recipe has hundreds"
        )
    return value


# every command's YAML (recipes, --config, option values): ``bounded_load`` is the loader of jsonargparse (every
# parser of this process): no alias bombs
set_loader("yaml", bounded_load, exceptions=(yaml.YAMLError,))
