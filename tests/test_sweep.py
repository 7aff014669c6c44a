"""``unisent sweep``: W&B sweep files whose parameters are CLI arguments; ``--local`` translates them to an
Optuna study (ask/tell), runs each trial as a subprocess that writes its own metric file, and resumes a
study from its storage after a kill."""

from __future__ import annotations

import json
import math
import os
import re
import signal
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import optuna
import pytest
import torch
import yaml
from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution
from optuna.trial import TrialState

from unisent.cli import main
from unisent.commands.sweep import (
    METRIC_CALLBACK,
    build_command,
    load_sweep,
    make_sampler,
    run_local,
    search_space,
)
from unisent.commands.sweep import main as sweep_main
from unisent.sweep_metrics import METRIC_FILE_ENV, MetricFile, read_metric

#: the repository's training, benchmark and test samples (not in the wheel)
SAMPLE_DIR = Path(__file__).resolve().parents[1] / "samples"

ROOT = Path(__file__).resolve().parents[1]
SWEEPS = sorted((ROOT / "recipes" / "sweeps").glob("*.yaml"))

# A stand-in for `unisent fit`: records its call, writes a metric file like MetricFile does (history: a better
# value first, so best != last), or misbehaves on request (mode=silent: no metric, mode=crash: exit 3,
# KILL_SWEEP_AT=n: the n-th call SIGKILLs the sweep process that started it).
FAKE_PROGRAM = """
import json, math, os, pathlib, signal, sys
args = dict(a[2:].split("=", 1) for a in sys.argv[1:])
calls = pathlib.Path(os.environ["UNISENT_SWEEP_TRIAL_DIR"]).parent / "calls.txt"
with calls.open("a") as f:
    f.write(json.dumps(args) + "\\n")
if os.environ.get("KILL_SWEEP_AT") == str(len(calls.read_text().splitlines())):
    os.kill(os.getppid(), signal.SIGKILL)
    sys.exit(0)
if args.get("mode") == "silent":
    sys.exit(0)
if args.get("mode") == "crash":
    sys.exit(3)
score = -(math.log10(float(args.get("lr", 1e-3))) + 3) ** 2
metrics = {"score": score, "val/score": score, "train/loss": 0.5}
history = [{"step": 1, "score": score + 1}, {"step": 2, "score": score}]
pathlib.Path(os.environ["UNISENT_SWEEP_METRIC_FILE"]).write_text(json.dumps({"metrics": metrics, "history": history}))
"""


def score(lr: float) -> float:
    return -((math.log10(lr) + 3) ** 2)


@pytest.fixture
def fake(tmp_path):
    script = tmp_path / "fake_fit.py"
    script.write_text(FAKE_PROGRAM)
    return script


def _config(fake, method="bayes", **parameters):
    parameters = parameters or {"lr": {"distribution": "log_uniform_values", "min": 1e-5, "max": 1e-1}}
    return {
        "name": "fake",
        "method": method,
        "metric": {"name": "score", "goal": "maximize"},
        "parameters": parameters,
        "command": ["${interpreter}", str(fake), "${args}"],
    }


def _dotted(config: dict, key: str):
    node = config
    for part in key.split("."):
        if isinstance(node, list):  # e.g. model.objectives.init_args.x: the (last) objective
            node = node[-1]
        node = node[part]
    return node


@pytest.mark.integration
@pytest.mark.parametrize("path", SWEEPS, ids=lambda p: p.name)
def test_sweep_file_translates_and_its_trial_arguments_reach_the_config(path, capsys, monkeypatch):
    monkeypatch.chdir(ROOT)
    config = load_sweep(path)
    assert config["metric"]["name"] == "val/score" and "${args}" in config["command"]
    space = search_space(config)
    assert set(space) == set(config["parameters"])
    study = optuna.create_study(sampler=make_sampler(config["method"], space, seed=1), direction="maximize")
    parameters = study.ask(space).params
    command = build_command(config["command"], parameters, config.get("program"))
    assert command[:4] == [sys.executable, "-m", "unisent.cli", "fit"]
    with pytest.raises(SystemExit) as exit_:
        main(command[3:] + [METRIC_CALLBACK, "--print_config"])
    assert exit_.value.code in (0, None)
    printed = yaml.safe_load(capsys.readouterr().out)
    for key, value in parameters.items():
        assert _dotted(printed, key) == pytest.approx(value), key
    assert [c["class_path"] for c in printed["trainer"]["callbacks"]] == ["unisent.sweep_metrics.MetricFile"]


def test_the_ease_grid_is_the_papers_and_a_grid_sweep_runs_each_point_once(fake, tmp_path):
    config = load_sweep(ROOT / "recipes/sweeps/ease-bert-base-grid.yaml")
    assert isinstance(make_sampler("grid", search_space(config)), optuna.samplers.GridSampler)
    results = run_local({**config, "command": ["${interpreter}", str(fake), "${args}"]}, tmp_path / "sweep")
    points = [
        (t["parameters"]["data.batch_size"], t["parameters"]["model.optimizer.init_args.lr"]) for t in results["trials"]
    ]
    assert sorted(points) == [(b, lr) for b in (64, 128, 256, 512) for lr in (3e-5, 5e-5)]
    assert all(t["status"] == "complete" for t in results["trials"])


def test_wandb_parameters_become_optuna_distributions():
    space = search_space(
        {
            "method": "random",
            "parameters": {
                "lr": {"distribution": "log_uniform_values", "min": 1e-5, "max": 1e-3},
                "layers": {"min": 1, "max": 4},
                "dropout": {"min": 0.0, "max": 0.5},
                "step": {"distribution": "q_uniform", "min": 0.0, "max": 1.0, "q": 0.25},
                "pooler": {"values": ["cls", "mean"]},
                "fixed": {"value": 7},
            },
        }
    )
    assert space == {
        "lr": FloatDistribution(1e-5, 1e-3, log=True),
        "layers": IntDistribution(1, 4),
        "dropout": FloatDistribution(0.0, 0.5),
        "step": FloatDistribution(0.0, 1.0, step=0.25),
        "pooler": CategoricalDistribution(["cls", "mean"]),
        "fixed": CategoricalDistribution([7]),
    }
    grid = search_space(
        {"method": "grid", "parameters": {"layers": {"distribution": "int_uniform", "min": 1, "max": 3}}}
    )
    assert grid == {"layers": CategoricalDistribution([1, 2, 3])}


@pytest.mark.parametrize(
    "method, spec, message",
    [
        ("random", {"distribution": "normal", "mu": 0, "sigma": 1}, "'p': distribution 'normal' is not supported"),
        ("random", {"values": ["a", "b"], "probabilities": [0.5, 0.5]}, "'p': .*no probabilities"),
        ("random", {"values": [[1, 2], [3]]}, "'p': values must be a list of numbers"),
        ("random", {"values": []}, "'p': .*one or more elements"),
        ("random", {"min": 1.0, "max": 0.5}, "'p': .*low=1.0, high=0.5"),
        ("random", {"distribution": "uniform", "min": 0.1}, "'p': uniform needs 'max'"),
        ("grid", {"min": 0.0, "max": 1.0}, "'p': grid search needs values"),
    ],
)
def test_unsupported_parameters_are_rejected_by_name(method, spec, message):
    with pytest.raises(ValueError, match=message):
        search_space({"method": method, "parameters": {"p": spec}})


def test_a_bad_sweep_file_is_a_one_line_error_naming_it(tmp_path, capsys):
    bad = tmp_path / "bad.yaml"
    bad.write_text(
        yaml.safe_dump(
            {
                "method": "random",
                "metric": {"name": "s"},
                "command": ["x"],
                "parameters": {"lr": {"distribution": "normal"}},
            }
        )
    )
    with pytest.raises(SystemExit) as exit_:
        sweep_main([str(bad), "--local", "--count", "2"])
    assert str(bad) in str(exit_.value.code) and "'lr'" in str(exit_.value.code)
    bad.write_text("method: annealing\n")
    with pytest.raises(
        SystemExit, match=re.escape("bad.yaml: a sweep file is a mapping with method (grid|random|bayes)")
    ):
        sweep_main([str(bad), "--local"])


def test_commands_expand_like_the_wandb_agent(monkeypatch):
    cmd = build_command(
        ["${env}", "unisent", "fit", "-c", "r.yaml", "${args}"],
        {"data.batch_size": 64, "model.optimizer.init_args.lr": 3e-5},
    )
    assert cmd == [
        sys.executable,
        "-m",
        "unisent.cli",
        "fit",
        "-c",
        "r.yaml",
        "--data.batch_size=64",
        "--model.optimizer.init_args.lr=3e-05",
    ]
    assert build_command(["${interpreter}", "${program}", "${args_no_hyphens}"], {"a": 1}, "train.py") == [
        sys.executable,
        "train.py",
        "a=1",
    ]
    assert build_command(["p", "${args_no_boolean_flags}"], {"a": True, "b": False, "c": 2}) == ["p", "--a", "--c=2"]
    monkeypatch.setenv("SWEEP_TEST_VAR", "v")
    assert build_command(["p", "${envvar:SWEEP_TEST_VAR}", "${args_json}"], {"a": 1}) == ["p", "v", '{"a": 1}']
    with pytest.raises(ValueError, match="unknown macro"):
        build_command(["${argz}"], {})


def test_random_search_follows_the_distributions():
    space = search_space(
        {
            "method": "random",
            "parameters": {
                "lr": {"distribution": "log_uniform_values", "min": 1e-5, "max": 1e-3},
                "layers": {"min": 1, "max": 4},
            },
        }
    )
    study = optuna.create_study(sampler=make_sampler("random", space, seed=0))
    draws = [study.ask(space).params for _ in range(200)]
    assert all(1e-5 <= d["lr"] <= 1e-3 and d["layers"] in (1, 2, 3, 4) for d in draws)
    assert {d["layers"] for d in draws} == {1, 2, 3, 4}
    assert 70 < sum(d["lr"] < 1e-4 for d in draws) < 130  # log-uniform: half below the geometric middle


def test_bayes_is_tpe_and_moves_towards_the_optimum(fake, tmp_path):
    """A bayes sweep of 40 fake trials, through ``run_local`` (the goal is the study's direction, each trial's
    metric file is what Optuna is told), whose score peaks at lr=1e-3: of trials 20-39, at least 10 lie within
    half a decade of it (TPE, seed 0: 12; 10-14 for 195 of seeds 0-199). The window is a quarter of the (log)
    range, so random search passes with probability P(Binomial(20, 1/4) >= 10) ~ 1.4% (1.3% of 20,000 seeds
    with the sampler forced to random); minimising instead of maximising puts none of them there."""
    config = _config(fake)  # bayes, lr log-uniform in [1e-5, 1e-1], maximize -(log10(lr) + 3)^2
    config["command"] = ["${interpreter}", "-S", str(fake), "${args}"]  # -S: no site-packages, faster trials
    assert isinstance(make_sampler("bayes", search_space(config)), optuna.samplers.TPESampler)
    trials = run_local(config, tmp_path / "sweep", count=40)["trials"]
    assert len(trials) == 40 and all(t["status"] == "complete" for t in trials)
    later = [t["parameters"]["lr"] for t in trials[20:]]
    assert sum(abs(math.log10(lr) + 3) < 0.5 for lr in later) >= 10


def test_local_sweep_feeds_each_trials_metric_file_back(fake, tmp_path, capsys):
    results = run_local(_config(fake), tmp_path / "sweep", count=5)
    trials = results["trials"]
    assert len(trials) == 5 and all(t["status"] == "complete" for t in trials)
    assert all(t["metric"] == pytest.approx(score(t["parameters"]["lr"])) for t in trials)
    assert all(t["best"] == pytest.approx(t["metric"] + 1) for t in trials)
    assert results["best"]["metric"] == max(t["metric"] for t in trials)
    assert json.loads((tmp_path / "sweep" / "results.json").read_text())["best"]["trial"] == results["best"]["trial"]
    assert "[sweep] trial 4: score=" in capsys.readouterr().out


def test_a_trial_without_a_metric_is_a_failed_trial(fake, tmp_path, capsys):
    config = _config(fake, "grid", mode={"values": ["ok", "silent", "crash"]})
    storage = f"sqlite:///{tmp_path / 'study.db'}"
    with pytest.warns(UserWarning, match=r"trial \d failed \((no score in metrics.json|exit 3)\)"):
        results = run_local(config, tmp_path / "sweep", storage=storage, study_name="g")
    status = {t["parameters"]["mode"]: t["status"] for t in results["trials"]}
    assert status == {"ok": "complete", "silent": "failed (no score in metrics.json)", "crash": "failed (exit 3)"}
    states = {t.params["mode"]: t.state for t in optuna.load_study(study_name="g", storage=storage).trials}
    assert states == {"ok": TrialState.COMPLETE, "silent": TrialState.FAIL, "crash": TrialState.FAIL}
    # a sweep whose every trial fails says so and exits non-zero
    sweep = tmp_path / "silent.yaml"
    sweep.write_text(yaml.safe_dump(_config(fake, "grid", mode={"values": ["silent", "crash"]})))
    with pytest.warns(UserWarning), pytest.raises(SystemExit, match="every trial failed"):
        sweep_main([str(sweep), "--local", "--output", str(tmp_path / "all-failed")])
    assert "| 1 | " in capsys.readouterr().out


@pytest.mark.integration
def test_a_killed_bayes_sweep_resumes_from_its_storage(fake, tmp_path, monkeypatch, capsys):
    sweep, out = tmp_path / "bayes.yaml", tmp_path / "sweep"
    sweep.write_text(yaml.safe_dump(_config(fake)))
    storage = f"sqlite:///{tmp_path / 'study.db'}"
    args = [str(sweep), "--local", "--count", "6", "--storage", storage, "--study-name", "b", "--output", str(out)]
    runner = "import sys; from unisent.commands.sweep import main; main(sys.argv[1:])"
    killed = subprocess.run(
        [sys.executable, "-c", runner, *args],
        env={**os.environ, "KILL_SWEEP_AT": "4"},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-2000:]
    before = optuna.load_study(study_name="b", storage=storage).trials
    assert [t.state for t in before] == [TrialState.COMPLETE] * 3 + [TrialState.RUNNING]

    sweep_main(args)  # the same command again: resumes
    after = optuna.load_study(study_name="b", storage=storage).trials
    assert [(t.params, t.value) for t in after[:3]] == [(t.params, t.value) for t in before[:3]]
    assert after[3].state == TrialState.FAIL  # the interrupted trial ...
    assert after[4].params == before[3].params and after[4].user_attrs["retry_of"] == 3  # ... runs again
    assert len(after) == 7 and sum(t.state == TrialState.COMPLETE for t in after) == 6
    assert all(t.value == pytest.approx(score(t.params["lr"])) for t in after if t.state == TrialState.COMPLETE)
    results = json.loads((out / "results.json").read_text())
    assert [t["status"] for t in results["trials"]][3] == "interrupted"
    assert "best: trial" in capsys.readouterr().out
    sweep_main(args)  # finished: nothing more to run
    assert len(optuna.load_study(study_name="b", storage=storage).trials) == 7


def test_metric_file_callback(tmp_path, monkeypatch):
    monkeypatch.setenv(METRIC_FILE_ENV, str(tmp_path / "m.json"))
    callback = MetricFile()
    assert callback.path == str(tmp_path / "m.json")
    trainer = SimpleNamespace(
        sanity_checking=False,
        is_global_zero=True,
        global_step=5,
        max_steps=5,
        should_stop=False,
        callback_metrics={
            "val/score": torch.tensor(70.0),
            "val/nan": torch.tensor(float("nan")),
            "vector": torch.ones(3),
        },
    )
    callback.on_train_batch_end(trainer, None, None, None, 4)
    assert trainer.should_stop  # max_steps reached mid-epoch: stop, which makes Lightning validate first
    unlimited = SimpleNamespace(global_step=5, max_steps=-1, should_stop=False)
    callback.on_train_batch_end(unlimited, None, None, None, 4)
    assert not unlimited.should_stop
    callback.on_validation_end(trainer, None)
    trainer.callback_metrics["val/score"], trainer.global_step = torch.tensor(60.0), 10
    callback.on_validation_end(trainer, None)
    written = json.loads((tmp_path / "m.json").read_text())
    assert written["metrics"] == {"val/score": 60.0, "val/nan": None, "vector": None}
    assert [row["step"] for row in written["history"]] == [5, 10]
    assert read_metric(tmp_path / "m.json", "val/score") == (60.0, 70.0)
    assert read_metric(tmp_path / "m.json", "val/score", goal="minimize") == (60.0, 60.0)
    assert read_metric(tmp_path / "m.json", "val/nan") == (None, None)
    assert read_metric(tmp_path / "missing.json", "val/score") == (None, None)
    trainer.sanity_checking, trainer.callback_metrics["val/score"] = True, torch.tensor(1.0)
    callback.on_validation_end(trainer, None)
    assert json.loads((tmp_path / "m.json").read_text())["metrics"]["val/score"] == 60.0


@pytest.mark.slow  # 47 s: the killed Bayes sweep keeps trials of a real model in the default run
def test_offline_grid_sweep_on_a_tiny_model_measures_every_trial(tiny_bert_dir, tmp_path, monkeypatch, capsys):
    """max_steps (2) ends the run in the middle of its first epoch (8 batches): the metric callback makes
    Lightning validate before it stops, so that every trial has a val/score."""
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    monkeypatch.chdir(ROOT)
    recipe = tmp_path / "tiny.yaml"
    recipe.write_text(
        yaml.safe_dump(
            {
                "seed_everything": 1,
                "model": {
                    "encoder": {"model": str(tiny_bert_dir), "max_length": 32},
                    "objectives": [{"class_path": "unisent.objectives.SimCSE", "init_args": {"name": "simcse"}}],
                },
                "data": {
                    "train": {"simcse": {"path": str(SAMPLE_DIR / "sentences.txt"), "max_records": 64}},
                    "batch_size": 8,
                },
                "trainer": {
                    "max_epochs": 1,
                    "enable_progress_bar": False,
                    "enable_model_summary": False,
                    "log_every_n_steps": 1,
                },
            }
        )
    )
    sweep = tmp_path / "grid.yaml"
    sweep.write_text(
        yaml.safe_dump(
            {
                "name": "tiny-grid",
                "method": "grid",
                "metric": {"name": "val/score", "goal": "maximize"},
                "parameters": {"model.optimizer.init_args.lr": {"values": [1.0e-4, 1.0e-3]}},
                "command": [
                    "${env}",
                    "unisent",
                    "fit",
                    "-c",
                    str(recipe),
                    "-c",
                    "recipes/loggers/wandb.yaml",
                    "${args}",
                ],
            }
        )
    )
    out = tmp_path / "sweep"
    sweep_main([str(sweep), "--local", "--output", str(out), "--", "--trainer.max_steps=2"])
    printed = capsys.readouterr().out
    results = json.loads((out / "results.json").read_text())
    trials = results["trials"]
    assert sorted(t["parameters"]["model.optimizer.init_args.lr"] for t in trials) == [1e-4, 1e-3]
    for t in trials:
        assert t["status"] == "complete", Path(t["run_dir"], "output.log").read_text()[-3000:]
        assert isinstance(t["metric"], float) and -100 <= t["metric"] <= 100
        written = json.loads(Path(t["run_dir"], "metrics.json").read_text())
        assert [row["step"] for row in written["history"]] == [2] and written["metrics"]["val/score"] == t["metric"]
        (run_config,) = Path(t["run_dir"]).glob("*/*/config.yaml")  # the trial's own run: <project>/<W&B run id>/
        assert (run_config.parent / "checkpoints").is_dir()  # beside its checkpoints
        trial_config = yaml.safe_load(run_config.read_text())
        assert trial_config["model"]["optimizer"]["init_args"]["lr"] == t["parameters"]["model.optimizer.init_args.lr"]
        runs = list(Path(t["run_dir"]).glob("wandb/offline-run-*"))
        assert len(runs) == 1, t["run_dir"]  # the trial logged to W&B (offline) in its own directory
        table = list(runs[0].glob("files/media/table/val/results_*.table.json"))
        assert table and json.loads(table[0].read_text())["columns"] == ["task", "metric", "score"]
    assert (
        "| trial | model.optimizer.init_args.lr | val/score | best | status |" in printed and "best: trial" in printed
    )


def test_online_sweep_registers_the_file_and_runs_an_agent(monkeypatch, capsys):
    import wandb  # in the dev extra: a missing install fails here instead of skipping

    calls = {}
    monkeypatch.setattr(
        wandb,
        "sweep",
        lambda config, project=None, entity=None: calls.update(sweep=(config, project, entity)) or "abc123",
    )
    monkeypatch.setattr(wandb, "agent", lambda sweep_id, **kw: calls.update(agent=(sweep_id, kw)))
    sweep_main([str(ROOT / "recipes/sweeps/ease-bert-base-grid.yaml"), "--project", "p", "--count", "3"])
    config, project, entity = calls["sweep"]
    assert config["method"] == "grid" and config["parameters"]["data.batch_size"]["values"] == [64, 128, 256, 512]
    assert project == "p" and entity is None
    assert calls["agent"] == ("abc123", {"project": "p", "entity": None, "count": 3})
    assert "abc123" in capsys.readouterr().out


def test_help_and_print_config_behave_as_in_other_commands(tmp_path, capsys):
    with pytest.raises(SystemExit):
        sweep_main(["--help"])
    assert "--storage" in capsys.readouterr().out
    config = tmp_path / "args.yaml"
    config.write_text("count: 3\nlocal: true\nstudy_name: s\n")
    with pytest.raises(SystemExit):
        sweep_main(["--config", str(config), "x.yaml", "--print_config"])
    printed = yaml.safe_load(capsys.readouterr().out)
    assert (
        printed["count"] == 3
        and printed["local"] is True
        and printed["study_name"] == "s"
        and printed["sweep"] == "x.yaml"
    )
    with pytest.raises(SystemExit) as exit_:  # trial arguments without --local: a usage error
        sweep_main([str(ROOT / "recipes/sweeps/quickstart-grid.yaml"), "--", "--trainer.max_steps=5"])
    assert exit_.value.code == 2 and "need --local" in capsys.readouterr().err


def test_online_sweep_and_its_agent_get_the_sweep_files_entity(monkeypatch, capsys):
    """The entity of the sweep file reaches wandb.agent too, not only wandb.sweep (an agent of another
    entity would not find the sweep); --entity overrides it for both."""
    import sys
    import types

    from unisent.commands.sweep import run_online

    calls = []
    fake_wandb = types.SimpleNamespace(
        sweep=lambda config, **kw: calls.append(("sweep", kw)) or "abc123",
        agent=lambda sweep_id, **kw: calls.append(("agent", kw)),
    )
    monkeypatch.setitem(sys.modules, "wandb", fake_wandb)
    run_online({"entity": "team-a", "project": "p", "method": "grid", "parameters": {}}, None, None, 2)
    assert [kw["entity"] for _, kw in calls] == ["team-a", "team-a"]
    assert "wandb agent team-a/p/abc123" in capsys.readouterr().out
    calls.clear()
    run_online({"entity": "team-a", "method": "grid", "parameters": {}}, "q", "me", None)
    assert [kw["entity"] for _, kw in calls] == ["me", "me"]
