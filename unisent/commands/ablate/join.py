"""``unisent ablate --from-json A.json B.json``: one study tabulated in parts, joined by seed (a seed kept from an
earlier round whose run folders are gone, beside seeds run now). Only the summaries are read: every interval is
computed again from the joined per-seed scores by :func:`.summarise.cells`."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from .summarise import cells

__all__ = ["combine"]


def combine(summaries: Sequence[tuple[str, dict[str, Any]]]) -> dict[str, Any]:
    """The summary of one study whose runs were tabulated in parts (``--from_json A B``: seed 42 kept from an
    earlier round whose result files are gone, 43 and 44 tabulated now): each row's seeds, per-seed scores and
    training minutes joined in seed order, its cells computed again from the joined scores. The parts must share
    the recipe, steps and columns; a row may hold a seed once. Each mismatch is a :class:`ValueError` naming the
    file; ``best_balancer`` and ``targets`` are left to the caller, which has the recipe."""
    first_name, first = summaries[0]
    rows: dict[str, dict[str, Any]] = {}
    for name, summary in summaries:
        for key in ("recipe", "steps", "columns"):
            if summary.get(key) != first.get(key):
                raise ValueError(
                    f"--from_json {name}: {key} {summary.get(key)!r} is not {first_name}'s {first.get(key)!r}"
                )
        for part in summary["rows"]:
            if "per_seed" not in part:
                raise ValueError(f"--from_json {name}: row {part['row']!r} has no per_seed scores to join")
            row = rows.setdefault(part["row"], {k: part[k] for k in ("row", "kind", "slug")} | {"runs": {}})
            for i, seed in enumerate(part["seeds"]):
                if seed in row["runs"]:
                    raise ValueError(f"--from_json {name}: row {part['row']!r} has seed {seed} twice")
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
