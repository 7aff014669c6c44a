"""Every command of ``unisent`` (the table is :mod:`unisent.cli`): ``train`` (Lightning's fit/validate/test/
predict), and evaluate, export, encode, data, sweep as typed functions on jsonargparse (:mod:`._cli`)."""
