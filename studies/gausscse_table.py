"""Collect the GaussCSE CPU runs (runs/gausscse-snli-cpu/<sets>/test.json) into a markdown table.

python -m studies.gausscse_table [RUNS_DIR]
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

ORDER = ("ent", "ent-con", "ent-rev", "ent-con-rev")


def main(runs: Path) -> str:
    lines = [
        "| sets | direction by sim | direction by var | NLI 2-way accuracy | PR-AUC | threshold (dev) |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for sets in ORDER:
        result = runs / sets / "test.json"
        if not result.is_file():
            lines.append(f"| {sets.replace('-', '+')} | not run | | | | |")
            continue
        tasks = json.loads(result.read_text())["tasks"]
        direction, nli = tasks["snli-direction"]["metrics"], tasks["snli-nli"]["metrics"]
        lines.append(
            f"| {sets.replace('-', '+')} | {direction['direction_sim']:.2f} | {direction['direction_var']:.2f} "
            f"| {nli['accuracy']:.2f} | {nli['pr_auc']:.2f} | {nli['threshold']:.3f} |"
        )
    return "\n".join(lines)


if __name__ == "__main__":
    print(main(Path(sys.argv[1] if len(sys.argv) > 1 else "runs/gausscse-snli-cpu")))
