"""``unisent ablate RECIPE``: what each objective of a multi-objective recipe brings, over seeds.

From one recipe with several objectives it generates and runs

- ``unified``: the recipe as it is, once per balancer of ``--balancers`` (:mod:`unisent.balancers`);
- ``only-<o>``: each objective (or ``--group``) alone;
- ``without-<o>``: the recipe without it (leave-one-out);

each over every seed of ``--seeds``, with the same data, batch sizes, settings and number of optimiser
steps (``--steps``; the single-objective and leave-one-out runs use the first balancer listed). Every
run is scored on the panel columns the recipe declares (``model.evaluation.panel``, columns of
:mod:`unisent.evaluation.panel`), and the command writes ``ablation.md`` (a table: mean and 95%
interval over seeds per cell, Student's t), ``ablation.json`` and ``ablation.png`` in ``--out``.
Where the recipe names each objective's own column (``model.evaluation.panel_own``), the table also
compares each objective's own column inside the combination (best balancer) with the objective alone;
where it names targets (``model.evaluation.panel_targets: {column: minimum}``), a second table says for
every balancer which targets its mean over seeds meets, by how much each is met or missed, and whether
every own column is within the single-objective interval.

Runs go one after another (``--jobs N``: N at a time), or as a W&B sweep (``--sweep``: writes a sweep
file for ``unisent sweep`` whose trials are ``unisent ablate ... --run NAME --seed S``). The command
resumes where it stopped: a run with its result file is not run again, a finished fit is not trained
again, and an interrupted fit continues from its ``last.ckpt``. ``--from_json OUT/ablation.json`` writes the
table, plot and page again from the summary alone.

    unisent ablate recipes/unified/minilm-cpu-balanced.yaml --group cmlm=cmlm,bitext \\
        --balancers static uncertainty pcgrad --seeds 42 43 44 --data-dir ../shared/data --out runs/ablate

The parts, one idea each: :mod:`.plan` (which runs, and each run's recipe), :mod:`.run` (training each run
through :func:`unisent.commands.fitting.fit` and scoring it; ``--jobs`` processes; the sweep file),
:mod:`.summarise` (intervals, tables, verdicts, the plot), :mod:`.page` (``ablation.md``, the plot and the
page, also from ``ablation.json`` alone) and :mod:`.command` (the options).
"""

from __future__ import annotations

from .command import main

__all__ = ["main"]
