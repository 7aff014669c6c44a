"""This project's own studies: the scripts and tools that produce its results pages (docs/results/), kept out of
the ``unisent`` package, which holds only what a user of the library or of its commands runs. Each module
imports unisent as any user would, by the names its modules export (``__all__``; tests/test_studies_imports.py
checks it), and runs from the repository's root as ``python -m studies.NAME``:

- :mod:`studies.ablation_pages`: a study's block of a results page from its kept ``ablation.json`` (or parts
  of one study joined by seed), with :mod:`studies.tradeoff` (general quality against the own columns);
- :mod:`studies.unified_panel`: one row of the unified panel for any model, and the table of rows;
- :mod:`studies.merge_parts`: the merge-of-parts route (a leave-one-out run merged with the left-out single run);
- :mod:`studies.direction_dev` and :mod:`studies.direction_routes`: the direction dev sets and routes;
- :mod:`studies.gausscse_table`, :mod:`studies.matryoshka_table`: the GaussCSE and Matryoshka pages' tables.

benchmarks/ measures speed, memory and robustness; studies/ measures quality for the pages.
"""
