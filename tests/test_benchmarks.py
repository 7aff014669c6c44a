"""The benchmark harness's bookkeeping (its timings are measured by running it, not here)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]


def _harness():
    spec = importlib.util.spec_from_file_location("throughput", ROOT / "benchmarks" / "throughput.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_write_markdown_replaces_only_the_results_block(tmp_path):
    harness = _harness()
    page = tmp_path / "benchmarks.md"
    page.write_text(f"# Title\n\nprose before\n\n{harness.START}\nold table\n{harness.END}\n\nprose after\n")
    harness.write_markdown("new table", page)
    text = page.read_text()
    assert "old table" not in text and "new table" in text
    assert text.startswith("# Title\n\nprose before\n\n") and text.endswith(f"{harness.END}\n\nprose after\n")
    fresh = tmp_path / "fresh.md"
    harness.write_markdown("first", fresh)
    assert harness.START in fresh.read_text() and "first" in fresh.read_text()


def test_a_failed_extra_table_is_recorded_and_the_others_are_written(tmp_path, monkeypatch):
    """A GPU run: every table has the peak GPU memory; a stage whose child fails (scaling, here) is named in
    the raw results and left out of the page, and the stages before and after it are kept."""
    harness = _harness()
    calls = []

    def fake_child(kind, args, **overrides):
        calls.append((kind, overrides.get("steps", args.steps), overrides.get("warmup", args.warmup)))
        if "batch" in overrides:  # the scaling table's first child
            raise RuntimeError("train-unisent failed:\nModuleNotFoundError: No module named 'penman'")
        rate = 100.0 if "unisent" in kind else 50.0
        timing = {"sentences_per_s": rate, "seconds": 1.0, "achieved_flops": 2e9, "peak_rss_mb": 10.0}
        losses = {"peak_gpu_mb": 321.0, "tokens_per_step": 7.0, "mean_loss": 1.5, "final_loss": 1.25}
        return timing | losses | {"sentences": 5, "first_s": 1.0, "cached_s": 0.1}

    monkeypatch.setattr(harness, "_run_child", fake_child)
    monkeypatch.setattr(harness, "matmul_peak", lambda device, precision: 1e12)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda *a: "Fake GPU 9000")
    raw, page = tmp_path / "raw.json", tmp_path / "benchmarks.md"
    argv = ["throughput.py", "--device", "cuda", "--precision", "bf16-mixed", "--all", "--repeats", "1"]
    argv += ["--threads", str(torch.get_num_threads()), "--json", str(raw), "--output", str(page)]
    monkeypatch.setattr(sys, "argv", argv)
    harness.main()
    import json

    results = json.loads(raw.read_text())
    assert results["scaling"] is None and "No module named 'penman'" in results["failed"]["scaling"]
    assert results["objectives"][0]["peak_gpu_mb"] == 321.0 and results["tokenize"]["sentences"] == 5
    text = page.read_text()
    assert "Fake GPU 9000" in text and "### Cost of each objective" in text and "### Scaling" not in text
    assert text.count("peak GPU MB") == 2  # the systems' table and the objectives' table
    assert "| 100.0 | 2.00 | 1.5000 | 1.2500 | 2.0 | 0.2 | 10 | 321 |" in text  # unisent against ST at 50/s
    assert "sentences/s (`bf16-mixed`, above)" in text
    # on CUDA the timed windows are longer than a CPU's (12 steps after 3 time the host's jitter there)
    assert calls[0] == ("train-unisent", 60, 10) and ("train-unisent", 40, 10) in calls[-12:]
    assert "10 warm-up steps then 60 timed steps" in text and "40 timed steps after 10 warm-up steps" in text


def test_real_tokens_counts_every_attention_mask_of_a_nested_batch():
    harness = _harness()
    batch = {
        "cmlm": {
            "s1": {"input_ids": torch.ones(2, 4), "attention_mask": torch.tensor([[1, 1, 0, 0], [1, 1, 1, 0]])},
            "s2": {"input_ids": torch.ones(2, 2), "attention_mask": torch.tensor([[1, 1], [1, 0]])},
            "label": torch.tensor([0, 1]),
        }
    }
    assert harness._real_tokens(batch) == 8


def test_useful_flops_follow_the_formula(tiny_bert_dir):
    from transformers import AutoModel

    harness = _harness()
    model = AutoModel.from_pretrained(tiny_bert_dir)
    config = model.config
    embeddings = sum(p.numel() for n, p in model.named_parameters() if "embeddings" in n)
    params = sum(p.numel() for p in model.parameters()) - embeddings
    lengths = [3, 5, 4]
    expected = (2 * params + 4 * config.num_hidden_layers * 4.0 * config.hidden_size) * 12
    assert harness._encode_flops(model, lengths) == expected


def _load(name: str):
    sys.path.insert(0, str(ROOT / "benchmarks"))  # a script imports its siblings (restored after the test)
    spec = importlib.util.spec_from_file_location(name, ROOT / "benchmarks" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _results(path: Path, tasks: dict[str, dict[str, float]]) -> None:
    import json

    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"tasks": {name: {"score": 0.0, "metrics": m} for name, m in tasks.items()}}))


def test_preset_parity_compares_every_metric_at_the_printed_digits(tmp_path):
    parity = _load("preset_parity")
    _results(
        tmp_path / "preset" / "a.json",
        {"stsb-test": {"spearman": 82.0324, "pearson": 82.74}, "snli-nli": {"accuracy": 74.34, "threshold": 0.6141}},
    )
    _results(tmp_path / "preset" / "b.json", {"stc-tweet": {"accuracy": 63.63, "nmi": 86.64}})
    _results(
        tmp_path / "st" / "all.json",
        {
            "stsb-test": {"spearman": 82.0324 + 1e-9, "pearson": 82.74},
            "snli-nli": {"accuracy": 74.34, "threshold": 0.6141},
            "stc-tweet": {"accuracy": 63.63, "nmi": 86.64},
        },
    )
    assert parity.main(["compare", str(tmp_path / "preset"), str(tmp_path / "st")]) == 0
    # one metric differs in its last printed digit (3 digits for a threshold): a difference, exit 1
    _results(
        tmp_path / "st" / "all.json",
        {
            "stsb-test": {"spearman": 82.0324, "pearson": 82.74},
            "snli-nli": {"accuracy": 74.34, "threshold": 0.6149},
            "stc-tweet": {"accuracy": 63.63, "nmi": 86.64},
        },
    )
    rows, same = parity.compare(parity.load_tasks(tmp_path / "preset"), parity.load_tasks(tmp_path / "st"))
    assert not same and [r.split(" | ")[0] for r in rows if r.endswith("| NO |")] == ["| snli-nli"]
    # a task on one side only is reported, not skipped
    _results(tmp_path / "st" / "all.json", {"stsb-test": {"spearman": 82.0324, "pearson": 82.74}})
    rows, same = parity.compare(parity.load_tasks(tmp_path / "preset"), parity.load_tasks(tmp_path / "st"))
    assert not same and sum("missing in SentenceTransformer" in r for r in rows) == 2
    rows, same = parity.compare(parity.load_tasks(tmp_path / "preset"), parity.load_tasks(tmp_path / "st"), True)
    assert same and len(rows) == 4 and rows[-1].endswith("not compared): snli-nli, stc-tweet")


def test_preset_parity_table_puts_the_groups_in_the_pages_order(tmp_path, capsys):
    import json

    parity = _load("preset_parity")
    entry = {"group": "", "main_metric": "spearman", "score": 1.0, "metrics": {"spearman": 1.0}, "seconds": 0.1}
    for stem, task, group in (("xnli", "xnli-en", "xnli"), ("sts", "stsb-test", "sts"), ("extra", "x-task", "zzz")):
        (tmp_path / f"{stem}.json").write_text(json.dumps({"tasks": {task: entry | {"group": group}}}))
    assert parity.main(["table", str(tmp_path)]) == 0
    headings = [line for line in capsys.readouterr().out.splitlines() if line.startswith("### ")]
    assert headings[:3] == ["### sts", "### xnli", "### zzz"]


def _script(name: str):
    import sys

    sys.path.insert(0, str(ROOT / "benchmarks"))  # cli_speed imports throughput, precision_quality cli_speed
    spec = importlib.util.spec_from_file_location(name, ROOT / "benchmarks" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_cli_speed_costs_are_differences_of_run_lengths_and_the_systems_alternate(tmp_path, monkeypatch):
    speed = _script("cli_speed")
    # a fake clock: start-up 10 s (unisent) / 20 s (sentence-transformers), then 0.5 / 2 s per step
    per_step = {"fit": 0.5, "st_train.py": 2.0}
    calls = []

    def fake_run(command, env):
        system = "fit" if "fit" in command else "st_train.py"
        steps = int(command[-1].split("=")[-1]) if system == "fit" else int(command[-2])
        calls.append((system, steps))
        return (10.0 if system == "fit" else 20.0) + per_step[system] * steps

    monkeypatch.setattr(speed, "_run", fake_run)
    result = speed.measure("train", [5, 25], 2, tmp_path, {})
    # 64 x 20 steps / (20 x 0.5 s) = 128 sentences/s; sentence-transformers 64 x 20 / 40 = 32: ratio 4
    assert [r["sentences_per_s"] for r in result["runs"]["unisent"]] == [128.0, 128.0]
    assert [r["sentences_per_s"] for r in result["runs"]["sentence-transformers"]] == [32.0, 32.0]
    assert result["ratios"] == [4.0, 4.0] and result["median_ratio"] == 4.0
    first, second = ["fit", "fit", "st_train.py", "st_train.py"], ["st_train.py", "st_train.py", "fit", "fit"]
    assert [c[0] for c in calls] == first + second  # round 2 starts with the other system
    assert [c[1] for c in calls] == [5, 25] * 4  # short, then long
    assert speed.commands(tmp_path, "encode", "unisent", 100, fp32=True)[-2:] == ["--precision", "fp32"]
    assert "--trainer.precision=32-true" in speed.commands(tmp_path, "train", "unisent", 5, fp32=True)
    assert not any("precision" in word for word in speed.commands(tmp_path, "train", "unisent", 5))  # its default


def test_precision_quality_table_compares_means_against_the_seed_spread():
    quality = _script("precision_quality")
    rows = [
        {"seed": 1, "precision": "32-true", "fit_s": 60.0, "acc": 80.0},
        {"seed": 1, "precision": "bf16-mixed", "fit_s": 30.0, "acc": 80.5},
        {"seed": 2, "precision": "32-true", "fit_s": 62.0, "acc": 82.0},
        {"seed": 2, "precision": "bf16-mixed", "fit_s": 32.0, "acc": 81.0},
    ]
    text = quality.table({"cpu": "a CPU", "seeds": [1, 2], "runs": {"r": {"recipe": "x.yaml", "rows": rows}}})
    row = next(line for line in text.splitlines() if line.startswith("| r "))
    # means 81.00 / 80.75, gap -0.25, largest spread 2.00 (fp32 seeds), fit 61 / 31 s
    assert "| 80.00, 82.00 | 80.50, 81.00 | 81.00 | 80.75 | -0.25 | 2.00 | 61 / 31 |" in row


def test_cli_speed_settings_best_of_each_side_keeps_the_quality():
    """The best of a side is its fastest setting within 0.5 STS-B of its fp32 (issue 41): a faster int8
    that loses more than that does not count."""
    speed = _script("cli_speed")
    rows = {
        "sentence-transformers fp32": {"side": "st", "median": 300.0, "stsb": 82.03},
        "sentence-transformers bf16": {"side": "st", "median": 600.0, "stsb": 82.04},
        "ONNX Runtime fp32": {"side": "ort", "median": 400.0, "stsb": 82.03},
        "ONNX Runtime int8 per tensor": {"side": "ort", "median": 950.0, "stsb": 81.40},  # -0.63: out
        "ONNX Runtime int8 per channel": {"side": "ort", "median": 930.0, "stsb": 81.81},
        "unisent torch fp32": {"side": "unisent", "median": 500.0, "stsb": 82.03},
        "unisent onnx int8": {"side": "unisent", "median": 1200.0, "stsb": 81.75},
    }
    assert speed.best_of_sides(rows) == {
        "st": "sentence-transformers bf16",
        "ort": "ONNX Runtime int8 per channel",
        "unisent": "unisent onnx int8",
    }


@pytest.mark.slow  # 14 s: a benchmark script on a tiny run
def test_objective_memory_configurations_and_a_tiny_run(tmp_path, tiny_bert_dir):
    """benchmarks/objective_memory.py: each configuration drops one objective with its data and turns every
    other one on from step 0; a fresh process per configuration reports its peak RSS (on the tiny model)."""
    import yaml

    bench = _load("objective_memory")
    recipe = yaml.safe_load(bench.RECIPE.read_text(encoding="utf-8"))
    config = bench.configuration(recipe, "amr", 4, tmp_path)
    names = [bench._name(o) for o in config["model"]["objectives"]]
    assert names == ["gausscse", "ease", "cmlm", "bitext"]
    assert set(config["data"]["train"]) == set(config["data"]["batch_size"]) == set(names)
    assert config["data"]["length_grouped"] == {} and config["model"]["train"]["weight_schedule"] == {}
    assert config["model"]["balancer"] == recipe["model"]["balancer"] and config["trainer"]["max_steps"] == 4

    table = bench.table({"all": {"peak_gb": 3.4, "seconds": 200}, "cmlm": {"peak_gb": 2.9, "seconds": 150}})
    assert table.splitlines()[2:] == ["| all objectives | 3.40 |  | 200 |", "| without cmlm | 2.90 | 0.50 | 150 |"]

    sizes = {"gausscse": 4, "ease": 4, "amr": 2, "cmlm": 2, "bitext": 2}
    results = bench.run(
        steps=1, only=["bitext"], model=str(tiny_bert_dir), max_records=8, batch_size=sizes, workdir=tmp_path
    )
    assert list(results) == ["bitext"] and 0.1 < results["bitext"]["peak_gb"] < 20
    assert (tmp_path / "runs" / "bitext" / "version_0" / "metrics.csv").is_file()


@pytest.mark.slow  # 40 s: tests/test_grad_cache.py keeps cached against uncached in the default run
def test_cached_batch_runs_cached_and_uncached_with_the_same_losses(tiny_bert_dir, tmp_path):
    """benchmarks/cached_batch.py on the tiny BERT, two steps of batch 8: its table and JSON. Dropout off, the
    cached run (chunks of 4 rows: 16 sequences in 4 passes) logs the uncached run's loss at both steps (the
    second step's loss follows the first step's gradients); with dropout on, chunks smaller than the 16
    sequences draw other masks, so that equality only holds without dropout (or in a single chunk)."""
    import json

    bench = _load("cached_batch")
    assert bench.parse("b1024-c64") == (1024, 64) and bench.parse("b64") == (64, None)
    out, results = tmp_path / "table.md", tmp_path / "results.json"
    argv = ["--model", str(tiny_bert_dir), "--only", "b8", "b8-c4", "--steps", "2", "--max-length", "16"]
    argv += ["--dropout", "0", "--threads", "1", "--workdir", str(tmp_path / "work")]
    assert bench.main([*argv, "--out", str(out), "--json", str(results)]) == 0
    rows = json.loads(results.read_text())["results"]
    uncached, cached = rows["b8"], rows["b8-c4"]
    assert (uncached["cached"], cached["cached"], cached["chunk"]) == (False, True, 4)
    for row in (uncached, cached):
        assert row["batch"] == 8 and row["peak_gb"] > row["start_gb"] > 0.05 and row["sentences_per_s"] > 0
        assert len(row["losses"]) == 2 and row["timed_steps"] == 1
    assert cached["losses"] == pytest.approx(uncached["losses"], abs=1e-5)
    assert uncached["losses"][0] != pytest.approx(uncached["losses"][1], abs=1e-3)  # other batch, updated model
    lines = out.read_text().splitlines()
    assert lines[2].startswith("| 8 | no |  |") and lines[3].startswith("| 8 | yes | 4 |")
    assert bench.ratio(rows, "b8-c4", "b8") == cached["peak_gb"] / uncached["peak_gb"]


def test_the_gpu_checks_script_is_bash_and_names_recipes_that_exist():
    """benchmarks/gpu_checks.sh only runs where a GPU is (docs/benchmarks.md, "On a GPU"): here, that it parses and
    that every recipe it launches is in the repository."""
    import re
    import subprocess

    script = ROOT / "benchmarks" / "gpu_checks.sh"
    assert subprocess.run(["bash", "-n", str(script)], capture_output=True).returncode == 0
    recipes = re.findall(r"recipes/[\w/.-]+\.yaml", script.read_text(encoding="utf-8"))
    assert len(recipes) == 2 and all((ROOT / recipe).is_file() for recipe in recipes)
