"""A user's mistakes end in one line (file, line, what to do) and a non-zero exit, fast (issue 18, 3/5/9)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from unisent.cli import main

ROOT = Path(__file__).resolve().parents[1]
SAMPLE = ROOT / "samples" / "nli_triples.jsonl"
HEAVY = ("torch", "transformers", "lightning", "sklearn")


def _python(code: str, env: dict | None = None, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, **(env or {})},
        cwd=cwd or ROOT,
    )


def _heavy_after(argv: list[str]) -> str:
    """Run ``unisent ARGV`` in a fresh interpreter; print the heavy packages it imported, then exit as it did."""
    return (
        "import sys\nfrom unisent.cli import main\ncode = 0\n"
        f"try:\n    main({argv!r})\nexcept SystemExit as e:\n    code = e.code\n"
        f"print('HEAVY', sorted({{m.split('.')[0] for m in sys.modules}} & set({HEAVY!r})))\n"
        "if isinstance(code, str):\n    print(code, file=sys.stderr)\n"
        "sys.exit(code if isinstance(code, int) else 1)\n"
    )


# ------------------------------------------------------------------ 3: evaluate --list is light
def test_evaluate_list_imports_no_torch():
    done = _python(_heavy_after(["evaluate", "--list"]))
    assert done.returncode == 0, done.stderr
    assert "stsb-test" in done.stdout and "Groups:" in done.stdout
    assert "HEAVY []" in done.stdout


# ------------------------------------------------------------------ 9: evaluate fails before loading
def test_unknown_task_is_named_before_the_model_loads():
    done = _python(_heavy_after(["evaluate", "--model", "minilm-l6", "--tasks", "stsb-tset"]))
    assert done.returncode == 1
    assert done.stderr.strip().count("\n") == 0, done.stderr
    assert "unknown task or group 'stsb-tset'" in done.stderr and "did you mean 'stsb-test'" in done.stderr
    assert "HEAVY []" in done.stdout  # no torch: the model was never loaded


@pytest.mark.parametrize("model", ["runs/quickstart/version_0/checkpoints/bset.ckpt", "./my-model", "model.ckpt"])
def test_mistyped_model_path_fails_at_once(model, tmp_path):
    done = _python(_heavy_after(["evaluate", "--model", model]), cwd=tmp_path)
    assert done.returncode == 1
    assert done.stderr.strip() == (
        f"unisent evaluate: error: --model {model!r} does not exist; give a .ckpt file, "
        "a saved model directory, a preset (minilm-l6) or a Hugging Face hub id"
    )
    assert "HEAVY []" in done.stdout


def test_looks_like_path(tmp_path, monkeypatch):
    from unisent.encoders.loading import looks_like_path, resolve_model_location

    monkeypatch.chdir(tmp_path)
    (tmp_path / "runs").mkdir()
    for name in ("runs/encodr", "./x", "/abs/x", "~/x", "a/b/c", "best.ckpt", "org/model.safetensors"):
        assert looks_like_path(name), name
    for name in ("sentence-transformers/all-MiniLM-L6-v2", "bert-base-uncased"):
        assert not looks_like_path(name), name
    with pytest.raises(FileNotFoundError, match="looks like a local path"):
        resolve_model_location("runs/encodr")


def test_unreachable_hub_fails_without_retries(tmp_path):
    """huggingface_hub retries 5 times with back-off (~23 s) when the hub cannot be reached."""
    env = {"HF_ENDPOINT": "http://127.0.0.1:9", "HF_HOME": str(tmp_path / "hf")}
    code = (
        "import os, time\nfor k in ('HF_HUB_OFFLINE', 'TRANSFORMERS_OFFLINE', 'HTTPS_PROXY', 'https_proxy', "
        "'ALL_PROXY', 'all_proxy'): os.environ.pop(k, None)\n"
        "from unisent.encoders.loading import ModelNotAvailableError, load_backbone\n"
        "start = time.perf_counter()\ntry:\n    load_backbone('nobody/no-such-model')\n"
        "except ModelNotAvailableError as err:\n    print('ERR', err)\n"
        "print('SECONDS', time.perf_counter() - start)\n"
    )
    done = _python(code, env)
    assert "ERR could not load 'nobody/no-such-model'" in done.stdout, done.stdout + done.stderr
    assert "could not be reached" in done.stdout
    seconds = float(done.stdout.split("SECONDS")[1])
    assert seconds < 8, seconds
    assert "Retrying in" not in done.stderr


def test_evaluate_progress_bar_names_the_task(tiny_bert_dir, capsys):
    from unisent.evaluation.runner import evaluate

    class Model:
        def encode(self, sentences, batch_size=64):
            return torch.randn(len(sentences), 4)

    evaluate(Model(), "stsb-dev", ROOT / "unisent" / "resources", progress=True)
    assert "task stsb-dev" in capsys.readouterr().err


# ------------------------------------------------------------------ 5: checkpoints
@pytest.fixture
def truncated_ckpt(tmp_path) -> Path:
    full = tmp_path / "full.ckpt"
    torch.save({"state_dict": {"w": torch.zeros(2000)}}, full)
    data = full.read_bytes()
    path = tmp_path / "truncated.ckpt"
    path.write_bytes(data[: len(data) // 2])
    return path


def test_load_of_a_truncated_checkpoint_is_one_line(truncated_ckpt):
    import unisent
    from unisent.io import CheckpointError

    with pytest.raises(
        CheckpointError, match=r"truncated\.ckpt \(\d+ bytes\) is truncated or not a PyTorch checkpoint"
    ):
        unisent.load(truncated_ckpt)


# ------------------------------------------------------------------ 5: unisent fit
def _fit(tmp_path, tiny_bert_dir, *extra: str) -> list[str]:
    return [
        "fit",
        "-c",
        str(ROOT / "recipes/quickstart.yaml"),
        "--model.encoder.model",
        str(tiny_bert_dir),
        "--data.train.simcse.path",
        str(SAMPLE),
        "--trainer.max_steps",
        "2",
        "--trainer.logger.init_args.save_dir",
        str(tmp_path / "runs"),
        "--trainer.default_root_dir",
        str(tmp_path),
        "--trainer.enable_progress_bar",
        "false",
        "--data.batch_size",
        "8",
        *extra,
    ]


def _one_line_error(capsys, argv, code=1) -> str:
    with pytest.raises(SystemExit) as exit_:
        main(argv)
    assert exit_.value.code == code
    err = [line for line in capsys.readouterr().err.splitlines() if "error:" in line]
    assert len(err) == 1 and "Traceback" not in err[0], err
    return err[0]


def _no_run_dirs(tmp_path) -> None:
    runs = tmp_path / "runs"
    assert not runs.exists(), list(runs.rglob("*"))  # no version_N, and no empty runs/quickstart/ either


def test_fit_missing_training_file(tmp_path, tiny_bert_dir, capsys):
    missing = tmp_path / "trian.jsonl"
    line = _one_line_error(capsys, _fit(tmp_path, tiny_bert_dir, "--data.train.simcse.path", str(missing)))
    assert line.startswith(f"unisent fit: error: no such file: {missing}; check the path in the recipe")
    assert "UNISENT_TRACEBACK=1" in line
    _no_run_dirs(tmp_path)  # the failed attempt left no empty version_N


def test_fit_bad_jsonl_line_names_file_and_line(tmp_path, tiny_bert_dir, capsys):
    bad = tmp_path / "bad.jsonl"
    bad.write_text("".join(SAMPLE.read_text().splitlines(keepends=True)[:5]) + '{"anchor": "broken\n')
    line = _one_line_error(capsys, _fit(tmp_path, tiny_bert_dir, "--data.train.simcse.path", str(bad)))
    assert f"{bad}:line 6: not valid JSON" in line
    _no_run_dirs(tmp_path)


@pytest.mark.parametrize(
    ("option", "message"),
    [
        ("--model.head_lr=0", "model.head_lr must be > 0"),
        ("--model.conflict_every=-1", "model.conflict_every must be >= 0"),
        ("--model.warmup_ratio=2", "0 <= model.warmup_ratio <= 1"),
        ("--model.head_only_steps=-1", "model.head_only_steps must be >= 0"),
        ("--model.head_only_ratio=1", "model.head_only_ratio must be in [0, 1)"),
    ],
)
def test_fit_a_refused_model_value_is_one_line(tmp_path, tiny_bert_dir, capsys, option, message):
    line = _one_line_error(capsys, _fit(tmp_path, tiny_bert_dir, option))
    assert line.startswith("unisent fit: error: ") and message in line
    _no_run_dirs(tmp_path)


def test_fit_head_only_steps_past_the_run_is_one_line(tmp_path, tiny_bert_dir, capsys):
    line = _one_line_error(capsys, _fit(tmp_path, tiny_bert_dir, "--model.head_only_steps=3", "--trainer.max_steps=3"))
    assert "model.head_only_steps (3) must be below the run's optimiser steps (3)" in line


def test_fit_empty_file(tmp_path, tiny_bert_dir, capsys):
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    line = _one_line_error(capsys, _fit(tmp_path, tiny_bert_dir, "--data.train.simcse.path", str(empty)))
    assert "empty.jsonl: no usable records" in line
    _no_run_dirs(tmp_path)


def test_fit_truncated_checkpoint(tmp_path, tiny_bert_dir, truncated_ckpt, capsys):
    line = _one_line_error(capsys, _fit(tmp_path, tiny_bert_dir, "--ckpt_path", str(truncated_ckpt)))
    assert "is truncated or not a PyTorch checkpoint; copy it again" in line


def _bad_checkpoint(tmp_path, kind: str) -> Path:
    path = tmp_path / f"{kind}.ckpt"
    if kind == "truncated":  # a real checkpoint of `unisent fit`, cut (an interrupted copy)
        full = tmp_path / "full.ckpt"
        torch.save({"unisent": {"encoder": {}, "objectives": []}, "state_dict": {"w": torch.zeros(4000)}}, full)
        path.write_bytes(full.read_bytes()[:3000])
    elif kind == "foreign":  # a PyTorch checkpoint of another program
        torch.save({"model": {"w": torch.zeros(3)}, "epoch": 3}, path)
    elif kind == "pickle":  # not a PyTorch archive at all
        import pickle

        path.write_bytes(pickle.dumps({"a": 1}))
    else:  # a zip archive that is no PyTorch checkpoint
        import zipfile

        with zipfile.ZipFile(path, "w") as archive:
            archive.writestr("notes.txt", "hello")
    return path


@pytest.mark.parametrize("kind", ["truncated", "foreign", "pickle", "zip"])
def test_every_command_reports_a_bad_checkpoint_in_one_line(tmp_path, tiny_bert_dir, kind, capsys):
    """fit/validate/test --ckpt_path, evaluate/encode --model and export: one line naming the file, no traceback."""
    ckpt = _bad_checkpoint(tmp_path, kind)
    lightning = _fit(tmp_path, tiny_bert_dir, "--ckpt_path", str(ckpt))
    commands = [
        lightning,
        ["validate", *lightning[1:]],
        ["test", *lightning[1:]],
        ["evaluate", "--model", str(ckpt), "--tasks", "stsb-dev"],
        [
            "encode",
            "--model",
            str(ckpt),
            "--input",
            str(SAMPLE),
            "--column",
            "anchor",
            "--output",
            str(tmp_path / "v.npy"),
        ],
        ["export", str(ckpt), "--format", "sentence-transformers", "--out", str(tmp_path / "out")],
    ]
    expected = {
        "truncated": "is truncated or not a PyTorch checkpoint",
        "pickle": "is truncated or not a PyTorch checkpoint",
        "foreign": "was not written by `unisent fit` (it holds keys: epoch, model",
        "zip": "could not be read as a PyTorch checkpoint (RuntimeError: ",
    }[kind]
    for argv in commands:
        with pytest.raises(SystemExit) as exit_:
            main(argv)
        err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
        if isinstance(exit_.value.code, str):  # sys.exit(message): printed by the interpreter as it exits
            err.append(exit_.value.code)
        else:
            assert exit_.value.code == 1
        assert len(err) == 1 and "Traceback" not in err[0], err
        line = err[0]
        assert line.startswith(f"unisent {argv[0]}: error: checkpoint {ckpt}") and expected in line, line


def test_a_missing_best_checkpoint_names_the_ones_there(tmp_path, tiny_bert_dir, capsys):
    run = tmp_path / "runs" / "quickstart" / "version_0" / "checkpoints"
    run.mkdir(parents=True)
    (run / "last.ckpt").write_bytes(b"x")
    line = _one_line_error(capsys, ["test", *_fit(tmp_path, tiny_bert_dir, "--ckpt_path", str(run / "best.ckpt"))[1:]])
    assert f"checkpoint {run / 'best.ckpt'} does not exist; {run} holds last.ckpt (best.ckpt is written when" in line


def test_traceback_env_shows_the_traceback(tmp_path, tiny_bert_dir, truncated_ckpt, monkeypatch):
    from unisent.io import CheckpointError

    monkeypatch.setenv("UNISENT_TRACEBACK", "1")
    with pytest.raises(CheckpointError):
        main(_fit(tmp_path, tiny_bert_dir, "--ckpt_path", str(truncated_ckpt)))


def test_yaml_syntax_error_names_file_and_line(tmp_path, tiny_bert_dir, capsys):
    broken = tmp_path / "broken.yaml"
    broken.write_text("trainer:\n  max_steps: 3\n  callbacks: [\n")
    line = _one_line_error(capsys, _fit(tmp_path, tiny_bert_dir, "-c", str(broken)), code=2)
    assert f"{broken}:4:1: YAML syntax error" in line


def test_unknown_key_without_usage_dump(tmp_path, tiny_bert_dir, capsys):
    recipe = tmp_path / "typo.yaml"
    recipe.write_text("trainer:\n  max_stepz: 3\n")
    with pytest.raises(SystemExit) as exit_:
        main(_fit(tmp_path, tiny_bert_dir, "-c", str(recipe)))
    assert exit_.value.code == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "usage:" not in err
    assert "trainer.max_stepz" in err and str(recipe) in err


def test_ctrl_c_suggests_resume(tmp_path, tiny_bert_dir, capsys, monkeypatch):
    from unisent.module import UnisentModule

    def interrupt(self, *args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(UnisentModule, "training_step", interrupt)
    argv = _fit(tmp_path, tiny_bert_dir)
    start = time.perf_counter()
    with pytest.raises(SystemExit) as exit_:
        main(argv)
    assert exit_.value.code == 130 and time.perf_counter() - start < 120
    err = capsys.readouterr().err
    hint = [line for line in err.splitlines() if "interrupted" in line]
    # interrupted inside the first step: nothing was trained, so nothing is offered to resume (issue 29: the
    # old hint's --ckpt_path last picked another run); the resumable cases: tests/test_resume.py
    assert len(hint) == 1 and hint[0].startswith(
        "unisent fit: interrupted (SIGINT) before a checkpoint was saved; "
        "nothing to resume. Start again with: unisent fit -c "
    )
    assert "--ckpt_path" not in hint[0]
    _no_run_dirs(tmp_path)
