"""What GaussCSE's own top layers buy in the merge-of-parts route (recipes/unified/four-papers.yaml): direction on
dev and test against the parameters the head's own tower adds, for ``own_layers`` 0-5, over seeds.

Per seed, the route's joint part (every objective but GaussCSE, ``unisent ablate --runs leave-one-out``, trained
once: it does not depend on ``own_layers``) is merged by task arithmetic with GaussCSE alone trained with ``k`` own
layers (``--runs single``, 62 steps, fp32), as ``unisent fit -c recipes/unified/four-papers.yaml`` does for
``k = 5``. Each merge is scored on direction (test: SNLI's entailment pairs whose hypothesis is not shorter; dev:
SICK train's, what ``BestOnDev`` reads) and STS-B test; the route's own choice (``k = 5``) on the whole panel.

    python -m studies.own_layers train --joint runs/parts --out runs/own-layers --seeds 42 43 44 \\
        --data-dir ../shared/data
    python -m studies.own_layers table docs/results/unified/own-layers-cost.json --join runs/own-layers/*.json \\
        --joint-results runs/parts/results/without-gausscse/seed*.json \\
        --page docs/results/unified/own-layers-cost.md --plot docs/results/unified/own-layers-cost.png
    python -m studies.own_layers score runs/four-papers/seed51 --record runs/four-papers/seed51.json  # a row

The second seed set is trained by the one command (``unisent fit -c recipes/unified/four-papers.yaml
--seed_everything 51``); ``score`` adds its run to ``table --join`` as a row of the panel.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import yaml

os.environ.setdefault("HF_HUB_OFFLINE", "1")

RECIPE = Path("recipes/unified/minilm-cpu-balanced-distill-own5.yaml")
TEST, DEV = "snli-direction-hyp-not-shorter", "sick-direction-hyp-not-shorter-train"
COLUMNS = [TEST, DEV, "stsb-test"]
#: the whole panel of the route's choice, the cross-lingual columns included
ROUTE_COLUMNS = [
    *COLUMNS,
    "sick-r",
    "snli-direction",
    "amr-text-to-graph",
    "entity-top10",
    "tatoeba-deu",
    "stsb-multi-en-de",
    "stsb-multi-en-es",
    "stsb-multi-en-de-dev",
    "stsb-multi-en-es-dev",
]
CHOSEN = 5


def _recipe(out: Path, k: int) -> Path:
    """The route's recipe with GaussCSE over ``k`` own layers."""
    config = yaml.safe_load(RECIPE.read_text(encoding="utf-8"))
    for spec in config["model"]["objectives"]:
        if spec["class_path"].endswith(".GaussCSE"):
            spec["init_args"]["own_layers"] = k
    path = out / "recipes" / f"own{k}.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(config, sort_keys=False), encoding="utf-8")
    return path


def train(args: argparse.Namespace) -> None:
    """GaussCSE alone for every ``k`` and seed, then each merged with the seed's joint part and scored."""
    import unisent
    from unisent.commands.ablate import ablate
    from unisent.evaluation.panel import evaluate_panel
    from unisent.inference.cost import parameter_parts
    from unisent.merging import merge_runs

    record_path = args.record or args.out / "own-layers.json"
    rows = json.loads(record_path.read_text(encoding="utf-8"))["rows"] if record_path.is_file() else []
    done = {(r["own_layers"], r["seed"]) for r in rows}
    for seed in args.seeds:
        for k in args.layers:
            folder = args.out / f"own{k}"
            ablate(
                str(_recipe(args.out, k)), out=str(folder), steps=62, runs=["single"], run="only-gausscse",
                seed=seed, columns=[TEST], data_dir=args.data_dir, precision="fp32",
            )  # fmt: skip
    for seed in args.seeds:
        joint = args.joint / "runs" / "without-gausscse" / f"seed{seed}"
        while not (args.joint / "results" / "without-gausscse" / f"seed{seed}.json").is_file():
            time.sleep(30)  # the joint part still training (its result file is written once it is scored)
        for k in args.layers:
            if (k, seed) in done:
                continue
            merged = args.out / f"own{k}" / "merged" / f"seed{seed}"
            if not (merged / "merge.json").is_file():
                alone = args.out / f"own{k}" / "runs" / "only-gausscse" / f"seed{seed}"
                merge_runs([joint, alone], merged, method="task_arithmetic")
            columns = ROUTE_COLUMNS if k == CHOSEN else COLUMNS
            scores = evaluate_panel(
                str(merged / "encoder"), columns, args.data_dir, ckpt=str(merged / "checkpoints" / "last.ckpt")
            )
            parts = parameter_parts(unisent.load(str(merged / "encoder")))
            alone_seconds = json.loads(
                (args.out / f"own{k}" / "results" / "only-gausscse" / f"seed{seed}.json").read_text(encoding="utf-8")
            )["train_seconds"]
            rows.append(
                {
                    "own_layers": k,
                    "seed": seed,
                    "parameters": parts,
                    "scores": {c: scores[c].get("score") for c in columns},
                    "alone_train_seconds": alone_seconds,
                }
            )
            record = {"recipe": str(RECIPE), "joint": str(args.joint), "test": TEST, "dev": DEV, "rows": rows}
            record_path.write_text(json.dumps(record, indent=1) + "\n", encoding="utf-8")
            print(f"own_layers: k={k} seed {seed}: {record['rows'][-1]['scores']}", file=sys.stderr)
    if args.start_scores:  # the start on the route's columns (written beside, for ``table --join``)
        start = evaluate_panel("minilm-l6", ROUTE_COLUMNS, args.data_dir)
        scores = {c: v.get("score") for c, v in start.items()}
        (args.out / "start.json").write_text(json.dumps({"rows": [], "start": scores}, indent=1) + "\n", "utf-8")


def score(args: argparse.Namespace) -> None:
    """A run folder of the one command (``unisent fit -c recipes/unified/four-papers.yaml``) on the route's columns,
    as a row of ``table --join`` (``one_command``: in the panel, not in the trade-off over ``k``)."""
    import unisent
    from unisent.evaluation.panel import evaluate_panel
    from unisent.inference.cost import parameter_parts

    record = json.loads((args.run / "parts.json").read_text(encoding="utf-8"))
    model = str(args.run / "encoder")
    scores = evaluate_panel(model, ROUTE_COLUMNS, args.data_dir, ckpt=str(args.run / "checkpoints" / "last.ckpt"))
    row = {
        "own_layers": CHOSEN,
        "seed": record["seed"],
        "one_command": True,
        "parameters": parameter_parts(unisent.load(model)),
        "scores": {c: scores[c].get("score") for c in ROUTE_COLUMNS},
        "parts_train_seconds": {p["name"]: p["train_seconds"] for p in record["parts"]},
    }
    args.record.write_text(json.dumps({"rows": [row]}, indent=1) + "\n", encoding="utf-8")
    print(f"own_layers: {args.run}: {row['scores']}", file=sys.stderr)


def page(record: dict, plot_name: str | None) -> str:
    """The page's table (mean and 95% interval over seeds per ``k``) and, for the route's choice, the panel."""
    from unisent.commands.ablate.summarise import interval

    by_k: dict[int, list[dict]] = {}
    for row in record["rows"]:
        if not row.get("one_command"):  # the second seed set's runs of the one command: in the panel only
            by_k.setdefault(row["own_layers"], []).append(row)
    shared = record["rows"][0]["parameters"]["shared encoder"]

    def cell(rows: list[dict], column: str) -> str:
        values = [r["scores"][column] for r in rows if r["scores"].get(column) is not None]
        if not values:
            return "n/a"
        mean, ci = interval(values)
        return f"{mean:.2f}" + (f" ± {ci:.2f}" if ci is not None else "")

    lines = [
        "| own layers | added parameters | + of the shared encoder | direction test | direction dev | STS-B test "
        "| seeds |",
        "|---:|---:|---:|---:|---:|---:|---|",
    ]
    for k in sorted(by_k):
        rows = by_k[k]
        added = sum(v for part, v in rows[0]["parameters"].items() if part != "shared encoder")
        seeds = ", ".join(str(r["seed"]) for r in rows)
        mark = " (the recipe's)" if k == CHOSEN else ""
        lines.append(
            f"| {k}{mark} | {added / 1e6:.2f}M | {100 * added / shared:.0f}% | {cell(rows, record['test'])} | "
            f"{cell(rows, record['dev'])} | {cell(rows, 'stsb-test')} | {seeds} |"
        )
    chosen = by_k.get(CHOSEN, []) + [r for r in record["rows"] if r.get("one_command")]
    if chosen:
        columns = [c for c in ROUTE_COLUMNS if any(c in r["scores"] for r in chosen)]
        start = record.get("start") or {}
        lines += ["", f"The route's choice (`own_layers: {CHOSEN}`) on the whole panel, per seed, and the start:", ""]
        lines += ["| model | " + " | ".join(columns) + " |", "|---|" + "---:|" * len(columns)]
        named = [
            (f"seed {r['seed']}" + (" (the one command)" if r.get("one_command") else ""), r["scores"]) for r in chosen
        ]
        named += [(f"its joint part alone (no GaussCSE), seed {k}", v) for k, v in record.get("joint_part", {}).items()]
        for name, scores in named:
            cells = " | ".join(f"{scores.get(c):.2f}" if scores.get(c) is not None else "n/a" for c in columns)
            lines.append(f"| {name} | {cells} |")
        cells = " | ".join(f"{start[c]:.2f}" if start.get(c) is not None else "n/a" for c in columns)
        lines.append(f"| the start (all-MiniLM-L6-v2) | {cells} |")
    if plot_name:
        lines += ["", f"![direction against added parameters]({plot_name})"]
    return "\n".join(lines) + "\n"


def plot(record: dict, path: Path) -> None:
    """Direction (dev and test, mean and 95% interval over seeds) against the added parameters."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from unisent.commands.ablate.summarise import interval

    by_k: dict[int, list[dict]] = {}
    for row in record["rows"]:
        if not row.get("one_command"):
            by_k.setdefault(row["own_layers"], []).append(row)
    ks = sorted(by_k)
    added = [sum(v for p, v in by_k[k][0]["parameters"].items() if p != "shared encoder") / 1e6 for k in ks]
    fig, (ax, sts) = plt.subplots(1, 2, figsize=(10, 4))
    for column, label in ((record["test"], "test (SNLI)"), (record["dev"], "dev (SICK train)")):
        stats = [interval([r["scores"][column] for r in by_k[k]]) for k in ks]
        ax.errorbar(added, [m for m, _ in stats], yerr=[c or 0 for _, c in stats], marker="o", capsize=3, label=label)
    ax.axhline(65, color="grey", linestyle=":", label="target 65 (test)")
    ax.set_ylabel("direction accuracy x100 (hypothesis not shorter)")
    stats = [interval([r["scores"]["stsb-test"] for r in by_k[k]]) for k in ks]
    sts.errorbar(added, [m for m, _ in stats], yerr=[c or 0 for _, c in stats], marker="o", capsize=3, color="C2")
    sts.axhline(82.03, color="grey", linestyle=":", label="the start 82.03")
    sts.set_ylabel("STS-B test, Spearman x100")
    for axis in (ax, sts):
        for k, x in zip(ks, added):
            axis.annotate(f"{k}", (x, axis.get_ylim()[0]), textcoords="offset points", xytext=(0, 4), ha="center")
        axis.set_xlabel("added parameters, millions (labels: own_layers)")
        axis.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m studies.own_layers")
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("train")
    run.add_argument("--joint", type=Path, required=True)
    run.add_argument("--out", type=Path, required=True)
    run.add_argument("--seeds", type=int, nargs="*", default=[42, 43, 44])
    run.add_argument("--layers", type=int, nargs="+", default=[0, 1, 2, 3, 4, 5])
    run.add_argument("--data-dir", default="../shared/data")
    run.add_argument("--start-scores", action="store_true", help="also score the start on the route's columns")
    run.add_argument("--record", type=Path, help="the JSON of the rows (default OUT/own-layers.json; one per process)")
    table = sub.add_parser("table")
    table.add_argument("record", type=Path, help="the kept JSON (with --join: written from the --join files)")
    table.add_argument("--join", type=Path, nargs="+", help="train's JSON files (one per process): their rows")
    table.add_argument("--joint-results", type=Path, nargs="*", help="with --join: the joint part's result files")
    table.add_argument("--page", type=Path)
    table.add_argument("--plot", type=Path)
    scored = sub.add_parser("score", help="score a run folder of the one command on the route's columns")
    scored.add_argument("run", type=Path, help="OUT/seed<S> of unisent fit -c recipes/unified/four-papers.yaml")
    scored.add_argument("--record", type=Path, required=True, help="the JSON to write (one row, for table --join)")
    scored.add_argument("--data-dir", default="../shared/data")
    args = parser.parse_args(argv)
    if args.command == "train":
        train(args)
        return
    if args.command == "score":
        score(args)
        return
    if args.join:
        parts = [json.loads(p.read_text(encoding="utf-8")) for p in args.join]
        record = {k: v for p in parts for k, v in p.items() if k != "rows"}
        for path in args.joint_results or []:  # unisent ablate's result files of the joint part, per seed
            joint = json.loads(path.read_text(encoding="utf-8"))
            record.setdefault("joint_part", {})[str(joint["run"]["seed"])] = joint["scores"]
        record["rows"] = sorted((r for p in parts for r in p["rows"]), key=lambda r: (r["own_layers"], r["seed"]))
        args.record.write_text(json.dumps(record, indent=1) + "\n", encoding="utf-8")
    record = json.loads(args.record.read_text(encoding="utf-8"))
    text = page(record, args.plot.name if args.plot else None)
    if args.plot:
        plot(record, args.plot)
    if args.page:
        name = args.record.name
        start, end = f"<!-- own_layers {name} -->\n", f"<!-- /own_layers {name} -->"
        page_text = args.page.read_text(encoding="utf-8")
        head, tail = page_text[: page_text.index(start) + len(start)], page_text[page_text.index(end) :]
        args.page.write_text(head + "\n" + text + "\n" + tail, encoding="utf-8")
    else:
        sys.stdout.write(text)


if __name__ == "__main__":
    main()
