"""Is SICK's direction a dev set for SNLI test's? One row per trained run of ``unisent ablate`` studies.

The unified panel's direction column (``snli-direction-hyp-not-shorter``) is a test column, and SNLI dev is
training data for the unified recipes (GaussCSE trains on its triples), so a setting chosen "by direction"
needs another held-out set. The candidates are SICK's trial split (``sick-direction-dev``, 144 entailment
pairs; the default) and, with ``--split train``, SICK's train split (``sick-direction-train``, 1,299 pairs, which
no recipe trains on: what ``unisent.evaluation.BestOnDev`` reads in
recipes/unified/minilm-cpu-balanced-distill-own5-best.yaml). This script scores one for every run of the study
folders whose result file has a direction score (the runs with a Gaussian head), from the run's saved encoder,
and reports the Spearman correlation between each dev measure and each test measure, over the runs and over the
rows' means across seeds (what a choice between routes compares): how far a choice on the dev columns would
follow the test columns. Several folders are pooled, each run named ``<folder>/<run>``.

    python -m studies.direction_dev runs/study48-keep --seeds 42 43 44 --data-dir ../shared/data \\
        --output docs/results/unified/direction-dev.json
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

TEST = {"all": "snli-direction", "hyp_not_shorter": "snli-direction-hyp-not-shorter"}
DEV = {"all": "sick-direction-dev", "hyp_not_shorter": "sick-direction-hyp-not-shorter-dev"}
#: ``--split``: SICK's trial split (144 entailment pairs) or its train split (1,299; no recipe trains on SICK)
SPLITS = {
    "trial": DEV,
    "train": {"all": "sick-direction-train", "hyp_not_shorter": "sick-direction-hyp-not-shorter-train"},
}


def study_rows(folder: Path, seeds: list[int], data_dir: str, dev_columns: dict[str, str] = DEV) -> list[dict]:
    """``{run, seed, test_*, dev_*}`` for every run of ``folder/results`` with a direction score."""
    from unisent.evaluation.panel import evaluate_panel

    rows = []
    for seed in seeds:
        for result in sorted(folder.glob(f"results/*/seed{seed}.json")):
            scores = json.loads(result.read_text(encoding="utf-8"))["scores"]
            if scores.get(TEST["hyp_not_shorter"]) is None:
                continue
            encoder = folder / "runs" / result.parent.name / f"seed{seed}" / "encoder"
            if not encoder.is_dir():
                print(f"direction_dev: {result}: no saved encoder {encoder}; skipped", file=sys.stderr)
                continue
            dev = evaluate_panel(str(encoder), list(dev_columns.values()), data_dir)
            row = {"run": result.parent.name, "seed": seed}
            row |= {f"test_{k}": scores[c] for k, c in TEST.items()}
            row |= {f"dev_{k}": dev[c]["score"] for k, c in dev_columns.items()}
            rows.append(row)
            print(json.dumps(row), file=sys.stderr, flush=True)
    return rows


def correlations(rows: list[dict]) -> dict[str, float]:
    """Spearman's rho over the rows between each dev measure and each test measure."""
    from scipy.stats import spearmanr

    return {
        f"dev_{d}~test_{t}": float(spearmanr([r[f"dev_{d}"] for r in rows], [r[f"test_{t}"] for r in rows])[0])
        for d in DEV
        for t in TEST
    }


def run_means(rows: list[dict]) -> list[dict]:
    """One row per run (a study's row: a route or a merge), each measure its mean over the seeds: a choice
    between routes compares these."""
    runs: dict[str, list[dict]] = {}
    for row in rows:
        runs.setdefault(row["run"], []).append(row)
    keys = [f"{side}_{k}" for side in ("test", "dev") for k in TEST]
    return [
        {"run": run, "seeds": len(group)} | {k: sum(r[k] for r in group) / len(group) for k in keys}
        for run, group in runs.items()
    ]


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument(
        "study", type=Path, nargs="+", help="--out folders of unisent ablate (results/, runs/); several: pooled"
    )
    parser.add_argument("--seeds", type=int, nargs="+", default=[42, 43, 44])
    parser.add_argument("--data-dir", required=True, help="the evaluation data root (sts/sick, nli/snli)")
    parser.add_argument("--split", choices=SPLITS, default="trial", help="the SICK split read as dev (default: trial)")
    parser.add_argument("--output", type=Path, help="also write the JSON here")
    args = parser.parse_args(argv)
    rows = []
    for study in args.study:  # several studies: each run named <study>/<run>, a row of its own
        found = study_rows(study, args.seeds, args.data_dir, SPLITS[args.split])
        rows += [r | {"run": f"{study.name}/{r['run']}"} for r in found] if len(args.study) > 1 else found
    if len(rows) < 3:
        parser.error(
            f"{', '.join(map(str, args.study))}: {len(rows)} runs with a direction score and a saved encoder; need 3"
        )
    study = str(args.study[0]) if len(args.study) == 1 else [str(s) for s in args.study]
    report = {"study": study, "seeds": args.seeds, "split": args.split, "runs": len(rows)}
    means = run_means(rows)
    report |= {"spearman": correlations(rows), "spearman_of_run_means": correlations(means)}
    report |= {"run_means": means, "rows": rows}
    text = json.dumps(report, indent=1)
    if args.output:
        args.output.write_text(text + "\n", encoding="utf-8")
    print(text)
    return report


if __name__ == "__main__":
    main()
