"""``unisent ablate``: on the tiny model, a recipe with two objectives and two seeds gives its table (mean and
95% interval per cell, from the runs' own result files), its plot, and resumes after a SIGKILL without
rerunning finished runs; the generated recipes keep each objective's data; mistakes are one line (the options
that wrote this project's pages point to studies/); an interrupted fit stops the study. The pages written from
``ablation.json`` are tests/studies/test_study_pages.py's."""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

import unisent.commands.ablate as ablate_command
from unisent.commands.ablate import ablate
from unisent.commands.ablate import run as ablate_run
from unisent.commands.ablate.plan import PER_OBJECTIVE_DATA, Run, plan, run_recipe
from unisent.commands.ablate.summarise import interval, table, target_verdicts
from unisent.commands.function_commands import UsageError

pytestmark = pytest.mark.usefixtures("one_thread")
ROOT = Path(__file__).resolve().parents[1]


def _two_objectives(tiny_unified) -> Path:
    path = tiny_unified(max_steps=2, keep=("EASE", "AMRSimCSE"))
    config = yaml.safe_load(path.read_text(encoding="utf-8"))
    model = config["model"]
    model["evaluation"]["panel"] = ["stsb-test", "entity-top10"]
    model["evaluation"]["panel_own"] = {"ease": "entity-top10", "amr": "stsb-test"}
    model["evaluation"]["panel_targets"] = {"stsb-test": -100.0, "entity-top10": 1000.0}  # one met, one missed
    path.write_text(yaml.safe_dump(config, sort_keys=False), encoding="utf-8")
    return path


def _entity_records(recipe: Path, tmp_path: Path) -> Path:
    """The 48 records the tiny entity table is built from."""
    train = Path(yaml.safe_load(recipe.read_text())["data"]["train"]["ease"]["path"])
    records = tmp_path / "entity-records.jsonl"
    records.write_text("".join(train.read_text(encoding="utf-8").splitlines(keepends=True)[:48]), encoding="utf-8")
    return records


def test_interval_by_hand():
    mean, half = interval([1.0, 2.0, 4.0])
    sd = math.sqrt(((1 - 7 / 3) ** 2 + (2 - 7 / 3) ** 2 + (4 - 7 / 3) ** 2) / 2)
    assert mean == pytest.approx(7 / 3)
    assert half == pytest.approx(4.302653 * sd / math.sqrt(3), rel=1e-5)  # t(0.975, 2)
    assert interval([5.0]) == (5.0, None)


def _row(name, kind, **cells):
    cells = {c: {"mean": m, "ci": ci} for c, (m, ci) in cells.items()}
    return {"row": name, "kind": kind, "cells": cells, "seeds": [1, 2], "train_minutes": [1.0, 1.0]}


def test_target_verdicts_by_hand():
    """Each target: mean - target and met; an own column below the single-objective row by more than that
    row's half-width is named with the gap beyond it; a row meets every line only if both hold."""
    rows = [
        _row("unified (static)", "unified", stsb=(81.9, 0.5), own_a=(60.0, 3.0), own_b=(20.0, 1.0)),
        _row("unified (upgrad)", "unified", stsb=(82.3, 0.4), own_a=(64.0, 2.0), own_b=(21.5, 0.5)),
        _row("only a", "single", own_a=(62.0, 1.5)),
        _row("only b", "single", own_b=(21.8, 0.4)),
    ]
    own, units = {"a": "own_a", "b": "own_b"}, {"a": ("a",), "b": ("b",)}
    verdicts = target_verdicts(rows, {"stsb": 82.0, "own_a": 61.0}, own, units)
    static, upgrad = verdicts["unified (static)"], verdicts["unified (upgrad)"]
    assert static["targets"]["stsb"]["margin"] == pytest.approx(-0.1) and not static["targets"]["stsb"]["met"]
    assert static["targets"]["own_a"]["margin"] == pytest.approx(-1.0)
    # a: 60.0 vs 62.0 +- 1.5 -> 0.5 below the interval; b: 20.0 vs 21.8 +- 0.4 -> 1.4 below
    assert static["own_below"] == pytest.approx({"a": 0.5, "b": 1.4}) and not static["all_met"]
    assert upgrad["own_below"] == {} and upgrad["targets"]["stsb"]["margin"] == pytest.approx(0.3)
    assert upgrad["all_met"]
    text = table(rows, ["stsb", "own_a", "own_b"], own, units, {"stsb": 82.0, "own_a": 61.0})
    assert "| unified (static) | 81.90, **missed by 0.10** | 60.00, **missed by 1.00** |" in text
    assert "**a 0.50 below**, **b 1.40 below** | no |" in text
    assert "| unified (upgrad) | 82.30, met by 0.30 | 64.00, met by 3.00 | all within | yes |" in text


def test_the_summary_alone_writes_the_table_and_the_plot_again(tmp_path):
    """Everything after the runs reads ``ablation.json``: the table (with the notes under it) and the plot, the
    same bytes from the same summary, and nothing else in the folder (a results page is studies/' job)."""
    from unisent.commands.ablate.summarise import publish, summary_table

    rows = [_row("unified (upgrad)", "unified", stsb=(81.0, 0.5)), _row("only a", "single", stsb=(80.0, 1.0))]
    for row in rows:
        row["slug"] = row["row"].replace(" ", "-")
        row["precision"] = ["32-true", "32-true"]
    summary = {"rows": rows, "columns": ["stsb"], "own": {}, "units": {}, "panel_targets": {"stsb": 80.5}}
    summary["missing"] = ["only-a/seed3"]
    text = publish(summary, tmp_path / "out")
    assert text == summary_table(summary) == (tmp_path / "out" / "ablation.md").read_text(encoding="utf-8")
    assert (
        "| unified (upgrad) | 2 | 81.00 ± 0.50 | 1.0 |" in text and "| unified (upgrad) | 81.00, met by 0.50 |" in text
    )
    assert "Training precision per seed: unified (upgrad) 32-true (1, 2); only a 32-true (1, 2)." in text
    assert text.endswith("Not run (1 planned runs, left out of every row above): only-a/seed3.\n")
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["ablation.md", "ablation.png"]
    png = (tmp_path / "out" / "ablation.png").read_bytes()
    assert publish(summary, tmp_path / "again") == text and (tmp_path / "again" / "ablation.png").read_bytes() == png


def test_plan_and_the_generated_recipes(tiny_unified, tmp_path):
    config = yaml.safe_load(tiny_unified().read_text(encoding="utf-8"))
    config["trainer"]["val_check_interval"] = 5
    kinds = ["untrained", "unified", "single", "leave-one-out"]
    runs = plan(config, [1, 2], ["pcgrad", "static"], kinds, ["cmlm=cmlm,bitext"])
    rows = sorted({r.row for r in runs})
    assert rows == sorted(
        ["untrained", "unified (pcgrad)", "unified (static)"]
        + [f"{k} {u}" for k in ("only", "without") for u in ("gausscse", "ease", "amr", "cmlm")]
    )
    assert len(runs) == 1 + 2 * 10  # the untrained encoder is evaluated once
    only_cmlm = next(r for r in runs if r.row == "only cmlm" and r.seed == 2)
    recipe = run_recipe(config, only_cmlm, 7, tmp_path, conflict_every=3)
    assert [o["class_path"].rsplit(".", 1)[1] for o in recipe["model"]["objectives"]] == ["CMLM", "BitextRetrieval"]
    assert set(recipe["data"]["train"]) == {"cmlm", "bitext"}
    assert set(recipe["data"]["batch_size"]) == {"cmlm", "bitext"}
    assert recipe["model"]["train"]["weight_schedule"] == {"bitext": [[0, 0.0], [2, 0.2]]}
    assert recipe["model"]["balancer"] == {"class_path": "unisent.balancers.PCGrad"}  # the first balancer
    assert recipe["seed_everything"] == 2 and recipe["trainer"]["max_steps"] == 7
    # validation every 5 steps whatever the epoch length (an objective alone has shorter epochs)
    assert recipe["trainer"]["check_val_every_n_epoch"] is None and recipe["trainer"]["val_check_interval"] == 5
    assert recipe["trainer"]["logger"]["init_args"]["version"] == "seed2"
    without_ease = next(r for r in runs if r.row == "without ease")
    assert "ease" not in run_recipe(config, without_ease, 7, tmp_path, 3)["data"]["train"]
    # --leave_out: the leave-one-out rows of the units named only (a group by its label); a typo is one line
    chosen = plan(config, [1], ["upgrad"], ["unified", "leave-one-out"], ["cmlm=cmlm,bitext"], ["ease", "cmlm"])
    assert [r.row for r in chosen] == ["unified (upgrad)", "without ease", "without cmlm"]
    with pytest.raises(UsageError, match=r"--leave_out: eas \(did you mean 'ease'\?\) not a unit"):
        plan(config, [1], ["upgrad"], ["leave-one-out"], ["cmlm=cmlm,bitext"], ["eas"])


def test_anchored_runs_hold_the_start_only_where_the_anchor_is(tmp_path):
    """``--balancers anchored``: the unified run keeps Anchored; a run without Distill (``only ease``,
    ``without distill``) has nothing to hold the start with and gets the tasks' UPGrad."""
    recipe = ROOT / "recipes" / "unified" / "minilm-cpu-balanced-distill.yaml"
    config = yaml.safe_load(recipe.read_text(encoding="utf-8"))
    runs = {r.row: r for r in plan(config, [42], ["anchored"], ["unified", "single", "leave-one-out"], [])}
    anchored = {"class_path": "unisent.balancers.Anchored"}
    upgrad = {"class_path": "unisent.balancers.JacobianAggregator", "init_args": {"aggregator": "UPGrad"}}
    assert run_recipe(config, runs["unified (anchored)"], 62, tmp_path, 10)["model"]["balancer"] == anchored
    assert run_recipe(config, runs["without ease"], 62, tmp_path, 10)["model"]["balancer"] == anchored
    for row in ("only ease", "without distill"):
        assert run_recipe(config, runs[row], 62, tmp_path, 10)["model"]["balancer"] == upgrad
    # a class path with its own anchor and aggregator: the run without that anchor gets that aggregator
    from unisent.balancers import Anchored

    mgda = {"class_path": "unisent.balancers.Anchored", "init_args": {"anchor": "ease", "aggregator": "MGDA"}}
    runs = {r.row: r for r in plan(config, [42], [mgda["class_path"]], ["single"], [])}
    assert Anchored.without_anchor(mgda["init_args"], set(runs["only ease"].objectives)) is None
    expected = {"class_path": "unisent.balancers.JacobianAggregator", "init_args": {"aggregator": "MGDA"}}
    assert Anchored.without_anchor(mgda["init_args"], set(runs["only amr"].objectives)) == expected


def test_the_real_unified_recipe_split_by_objective(tmp_path):
    """What benchmarks/unified_ablation.py did for docs/results/unified.md, now the command's run_recipe."""
    config = yaml.safe_load((ROOT / "recipes" / "unified" / "minilm-cpu.yaml").read_text(encoding="utf-8"))
    runs = {r.row: r for r in plan(config, [42], ["static"], ["single", "leave-one-out"], ["cmlm=cmlm,bitext"])}
    only = run_recipe(config, runs["only cmlm"], 186, tmp_path, 10)  # CMLM keeps its bitext term
    assert [o["class_path"].rsplit(".", 1)[-1] for o in only["model"]["objectives"]] == ["CMLM", "BitextRetrieval"]
    assert set(only["data"]["train"]) == set(only["data"]["batch_size"]) == {"cmlm", "bitext"}
    assert only["model"]["train"]["weight_schedule"] == {"bitext": [[0, 0.0], [62, 0.2]]}
    without = run_recipe(config, runs["without gausscse"], 186, tmp_path, 10)
    assert set(without["data"]["train"]) == {"ease", "amr", "cmlm", "bitext"} and not any(
        o["class_path"].endswith("GaussCSE") for o in without["model"]["objectives"]
    )
    assert without["data"]["batch_size"]["ease"] == 64 and without["trainer"]["max_steps"] == 186
    assert without["trainer"]["max_epochs"] == -1 and without["model"]["train"]["conflict_every"] == 10
    assert without["data"]["length_grouped"] == {"amr": True} and only["data"]["length_grouped"] == {}


def _results(out: Path) -> dict[str, tuple[float, str]]:
    return {str(p.relative_to(out)): (p.stat().st_mtime, p.read_text()) for p in (out / "results").rglob("*.json")}


@pytest.mark.slow  # 58 s: the merge-row test keeps a real `unisent ablate` of runs in the default run
def test_ablate_two_objectives_two_seeds_table_and_resume_after_a_kill(tiny_unified, tmp_path):
    recipe = _two_objectives(tiny_unified)
    out = tmp_path / "ablate"
    records = _entity_records(recipe, tmp_path)
    args = [str(recipe), f"--out={out}", "--seeds", "1", "2", "--conflict_every=1", f"--entity_records={records}"]
    cmd = [sys.executable, "-m", "unisent.cli", "ablate", *args]
    env = dict(os.environ, OMP_NUM_THREADS="1")
    env.pop("UNISENT_FAULT", None)
    # the first attempt kills itself (SIGKILL) in its 5th training step: the first step of the third trained
    # run (2 steps each), after two trained runs have written their results; no polling against a deadline
    log = (tmp_path / "first.log").open("w")
    first = subprocess.run(
        cmd, stdout=log, stderr=subprocess.STDOUT, env={**env, "UNISENT_FAULT": "train_step@5=SIGKILL"}, timeout=900
    )
    assert first.returncode == -signal.SIGKILL, (tmp_path / "first.log").read_text()[-3000:]
    before = _results(out)
    assert len(before) >= 2 and len(before) < 7

    done = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    assert f"{len(before)} of 7 runs already done" in done.stderr
    after = _results(out)
    assert len(after) == 7
    for name, (mtime, text) in before.items():  # finished runs were not run again
        assert after[name] == (mtime, text)

    summary = json.loads((out / "ablation.json").read_text())
    rows = {r["row"]: r for r in summary["rows"]}
    assert set(rows) == {"untrained", "unified (static)", "only ease", "only amr"}
    assert rows.pop("untrained")["seeds"] == [1]
    for row in rows.values():
        assert sorted(row["seeds"]) == [1, 2]
    # every cell is the mean and the t interval of the two runs' own scores
    results = [json.loads(p.read_text()) for p in (out / "results").rglob("*.json")]
    for name, row in rows.items():
        values = sorted(r["scores"]["stsb-test"] for r in results if r["row"] == name)
        cell = row["cells"]["stsb-test"]
        assert sorted(cell["values"]) == values
        assert (cell["mean"], cell["ci"]) == pytest.approx(interval(values))
    assert "entity-top10" not in rows["only amr"]["cells"]  # no EASE objective: no entity table
    assert rows["only ease"]["cells"]["entity-top10"]["mean"] >= 0
    table = (out / "ablation.md").read_text()
    assert "| unified (static) | 2 |" in table and "±" in table
    assert "Each objective's own column" in table and "| ease | entity-top10 |" in table
    assert (out / "ablation.png").read_bytes()[:4] == b"\x89PNG"
    assert (out / "runs" / "unified-static" / "seed1" / "conflicts.csv").exists()
    verdict = summary["targets"]["unified (static)"]
    stsb = rows["unified (static)"]["cells"]["stsb-test"]["mean"]
    assert verdict["targets"]["stsb-test"] == pytest.approx(
        {"mean": stsb, "target": -100.0, "margin": stsb + 100, "met": True}
    )
    assert verdict["targets"]["entity-top10"]["met"] is False and verdict["all_met"] is False
    assert "Targets (`model.evaluation.panel_targets`)" in table and "**missed by" in table
    # once everything is done the same command only rebuilds the table
    again = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300)
    assert again.returncode == 0 and "7 of 7 runs already done" in again.stderr
    # the page with the table and the plots beside it: tests/studies/test_study_pages.py


@pytest.mark.integration
def test_sweep_file_and_dry_run(tiny_unified, tmp_path, capsys, monkeypatch):
    recipe = _two_objectives(tiny_unified)
    out = tmp_path / "ablate"
    result = ablate(str(recipe), out=str(out), seeds=[1, 2], balancers=["pcgrad", "uncertainty"], sweep=True)
    sweep = yaml.safe_load(Path(result["sweep"]).read_text())
    assert sweep["parameters"]["run"]["values"] == ["only-amr", "only-ease", "unified-pcgrad", "unified-uncertainty"]
    assert sweep["parameters"]["seed"]["values"] == [1, 2]
    assert sweep["command"][:4] == ["${env}", "unisent", "ablate", str(recipe)] and sweep["command"][-1] == "${args}"
    # a trial is started with --run and --seed only (no --seeds): any seed of the grid is found, not only
    # the default 42 43 44 (the same command line as a --jobs worker)
    trial = subprocess.run(
        [sys.executable, "-m", "unisent.cli", "ablate", str(recipe), f"--out={out}", "--run=only-nope", "--seed=2"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert "no run 'only-nope' with seed 2; the runs are only-amr, only-ease, unified-static" in trial.stderr
    started = []
    monkeypatch.setattr(ablate_run.Study, "execute", lambda self, r: started.append(r.key) or {"run": r.key})
    monkeypatch.setattr(ablate_command, "log_to_wandb", lambda result: None)
    ablate(str(recipe), out=str(out), balancers=["pcgrad", "uncertainty"], run="unified-uncertainty", seed=2)
    assert started == ["unified-uncertainty/seed2"]
    capsys.readouterr()
    # --dry_run with --run and --seed: that run's recipe and state only, and it is not trained
    ablate(str(recipe), out=str(tmp_path / "one"), run="only-ease", seed=2, dry_run=True)
    assert started == ["unified-uncertainty/seed2"]
    listed = capsys.readouterr().out.strip().splitlines()
    assert len(listed) == 1 and listed[0].startswith("only-ease/seed2") and "to run" in listed[0]
    assert sorted(p.name for p in (tmp_path / "one" / "recipes").iterdir()) == ["only-ease-seed2.yaml"]
    lean = ablate(str(recipe), out=str(tmp_path / "lean"), seeds=[1], sweep=True, keep_checkpoints=False)
    assert "--no_keep_checkpoints" in yaml.safe_load(Path(lean["sweep"]).read_text())["command"]  # trials too
    ablate(str(recipe), out=str(out), seeds=[1], dry_run=True)
    listed = capsys.readouterr().out
    assert "unified-static/seed1" in listed and "to run" in listed
    written = yaml.safe_load((out / "recipes" / "only-ease-seed1.yaml").read_text())  # runnable with unisent fit -c
    assert list(written["data"]["train"]) == ["ease"] and written["seed_everything"] == 1


@pytest.mark.integration
@pytest.mark.parametrize(
    "args, message",
    [
        (["--balancers", "pcgrd"], "did you mean 'pcgrad'"),
        (["--columns", "stsb-tset"], "did you mean 'stsb-test'"),
        (["--group", "cmlm=cmlm,nope"], "nope not objectives of the recipe"),
        (["--run", "unified-static"], "--run and --seed go together"),
        ({"stsb-tset": 82.0}, "'stsb-tset' is not a panel column (did you mean 'stsb-test'?)"),
        ({"stsb-test": "high"}, "panel_targets.stsb-test: 'high' is not a number"),
        (["--page", "docs/page.md"], "--page moved out of unisent ablate: this project's results pages are written"),
        (["--from-json", "a.json"], "--from-json moved out of unisent ablate"),
        (["--block=merge"], "--block moved out of unisent ablate"),
    ],
)
def test_mistakes_are_one_line(tiny_unified, tmp_path, args, message):
    recipe = _two_objectives(tiny_unified)
    if isinstance(args, dict):  # a mistake in the recipe's model.evaluation.panel_targets
        config = yaml.safe_load(recipe.read_text(encoding="utf-8"))
        config["model"]["evaluation"]["panel_targets"] = args
        recipe.write_text(yaml.safe_dump(config), encoding="utf-8")
        args = []
    done = subprocess.run(
        [sys.executable, "-m", "unisent.cli", "ablate", str(recipe), f"--out={tmp_path / 'o'}", "--dry_run", *args],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode != 0
    assert message in done.stderr and "Traceback" not in done.stderr


@pytest.mark.integration
def test_a_recipe_with_one_objective_is_refused(tiny_recipe, tmp_path):
    recipe = tiny_recipe(ROOT / "recipes" / "quickstart.yaml")
    done = subprocess.run(
        [sys.executable, "-m", "unisent.cli", "ablate", str(recipe), "--dry_run"], capture_output=True, text=True
    )
    assert done.returncode == 2 and "an ablation needs at least two" in done.stderr


def test_a_run_keeps_its_objectives_entries_of_each_per_objective_data_setting():
    """``run_recipe`` cuts exactly the DataModule's settings that a recipe may give per objective (typed
    ``X | dict[str, X]``, besides ``train``): a key the DataModule does not have would be dead code."""
    import typing

    from unisent.data import UnisentDataModule

    hints = typing.get_type_hints(UnisentDataModule.__init__)
    per_objective = {
        name
        for name, hint in hints.items()
        if name != "train" and any(typing.get_origin(arg) is dict for arg in typing.get_args(hint))
    }
    assert set(PER_OBJECTIVE_DATA) == per_objective


def test_an_interrupted_fit_stops_the_study_with_its_status(tmp_path, monkeypatch, capsys):
    """Ctrl-C or SIGTERM in a run's fit comes back as the fit's outcome (not a module global): the study stops
    there with ``unisent fit``'s status and says that the same command continues it."""
    from unisent.commands import fitting
    from unisent.resume import Interrupt

    last = tmp_path / "runs" / "only-ease" / "seed1" / "checkpoints" / "last.ckpt"
    stopped = fitting.FitOutcome("fit", interrupted=Interrupt(signal="SIGTERM", step=3, checkpoint=str(last)))
    calls = []
    monkeypatch.setattr(fitting, "fit", lambda files, overrides: calls.append((files, overrides)) or stopped)
    with pytest.raises(ablate_run.StudyInterrupted) as err:
        ablate_run.fit_run(tmp_path / "r.yaml", "only-ease/seed1")
    assert calls == [([tmp_path / "r.yaml"], ["--ckpt_path", "last"])] and err.value.status == 143
    assert str(err.value).startswith(f"interrupted (SIGTERM) in only-ease/seed1; its last checkpoint is {last}; ")

    monkeypatch.setattr(ablate_command, "ablate", lambda **values: ablate_run.fit_run(tmp_path / "r.yaml", "x"))
    monkeypatch.setattr(ablate_command, "command_parser", lambda function, prog: None)
    monkeypatch.setattr(ablate_command, "parse", lambda parser, argv: {})
    with pytest.raises(SystemExit) as exit_:
        ablate_command.main([])
    assert exit_.value.code == 143 and "unisent ablate: interrupted (SIGTERM) in x;" in capsys.readouterr().err


@pytest.mark.parametrize("keep", [True, False])
def test_checkpoints_are_dropped_after_scoring_only_when_asked(tmp_path, monkeypatch, keep):
    """--keep_checkpoints false: a run's *.ckpt files go once its result file is written (the panel has read
    them: EASE's entity table lives there); encoder/ and logs stay. Default: everything stays."""
    from unisent.evaluation import panel

    run = Run("only ease", "single", ("ease",), "static", 1)
    folder = tmp_path / "out" / "runs" / run.slug / "seed1"

    def fake_fit(recipe_path, key):
        (folder / "encoder").mkdir(parents=True)
        (folder / "checkpoints").mkdir()
        for name in ("last.ckpt", "step=2.ckpt"):
            (folder / "checkpoints" / name).write_bytes(b"weights")
        (folder / "metrics.csv").write_text("step\n0\n")

    seen = {}

    def fake_panel(model, columns, data_dir, ckpt=None, entity_records=None):
        seen["ckpt"] = ckpt and Path(ckpt).read_bytes()
        return {c: {"score": 1.0} for c in columns}

    monkeypatch.setattr(ablate_run, "fit_run", fake_fit)
    monkeypatch.setattr(panel, "evaluate_panel", fake_panel)
    config = {"model": {"objectives": []}, "data": {"train": {}}, "trainer": {}}
    study = ablate_run.Study(
        tmp_path / "r.yaml", config, tmp_path / "out", 2, ["entity-top10"], None, 0, None, [], keep_checkpoints=keep
    )
    monkeypatch.setattr(ablate_run.Study, "write_recipe", lambda self, r: tmp_path / "r.yaml")
    result = study.execute(run)
    assert seen["ckpt"] == b"weights" and result["scores"] == {"entity-top10": 1.0}
    assert study.result_path(run).exists()
    assert sorted(p.name for p in folder.rglob("*.ckpt")) == (["last.ckpt", "step=2.ckpt"] if keep else [])
    assert (folder / "encoder").is_dir() and (folder / "metrics.csv").exists()


@pytest.mark.parametrize(("step", "trains"), [(2, False), (1, True)])
def test_a_run_stopped_in_its_last_step_is_scored_from_its_checkpoint_not_trained_again(
    tmp_path, monkeypatch, step, trains
):
    """A signal in a run's last step saves ``last.ckpt`` at its steps and stops before ``encoder/``: the same
    command scores that checkpoint (``unisent fit --ckpt_path last`` would refuse: nothing to train); a
    checkpoint short of the steps is trained on."""
    import torch

    from unisent.evaluation import panel

    run = Run("only ease", "single", ("ease",), "static", 1)
    last = tmp_path / "out" / "runs" / run.slug / "seed1" / "checkpoints" / "last.ckpt"
    last.parent.mkdir(parents=True)
    torch.save({"global_step": step, "epoch": 0, "state_dict": {}}, last)
    fits, seen = [], {}
    monkeypatch.setattr(ablate_run, "fit_run", lambda recipe_path, key: fits.append(key))
    monkeypatch.setattr(panel, "evaluate_panel", lambda model, columns, *a, **k: seen.update(model=model) or {})
    monkeypatch.setattr(ablate_run.Study, "write_recipe", lambda self, r: tmp_path / "r.yaml")
    config = {"model": {"objectives": []}, "data": {"train": {}}, "trainer": {}}
    study = ablate_run.Study(tmp_path / "r.yaml", config, tmp_path / "out", 2, [], None, 0, None, [])
    study.execute(run)
    assert fits == ([run.key] if trains else []) and seen["model"] == str(last)


def test_precision_is_pinned_recorded_per_run_and_named_per_seed(tmp_path, monkeypatch):
    """``--precision`` is every run's ``trainer.precision`` (and is passed on to ``--jobs`` workers); a result
    records what its run trained in (``auto``: this machine's choice, bf16 only with AVX512-BF16 or AMX), and
    the table names each row's precision by seed (after parts are joined: tests/studies/test_study_pages.py)."""
    from unisent import hardware
    from unisent.commands.ablate import _passed, _read_recipe
    from unisent.commands.ablate.summarise import summarize, summary_table
    from unisent.evaluation import panel

    recipe = tmp_path / "r.yaml"
    recipe.write_text(yaml.safe_dump({"model": {"objectives": []}, "trainer": {"precision": "auto"}}))
    assert _read_recipe(recipe, "fp32")["trainer"]["precision"] == "fp32"
    assert _read_recipe(recipe, None)["trainer"]["precision"] == "auto"
    assert _read_recipe(recipe, "bf16-mixed")["trainer"]["precision"] == "bf16-mixed"  # Lightning's names too
    with pytest.raises(UsageError, match=r"--precision 'fp23': one of auto, fp32, bf16, or Lightning's 32-true"):
        _read_recipe(recipe, "fp23")  # before any run starts
    options = {"out": "o", "conflict_every": 0, "group": [], "leave_out": [], "balancers": [], "merges": []}
    options |= {"data_dir": None, "entity_records": None, "keep_checkpoints": True}
    assert "--precision=bf16" in _passed(2, ["stsb-test"], **options, precision="bf16")

    from unisent.trainer import UnisentTrainer

    def fake_fit(recipe_path, key):  # the run's own Trainer resolves its recipe's precision; nothing trains
        trainer = yaml.safe_load(Path(recipe_path).read_text(encoding="utf-8"))["trainer"]
        options = {"accelerator": "cpu", "logger": False, "enable_checkpointing": False}
        return UnisentTrainer(precision=trainer["precision"], **options).precision_choice

    monkeypatch.setattr(ablate_run, "fit_run", fake_fit)
    monkeypatch.setattr(panel, "evaluate_panel", lambda model, columns, *a, **k: {c: {"score": 1.0} for c in columns})
    results = []
    for seed, flags in ((1, {"avx2", "avx512_bf16"}), (2, {"avx2"})):  # the same recipe on two machines
        monkeypatch.setattr(hardware, "cpu_flags", lambda flags=flags: frozenset(flags))
        config = _read_recipe(recipe, None)
        study = ablate_run.Study(recipe, config, tmp_path / "out", 2, ["stsb-test"], None, 0, None, [])
        results.append(study.execute(Run("only ease", "single", ("ease",), "static", seed)))
    assert [r["precision"] for r in results] == ["bf16-mixed", "32-true"]
    study = ablate_run.Study(
        recipe, _read_recipe(recipe, "fp32"), tmp_path / "out", 2, ["stsb-test"], None, 0, None, []
    )
    assert study.execute(Run("only amr", "single", ("amr",), "static", 1))["precision"] == "32-true"
    # a run trained to the end before (its encoder is there) is not trained again: its precision is not known
    (tmp_path / "out" / "runs" / "only-cmlm" / "seed1" / "encoder").mkdir(parents=True)
    assert "precision" not in study.execute(Run("only cmlm", "single", ("cmlm",), "static", 1))

    rows = summarize(results, ["stsb-test"])
    summary = {"rows": rows, "columns": ["stsb-test"], "own": {}, "units": {}, "panel_targets": {}}
    assert "Training precision per seed: only ease bf16-mixed (1), 32-true (2)." in summary_table(summary)


@pytest.mark.integration
def test_merge_rows_merge_each_seeds_single_runs_and_a_new_column_is_scored_without_training(
    tiny_unified, tmp_path, monkeypatch
):
    """``--runs single merge``: one merge row per method, each the seed's single runs merged by `unisent merge`
    (the same model as merging them by hand); the targets' table holds merge rows to the same lines. Run again
    with one more column, only that column is scored: nothing is trained or merged again."""
    from unisent.evaluation.panel import evaluate_panel
    from unisent.merging import merge_runs

    recipe = _two_objectives(tiny_unified)
    out = tmp_path / "ablate"
    options = {"seeds": [1], "runs": ["single", "merge"], "merges": ["linear", "ties"], "columns": ["stsb-test"]}
    summary = ablate(str(recipe), out=str(out), **options)
    rows = {r["row"]: r for r in summary["rows"]}
    assert set(rows) == {"only ease", "only amr", "merge (linear)", "merge (ties)"}
    assert set(summary["targets"]) == {"merge (linear)", "merge (ties)"}
    merged = out / "runs" / "merge-ties" / "seed1"
    record = json.loads((merged / "merge.json").read_text())
    singles = [out / "runs" / s / "seed1" / "checkpoints" / "last.ckpt" for s in ("only-ease", "only-amr")]
    assert [r["checkpoint"] for r in record["runs"]] == [str(p) for p in singles]
    assert record["method"] == "ties" and record["seed"] == 1 and record["weights"] == [1.0, 1.0]
    by_hand = tmp_path / "by-hand"
    merge_runs([p.parent.parent for p in singles], by_hand, method="ties", seed=1)
    expected = evaluate_panel(str(by_hand / "encoder"), ["stsb-test"])["stsb-test"]["score"]
    assert rows["merge (ties)"]["cells"]["stsb-test"]["mean"] == pytest.approx(expected, abs=1e-9)

    def no_training(*args, **kwargs):
        raise AssertionError("trained or merged again")

    monkeypatch.setattr(ablate_run, "fit_run", no_training)
    monkeypatch.setattr("unisent.merging.merge_runs", no_training)
    again = ablate(str(recipe), out=str(out), **{**options, "columns": ["stsb-test", "stsb-dev"]})
    for row in again["rows"]:
        assert set(row["cells"]) == {"stsb-test", "stsb-dev"}
        assert row["cells"]["stsb-test"] == {r["row"]: r for r in summary["rows"]}[row["row"]]["cells"]["stsb-test"]
    # --tabulate: a second seed planned but not run is named under the table, nothing trained
    partial = ablate(str(recipe), out=str(out), tabulate=True, **{**options, "seeds": [1, 2]})
    assert all(row["seeds"] == [1] for row in partial["rows"])
    assert partial["missing"] == ["only-ease/seed2", "only-amr/seed2", "merge-linear/seed2", "merge-ties/seed2"]
    assert (
        "Not run (4 planned runs, left out of every row above): only-ease/seed2," in (out / "ablation.md").read_text()
    )
    assert partial["command"].endswith(" --tabulate")


def test_a_merge_waits_for_its_seeds_single_runs_and_needs_them():
    single = Run("only ease", "single", ("ease",), "static", 1)
    other_seed = Run("only ease", "single", ("ease",), "static", 2)
    merge = Run("merge (ties)", "merge", ("ease", "amr"), "static", 1)
    assert merge.slug == "merge-ties"
    assert ablate_run._next_ready([merge, other_seed], [single]) == other_seed
    assert ablate_run._next_ready([merge], [single]) is None
    assert ablate_run._next_ready([merge], [other_seed]) == merge
    with pytest.raises(ablate_command.UsageError, match="add single to --runs"):
        ablate(str(ROOT / "recipes" / "unified" / "minilm-cpu-balanced.yaml"), runs=["unified", "merge"])
    with pytest.raises(ablate_command.UsageError, match="--merges: soup not one of"):
        ablate(
            str(ROOT / "recipes" / "unified" / "minilm-cpu-balanced.yaml"), runs=["single", "merge"], merges=["soup"]
        )
