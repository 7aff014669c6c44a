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


@pytest.mark.integration
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
    from unisent.encoders.loading import resolve_model_location
    from unisent.io.model_files import looks_like_path

    monkeypatch.chdir(tmp_path)
    (tmp_path / "runs").mkdir()
    for name in ("runs/encodr", "./x", "/abs/x", "~/x", "a/b/c", "best.ckpt", "org/model.safetensors"):
        assert looks_like_path(name), name
    for name in ("sentence-transformers/all-MiniLM-L6-v2", "bert-base-uncased"):
        assert not looks_like_path(name), name
    with pytest.raises(FileNotFoundError, match="looks like a local path"):
        resolve_model_location("runs/encodr")


@pytest.mark.integration
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
        ("--model.train.heads.lr=0", "model.train.heads.lr must be > 0"),
        ("--model.train.conflict_every=-1", "model.train.conflict_every must be >= 0"),
        ("--model.train.schedule.warmup_ratio=2", "model.train.schedule.warmup_ratio must be in [0, 1], got 2"),
        ("--model.train.heads.only_steps=-1", "model.train.heads.only_steps must be >= 0"),
        ("--model.train.heads.only_ratio=1", "model.train.heads.only_ratio must be in [0, 1)"),
        ("--model.train.cache_chunk=0", "model.train.cache_chunk must be a number of rows >= 1"),
        # refused by the objective's own constructor while jsonargparse builds it (no 80-line traceback)
        ("--model.objectives.init_args.temperature=-1", "temperature must be positive, got -1.0"),
    ],
)
def test_fit_a_refused_model_value_is_one_line(tmp_path, tiny_bert_dir, capsys, option, message):
    line = _one_line_error(capsys, _fit(tmp_path, tiny_bert_dir, option))
    assert line.startswith("unisent fit: error: ") and message in line
    _no_run_dirs(tmp_path)


@pytest.mark.parametrize(
    ("old", "new"),
    [("--model.head_lr=0.01", "model.train.heads.lr"), ("--model.schedule=constant", "model.train.schedule.decay")],
)
def test_fit_a_key_of_before_model_train_names_its_new_place(tmp_path, tiny_bert_dir, capsys, old, new):
    """The flat keys of before ``model.train`` (training_config.MOVED), on the command line or in a recipe:
    one line naming the new place."""
    key = old[2:].split("=")[0]
    line = _one_line_error(capsys, _fit(tmp_path, tiny_bert_dir, old), code=2)
    assert line.startswith(f"unisent fit: error: {key} moved to {new} ")
    recipe = tmp_path / "old.yaml"
    recipe.write_text(f"model:\n  {key.split('.')[1]}: {old.split('=')[1]}\n", encoding="utf-8")
    line = _one_line_error(capsys, _fit(tmp_path, tiny_bert_dir, "-c", str(recipe)), code=2)
    assert line.startswith(f"unisent fit: error: {key} moved to {new} ")
    _no_run_dirs(tmp_path)


def test_fit_head_only_steps_past_the_run_is_one_line(tmp_path, tiny_bert_dir, capsys):
    line = _one_line_error(
        capsys, _fit(tmp_path, tiny_bert_dir, "--model.train.heads.only_steps=3", "--trainer.max_steps=3")
    )
    assert "model.train.heads.only_steps (3) must be below the run's optimiser steps (3)" in line


def test_fit_empty_file(tmp_path, tiny_bert_dir, capsys):
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    line = _one_line_error(capsys, _fit(tmp_path, tiny_bert_dir, "--data.train.simcse.path", str(empty)))
    assert "empty.jsonl: no usable records" in line
    _no_run_dirs(tmp_path)


def test_fit_malformed_records_name_the_sources_full_key(tmp_path, tiny_bert_dir, capsys):
    """The hint names the option of this source (issue 37: `--data.train.simcse.on_error=skip` had to be
    guessed), and what `on_error: skip` dropped is one plain line with that key, not a Python warning."""
    bad = tmp_path / "bad.jsonl"
    bad.write_text("".join(SAMPLE.read_text().splitlines(keepends=True)[:40]) + '{"anchor": "a", "positive": "b"}\n')
    line = _one_line_error(capsys, _fit(tmp_path, tiny_bert_dir, "--data.train.simcse.path", str(bad)))
    assert f"{bad}:line 41: field 'negative' is missing" in line
    assert "set data.train.simcse.on_error: skip (--data.train.simcse.on_error=skip) to drop and count them" in line
    import warnings

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        main(_fit(tmp_path, tiny_bert_dir, "--data.train.simcse.path", str(bad), "--data.train.simcse.on_error=skip"))
    # not a Python warning with its source line (Lightning's own warnings quote pytest's argv, which may hold -k names)
    assert not [w for w in caught if str(w.message).startswith("unisent") or "malformed record" in str(w.message)]
    err = capsys.readouterr().err
    assert [line for line in err.splitlines() if "skipped" in line] == [
        f"unisent: skipped 1 malformed record(s) of {bad}, kept 40 (data.train.simcse.on_error=skip): "
        f"{bad}:line 41: field 'negative' is missing (record has: anchor, positive)"
    ]


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


@pytest.mark.integration
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
    from unisent.lightning_module import UnisentModule

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


def test_the_typed_fit_returns_its_run_and_what_an_interruption_left(tmp_path, tiny_bert_dir, monkeypatch):
    """``unisent.commands.fitting.fit`` (what ``unisent fit`` and ``unisent ablate`` train with) takes recipes and
    overrides, never ``sys.argv`` (pytest's own arguments are there), and returns what the run left: its
    directory and last.ckpt, or the interruption (no module global read, no exit)."""
    from unisent.commands.fitting import fit
    from unisent.lightning_module import UnisentModule

    words = _fit(tmp_path, tiny_bert_dir, "--trainer.max_steps", "1", "--trainer.precision", "fp32")
    done = fit([words[2]], words[3:])
    assert done.interrupted is None and done.status == 0 and done.command == "fit"
    assert done.precision == "32-true"  # what its Trainer trained in (unisent ablate records it per run)
    assert done.run_dir == tmp_path / "runs" / "quickstart" / "version_0" and (done.run_dir / "encoder").is_dir()
    assert done.checkpoint == done.run_dir / "checkpoints" / "last.ckpt" and done.checkpoint.is_file()

    def interrupt(self, *args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(UnisentModule, "training_step", interrupt)
    stopped = fit([words[2]], words[3:])
    assert stopped.interrupted is not None and stopped.interrupted.signal == "SIGINT" and stopped.status == 130
    assert stopped.interrupted.checkpoint is None and stopped.checkpoint is None  # nothing saved in its first step
    assert sorted(p.name for p in (tmp_path / "runs" / "quickstart").iterdir()) == ["version_0"]  # no empty run


# ------------------------------------------------------------------ hints name options of their command
#: the files whose messages each command prints (unisent/io: shared by several commands, so a hint there
#: may name an option only after the command it belongs to: "unisent convert-checkpoint FILE --trust")
_HINT_FILES = {
    "export": ["unisent/commands/export.py", "unisent/export/api.py", "unisent/export/card.py"],
    "encode": ["unisent/commands/encode.py", "unisent/export/file_encoding.py"],
    "evaluate": ["unisent/commands/evaluate.py"],
    "ablate": [f"unisent/commands/ablate/{name}.py" for name in ("__init__", "plan", "run", "summarise")],
    "retrofit": ["unisent/commands/retrofit.py"],
    None: ["unisent/io/checkpoints.py", "unisent/io/__init__.py"],
}


def _messages(path: Path) -> list[str]:
    """The string literals of ``path`` that are not docstrings (an f-string's fields read as ``{}``)."""
    import ast

    tree = ast.parse(path.read_text(encoding="utf-8"))
    docstrings = {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
        and node.body
        and isinstance(node.body[0], ast.Expr)
        and isinstance(node.body[0].value, ast.Constant)
    }
    texts, parts = [], set()
    for node in ast.walk(tree):
        if isinstance(node, ast.JoinedStr):
            texts.append("".join(v.value if isinstance(v, ast.Constant) else "{}" for v in node.values))
            parts |= {id(v) for v in node.values}
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings | parts:
            texts.append(node.value)
    return texts


def _options_of(command: str, capsys) -> set[str]:
    """The ``--options`` that ``unisent COMMAND --help`` lists, dashes read as underscores."""
    import re

    with pytest.raises(SystemExit):
        main([command, "--help"])
    return {"--" + o[2:].replace("-", "_") for o in re.findall(r"--[\w][\w.\-]*", capsys.readouterr().out)}


def test_every_hint_names_an_option_of_the_command_that_prints_it(capsys):
    """Issue 37: export's answer to a truncated checkpoint suggested --ckpt_path, which export does not take."""
    import re

    from unisent.cli import COMMAND_HELP, EXTRA_COMMANDS

    known: dict[str, set[str]] = {}
    wrong = []
    for command, files in _HINT_FILES.items():
        for name in files:
            for text in _messages(ROOT / name):
                if re.fullmatch(r"--[\w.\-]+(=.*)?", text):
                    continue  # a word of an argument list (ablate's own `fit ... --ckpt_path last`), not a message
                # each option belongs to the nearest `unisent CMD` before it in the message, else to the file's
                owner = command
                for match in re.finditer(r"unisent ([a-z][a-z\-]*)|(?<![\w\-])(--[a-z][\w.\-]*)", text):
                    if match.group(1):
                        owner = match.group(1) if match.group(1) in COMMAND_HELP else "?"
                        continue
                    option = "--" + match.group(2).rstrip(".-")[2:].replace("-", "_")
                    if owner == "?" or owner not in EXTRA_COMMANDS and owner is not None:
                        continue  # a Lightning command's key (checked by test_cli) or an unknown word
                    if owner is None:
                        wrong.append(f"{name}: {option} without its command: {text!r}")
                        continue
                    if owner not in known:
                        known[owner] = _options_of(owner, capsys)
                    if option not in known[owner]:
                        wrong.append(f"{name}: unisent {owner} has no {option}: {text!r}")
    assert not wrong, "\n".join(wrong)


def test_export_of_a_truncated_checkpoint_names_no_option_of_another_command(tmp_path, capsys):
    run = tmp_path / "checkpoints"
    run.mkdir()
    torch.save({"state_dict": {"w": torch.zeros(4000)}}, run / "best.ckpt")
    (run / "last.ckpt").write_bytes((run / "best.ckpt").read_bytes()[:3000])
    argv = ["export", str(run / "last.ckpt"), "--format", "sentence-transformers", "--out", str(tmp_path / "out")]
    with pytest.raises(SystemExit) as exit_:
        main(argv)
    assert capsys.readouterr().err == ""
    line = exit_.value.code  # sys.exit(message): one line, status 1
    assert line == (
        f"unisent export: error: checkpoint {run / 'last.ckpt'} (3000 bytes) is truncated or not a PyTorch "
        f"checkpoint; copy it again, or pick another file of {run}: best.ckpt"
    )
