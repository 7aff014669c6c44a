"""``unisent sweep``: W&B sweep files whose parameters are CLI arguments; the offline search runs
``unisent fit`` trials, reads their metric back and feeds it to the search."""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import pytest
import yaml

from unisent.cli import main
from unisent.commands.sweep import (
    BuiltinEngine,
    build_command,
    load_sweep,
    make_engine,
    read_wandb_run,
    run_local,
)
from unisent.commands.sweep import main as sweep_main
from unisent.data import SAMPLE_DIR

ROOT = Path(__file__).resolve().parents[1]
SWEEPS = sorted((ROOT / "recipes" / "sweeps").glob("*.yaml"))


def _dotted(config: dict, key: str):
    node = config
    for part in key.split("."):
        if isinstance(node, list):  # e.g. model.objectives.init_args.x: the (last) objective
            node = node[-1]
        node = node[part]
    return node


@pytest.mark.parametrize("path", SWEEPS, ids=lambda p: p.name)
def test_sweep_file_is_valid_and_its_trial_arguments_reach_the_config(path, capsys, monkeypatch):
    monkeypatch.chdir(ROOT)
    config = load_sweep(path)
    assert config["metric"]["name"] == "val/score" and "${args}" in config["command"]
    parameters = BuiltinEngine(config, seed=1).next([])
    command = build_command(config["command"], parameters, config.get("program"))
    assert command[:4] == [sys.executable, "-m", "unisent.cli", "fit"]
    with pytest.raises(SystemExit) as exit_:
        main(command[3:] + ["--print_config"])
    assert exit_.value.code in (0, None)
    printed = yaml.safe_load(capsys.readouterr().out)
    for key, value in parameters.items():
        assert _dotted(printed, key) == pytest.approx(value), key


def test_the_ease_grid_is_the_papers():
    config = load_sweep(ROOT / "recipes/sweeps/ease-bert-base-grid.yaml")
    engine = BuiltinEngine(config)
    points = [engine.next([None] * i) for i in range(engine.size)]
    assert engine.size == 8 and engine.next([None] * 8) is None
    assert {(p["data.batch_size"], p["model.optimizer.init_args.lr"]) for p in points} == {
        (b, lr) for b in (64, 128, 256, 512) for lr in (3e-5, 5e-5)}


def test_commands_expand_like_the_wandb_agent():
    cmd = build_command(["${env}", "unisent", "fit", "-c", "r.yaml", "${args}"], {"data.batch_size": 64, "model.optimizer.init_args.lr": 3e-5})
    assert cmd == [sys.executable, "-m", "unisent.cli", "fit", "-c", "r.yaml", "--data.batch_size=64", "--model.optimizer.init_args.lr=3e-05"]
    assert build_command(["${interpreter}", "${program}", "${args_no_hyphens}"], {"a": 1}, "train.py") == [sys.executable, "train.py", "a=1"]
    with pytest.raises(ValueError, match="unknown macro"):
        build_command(["${argz}"], {})


def test_random_search_follows_wandb_distributions():
    config = {"method": "random", "parameters": {
        "lr": {"distribution": "log_uniform_values", "min": 1e-5, "max": 1e-3},
        "layers": {"min": 1, "max": 4}, "dropout": {"min": 0.0, "max": 0.5},
        "pooler": {"values": ["cls", "mean"], "probabilities": [1.0, 0.0]}, "fixed": {"value": 7}}}
    engine = BuiltinEngine(config, seed=0)
    draws = [engine.next([]) for _ in range(200)]
    assert all(1e-5 <= d["lr"] <= 1e-3 and d["layers"] in (1, 2, 3, 4) and 0 <= d["dropout"] <= 0.5 for d in draws)
    assert {d["pooler"] for d in draws} == {"cls"} and {d["fixed"] for d in draws} == {7}
    assert sum(d["lr"] < 1e-4 for d in draws) > 70  # log-uniform: half the draws below the geometric middle
    with pytest.raises(ValueError, match="grid search needs values"):
        BuiltinEngine({**config, "method": "grid"})


def test_builtin_bayes_moves_towards_the_better_metric():
    config = {"method": "bayes", "metric": {"name": "score", "goal": "maximize"},
              "parameters": {"lr": {"distribution": "log_uniform_values", "min": 1e-6, "max": 1e-2}}}
    engine = BuiltinEngine(config, seed=0)
    history = []
    for trial in range(10):
        p = engine.next(history)
        score = -(math.log10(p["lr"]) + 4) ** 2  # best at lr = 1e-4
        history.append({"trial": trial, "parameters": p, "metric": score, "status": "finished"})
    best = max(history, key=lambda h: h["metric"])
    assert abs(math.log10(best["parameters"]["lr"]) + 4) < 0.5


def test_local_sweep_feeds_each_trials_metric_back(tmp_path):
    """A bayes sweep over a stand-in command that writes a CSV log: the whole loop without training."""
    script = tmp_path / "fake_fit.py"
    script.write_text(
        "import math, os, pathlib, sys\n"
        "args = dict(a[2:].split('=', 1) for a in sys.argv[1:])\n"
        "score = -(math.log10(float(args['lr'])) + 3) ** 2\n"
        "out = pathlib.Path(os.environ['UNISENT_SWEEP_TRIAL_DIR'])\n"
        "(out / 'metrics.csv').write_text(f'step,val/score\\n1,{score - 1}\\n2,{score}\\n')\n"
    )
    config = {"method": "bayes", "metric": {"name": "val/score", "goal": "maximize"},
              "parameters": {"lr": {"distribution": "log_uniform_values", "min": 1e-5, "max": 1e-1}},
              "command": ["${interpreter}", str(script), "${args}"]}
    results = run_local(config, tmp_path / "sweep", count=6, engine="builtin", quiet=True)
    trials = results["trials"]
    assert len(trials) == 6 and all(t["status"] == "finished" for t in trials)
    assert all(t["metric"] == pytest.approx(-(math.log10(t["parameters"]["lr"]) + 3) ** 2) for t in trials)
    assert all(t["best"] == pytest.approx(t["metric"]) for t in trials)
    assert json.loads((tmp_path / "sweep" / "results.json").read_text())["best"]["trial"] == results["best"]["trial"]


@pytest.mark.skipif("sweeps" not in sys.modules and __import__("importlib").util.find_spec("sweeps") is None,
                    reason="W&B's `sweeps` package is not installed (it pins numpy<2)")
def test_the_wandb_sweeps_engine_is_used_when_installed():
    config = load_sweep(ROOT / "recipes/sweeps/simcse-unsup-bayes.yaml")
    engine = make_engine(config)
    assert type(engine).__name__ == "SweepsEngine"
    first = engine.next([])
    assert set(first) == set(config["parameters"])


def test_offline_grid_sweep_on_a_tiny_model_records_both_runs(tiny_bert_dir, tmp_path, monkeypatch, capsys):
    pytest.importorskip("wandb")
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    monkeypatch.chdir(ROOT)
    recipe = tmp_path / "tiny.yaml"
    recipe.write_text(yaml.safe_dump({
        "seed_everything": 1,
        "model": {"encoder": {"model": str(tiny_bert_dir), "max_length": 32},
                  "objectives": [{"class_path": "unisent.objectives.SimCSE", "init_args": {"name": "simcse"}}]},
        "data": {"train": {"simcse": {"path": str(SAMPLE_DIR / "sentences.txt"), "max_records": 64}}, "batch_size": 8},
        "trainer": {"max_steps": 2, "val_check_interval": 2, "check_val_every_n_epoch": None,
                    "enable_progress_bar": False, "enable_model_summary": False, "log_every_n_steps": 1},
    }))
    sweep = tmp_path / "grid.yaml"
    sweep.write_text(yaml.safe_dump({
        "name": "tiny-grid", "method": "grid", "metric": {"name": "val/score", "goal": "maximize"},
        "parameters": {"model.optimizer.init_args.lr": {"values": [1.0e-4, 1.0e-3]}},
        "command": ["${env}", "unisent", "fit", "-c", str(recipe), "-c", "recipes/loggers/wandb.yaml", "${args}"],
    }))
    out = tmp_path / "sweep"
    sweep_main([str(sweep), "--local", "--output", str(out)])
    printed = capsys.readouterr().out
    results = json.loads((out / "results.json").read_text())
    trials = results["trials"]
    assert [t["parameters"]["model.optimizer.init_args.lr"] for t in trials] == [1e-4, 1e-3]
    for t in trials:
        assert t["status"] == "finished", Path(t["run_dir"], "output.log").read_text()[-3000:]
        assert isinstance(t["metric"], float) and -100 <= t["metric"] <= 100
        runs = list(Path(t["run_dir"]).glob("wandb/offline-run-*"))
        assert len(runs) == 1, t["run_dir"]
        logged = read_wandb_run(runs[0])
        assert logged["summary"]["val/score"] == t["metric"]
        # the full config (every objective with its settings) and the evaluation table are in the run
        assert "SimCSE" in json.dumps(logged["config"]["config"]["model"]["objectives"])
        assert logged["config"]["config"]["model"]["optimizer"]["init_args"]["lr"] == t["parameters"]["model.optimizer.init_args.lr"]
        assert logged["config"]["unisent"]["objectives"][0]["init_args"]["temperature"] == 0.05
        table = list(runs[0].glob("files/media/table/val/results_*.table.json"))
        assert table and json.loads(table[0].read_text())["columns"] == ["task", "metric", "score"]
    assert "| trial | model.optimizer.init_args.lr | val/score |" in printed and "best: trial" in printed


def test_online_sweep_registers_the_file_and_runs_an_agent(monkeypatch, capsys):
    wandb = pytest.importorskip("wandb")
    calls = {}
    monkeypatch.setattr(wandb, "sweep", lambda config, project=None, entity=None: calls.update(sweep=(config, project, entity)) or "abc123")
    monkeypatch.setattr(wandb, "agent", lambda sweep_id, **kw: calls.update(agent=(sweep_id, kw)))
    sweep_main([str(ROOT / "recipes/sweeps/ease-bert-base-grid.yaml"), "--project", "p", "--count", "3"])
    config, project, entity = calls["sweep"]
    assert config["method"] == "grid" and config["parameters"]["data.batch_size"]["values"] == [64, 128, 256, 512]
    assert project == "p" and entity is None
    assert calls["agent"] == ("abc123", {"project": "p", "entity": None, "count": 3})
    assert "abc123" in capsys.readouterr().out
