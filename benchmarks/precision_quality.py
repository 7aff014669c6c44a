"""Does bf16 training reach fp32's quality? The same runs in both precisions, several seeds, held-out tests.

Two runs, each as a user starts it (``unisent fit -c RECIPE``), once with ``--trainer.precision 32-true``
and once with ``bf16-mixed`` (what ``precision: auto`` picks on a CPU with AVX512-BF16 or AMX, or a GPU),
for every seed; every trained model is then measured by ``unisent evaluate`` in fp32 (the protocol):

- **quickstart**: ``recipes/gausscse/quickstart.yaml`` (the README's first command: a Gaussian head on the
  frozen MiniLM) on SNLI-test entailment direction (``snli-direction-sample``, KL similarity) and STS-B test;
- **simcse**: ``recipes/quickstart.yaml`` (supervised SimCSE, MiniLM fine-tuned) on STS-B test.

"Within seed noise" is read off the table: the gap between the precisions' means against the spread
between seeds of one precision. Also: the pretrained MiniLM's STS-B test with the encoding itself in
bf16 (``unisent evaluate --precision bf16``) against fp32.

    python benchmarks/precision_quality.py                      # seeds 42 43; prints the table
    python benchmarks/precision_quality.py --seeds 42 43 44 --write   # also docs/benchmarks-precision.json
    python benchmarks/precision_quality.py --runs gausscse --seeds 42 43 44 --write   # adds a run (same seeds)
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from cli_speed import _unisent  # noqa: E402
from throughput import cpu_description  # noqa: E402  # a sibling script

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "docs" / "benchmarks-precision.json"
PRECISIONS = ("32-true", "bf16-mixed")

#: run name -> (recipe, extra fit arguments, [(column, evaluate arguments, metric path)])
RUNS = {
    "quickstart": (
        "recipes/gausscse/quickstart.yaml",
        [],
        [
            ("direction %", ["--tasks", "snli-direction-sample", "--similarity", "kl"], "snli-direction-sample"),
            ("STS-B test", ["--tasks", "stsb-test"], "stsb-test"),
        ],
    ),
    "simcse": ("recipes/quickstart.yaml", [], [("STS-B test", ["--tasks", "stsb-test"], "stsb-test")]),
    # GaussCSE fine-tuning the whole encoder (184 steps): the bundled SNLI-dev triples, no test tasks (those
    # need the full SNLI files); the held-out tests are run by `unisent evaluate` as for the others
    "gausscse": (
        "recipes/gausscse/snli-cpu.yaml",
        ["--data.train.gausscse.path=samples/snli_dev_triples.jsonl", "--model.evaluation.test_tasks=[]"],
        [
            ("direction %", ["--tasks", "snli-direction-sample", "--similarity", "kl"], "snli-direction-sample"),
            ("STS-B test", ["--tasks", "stsb-test"], "stsb-test"),
        ],
    ),
}


def _run(command: list[str], env: dict[str, str]) -> float:
    start = time.perf_counter()
    done = subprocess.run(command, env=env, capture_output=True, text=True, cwd=ROOT)
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(command)} failed ({done.returncode}):\n{done.stderr[-3000:]}")
    return time.perf_counter() - start


def _score(model: str, arguments: list[str], task: str, out: Path, env: dict[str, str], *extra: str) -> float:
    _run([_unisent(), "evaluate", "--model", model, *arguments, "--output", str(out), "--quiet", *extra], env)
    return json.loads(out.read_text())["tasks"][task]["score"]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[42, 43])
    parser.add_argument("--runs", default="quickstart,simcse")
    parser.add_argument(
        "--precisions",
        nargs="+",
        default=list(PRECISIONS),
        choices=PRECISIONS,
        help="rerun only these (--write merges)",
    )
    parser.add_argument("--write", action="store_true", help=f"add the result to {RESULTS.relative_to(ROOT)}")
    args = parser.parse_args(argv)
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    result: dict = {"cpu": cpu_description(), "seeds": args.seeds, "runs": {}}
    with tempfile.TemporaryDirectory(prefix="unisent-precision-") as tmp:
        work = Path(tmp)
        base = {}
        for precision in ("fp32", "bf16"):
            base[precision] = _score(
                "minilm-l6", ["--tasks", "stsb-test"], "stsb-test", work / "base.json", env, "--precision", precision
            )
        result["pretrained_stsb_test_encoded_in"] = base
        print(f"pretrained MiniLM, STS-B test encoded in fp32 / bf16: {base['fp32']:.2f} / {base['bf16']:.2f}")
        for name in args.runs.split(","):
            recipe, extra, measures = RUNS[name]
            rows = []
            for seed in args.seeds:
                for precision in args.precisions:
                    version = f"{name}-{precision}-{seed}"
                    fit = [_unisent(), "fit", "-c", recipe, f"--trainer.precision={precision}", *extra]
                    fit += [f"--seed_everything={seed}", f"--trainer.logger.init_args.save_dir={work}"]
                    fit += ["--trainer.logger.init_args.name=runs", f"--trainer.logger.init_args.version={version}"]
                    fit += ["--trainer.enable_progress_bar=false", "--trainer.enable_checkpointing=false"]
                    seconds = _run(fit, env)
                    encoder = str(work / "runs" / version / "encoder")
                    scores = {
                        column: _score(encoder, arguments, task, work / f"{version}.json", env)
                        for column, arguments, task in measures
                    }
                    rows.append({"seed": seed, "precision": precision, "fit_s": seconds, **scores})
                    print(f"{name} seed {seed} {precision}: {scores} ({seconds:.0f} s)", flush=True)
            result["runs"][name] = {"recipe": recipe, "rows": rows}
    if args.write:
        saved = json.loads(RESULTS.read_text()) if RESULTS.exists() else {}
        if result["cpu"] in saved and saved[result["cpu"]]["seeds"] == result["seeds"]:  # other runs, same seeds
            for name, run in result["runs"].items():  # rows of precisions not rerun are kept
                kept = saved[result["cpu"]]["runs"].get(name, {}).get("rows", [])
                run["rows"] = [r for r in kept if r["precision"] not in args.precisions] + run["rows"]
            result["runs"] = {**saved[result["cpu"]]["runs"], **result["runs"]}
            result["pretrained_stsb_test_encoded_in"] = saved[result["cpu"]]["pretrained_stsb_test_encoded_in"]
        saved[result["cpu"]] = result
        RESULTS.write_text(json.dumps(saved, indent=2) + "\n")
        print(f"written to {RESULTS.relative_to(ROOT)}")
    print(table(result))


def table(result: dict) -> str:
    lines = [
        f"- machine: {result['cpu']}; seeds {', '.join(map(str, result['seeds']))}; models evaluated in fp32",
        "",
        "| run (recipe) | held-out test | fp32 per seed | bf16 per seed | fp32 mean | bf16 mean | bf16 - fp32 | "
        "largest seed-to-seed spread | fit s (fp32 / bf16, mean) |",
        "|---|---|---|---|---:|---:|---:|---:|---|",
    ]
    for name, run in result["runs"].items():
        rows = run["rows"]
        columns = [k for k in rows[0] if k not in ("seed", "precision", "fit_s")]
        for column in columns:
            per = {p: [r[column] for r in rows if r["precision"] == p] for p in PRECISIONS}
            if not all(per.values()):
                continue  # one precision only (--precisions without --write): nothing to compare
            means = {p: statistics.fmean(v) for p, v in per.items()}
            spread = max(max(v) - min(v) for v in per.values())
            fit = {p: statistics.fmean(r["fit_s"] for r in rows if r["precision"] == p) for p in PRECISIONS}
            lines.append(
                f"| {name} (`{run['recipe']}`) | {column} | {', '.join(f'{x:.2f}' for x in per['32-true'])} | "
                f"{', '.join(f'{x:.2f}' for x in per['bf16-mixed'])} | {means['32-true']:.2f} | "
                f"{means['bf16-mixed']:.2f} | {means['bf16-mixed'] - means['32-true']:+.2f} | {spread:.2f} | "
                f"{fit['32-true']:.0f} / {fit['bf16-mixed']:.0f} |"
            )
    return "\n".join(lines)


if __name__ == "__main__":
    main()
