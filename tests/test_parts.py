"""``unisent fit -c`` of a recipe with ``parts:`` (unisent/commands/parts.py): the parts trained and merged in one
command equal the three-command route (``unisent ablate --runs leave-one-out``, ``--runs single``, ``unisent
merge``), a SIGTERM in each part continues to the same model, and each mistake in ``parts:`` is one line."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import torch
import yaml
from safetensors.torch import load_file

from unisent.commands.function_commands import UsageError
from unisent.commands.parts import read_parts, split_words

from .conftest import recipe_files, run_cli

pytestmark = pytest.mark.usefixtures("one_thread")

ROOT = Path(__file__).resolve().parents[1]


def _recipe(tiny_recipe, tmp_path: Path) -> Path:
    """The route's recipe on the tiny model: GaussCSE over its own top layer, EASE and AMR, 48 records each."""
    path = tiny_recipe(ROOT / "recipes" / "unified" / "minilm-cpu-balanced-distill-own5.yaml", max_records=48)
    config = yaml.safe_load(path.read_text(encoding="utf-8"))
    model, data = config["model"], config["data"]
    model["objectives"] = [
        o for o in model["objectives"] if o["class_path"].rsplit(".", 1)[1] in ("GaussCSE", "EASE", "AMRSimCSE")
    ]
    data["train"] = {k: v for k, v in data["train"].items() if k in ("gausscse", "ease", "amr")}
    data["batch_size"] = {"gausscse": 8, "ease": 8, "amr": 4}
    data["cache_dir"] = str(tmp_path / "cache")
    model["train"]["weight_schedule"] = {}
    model["evaluation"].update(val_tasks=[], panel=["stsb-test"], panel_own={}, panel_targets={})
    config["trainer"].update(max_steps=4, val_check_interval=None, enable_progress_bar=False, precision="32-true")
    path.write_text(yaml.safe_dump(config, sort_keys=False), encoding="utf-8")
    return path


def _parts(recipe: Path, out: Path, **extra) -> Path:
    path = out.parent / f"{out.name}.yaml"
    settings = {
        "recipe": str(recipe),
        "out": str(out),
        "seed": 3,
        "train": [
            {"leave_out": ["gausscse"], "steps": 4, "balancer": "upgrad"},
            {"only": ["gausscse"], "steps": 2},
        ],
        **extra,
    }
    path.write_text(yaml.safe_dump({"parts": settings}, sort_keys=False), encoding="utf-8")
    return path


def _weights(folder: Path) -> dict[str, torch.Tensor]:
    tensors = load_file(str(folder / "encoder" / "model.safetensors"))
    head = torch.load(folder / "encoder" / "gaussian_head.pt", map_location="cpu", weights_only=True)
    tensors |= {f"head.{k}": v for k, v in head.items() if isinstance(v, torch.Tensor)}
    return tensors


def _assert_same(a: Path, b: Path) -> None:
    left, right = _weights(a), _weights(b)
    assert left.keys() == right.keys() and len(left) > 10
    for key, value in left.items():
        torch.testing.assert_close(value, right[key], rtol=0, atol=1e-6, msg=key)


def test_split_words_and_the_settings_read(tiny_recipe, tmp_path):
    assert split_words(["fit", "-c", "a.yaml", "--config=b.yaml", "--seed_everything", "4", "--verbose"]) == (
        ["a.yaml", "b.yaml"],
        ["--seed_everything", "4"],
    )
    recipe = _recipe(tiny_recipe, tmp_path)
    path = _parts(recipe, tmp_path / "route")
    settings, _, parts = read_parts(path, ["--seed_everything", "7", "--parts.jobs=2", "--ckpt_path", "last"])
    assert settings["seed"] == 7 and settings["jobs"] == 2 and settings["merge"]["method"] == "task_arithmetic"
    assert [(p.name, p.run.kind, p.run.objectives, p.steps) for p in parts] == [
        ("without-gausscse", "leave-one-out", ("ease", "amr"), 4),
        ("only-gausscse", "single", ("gausscse",), 2),
    ]
    assert parts[0].folder == tmp_path / "route" / "seed7" / "parts" / "without-gausscse"


@pytest.mark.parametrize(
    ("extra", "overrides", "message"),
    [
        ({"trian": []}, [], "unknown key 'trian' (did you mean 'train'?)"),
        ({"train": [{"only": ["gauss"]}]}, [], "['gauss'] (did you mean 'gausscse'?): name objectives"),
        ({"train": [{"only": ["ease"], "leave_out": ["amr"]}]}, [], "give leave_out: (train the others"),
        ({"merge": {"methd": "ties"}}, [], "merge: keys are method, weights, density, scale"),
        ({}, ["--trainer.max_steps", "3"], "--trainer.max_steps: a parts recipe"),
        (
            {"train": [{"only": ["ease"], "steps": 2}, {"only": ["ease"], "steps": 4}]},
            [],
            "train[1]: a second part named 'only-ease' would train in the first one's folder",
        ),
    ],
)
def test_mistakes_are_one_line_naming_the_file_and_key(tiny_recipe, tmp_path, extra, overrides, message):
    path = _parts(_recipe(tiny_recipe, tmp_path), tmp_path / "route", **extra)
    with pytest.raises(UsageError) as err:
        read_parts(path, overrides)
    assert message in str(err.value) and "\n" not in str(err.value)


@pytest.mark.integration
def test_one_command_equals_the_three_command_route_and_resumes_after_sigterm_in_each_part(
    tiny_recipe, tmp_path, unisent_cli
):
    recipe = _recipe(tiny_recipe, tmp_path)
    # the three commands of docs/merging.md, on the same seed
    common = ["--seed", "3", "--columns=stsb-test", "--precision", "32-true"]
    unisent_cli(
        "ablate", str(recipe), f"--out={tmp_path / 'a'}", "--steps=4", "--leave_out=gausscse",
        "--balancers=upgrad", "--runs", "leave-one-out", "--run", "without-gausscse", *common,
    )  # fmt: skip
    unisent_cli("ablate", str(recipe), f"--out={tmp_path / 's'}", "--steps=2", "--runs", "single",
                "--run", "only-gausscse", *common)  # fmt: skip
    three = tmp_path / "three"
    unisent_cli("merge", str(tmp_path / "a/runs/without-gausscse/seed3"), str(tmp_path / "s/runs/only-gausscse/seed3"),
                "--method", "task_arithmetic", "--seed", "3", f"--out={three}")  # fmt: skip

    one = _parts(recipe, tmp_path / "one", precision="32-true")
    unisent_cli("fit", "-c", str(one))
    folder = tmp_path / "one" / "seed3"
    _assert_same(folder, three)
    record = json.loads((folder / "parts.json").read_text())
    assert [p["name"] for p in record["parts"]] == ["without-gausscse", "only-gausscse"]
    assert set(record["cost"]["parameters"]) == {"shared encoder", "own top layers (a head's own tower)", "head"}
    assert record["cost"]["files"]["gaussian_head.pt"] == (folder / "encoder" / "gaussian_head.pt").stat().st_size
    merge = json.loads((folder / "merge.json").read_text())
    assert [Path(r["checkpoint"]).parts[-3] for r in merge["runs"]] == ["without-gausscse", "only-gausscse"]

    # SIGTERM in the middle of the first part's 2nd step, then of the second part's 2nd step (the fault count
    # runs on over the first part's two remaining steps); the same command continues each time
    again = _parts(recipe, tmp_path / "again", precision="32-true")
    env = dict(os.environ, OMP_NUM_THREADS="1")
    for fault in ("train_step@2=SIGTERM", "train_step@4=SIGTERM"):
        stopped = run_cli(["fit", "-c", str(again)], env={**env, "UNISENT_FAULT": fault})
        assert stopped.returncode == 143, stopped.stderr[-2000:]
        assert "interrupted (SIGTERM)" in stopped.stderr and "the same command continues" in stopped.stderr
    parts = tmp_path / "again" / "seed3" / "parts"
    assert (parts / "without-gausscse" / "encoder").is_dir() and not (parts / "only-gausscse" / "encoder").exists()
    done = run_cli(["fit", "-c", str(again), "--ckpt_path", "last"], env=env)
    assert done.returncode == 0, done.stderr[-2000:]
    _assert_same(tmp_path / "again" / "seed3", three)
    finished = run_cli(["fit", "-c", str(again)], env=env)
    assert finished.returncode == 0 and "merged already" in finished.stderr


@pytest.mark.integration
@pytest.mark.parametrize("path", recipe_files(parts=True), ids=lambda p: p.name)
def test_the_shipped_parts_recipes_read_and_their_parts_are_recipes_the_cli_takes(path, tmp_path, capsys):
    from unisent.cli import main
    from unisent.commands.ablate.plan import run_recipe

    settings, config, parts = read_parts(path)
    assert len(parts) >= 2 and settings["merge"]["method"] in ("linear", "task_arithmetic", "ties", "dare_ties")
    assert "arXiv:" in path.read_text(encoding="utf-8")  # recipes cite their papers
    for part in parts:
        part_path = tmp_path / f"{part.name}.yaml"
        part_path.write_text(yaml.safe_dump(run_recipe(config, part.run, part.steps, tmp_path, 10)), encoding="utf-8")
        with pytest.raises(SystemExit) as exit_:
            main(["fit", "-c", str(part_path), "--print_config"])
        assert exit_.value.code in (0, None)
        printed = yaml.safe_load(capsys.readouterr().out)
        assert len(printed["model"]["objectives"]) == len(part.run.objectives)


@pytest.mark.parametrize(("job", "failed", "status"), [(None, None, 143), ("77", None, 0), ("77", "no scontrol", 1)])
def test_a_preempted_slurm_job_of_parts_is_requeued_as_a_plain_fit_is(monkeypatch, capsys, job, failed, status):
    from unisent import resume
    from unisent.commands import parts
    from unisent.commands.ablate.run import StudyInterrupted

    def stopped(path, words):
        raise StudyInterrupted("interrupted (SIGTERM); each part saved its last checkpoint", 143)

    asked = []
    monkeypatch.setattr(parts, "fit_parts", stopped)
    monkeypatch.setattr(resume, "slurm_job_id", lambda: job)
    monkeypatch.setattr(resume, "requeue_slurm_job", lambda j: asked.append(j) or failed)
    with pytest.raises(SystemExit) as exit_:
        parts.main(Path("r.yaml"), [])
    assert exit_.value.code == status and asked == ([job] if job else [])
    assert ("requeued SLURM job 77" in capsys.readouterr().err) == (status == 0)


def test_a_parts_step_is_the_last_its_metrics_logged(tmp_path):
    from unisent.commands.parts import Part, _step

    part = Part("p", None, 4, tmp_path)
    assert _step(part) == 0  # nothing logged yet
    (tmp_path / "metrics.csv").write_text("epoch,step,train/loss\n0,0,1.0\n0,2,0.5\n0,,\n", encoding="utf-8")
    assert _step(part) == 2


def test_a_merge_that_refuses_the_parts_is_one_line(monkeypatch, capsys):
    from unisent.commands import parts
    from unisent.merging import MergeError

    def refused(path, words):
        raise MergeError("runs/x/parts/only-gausscse: runs of different backbones")

    monkeypatch.setattr(parts, "fit_parts", refused)
    with pytest.raises(SystemExit) as exit_:
        parts.main(Path("r.yaml"), [])
    assert exit_.value.code == "unisent fit: error: runs/x/parts/only-gausscse: runs of different backbones"
