"""The trade-off of this project's studies (docs/results/unified.md): general quality, the mean of STS-B test and
SICK-R test, against the objectives' own columns (``panel_own``), one point per row of an ``unisent ablate``
summary, with 95% intervals over seeds and the frontier. Only the results pages draw it (the study pages'
blocks, :mod:`studies.ablation_pages`, and the merge-of-parts route, :mod:`studies.merge_parts`): its "general"
is this project's pair of columns, so ``unisent ablate`` itself tabulates the panel without it. Computed from
each row's ``per_seed`` scores alone (an older ``ablation.json`` without them has no trade-off)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from unisent.commands.ablate.summarise import cell_text, interval

__all__ = ["GENERAL_COLUMNS", "TRADEOFF_ALT", "tradeoff", "tradeoff_points", "tradeoff_table"]

#: the trade-off's general quality: the mean of these two panel columns
GENERAL_COLUMNS = ("stsb-test", "sick-r")
#: the plot's alt text on a page and in ``ablation.md``
TRADEOFF_ALT = "general quality against the objectives' own columns"


def _tradeoff_own(columns: list[str], own: dict[str, str]) -> list[str]:
    """The trade-off's own columns: the distinct values of ``own`` (first appearance first) among ``columns``."""
    return [c for c in dict.fromkeys(own.values()) if c in columns]


def _seed_point(scores: dict[str, Any], own_columns: list[str]) -> tuple[float, float] | None:
    """``(own, general)`` of one seed; an own column it could not compute (``None``) counts as 0; ``None``
    without both general columns."""
    general = [scores.get(c) for c in GENERAL_COLUMNS]
    if any(v is None for v in general):
        return None
    own = [scores.get(c) if scores.get(c) is not None else 0.0 for c in own_columns]
    return sum(own) / len(own), sum(general) / len(general)


def _frontier(points: list[dict[str, Any]]) -> None:
    """Mark ``frontier``: no other point has both means at least as large and one of them larger."""
    for p in points:
        p["frontier"] = not any(
            q is not p
            and q["own"]["mean"] >= p["own"]["mean"]
            and q["general"]["mean"] >= p["general"]["mean"]
            and (q["own"]["mean"] > p["own"]["mean"] or q["general"]["mean"] > p["general"]["mean"])
            for q in points
        )


def tradeoff_points(summary: dict[str, Any]) -> tuple[list[dict[str, Any]], list[str]]:
    """Each row's own ability (x: the mean of the own columns, n/a as 0) and general quality (y: the mean of
    STS-B test and SICK-R test), computed per seed from the row's ``per_seed`` scores, then mean and 95%
    interval over seeds (:func:`interval`), and whether it is on the frontier; and the own columns. No points
    when the study lacks a general column or an own column; a row without ``per_seed`` (an older summary)
    or without a seed that has both general scores is left out."""
    columns, own = summary["columns"], summary.get("own") or {}
    own_cols = _tradeoff_own(columns, own)
    if not own_cols or not all(c in columns for c in GENERAL_COLUMNS):
        return [], own_cols
    points = []
    for row in summary["rows"]:
        seeds = [_seed_point(scores, own_cols) for scores in row.get("per_seed") or []]
        seeds = [s for s in seeds if s is not None]
        if not seeds:
            continue
        x, y = (dict(zip(("mean", "ci"), interval([s[i] for s in seeds]))) for i in (0, 1))
        points.append({"row": row["row"], "seeds": len(seeds), "own": x, "general": y})
    _frontier(points)
    return points, own_cols


def tradeoff_table(points: list[dict[str, Any]], own_cols: list[str]) -> str:
    """The trade-off's markdown: a sentence, the table (mean ± 95% half-width over seeds) and how it is made."""
    lines = [
        "General quality against the objectives' own columns, mean and 95% interval over seeds:",
        "",
        "| run | seeds | general (STS-B, SICK-R) | own columns | frontier |",
        "|---|---:|---:|---:|---|",
    ]
    for p in points:
        frontier = "yes" if p["frontier"] else "no"
        lines.append(f"| {p['row']} | {p['seeds']} | {cell_text(p['general'])} | {cell_text(p['own'])} | {frontier} |")
    lines += [
        "",
        "Per seed, general is the mean of stsb-test and sick-r and own columns the mean of "
        + ", ".join(own_cols)
        + "; a column a run cannot compute (n/a: a direction column without a Gaussian head, an entity column "
        "without EASE) counts as 0, since the model cannot do it (a symmetric similarity never ranks one "
        "direction above the other). A run is on the frontier when no other run is at least as high on both "
        "means and higher on one.",
    ]
    return "\n".join(lines) + "\n"


def tradeoff(points: list[dict[str, Any]], path: Path) -> Path:
    """General quality (y) against the own columns (x): one point per row with both intervals as error bars,
    labelled; frontier rows filled and joined by a step line, the others hollow."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 5.5))
    start = next((p for p in points if p["row"] == "untrained"), None)
    if start is not None:  # the starting model's general quality: what the combination is to keep
        ax.axhline(start["general"]["mean"], color="#808080", linestyle=":", linewidth=1)
    # labels of points close together alternate above and below (sorted by x, then y)
    order = sorted(range(len(points)), key=lambda i: (points[i]["own"]["mean"], points[i]["general"]["mean"]))
    below = {i: k % 2 == 1 for k, i in enumerate(order)}
    for i, p in enumerate(points):
        x, y = p["own"], p["general"]
        # frontier: a filled red diamond; the others: a hollow blue circle
        color, marker, face = ("#c03030", "D", "#c03030") if p["frontier"] else ("#4878a8", "o", "none")
        errors = {"xerr": x["ci"] or 0.0, "yerr": y["ci"] or 0.0, "capsize": 3, "linestyle": "none"}
        ax.errorbar(x["mean"], y["mean"], color=color, marker=marker, markerfacecolor=face, **errors)
        offset = (5, -11) if below[i] else (5, 5)
        ax.annotate(p["row"], (x["mean"], y["mean"]), textcoords="offset points", xytext=offset, fontsize=8)
    edge = sorted((p["own"]["mean"], p["general"]["mean"]) for p in points if p["frontier"])
    if len(edge) > 1:
        ax.plot(*zip(*edge), drawstyle="steps-pre", color="#c03030", linestyle="--", linewidth=1)
    ax.set_xlabel("own columns, mean (x100)")
    ax.set_ylabel("general: mean of STS-B test and SICK-R test")
    title = "filled: on the frontier; an own column a run cannot compute counts as 0"
    ax.set_title(title + ("; dotted: the untrained start" if start is not None else ""), fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path
