"""What an ablation writes from its summary: ``ablation.md``, ``ablation.png`` and the table in a markdown page.

``ablation.json`` (the summary) holds everything the table is made of: the rows (every cell's values, mean
and interval), the columns, each objective's own column, the units, the targets and the command that ran the
study. So ``unisent ablate RECIPE --from_json OUT/ablation.json --page PAGE`` writes the page's block again,
byte for byte, without a run or a result file (tests/test_ablate.py).
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path
from typing import Any

from .run import write
from .summarise import plot, table

__all__ = ["PAGE_END", "PAGE_START", "publish", "summary_table", "update_page"]

PAGE_START, PAGE_END = "<!-- unisent ablate -->", "<!-- /unisent ablate -->"


def summary_table(summary: dict[str, Any]) -> str:
    """The markdown of ``ablation.md``, from the summary alone."""
    return table(summary["rows"], summary["columns"], summary["own"], summary["units"], summary["panel_targets"])


def publish(summary: dict[str, Any], folder: Path, page: Path | None, *, keep_plots: bool = False) -> str:
    """Write ``folder/ablation.md`` and ``folder/ablation.png`` from ``summary`` and, with ``page``, the table
    into the page (:func:`update_page`); returns the table."""
    text = summary_table(summary)
    write(folder / "ablation.md", text)
    try:
        plot(summary["rows"], summary["columns"], folder / "ablation.png", summary["panel_targets"])
    except ImportError:  # pragma: no cover - matplotlib is a dependency
        print("unisent ablate: pip install matplotlib for ablation.png", file=sys.stderr)
    if page is not None:
        update_page(page, text, folder, summary, summary["command"], keep_plots=keep_plots)
    return text


def update_page(
    page: Path, text: str, folder: Path, summary: dict[str, Any], command: str, *, keep_plots: bool = False
) -> None:
    """Put the table (and the command that made it) between the page's markers; copy ``ablation.png`` and
    the best balancer's first-seed ``conflicts.png`` beside the page as ``<page>-ablation.png`` and
    ``<page>-conflicts.png``. ``keep_plots``: a plot whose source is not in ``folder`` (the runs are gone)
    but that is already beside the page stays named on it."""
    lines = [PAGE_START, "", f"Written by `{command}`.", "", text.rstrip(), ""]
    source, beside = folder / "ablation.png", page.parent / f"{page.stem}-ablation.png"
    if source.exists():
        shutil.copyfile(source, beside)
    if source.exists() or (keep_plots and beside.exists()):
        lines += [f"![every run, mean and 95% interval over seeds]({beside.name})", ""]
    best = summary.get("best_balancer")
    if best:
        row = next(r for r in summary["rows"] if r["row"] == best)
        seed = min(row["seeds"])
        source = folder / "runs" / row["slug"] / f"seed{seed}" / "conflicts.png"
        beside = page.parent / f"{page.stem}-conflicts.png"
        if source.exists():
            shutil.copyfile(source, beside)
        if source.exists() or (keep_plots and beside.exists()):
            lines += [f"![gradient conflicts of {best}, seed {seed}]({beside.name})", ""]
    block = "\n".join(lines) + PAGE_END
    current = page.read_text(encoding="utf-8") if page.exists() else ""
    if PAGE_START in current and PAGE_END in current:
        head, rest = current.split(PAGE_START, 1)
        current = head + block + rest.split(PAGE_END, 1)[1]
    else:
        current = current.rstrip() + ("\n\n" if current else "") + block + "\n"
    write(page, current)
