"""What the runs of an ablation say: Student-t intervals over seeds, the table, own columns against the
objective alone, the targets' verdicts, the plot and the trade-off between general quality and the
objectives' own columns. Everything after :func:`summarize` reads only the summary, so ``ablation.json``
alone writes ``ablation.md``, the plots and the page again, byte for byte."""

from __future__ import annotations

import math
import shutil
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from .plan import UNTRAINED, Run
from .run import write

__all__ = [
    "best_balancer",
    "cells",
    "interval",
    "own_columns",
    "publish",
    "summarize",
    "table",
    "target_verdicts",
    "tradeoff",
    "tradeoff_points",
    "tradeoff_table",
]

#: the trade-off's general quality: the mean of these two panel columns
GENERAL_COLUMNS = ("stsb-test", "sick-r")


def interval(values: Sequence[float], confidence: float = 0.95) -> tuple[float, float | None]:
    """Mean and the half-width of its Student-t interval (``None`` for one value)."""
    n = len(values)
    mean = sum(values) / n
    if n < 2:
        return mean, None
    from scipy.stats import t

    sd = math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1))
    return mean, float(t.ppf(0.5 + confidence / 2, n - 1) * sd / math.sqrt(n))


def summarize(results: list[dict[str, Any]], columns: list[str]) -> list[dict[str, Any]]:
    """One row per run name: each column's mean, interval and seeds; ``per_seed`` has every column's score
    (``None`` where the run could not compute it) per seed, in the order of ``seeds`` (the trade-off pairs a
    seed's columns; an older ``ablation.json`` without it has no trade-off)."""
    rows: dict[str, dict[str, Any]] = {}
    for result in results:
        run = Run(**result["run"])
        row = rows.setdefault(run.row, {"row": run.row, "kind": run.kind, "slug": run.slug, "cells": {}})
        row.setdefault("seeds", []).append(result["run"]["seed"])
        row.setdefault("train_minutes", []).append(result["train_seconds"] / 60)
        row.setdefault("per_seed", []).append({c: result["scores"].get(c) for c in columns})
        row.setdefault("precision", []).append(result.get("precision"))  # None: untrained, merged or older
    for row in rows.values():
        row["cells"] = cells(row["per_seed"], columns)
    return list(rows.values())


def cells(per_seed: list[dict[str, Any]], columns: list[str]) -> dict[str, dict[str, Any]]:
    """Each column's mean, interval and values over the seeds that have it (a column no seed has is left out)."""
    values = {c: [s[c] for s in per_seed if s.get(c) is not None] for c in columns}
    return {c: dict(zip(("mean", "ci"), interval(v)), values=v) for c, v in values.items() if v}


def _cell(cell: dict[str, Any] | None) -> str:
    if not cell:
        return "n/a"
    if cell["ci"] is None:
        return f"{cell['mean']:.2f}"
    return f"{cell['mean']:.2f} ± {cell['ci']:.2f}"


def best_balancer(rows: list[dict[str, Any]], own: dict[str, str]) -> str | None:
    """The unified row with the best mean over the own columns (all columns when the recipe names none)."""
    unified = [r for r in rows if r["kind"] == "unified"]
    if not unified:
        return None
    wanted = sorted(set(own.values())) or sorted({c for r in unified for c in r["cells"]})

    def score(row):
        values = [row["cells"][c]["mean"] for c in wanted if c in row["cells"]]
        return sum(values) / len(values) if values else float("-inf")

    return max(unified, key=score)["row"]


def own_columns(
    row: dict[str, Any], rows: list[dict[str, Any]], own: dict[str, str], units: dict[str, tuple]
) -> list[dict[str, Any]]:
    """Each objective's own column in ``row`` against the objective alone: the difference of the means, and
    whether it is within the single-objective interval (below by at most the half-width)."""
    by_name = {r["row"]: r for r in rows}
    out = []
    for unit, members in units.items():
        column = next((own[m] for m in members if m in own), None)
        alone = by_name.get(f"only {unit}")
        if column is None or alone is None:
            continue
        a, b = row["cells"].get(column), alone["cells"].get(column)
        if not a or not b:
            continue
        diff = a["mean"] - b["mean"]
        width = b["ci"] if b["ci"] is not None else 0.0
        out.append(
            {
                "objective": unit,
                "column": column,
                "unified": a,
                "alone": b,
                "diff": diff,
                "width": width,
                "within": diff >= -width,
            }
        )
    return out


def target_verdicts(
    rows: list[dict[str, Any]], targets: dict[str, float], own: dict[str, str], units: dict[str, tuple]
) -> dict[str, dict[str, Any]]:
    """For every unified row: each target's mean, margin (mean - target) and whether it is met, and the
    own columns below their single-objective interval."""
    verdicts = {}
    for row in (r for r in rows if r["kind"] in ("unified", "merge")):
        cells = {}
        for column, target in targets.items():
            cell = row["cells"].get(column)
            if cell:
                margin = cell["mean"] - target
                cells[column] = {"mean": cell["mean"], "target": target, "margin": margin, "met": margin >= 0}
        below = [o for o in own_columns(row, rows, own, units) if not o["within"]]
        verdicts[row["row"]] = {
            "targets": cells,
            "own_below": {o["objective"]: -o["diff"] - o["width"] for o in below},
            "all_met": all(c["met"] for c in cells.values()) and not below,
        }
    return verdicts


def _target_table(verdicts: dict[str, dict[str, Any]], targets: dict[str, float], check_own: bool) -> list[str]:
    head = [f"{c} (>= {t:g})" for c, t in targets.items()] + (["own columns"] if check_own else [])
    lines = ["| run | " + " | ".join(head) + " | every line |", "|---|" + "---|" * (len(head) + 1)]
    for name, v in verdicts.items():
        cells = []
        for column in targets:
            c = v["targets"].get(column)
            if c is None:
                cells.append("n/a")
            else:
                verdict = f"met by {c['margin']:.2f}" if c["met"] else f"**missed by {-c['margin']:.2f}**"
                cells.append(f"{c['mean']:.2f}, {verdict}")
        if check_own:
            below = v["own_below"]
            cells.append(
                "all within" if not below else ", ".join(f"**{o} {gap:.2f} below**" for o, gap in below.items())
            )
        lines.append(f"| {name} | " + " | ".join(cells) + f" | {'yes' if v['all_met'] else 'no'} |")
    return lines


def table(
    rows: list[dict[str, Any]],
    columns: list[str],
    own: dict[str, str],
    units: dict[str, tuple],
    targets: dict[str, float] | None = None,
) -> str:
    lines = [
        "| run | seeds | " + " | ".join(columns) + " | train min |",
        "|---|---:|" + "---:|" * (len(columns) + 1),
    ]
    for row in rows:
        minutes = sum(row["train_minutes"]) / len(row["train_minutes"])
        cells = " | ".join(_cell(row["cells"].get(c)) for c in columns)
        lines.append(f"| {row['row']} | {len(row['seeds'])} | {cells} | {minutes:.1f} |")
    best = best_balancer(rows, own)
    own_lines = []
    if best and own:
        by_name = {r["row"]: r for r in rows}
        for o in own_columns(by_name[best], rows, own, units):
            verdict = "yes" if o["within"] else f"no, below by {-o['diff'] - o['width']:.2f} beyond it"
            own_lines.append(
                f"| {o['objective']} | {o['column']} | {_cell(o['unified'])} | {_cell(o['alone'])} "
                f"| {o['diff']:+.2f} | {verdict} |"
            )
        if own_lines:  # only where the objectives also ran alone
            lines += [
                "",
                f"Each objective's own column, inside the combination ({best}) and alone:",
                "",
                "| objective | column | unified | alone | difference | within the interval |",
                "|---|---|---:|---:|---:|---|",
                *own_lines,
            ]
    verdicts = target_verdicts(rows, targets or {}, own, units) if targets else {}
    if verdicts:
        lines += [
            "",
            "Targets (`model.evaluation.panel_targets`), each balancer's mean over seeds"
            + (", and its objectives' own columns against each objective alone:" if own_lines else ":"),
            "",
            *_target_table(verdicts, targets, bool(own_lines)),
        ]
    return "\n".join(lines) + "\n"


def plot(rows: list[dict[str, Any]], columns: list[str], path: Path, targets: dict[str, float] | None = None) -> Path:
    """One panel per column: each run's mean with its interval; a column's target (``panel_targets``) is in
    its title, and a dashed line where it falls inside the plotted range."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cols = min(3, len(columns))
    lines = math.ceil(len(columns) / cols)
    fig, axes = plt.subplots(lines, cols, figsize=(5 * cols, 0.35 * len(rows) * lines + 1.5 * lines), squeeze=False)
    for ax, column in zip(axes.flat, columns):
        names = [r["row"] for r in rows if column in r["cells"]]
        means = [r["cells"][column]["mean"] for r in rows if column in r["cells"]]
        errors = [r["cells"][column]["ci"] or 0.0 for r in rows if column in r["cells"]]
        ax.barh(range(len(names)), means, xerr=errors, color="#4878a8", capsize=3)
        ax.set_yticks(range(len(names)), names, fontsize=8)
        ax.invert_yaxis()
        if means:
            low = min(m - e for m, e in zip(means, errors))
            high = max(m + e for m, e in zip(means, errors))
            pad = max(1.0, 0.1 * (high - low))
            ax.set_xlim(low - pad, high + pad)
            target = (targets or {}).get(column)
            if target is not None and low - pad <= target <= high + pad:
                ax.axvline(target, color="#c03030", linestyle="--", linewidth=1)
        title = column if column not in (targets or {}) else f"{column} (target >= {targets[column]:g})"
        ax.set_title(title, fontsize=10)
    for ax in list(axes.flat)[len(columns) :]:
        ax.axis("off")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


# ------------------------------------------------------------------------------------------------ trade-off
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
        lines.append(f"| {p['row']} | {p['seeds']} | {_cell(p['general'])} | {_cell(p['own'])} | {frontier} |")
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


PAGE_START, PAGE_END = "<!-- unisent ablate -->", "<!-- /unisent ablate -->"
TRADEOFF_ALT = "general quality against the objectives' own columns"


def summary_table(summary: dict[str, Any]) -> str:
    """The markdown of the page's block (``ablation.md`` without its image line), from the summary alone."""
    text = table(summary["rows"], summary["columns"], summary["own"], summary["units"], summary["panel_targets"])
    points, own_cols = tradeoff_points(summary)
    text += "\n" + tradeoff_table(points, own_cols) if points else ""
    trained = _precisions(summary["rows"])
    if trained:
        text += f"\nTraining precision per seed: {trained}.\n"
    missing = summary.get("missing") or []
    if missing:  # --tabulate: the planned runs without a result, named on the page
        text += f"\nNot run ({len(missing)} planned runs, left out of every row above): {', '.join(missing)}.\n"
    return text


def _precisions(rows: list[dict[str, Any]]) -> str:
    """``unified (anchored) 32-true (42), bf16-mixed (43, 44)``: each trained row's precision by seed, from the
    result files that record it (a summary written before they did names none: the empty string)."""
    parts = []
    for row in rows:
        by: dict[str, list[str]] = {}
        for seed, precision in zip(row["seeds"], row.get("precision") or []):
            by.setdefault(str(precision or "not recorded"), []).append(str(seed))
        if set(by) - {"not recorded"} and row["kind"] not in (UNTRAINED, "merge"):
            parts.append(row["row"] + " " + ", ".join(f"{p} ({', '.join(s)})" for p, s in by.items()))
    return "; ".join(parts)


def publish(summary: dict[str, Any], folder: Path, page: Path | None, *, keep_plots: bool = False) -> str:
    """Write ``ablation.md``, ``ablation.png`` and (with a trade-off) ``tradeoff.png`` into ``folder`` (and the
    tables into ``page``); the text of ``ablation.md``."""
    text = summary_table(summary)
    points, _ = tradeoff_points(summary)
    folder.mkdir(parents=True, exist_ok=True)
    try:
        plot(summary["rows"], summary["columns"], folder / "ablation.png", summary["panel_targets"])
        if points:
            tradeoff(points, folder / "tradeoff.png")
    except ImportError:  # pragma: no cover - matplotlib is a dependency
        print("unisent ablate: pip install matplotlib for ablation.png", file=sys.stderr)
    written = text
    if points and (folder / "tradeoff.png").exists():
        written += f"\n![{TRADEOFF_ALT}](tradeoff.png)\n"
    write(folder / "ablation.md", written)
    if page is not None:
        update_page(page, text, folder, summary, summary["command"], keep_plots=keep_plots, with_tradeoff=bool(points))
    return written


def _beside(source: Path, beside: Path, keep_plots: bool) -> bool:
    """Copy ``source`` beside the page; whether the page names the copy (also a kept one whose source is gone)."""
    if source.exists():
        shutil.copyfile(source, beside)
    return source.exists() or (keep_plots and beside.exists())


def update_page(
    page: Path,
    text: str,
    folder: Path,
    summary: dict[str, Any],
    command: str,
    *,
    keep_plots: bool = False,
    with_tradeoff: bool = False,
) -> None:
    """Put the tables and their command between the page's markers, with ``tradeoff.png`` (when ``with_tradeoff``:
    the summary has a trade-off, whose table ends ``text``), ``ablation.png`` and the best balancer's
    ``conflicts.png`` copied beside it; ``keep_plots``: a plot beside it whose source is gone stays named."""
    name = summary.get("block")  # one page, several studies: each between its own named markers
    start, end = (
        (f"<!-- unisent ablate {name} -->", f"<!-- /unisent ablate {name} -->") if name else (PAGE_START, PAGE_END)
    )
    stem = f"{page.stem}-{name}" if name else page.stem
    joined = summary.get("from_json")  # parts of one study tabulated apart, joined by seed
    written = f"Written by `{command}`" + (f", joined by seed from {', '.join(joined)}." if joined else ".")
    lines = [start, "", written, "", text.rstrip(), ""]
    beside = page.parent / f"{stem}-tradeoff.png"
    if with_tradeoff and _beside(folder / "tradeoff.png", beside, keep_plots):
        lines += [f"![{TRADEOFF_ALT}]({beside.name})", ""]
    beside = page.parent / f"{stem}-ablation.png"
    if _beside(folder / "ablation.png", beside, keep_plots):
        lines += [f"![every run, mean and 95% interval over seeds]({beside.name})", ""]
    best = summary.get("best_balancer")
    if best:
        row = next(r for r in summary["rows"] if r["row"] == best)
        seed = min(row["seeds"])
        source = folder / "runs" / row["slug"] / f"seed{seed}" / "conflicts.png"
        beside = page.parent / f"{stem}-conflicts.png"
        if _beside(source, beside, keep_plots):
            lines += [f"![gradient conflicts of {best}, seed {seed}]({beside.name})", ""]
    block = "\n".join(lines) + end
    current = page.read_text(encoding="utf-8") if page.exists() else ""
    if start in current and end in current:
        head, rest = current.split(start, 1)
        current = head + block + rest.split(end, 1)[1]
    else:
        current = current.rstrip() + ("\n\n" if current else "") + block + "\n"
    write(page, current)
