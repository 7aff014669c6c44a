"""Every command of ``unisent`` (the table is ``unisent.cli``)."""

from ._yaml import install as _bound_yaml

_bound_yaml()  # every command's YAML (recipes, --config, option values): no alias bombs (see ._yaml)
