"""Files the library reads at run time (shipped in the wheel; sources and licences in ``LICENSE.md``).

- ``EVALUATION_DATA_DIR``: the default ``--data-dir`` of ``unisent evaluate`` and of the
  evaluation in training: the STS Benchmark dev and test sets (``sts/stsbenchmark``) and 1,000 SNLI
  test entailment pairs (``snli_test_entailment.tsv``, the ``snli-direction-sample`` task).
- ``AMR_PREDICATES``, ``AMR_ADDITIONS``: the AMR authors' vocabulary lists, read by
  ``unisent.amr.authors_style.authors_vocabulary``.

Training, benchmark and test samples are not here: they are in the repository's ``samples/`` folder.
"""

from pathlib import Path

__all__ = ["AMR_ADDITIONS", "AMR_PREDICATES", "EVALUATION_DATA_DIR", "RESOURCES"]

RESOURCES = Path(__file__).resolve().parent
EVALUATION_DATA_DIR = RESOURCES
AMR_PREDICATES = RESOURCES / "amr_predicates.tsv"
AMR_ADDITIONS = RESOURCES / "amr_additions.txt"
