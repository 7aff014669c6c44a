"""The merge-of-parts route of docs/results/unified.md: per seed, the joint run without one objective merged with that
objective's single run (``unisent merge``, task arithmetic, weights 1, scale 1), scored on the recipe's panel.

``unisent ablate`` merges single runs with each other; this route merges a leave-one-out run (trained by
``unisent ablate --runs leave-one-out``) with the single run of the objective it leaves out (``--runs single``),
each from its own study folder, since the two train for different numbers of steps. The merge, the panel and
the interval are the library's (:func:`unisent.merging.merge_runs`, :func:`unisent.evaluation.panel.evaluate_panel`,
the interval of ``unisent ablate``'s tables); this script pairs the runs, keeps every score in one JSON and
writes the table of the three rows (the joint run, the single run, the merge) with the recipe's targets and,
with ``--alone``, each own column against its objective alone (an ``ablation.json`` with the single rows).

    python -m studies.merge_parts --recipe recipes/unified/minilm-cpu-balanced-distill-own5.yaml \\
        --joint runs/study48-parts --single runs/study48-parts-single --objective gausscse --seeds 42 43 44 \\
        --out runs/study48-parts-merge --data-dir ../shared/data --alone docs/results/unified/merge-ablation.json \\
        --output docs/results/unified/parts.json
    python -m studies.merge_parts --table docs/results/unified/parts.json     # the table again, no run
    python -m studies.merge_parts --table docs/results/unified/parts.json \\
        --tradeoff docs/results/unified/merge-ablation.json --plot docs/results/unified/parts-tradeoff.png

``--tradeoff`` adds the route's three rows to a kept study's rows (the same seeds) and draws the study's
trade-off again with them (:func:`studies.tradeoff.tradeoff_points`, ``tradeoff``): general quality against the
own columns, the frontier recomputed.
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")


def _run_scores(study: Path, slug: str, seed: int) -> dict:
    """The panel scores ``unisent ablate`` wrote for one run."""
    path = study / "results" / slug / f"seed{seed}.json"
    if not path.is_file():
        raise SystemExit(f"merge_parts: {path}: no result of {slug} seed {seed} (run unisent ablate first)")
    return json.loads(path.read_text(encoding="utf-8"))["scores"]


def merge_and_score(args: argparse.Namespace, columns: list[str]) -> dict:
    """Every seed: the two runs' scores, and the merge's (merged once; a finished merge is scored again only
    for missing columns)."""
    from unisent.evaluation.panel import evaluate_panel
    from unisent.merging import merge_runs

    joint_slug, single_slug = f"without-{args.objective}", f"only-{args.objective}"
    seeds = []
    for seed in args.seeds:
        joint = args.joint / "runs" / joint_slug / f"seed{seed}"
        single = args.single / "runs" / single_slug / f"seed{seed}"
        folder = args.out / f"seed{seed}"
        if not (folder / "merge.json").is_file():
            merge_runs([joint, single], folder, method="task_arithmetic")
        scores = evaluate_panel(
            str(folder / "encoder"), columns, args.data_dir, ckpt=str(folder / "checkpoints" / "last.ckpt")
        )
        seeds.append(
            {
                "seed": seed,
                "joint": _run_scores(args.joint, joint_slug, seed),
                "single": _run_scores(args.single, single_slug, seed),
                "merge": {c: scores[c].get("score") for c in columns},
                "merge_folder": str(folder),
            }
        )
    return {
        "objective": args.objective,
        "columns": columns,
        "targets": args.targets,
        "alone": args.alone,
        "seeds": seeds,
    }


def alone_intervals(path: Path, own: dict[str, str]) -> dict[str, dict]:
    """Each own column's interval for its objective alone, from an ``ablation.json`` of ``unisent ablate`` with
    the single rows (``only <objective>``): ``{column: {"row", "mean", "ci"}}``; objectives without a row of
    their own (a grouped one, such as bitext with cmlm) are left out."""
    rows = {r["row"]: r for r in json.loads(path.read_text(encoding="utf-8"))["rows"]}
    found = {}
    for objective, column in own.items():
        cell = (rows.get(f"only {objective}") or {}).get("cells", {}).get(column)
        if cell and column not in found:
            found[column] = {"row": f"only {objective}", "mean": cell["mean"], "ci": cell["ci"] or 0.0}
    return found


def table(report: dict) -> str:
    """The three rows (mean ± the 95% Student-t half-width over the seeds) and each target's verdict."""
    from unisent.commands.ablate.summarise import interval

    columns, name = report["columns"], report["objective"]
    rows = {"joint": f"without {name}", "single": f"only {name}", "merge": f"merge (without {name} + only {name})"}
    header = f"| row | seeds | {' | '.join(columns)} |"
    lines = [header, "|---|---:|" + "---:|" * len(columns)]
    means = {}
    for key, label in rows.items():
        cells = []
        for column in columns:
            values = [s[key][column] for s in report["seeds"] if s[key].get(column) is not None]
            if not values:
                cells.append("n/a")
                continue
            mean, half = interval(values)
            means[key, column] = mean
            cells.append(f"{mean:.2f}" if half is None else f"{mean:.2f} ± {half:.2f}")
        lines.append(f"| {label} | {len(report['seeds'])} | {' | '.join(cells)} |")
    targets = report.get("targets") or {}
    if targets:
        verdicts = []
        for column, line in targets.items():
            mean = means.get(("merge", column))
            if mean is None:
                verdicts.append(f"{column} n/a")
            else:
                verdicts.append(
                    f"{column} {mean:.2f} " + ("met" if mean >= line else f"**missed by {line - mean:.2f}**")
                )
        lines += ["", f"The merge against the targets (>= {', '.join(f'{c} {v:g}' for c, v in targets.items())}): "]
        lines[-1] += "; ".join(verdicts) + "."
    alone = report.get("alone") or {}
    if alone:
        verdicts = []
        for column, cell in alone.items():
            mean, low = means.get(("merge", column)), cell["mean"] - cell["ci"]
            where = "n/a" if mean is None else "within or above" if mean >= low else f"**below by {low - mean:.2f}**"
            verdicts.append(f"{column} {where} ({cell['row']}: {cell['mean']:.2f} ± {cell['ci']:.2f})")
        lines += ["", "The merge's own columns against each objective alone: " + "; ".join(verdicts) + "."]
    return "\n".join(lines)


def tradeoff_of(report: dict, study: dict) -> tuple[list[dict], list[str]]:
    """The trade-off points of ``study`` (an ``ablation.json``) with the route's three rows added (``parts:``),
    and the own columns; refused by name when the two were run on different seeds."""
    from studies.tradeoff import tradeoff_points

    seeds = [s["seed"] for s in report["seeds"]]
    trained = {seed for row in study["rows"] if row["kind"] != "untrained" for seed in row["seeds"]}
    if set(seeds) != trained:
        raise SystemExit(f"merge_parts: the route's seeds {seeds} are not the study's {sorted(trained)}")
    name = report["objective"]
    labels = {"joint": f"parts: without {name}", "single": f"parts: only {name}", "merge": "parts: merged"}
    rows = [{"row": label, "per_seed": [s[key] for s in report["seeds"]]} for key, label in labels.items()]
    return tradeoff_points({**study, "rows": list(study["rows"]) + rows})


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--recipe", type=Path, help="the recipe: its panel columns and targets")
    parser.add_argument("--joint", type=Path, help="the study folder of the leave-one-out run")
    parser.add_argument("--single", type=Path, help="the study folder of the single run")
    parser.add_argument("--objective", default="gausscse", help="the objective the joint run leaves out")
    parser.add_argument("--seeds", type=int, nargs="+", default=[42, 43, 44])
    parser.add_argument("--out", type=Path, help="where the merged folders go (<out>/seed<S>)")
    parser.add_argument("--data-dir", default="../shared/data")
    parser.add_argument("--alone", type=Path, help="an ablation.json with the single rows: the own-column intervals")
    parser.add_argument("--output", type=Path, help="also write the JSON here")
    parser.add_argument("--table", type=Path, metavar="JSON", help="print the table of a kept JSON; no run")
    parser.add_argument("--tradeoff", type=Path, metavar="ABLATION_JSON", help="with --table: the study's trade-off")
    parser.add_argument("--plot", type=Path, help="with --tradeoff: draw it here (a .png)")
    args = parser.parse_args(argv)
    if (args.tradeoff and not args.table) or (args.plot and not args.tradeoff):
        parser.error("--tradeoff reads a kept JSON (--table JSON), and --plot draws a --tradeoff")
    if args.table:
        report = json.loads(args.table.read_text(encoding="utf-8"))
        if not args.tradeoff:
            print(table(report))
            return report
        from studies.tradeoff import tradeoff, tradeoff_table

        points, own_cols = tradeoff_of(report, json.loads(args.tradeoff.read_text(encoding="utf-8")))
        if args.plot:
            tradeoff(points, args.plot)
        print(tradeoff_table(points, own_cols), end="")
        return report
    if not (args.recipe and args.joint and args.single and args.out):
        parser.error("--recipe, --joint, --single and --out are needed (or --table JSON)")
    import yaml

    evaluation = (yaml.safe_load(args.recipe.read_text(encoding="utf-8"))["model"] or {}).get("evaluation") or {}
    args.targets = evaluation.get("panel_targets") or {}
    args.alone = alone_intervals(args.alone, evaluation.get("panel_own") or {}) if args.alone else {}
    report = merge_and_score(args, list(evaluation.get("panel") or []))
    if args.output:
        args.output.write_text(json.dumps(report, indent=1) + "\n", encoding="utf-8")
    print(table(report))
    return report


if __name__ == "__main__":
    main()
