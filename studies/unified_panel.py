"""One row of the unified panel (docs/results/unified.md): the same held-out evaluations for any model.

Columns (each skipped with ``--skip NAME``):

- ``sts``: STS-B test and SICK-R (Spearman x 100, cosine of ``encode``), ``unisent.evaluation``;
- ``stc``: the short-text clustering group (K-means accuracy, mean over the sets present);
- ``snli``: SNLI-test entailment direction by similarity (``sim(hyp || pre) > sim(pre || hyp)``, KL
  similarity: only for a model with a Gaussian head; a symmetric similarity has no direction) and
  2-way NLI accuracy (threshold on the similarity, tuned on SNLI dev);
- ``amr``: text -> graph and graph -> text top-1 on the Little Prince v1.6 **test** split
  (``unisent.evaluation.panel.amr_retrieval``, as ``benchmarks/amr_retrieval.py``; the model's own vocabulary);
- ``entity``: entity retrieval top-1/top-10 on the held-out FewRel sentences over the whole entity
  table (``unisent.evaluation.panel.score_entities``, as ``benchmarks/ease_entity_retrieval.py``, at
  the panel's token limit; needs ``--ckpt`` of a run with an EASE objective);
- ``tatoeba``: Tatoeba deu<->eng accuracy (mean of both directions).

The computations are the library's (:mod:`unisent.evaluation.panel`, the columns ``unisent ablate``
reports); this script writes one row as JSON and the markdown table of rows.

    python -m studies.unified_panel --model runs/unified-minilm-cpu/full/encoder \\
        --ckpt runs/unified-minilm-cpu/full/checkpoints/last.ckpt --data-dir ../shared/data \\
        --name unified --output runs/panel/unified.json
    python -m studies.unified_panel --length-rule --name "length rule" --output runs/panel/length-rule.json
    python -m studies.unified_panel --table runs/panel/*.json     # the markdown table
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from unisent.evaluation.panel import PANEL_MAX_LENGTH  # noqa: E402 - after the environment above

COLUMNS = ("sts", "stc", "snli", "amr", "entity", "tatoeba")
#: every row is evaluated with this token limit: the packaged MiniLM's own (256), which its exports keep.
#: A run's saved encoder carries its *training* limit (32 in the unified recipe); evaluating at that would
#: cut 117 of the 143 test graphs and some STS-B sentences, and score trained rows against a different
#: protocol from the untrained one.
MAX_LENGTH = PANEL_MAX_LENGTH


def _task_entry(task: str, column: dict) -> dict:
    """A panel column of a registered task as ``evaluate`` reports the task (the rows' JSON keeps that shape)."""
    from unisent.evaluation import get_task

    found = get_task(task)
    return {
        "group": found.group,
        "main_metric": found.main_metric,
        "score": column["metrics"][found.main_metric],
        "metrics": column["metrics"],
        "seconds": column["seconds"],
    }


def panel_row(
    model_path: str,
    data_dir: str,
    ckpt: str | None = None,
    skip: tuple[str, ...] = (),
    batch_size: int = 128,
    max_length: int | None = MAX_LENGTH,
) -> dict:
    """Every column of the panel for one model (see the module doc), every text cut at ``max_length``
    tokens whatever the model was trained with (``None``: the model's own limit). The panel's columns are
    :func:`unisent.evaluation.panel.evaluate_panel`'s (what ``unisent ablate`` reports); ``stc`` and the
    2-way SNLI accuracy are ``unisent.evaluation.evaluate``'s."""
    from unisent.evaluation import evaluate
    from unisent.evaluation.panel import evaluate_panel, load_panel_model

    row: dict = {"model": model_path, "checkpoint": ckpt, "seconds": {}}
    model = load_panel_model(model_path, max_length)  # once: every column below reuses it
    row["max_length"] = model.config.max_length
    gaussian = hasattr(model, "encode_gaussian")
    row["gaussian_head"] = gaussian

    def timed(column: str, fn):
        start = time.perf_counter()
        value = fn()
        row["seconds"][column] = round(time.perf_counter() - start, 1)
        return value

    def panel(*columns: str) -> dict:
        return evaluate_panel(model, columns, data_dir, ckpt, max_length=max_length, batch_size=batch_size)

    if "sts" not in skip:
        found = timed("sts", lambda: panel("stsb-test", "sick-r"))
        row["sts"] = {task: _task_entry(task, column) for task, column in found.items()}
    if "stc" not in skip:
        results = timed("stc", lambda: evaluate(model, ["stc"], data_dir, batch_size, progress=False, on_error="raise"))
        row["stc"] = {
            "tasks": results["tasks"],
            "group": results.get("groups", {}).get("stc"),
            "skipped": sorted(results.get("skipped", {})),
        }
    if "snli" not in skip:

        def snli() -> dict:
            tasks = {}
            if gaussian:
                tasks["snli-direction"] = _task_entry("snli-direction", panel("snli-direction")["snli-direction"])
            similarity = "kl" if gaussian else None
            results = evaluate(
                model, ["snli-nli"], data_dir, batch_size, progress=False, similarity=similarity, on_error="raise"
            )
            return tasks | results["tasks"]

        row["snli"] = timed("snli", snli)
    if "amr" not in skip:
        found = timed("amr", lambda: panel("amr-text-to-graph"))["amr-text-to-graph"]
        drop = ("score", "seconds", "text_to_graph_errors", "graph_to_text_errors", "problems", "model", "input")
        row["amr"] = {
            "model": model_path,
            "amr_vocabulary": False,
            "added_tokens": 0,
            "max_length": found["max_length"],
            "input": found["input"],
            "linearisation": {"parentheses": True, "drop_wiki": True},
            "pairs_read": found["pairs"],
            "excluded": 0,
            "problems": found["problems"],
        } | {key: value for key, value in found.items() if key not in drop}
    if "entity" not in skip and ckpt:
        found = timed("entity", lambda: panel("entity-top10"))["entity-top10"]
        # no EASE objective in this run: no entity table to retrieve from
        row["entity"] = (
            {"error": found["reason"]} if found["score"] is None else {k: v for k, v in found.items() if k != "score"}
        )
    if "tatoeba" not in skip:
        found = timed("tatoeba", lambda: panel("tatoeba-deu"))
        row["tatoeba"] = {"tatoeba-deu": _task_entry("tatoeba-deu", found["tatoeba-deu"])}
    return row


def length_rule_row(data_dir: str, tokenizer_model: str = "minilm-l6") -> dict:
    """The reference row of the direction column: no model, the rule "the longer sentence (in the
    tokenizer's tokens) is the premise" on the same SNLI test entailment pairs; a tie counts as wrong."""
    import unisent
    from unisent.data.benchmark_readers import read_aligned_nli

    snli = Path(data_dir) / "nli" / "snli"
    pairs = read_aligned_nli(*(snli / f"{f}.test" for f in ("s1", "s2", "labels")))
    keep = [i for i, y in enumerate(pairs.labels) if y == "entailment"]
    tokenizer = unisent.load(tokenizer_model).tokenizer
    count = lambda texts: [len(ids) for ids in tokenizer(texts, add_special_tokens=False)["input_ids"]]  # noqa: E731
    pre = count([pairs.sentences1[i] for i in keep])
    hyp = count([pairs.sentences2[i] for i in keep])
    right = sum(p > h for p, h in zip(pre, hyp))
    ties = sum(p == h for p, h in zip(pre, hyp))
    return {
        "model": f"length rule ({tokenizer_model} tokens)",
        "seconds": {},
        "snli": {
            "snli-direction": {
                "direction_sim": 100.0 * right / len(keep),
                "ties": 100.0 * ties / len(keep),
                "n_pairs": len(keep),
            }
        },
    }


def _metric(entry: dict | None, key: str) -> float | None:
    if not entry:
        return None
    metrics = entry.get("metrics", entry)
    return metrics.get(key)


def table(paths: list[str]) -> str:
    """The markdown panel from rows written by ``--output``."""
    head = (
        "| model | STS-B test | SICK-R | stc | SNLI direction | SNLI 2-way | AMR t->g | AMR g->t | "
        "entity top-10 | Tatoeba deu | train min |"
    )
    lines = [head, "|" + "---|" + "---:|" * 10]
    for path in paths:
        row = json.loads(Path(path).read_text(encoding="utf-8"))

        def fmt(value) -> str:
            return "n/a" if value is None else f"{value:.2f}"

        sts, snli = row.get("sts", {}), row.get("snli", {})
        stc = (row.get("stc") or {}).get("group") or {}
        entity = row.get("entity") or {}
        amr = row.get("amr") or {}
        lines.append(
            "| "
            + " | ".join(
                [
                    row.get("name", Path(path).stem),
                    fmt(_metric(sts.get("stsb-test"), "spearman")),
                    fmt(_metric(sts.get("sick-r"), "spearman")),
                    fmt(stc.get("score")),
                    fmt(_metric(snli.get("snli-direction"), "direction_sim")),
                    fmt(_metric(snli.get("snli-nli"), "accuracy")),
                    fmt(amr.get("text_to_graph_top1")),
                    fmt(amr.get("graph_to_text_top1")),
                    fmt(None if entity.get("top10") is None else 100.0 * entity["top10"]),
                    fmt(_metric((row.get("tatoeba") or {}).get("tatoeba-deu"), "accuracy")),
                    fmt(row.get("train_minutes")),
                ]
            )
            + " |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", help="a saved model directory, preset or checkpoint")
    parser.add_argument("--ckpt", help="the run's checkpoint (for entity retrieval)")
    parser.add_argument("--data-dir", default="../shared/data")
    parser.add_argument("--name", help="the row's name in the table")
    parser.add_argument("--train-minutes", type=float, help="wall time of the run that made the model")
    parser.add_argument("--skip", nargs="*", default=[], choices=COLUMNS)
    parser.add_argument(
        "--max-length",
        type=int,
        default=MAX_LENGTH,
        help=f"token limit for every text of every column (default {MAX_LENGTH}; 0: the model's own)",
    )
    parser.add_argument(
        "--length-rule",
        action="store_true",
        help="the direction column's reference row: the longer sentence is the premise (no model)",
    )
    parser.add_argument("--output", help="write the row as JSON here")
    parser.add_argument("--table", nargs="*", metavar="ROW.json", help="print the markdown table of these rows")
    args = parser.parse_args(argv)
    if args.table:
        print(table(args.table))
        return 0
    if args.length_rule:
        row = length_rule_row(args.data_dir)
    elif not args.model:
        parser.error("--model is required (or --table ROW.json ..., or --length-rule)")
    else:
        row = panel_row(args.model, args.data_dir, args.ckpt, tuple(args.skip), max_length=args.max_length or None)
    row["name"] = args.name or args.model
    row["train_minutes"] = args.train_minutes
    text = json.dumps(row, indent=1, default=str)
    if args.output:
        Path(args.output).parent.mkdir(parents=True, exist_ok=True)
        Path(args.output).write_text(text + "\n", encoding="utf-8")
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
