"""What the runs of an ablation say: Student-t intervals over seeds, the table, own columns against the
objective alone, the targets' verdicts and the plot. Everything after ``summarize`` reads only the
summary, so ``ablation.json`` alone writes ``ablation.md`` and ``ablation.png`` again, byte for byte."""

from __future__ import annotations

import math
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from .plan import UNTRAINED, Run
from .run import write

__all__ = [
    "best_balancer",
    "cell_text",
    "cells",
    "interval",
    "notes",
    "own_columns",
    "plot",
    "publish",
    "summarize",
    "summary_table",
    "table",
    "target_verdicts",
]


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
    (``None`` where the run could not compute it) per seed, in the order of ``seeds`` (what pairs a seed's
    columns, or joins rows tabulated apart)."""
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


def cell_text(cell: dict[str, Any] | None) -> str:
    """A table cell: ``mean ± half-width`` (``mean`` for one seed, ``n/a`` for none)."""
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
    row: dict[str, Any], rows: list[dict[str, Any]], own: dict[str, str], units: Mapping[str, Sequence[str]]
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
    rows: list[dict[str, Any]], targets: dict[str, float], own: dict[str, str], units: Mapping[str, Sequence[str]]
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
    units: Mapping[str, Sequence[str]],
    targets: dict[str, float] | None = None,
) -> str:
    lines = [
        "| run | seeds | " + " | ".join(columns) + " | train min |",
        "|---|---:|" + "---:|" * (len(columns) + 1),
    ]
    for row in rows:
        minutes = sum(row["train_minutes"]) / len(row["train_minutes"])
        cells = " | ".join(cell_text(row["cells"].get(c)) for c in columns)
        lines.append(f"| {row['row']} | {len(row['seeds'])} | {cells} | {minutes:.1f} |")
    best = best_balancer(rows, own)
    own_lines = []
    if best and own:
        by_name = {r["row"]: r for r in rows}
        for o in own_columns(by_name[best], rows, own, units):
            verdict = "yes" if o["within"] else f"no, below by {-o['diff'] - o['width']:.2f} beyond it"
            own_lines.append(
                f"| {o['objective']} | {o['column']} | {cell_text(o['unified'])} | {cell_text(o['alone'])} "
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
    if verdicts and targets:
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
        title = column if column not in (targets or {}) else f"{column} (target >= {(targets or {})[column]:g})"
        ax.set_title(title, fontsize=10)
    for ax in list(axes.flat)[len(columns) :]:
        ax.axis("off")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def summary_table(summary: dict[str, Any]) -> str:
    """The markdown of ``ablation.md`` (without its image line), from the summary alone: ``table``, then ``notes``."""
    text = table(summary["rows"], summary["columns"], summary["own"], summary["units"], summary["panel_targets"])
    return text + notes(summary)


def notes(summary: dict[str, Any]) -> str:
    """The lines under the tables: each trained row's precision by seed (where the result files record it) and,
    after ``--tabulate``, the planned runs without a result; the empty string when there is neither."""
    text = ""
    trained = _precisions(summary["rows"])
    if trained:
        text += f"\nTraining precision per seed: {trained}.\n"
    missing = summary.get("missing") or []
    if missing:  # --tabulate: the planned runs without a result, named under the table
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


def publish(summary: dict[str, Any], folder: Path) -> str:
    """Write ``ablation.md`` and ``ablation.png`` into ``folder``; the text of ``ablation.md``."""
    text = summary_table(summary)
    folder.mkdir(parents=True, exist_ok=True)
    try:
        plot(summary["rows"], summary["columns"], folder / "ablation.png", summary["panel_targets"])
    except ImportError:  # pragma: no cover - matplotlib is a dependency
        print("unisent ablate: pip install matplotlib for ablation.png", file=sys.stderr)
    write(folder / "ablation.md", text)
    return text
