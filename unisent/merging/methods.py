"""The arithmetic of weight merging, one tensor at a time: each run's tensor ``T_i`` with its weight ``w_i``,
the starting model's ``B`` and its task vector ``tau_i = T_i - B``.

- ``linear`` (model soups, Wortsman et al. 2022, arXiv:2203.05482): ``sum_i w_i T_i / sum_i w_i``.
- ``task_arithmetic`` (Ilharco et al. 2023, arXiv:2212.04089): ``B + scale * sum_i w_i tau_i``.
- ``ties`` (Yadav et al. 2023, arXiv:2306.01708): each ``tau_i`` trimmed to its ``density`` share of largest
  magnitudes, the sign of every entry elected by the weighted sum ``sum_i w_i trim(tau_i)``, and the entries
  that agree with it averaged (the "disjoint mean", weighted: ``sum w_i t_i / sum w_i`` over the agreeing
  ``i``); ``B + scale *`` that.
- ``dare_ties`` (Yu et al. 2024, arXiv:2311.03099, with TIES' sign election): each entry of ``tau_i`` kept
  with probability ``density`` and rescaled by ``1 / density`` (a Bernoulli mask from a seeded generator),
  then TIES' election and disjoint mean.

Written here rather than taken from mergekit: mergekit pins versions of torch and transformers that our
pins do not meet (Sentence Transformers dropped it for that reason), and the arithmetic is these few lines;
tests/test_merge.py checks each method against a hand computation on tiny tensors.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

__all__ = ["METHODS", "merge_tensors"]

#: method -> what it needs of the starting model (all but ``linear`` read task vectors)
METHODS: dict[str, str] = {
    "linear": "a weighted mean of the runs' weights (model soups)",
    "task_arithmetic": "the start plus the weighted sum of the runs' task vectors",
    "ties": "task vectors trimmed to their largest entries, signs elected, agreeing entries averaged",
    "dare_ties": "task vectors randomly dropped and rescaled (DARE), then TIES' sign election and mean",
}


def _trim(delta: torch.Tensor, density: float) -> torch.Tensor:
    """``delta`` with all but its ``int(density * numel)`` largest magnitudes set to 0."""
    if density >= 1.0:
        return delta
    keep = int(density * delta.numel())
    if keep <= 0:
        return torch.zeros_like(delta)
    flat = delta.flatten()
    kept = torch.zeros_like(flat)
    index = torch.topk(flat.abs(), keep, sorted=False).indices
    kept[index] = flat[index]
    return kept.view_as(delta)


def _drop(delta: torch.Tensor, density: float, generator: torch.Generator | None) -> torch.Tensor:
    """DARE: every entry kept with probability ``density`` and divided by it, the others 0."""
    if density >= 1.0:
        return delta
    mask = torch.rand(delta.shape, generator=generator, dtype=torch.float32) < density
    return torch.where(mask, delta / density, torch.zeros_like(delta))


def _disjoint_mean(deltas: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
    """TIES' elected sign and weighted mean over the runs that agree with it (``deltas``: runs x ...; ``weights``:
    runs x 1 x ...)."""
    weighted = deltas * weights
    elected = torch.sign(weighted.sum(0))
    agree = (torch.sign(deltas) == elected) & (deltas != 0)
    divisor = (weights * agree).sum(0)
    merged = (weighted * agree).sum(0)
    return torch.where(divisor != 0, merged / torch.where(divisor != 0, divisor, 1), torch.zeros_like(merged))


def merge_tensors(
    base: torch.Tensor | None,
    tensors: Sequence[torch.Tensor],
    weights: Sequence[float],
    method: str,
    *,
    density: float = 1.0,
    scale: float = 1.0,
    generator: torch.Generator | None = None,
) -> torch.Tensor:
    """One merged tensor (float32 arithmetic, the first tensor's dtype), by ``method`` (``METHODS``).

    Args:
        base: the starting model's tensor (every method but ``linear`` needs it).
        tensors: one tensor per run, all of ``base``'s shape.
        weights: one weight per run.
        density: the share of each task vector's entries kept (``ties``: the largest; ``dare_ties``: at random).
        scale: the factor of the merged task vector (``task_arithmetic``, ``ties``, ``dare_ties``).
        generator: DARE's random source (seeded by the caller, so that a merge is reproduced).
    """
    if method not in METHODS:
        raise ValueError(f"unknown merge method {method!r}; one of {', '.join(METHODS)}")
    if len(tensors) != len(weights) or not tensors:
        raise ValueError(f"{len(tensors)} tensors and {len(weights)} weights: give one weight per run")
    dtype = tensors[0].dtype
    stacked = torch.stack([t.to(torch.float32) for t in tensors])
    w = torch.tensor([float(x) for x in weights], dtype=torch.float32).view((-1,) + (1,) * (stacked.dim() - 1))
    if method == "linear":
        return ((stacked * w).sum(0) / w.sum()).to(dtype)
    if base is None:
        raise ValueError(f"merge method {method!r} needs the starting model's weights (task vectors)")
    start = base.to(torch.float32)
    deltas = stacked - start
    if method == "task_arithmetic":
        merged = (deltas * w).sum(0)
    elif method == "ties":
        merged = _disjoint_mean(torch.stack([_trim(d, density) for d in deltas]), w)
    else:  # dare_ties
        merged = _disjoint_mean(torch.stack([_drop(d, density, generator) for d in deltas]), w)
    return (start + scale * merged).to(dtype)
