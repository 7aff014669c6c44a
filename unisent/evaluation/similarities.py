"""Named similarities for evaluation (``--similarity`` of ``unisent evaluate``, ``model.evaluation``)."""

from __future__ import annotations

from functools import partial

from .metrics.similarity import (
    COSINE,
    Similarity,
    averaged_kl_similarity,
    kl_similarity,
    symmetric_kl_similarity,
)

__all__ = ["SIMILARITIES", "get_similarity"]

#: ``kl``: GaussCSE's asymmetric ``sim(a || b)``; ``kl_symmetric``: the authors' symmetric STS score (eq. 3);
#: ``kl_avg_sim``: the mean of the two ``kl`` similarities. KL is summed over dimensions (the paper), or
#: taken per dimension and averaged for ``*_mean`` (the authors' code).
SIMILARITIES: dict[str, Similarity] = {
    "cosine": COSINE,
    "kl": Similarity("kl", kl_similarity, gaussian=True),
    "kl_mean": Similarity("kl_mean", partial(kl_similarity, reduction="mean"), gaussian=True),
    "kl_symmetric": Similarity("kl_symmetric", symmetric_kl_similarity, gaussian=True),
    "kl_symmetric_mean": Similarity(
        "kl_symmetric_mean", partial(symmetric_kl_similarity, reduction="mean"), gaussian=True
    ),
    "kl_avg_sim": Similarity("kl_avg_sim", averaged_kl_similarity, gaussian=True),
}


def get_similarity(name: str) -> Similarity:
    try:
        return SIMILARITIES[name]
    except KeyError:
        raise ValueError(f"unknown similarity {name!r}; valid: {', '.join(SIMILARITIES)}") from None
