"""Every command of ``unisent`` (the table is :mod:`unisent.cli`): ``train`` (Lightning's fit/validate/test/
predict), and evaluate, export, encode, data, sweep as typed functions on jsonargparse (:mod:`.function_commands`)."""

from ._yaml import install as _bound_yaml

_bound_yaml()  # every command's YAML (recipes, --config, option values): no alias bombs (see ._yaml)
