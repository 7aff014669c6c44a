"""This project's study pages from kept ``unisent ablate`` summaries: an ``ablation.json`` (or several parts of one
study, joined by seed) written into a results page between its markers, with the command that ran the study,
the tables of ``unisent ablate`` (:mod:`unisent.commands.ablate.summarise`), the trade-off (:mod:`studies.tradeoff`)
and the plots copied beside the page. Only the summaries are read, so a kept ``ablation.json`` writes its block
again byte for byte with nothing run (tests/studies/test_study_pages.py does, for every block of docs/results).

    # a study run now: its table, plots and the page's block
    unisent ablate RECIPE --out runs/study ...
    python -m studies.ablation_pages runs/study/ablation.json --page docs/results/unified/cls.md --block cls
    # a block again from the summary kept beside the page
    python -m studies.ablation_pages docs/results/unified/cls-ablation.json --page docs/results/unified/cls.md
    # a study tabulated in parts (a seed kept from an earlier round whose runs are gone, and seeds run now)
    python -m studies.ablation_pages docs/results/unified/cls-ablation.json runs/study48-cls/ablation.json \\
        --page docs/results/unified/cls.md --block cls --out runs/study48-cls-joined

The block of a page is ``<!-- unisent ablate NAME -->`` ... ``<!-- /unisent ablate NAME -->`` (``--block NAME``,
else the summary's own ``block``; without a name ``<!-- unisent ablate -->``), appended when the page lacks it.
Its plots are ``NAME-ablation.png``, ``NAME-tradeoff.png`` and the best balancer's ``NAME-conflicts.png`` beside
the page (without a name, the page's stem instead of ``NAME``); a plot beside the page whose source is gone (the
runs of a kept summary) stays on it.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from studies.tradeoff import TRADEOFF_ALT, tradeoff, tradeoff_points, tradeoff_table
from unisent.commands.ablate.summarise import best_balancer, cells, notes, plot, table, target_verdicts
from unisent.io import atomic_write

__all__ = ["block_text", "combine", "main", "pages", "publish", "read_summary", "update_page"]

PAGE_START, PAGE_END = "<!-- unisent ablate -->", "<!-- /unisent ablate -->"
#: what a summary must hold to write its block (every ``ablation.json`` of ``unisent ablate`` has them)
NEEDED = ("recipe", "rows", "columns", "seeds", "steps", "own", "units", "panel_targets", "command")


def _write(path: Path, text: str) -> None:
    with atomic_write(path) as f:
        f.write(text)


def read_summary(path: Path) -> dict[str, Any]:
    """A kept ``ablation.json``; a file that is not one is a :class:`ValueError` naming it."""
    try:
        summary = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as err:
        raise ValueError(f"{path}: not JSON ({err})") from None
    lacking = [key for key in NEEDED if key not in summary] if isinstance(summary, dict) else list(NEEDED)
    if lacking:
        raise ValueError(f"{path}: not an ablation.json of unisent ablate (no {', '.join(lacking)})")
    return summary


def combine(summaries: Sequence[tuple[str, dict[str, Any]]]) -> dict[str, Any]:
    """The summary of one study whose runs were tabulated in parts (seed 42 kept from an earlier round whose result
    files are gone, 43 and 44 tabulated now): each row's seeds, per-seed scores and training minutes joined in seed
    order, its cells computed again from the joined scores. The parts must share the recipe, steps and columns; a
    row may hold a seed once. Each mismatch is a :class:`ValueError` naming the file; ``best_balancer`` and
    ``targets`` are judged again by :func:`pages`."""
    first_name, first = summaries[0]
    rows: dict[str, dict[str, Any]] = {}
    for name, summary in summaries:
        for key in ("recipe", "steps", "columns"):
            if summary.get(key) != first.get(key):
                raise ValueError(f"{name}: {key} {summary.get(key)!r} is not {first_name}'s {first.get(key)!r}")
        for part in summary["rows"]:
            if "per_seed" not in part:
                raise ValueError(f"{name}: row {part['row']!r} has no per_seed scores to join")
            row = rows.setdefault(part["row"], {k: part[k] for k in ("row", "kind", "slug")} | {"runs": {}})
            for i, seed in enumerate(part["seeds"]):
                if seed in row["runs"]:
                    raise ValueError(f"{name}: row {part['row']!r} has seed {seed} twice")
                precision = (part.get("precision") or [None] * len(part["seeds"]))[i]
                row["runs"][seed] = (part["per_seed"][i], part["train_minutes"][i], precision)
    joined = []
    for row in rows.values():
        seeds = sorted(row.pop("runs").items())
        row["seeds"] = [seed for seed, _ in seeds]
        row["train_minutes"] = [minutes for _, (_, minutes, _) in seeds]
        row["per_seed"] = [scores for _, (scores, _, _) in seeds]
        row["precision"] = [precision for _, (_, _, precision) in seeds]
        row["cells"] = cells(row["per_seed"], first["columns"])
        joined.append(row)
    seeds = sorted({seed for row in joined for seed in row["seeds"]})
    summary = {k: v for k, v in first.items() if k not in ("rows", "seeds", "best_balancer", "targets", "missing")}
    summary |= {"seeds": seeds, "rows": joined, "from_json": [name for name, _ in summaries]}
    ran = {f"{row['slug']}/seed{seed}" for row in joined for seed in row["seeds"]}
    missing = [key for _, part in summaries for key in part.get("missing") or [] if key not in ran]
    if missing:  # planned in a part and run in none
        summary["missing"] = list(dict.fromkeys(missing))
    head, sep, tail = summary.get("command", "").partition(" --seeds ")
    if sep:  # the page names the seeds the joined table holds
        runs = tail.partition(" --runs ")[2]
        summary["command"] = head + sep + " ".join(map(str, seeds)) + (" --runs " + runs if runs else "")
    return summary


def block_text(summary: dict[str, Any]) -> str:
    """The markdown of a page's block (``ablation.md`` without its image lines): ``unisent ablate``'s tables, the
    trade-off's table (when the study has one) and the notes under them, from the summary alone."""
    text = table(summary["rows"], summary["columns"], summary["own"], summary["units"], summary["panel_targets"])
    points, own_cols = tradeoff_points(summary)
    text += "\n" + tradeoff_table(points, own_cols) if points else ""
    return text + notes(summary)


def publish(
    summary: dict[str, Any],
    folder: Path,
    page: Path | None = None,
    *,
    runs: Path | None = None,
    block: str | None = None,
    keep_plots: bool = True,
) -> str:
    """Write ``ablation.md``, ``ablation.png`` and (with a trade-off) ``tradeoff.png`` into ``folder``, and the block
    into ``page`` (:func:`update_page`; ``runs``: the study folder whose run folders hold the conflicts plot);
    the text of ``ablation.md``."""
    text = block_text(summary)
    points, _ = tradeoff_points(summary)
    folder.mkdir(parents=True, exist_ok=True)
    plot(summary["rows"], summary["columns"], folder / "ablation.png", summary["panel_targets"])
    if points:
        tradeoff(points, folder / "tradeoff.png")
    written = text + (f"\n![{TRADEOFF_ALT}](tradeoff.png)\n" if points else "")
    _write(folder / "ablation.md", written)
    if page is not None:
        name = block if block is not None else summary.get("block")
        update_page(
            page, text, folder, runs or folder, summary, name, keep_plots=keep_plots, with_tradeoff=bool(points)
        )
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
    runs: Path,
    summary: dict[str, Any],
    name: str | None,
    *,
    keep_plots: bool = True,
    with_tradeoff: bool = False,
) -> None:
    """Put the tables and the study's command between the page's markers (those of block ``name``), with
    ``folder``'s ``tradeoff.png`` (when ``with_tradeoff``: the summary has a trade-off, whose table is in ``text``)
    and ``ablation.png``, and the best balancer's ``conflicts.png`` from ``runs``, copied beside it;
    ``keep_plots``: a plot beside it whose source is gone stays named."""
    start, end = (
        (f"<!-- unisent ablate {name} -->", f"<!-- /unisent ablate {name} -->") if name else (PAGE_START, PAGE_END)
    )
    stem = name or page.stem
    joined = summary.get("from_json")  # parts of one study tabulated apart, joined by seed
    written = f"Written by `{summary['command']}`" + (f", joined by seed from {', '.join(joined)}." if joined else ".")
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
        source = runs / "runs" / row["slug"] / f"seed{seed}" / "conflicts.png"
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
    _write(page, current)


def pages(
    paths: Sequence[Path],
    out: Path,
    page: Path | None = None,
    *,
    block: str | None = None,
    runs: Path | None = None,
) -> dict[str, Any]:
    """The summary of ``paths`` (one ``ablation.json``, or the parts of one study joined by seed and judged again,
    the joined summary written to ``out/ablation.json``), published into ``out`` and ``page`` (:func:`publish`;
    ``runs``: default the first summary's folder, where ``unisent ablate`` put its runs)."""
    if not paths:
        raise ValueError("ablation_pages needs at least one ablation.json")
    summaries = [(str(path), read_summary(Path(path))) for path in paths]
    summary = summaries[0][1] if len(summaries) == 1 else combine(summaries)
    if len(summaries) > 1:  # the joined rows are judged again, as a study's own rows are
        summary["best_balancer"] = best_balancer(summary["rows"], summary["own"])
        if summary["panel_targets"]:
            summary["targets"] = target_verdicts(
                summary["rows"], summary["panel_targets"], summary["own"], summary["units"]
            )
        out.mkdir(parents=True, exist_ok=True)
        _write(out / "ablation.json", json.dumps(summary, indent=1) + "\n")
    runs = runs if runs is not None else Path(paths[0]).parent
    print(publish(summary, out, page, runs=runs, block=block))
    return summary


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(prog="python -m studies.ablation_pages", description=__doc__.split("\n")[0])
    parser.add_argument("summaries", type=Path, nargs="+", metavar="ABLATION_JSON", help="one study, or its parts")
    parser.add_argument("--page", type=Path, help="the markdown page whose block is written (the plots beside it)")
    parser.add_argument("--block", help="the block's name on the page (default: the summary's own, else none)")
    parser.add_argument(
        "--out", type=Path, default=Path("runs/study-page"), help="ablation.md, the plots and a joined ablation.json"
    )
    parser.add_argument("--runs", type=Path, help="the study folder with the runs (default: the first JSON's folder)")
    args = parser.parse_args(argv)
    try:
        summary = pages(args.summaries, args.out, args.page, block=args.block, runs=args.runs)
    except (OSError, ValueError) as err:
        sys.exit(f"ablation_pages: {err}")
    except (KeyError, TypeError, AttributeError, IndexError, ArithmeticError) as err:  # a field malformed or missing
        if os.environ.get("UNISENT_TRACEBACK", "").lower() not in ("", "0", "false", "no"):
            raise
        what = f"missing field {err}" if isinstance(err, KeyError) else f"a field of the wrong type ({err})"
        sys.exit(
            f"ablation_pages: {', '.join(map(str, args.summaries))}: not an ablation.json of unisent ablate: {what}"
        )
    where = f"{args.page} and {args.out}" if args.page else str(args.out)
    print(f"ablation_pages: {', '.join(map(str, args.summaries))} written to {where} (no run)", file=sys.stderr)
    return summary


if __name__ == "__main__":
    main()
