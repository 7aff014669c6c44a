"""A checkpoint is data, never code: a ``.ckpt`` whose pickle names ``os.system`` runs nothing in any
entry point (export, evaluate, encode, ``unisent.load``, fit/test ``--ckpt_path``, the converter without
``--trust``); each refuses it in one line that names the file. A record that names a function instead
of an objective class is refused as well. A checkpoint that holds a harmless non-data object is
refused with the command that converts it, and loads once converted."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]
LEGACY = ROOT / "tests" / "fixtures" / "legacy" / "legacy.ckpt"


class _Evil:
    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


@pytest.fixture
def evil(tmp_path) -> tuple[Path, Path]:
    """(the malicious checkpoint, the marker file that running it would create)."""
    marker = tmp_path / "PWNED"
    path = tmp_path / "evil.ckpt"
    torch.save({"state_dict": {}, "global_step": 3, "epoch": 0, "unisent": _Evil(marker)}, path)
    assert not marker.exists()
    return path, marker


def _cli(capsys, *args: str) -> tuple[int, str]:
    """``unisent ARGS`` in this process: (exit status, stderr's non-empty lines joined)."""
    from unisent.cli import main

    capsys.readouterr()
    code = 0
    try:
        main(list(args))
    except SystemExit as done:
        code = done.code if isinstance(done.code, int) else 1
        if isinstance(done.code, str):
            print(done.code, file=sys.stderr)
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.strip()]
    return code, "\n".join(lines)


def _refused(code: int, err: str, path: Path, marker: Path) -> None:
    assert not marker.exists(), "the checkpoint's code ran"
    assert code != 0
    assert len(err.splitlines()) == 1, err
    assert str(path) in err and "would run code" in err, err
    assert "Traceback" not in err


def test_export_runs_nothing(evil, tmp_path, capsys):
    path, marker = evil
    code, err = _cli(capsys, "export", str(path), "--format", "sentence-transformers", "--out", str(tmp_path / "out"))
    _refused(code, err, path, marker)
    assert not (tmp_path / "out").exists()


def test_evaluate_runs_nothing(evil, capsys):
    path, marker = evil
    code, err = _cli(capsys, "evaluate", "--model", str(path), "--tasks", "stsb-test")
    _refused(code, err, path, marker)


def test_encode_runs_nothing(evil, tmp_path, capsys):
    path, marker = evil
    text = tmp_path / "in.txt"
    text.write_text("a sentence\n", encoding="utf-8")
    out = tmp_path / "out.npy"
    code, err = _cli(capsys, "encode", "--model", str(path), "--input", str(text), "--output", str(out))
    _refused(code, err, path, marker)
    assert not out.exists()


@pytest.mark.parametrize("command", ["fit", "test"])
def test_ckpt_path_runs_nothing(evil, tmp_path, capsys, command):
    path, marker = evil
    code, err = _cli(
        capsys,
        command,
        "-c",
        str(ROOT / "recipes" / "quickstart.yaml"),
        f"--trainer.default_root_dir={tmp_path / 'runs'}",
        "--ckpt_path",
        str(path),
    )
    _refused(code, err, path, marker)


def test_convert_without_trust_runs_nothing(evil, capsys):
    path, marker = evil
    code, err = _cli(capsys, "convert-checkpoint", str(path))
    assert not marker.exists()
    assert code == 2 and len(err.splitlines()) == 1 and "--trust" in err and "posix.system" in err, err


def test_convert_with_trust_refuses_a_function_and_runs_nothing(evil, tmp_path, capsys):
    """``--trust`` builds the classes a file names, never a function such as ``os.system``."""
    path, marker = evil
    code, err = _cli(capsys, "convert-checkpoint", str(path), "--trust", "--out", str(tmp_path / "c.ckpt"))
    assert not marker.exists() and not (tmp_path / "c.ckpt").exists()
    assert code == 1 and len(err.splitlines()) == 1 and "posix.system, which is not a class" in err, err


@pytest.mark.integration
def test_load_in_a_fresh_interpreter_runs_nothing(evil):
    """``unisent.load`` from Python, as a researcher evaluating a downloaded file would call it."""
    path, marker = evil
    done = subprocess.run(
        [sys.executable, "-c", f"import unisent; unisent.load({str(path)!r})"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=300,
    )
    assert not marker.exists()
    assert done.returncode != 0
    last = done.stderr.strip().splitlines()[-1]
    assert "UnsafeCheckpointError" in last and "would run code" in last and str(path) in last, done.stderr


def test_a_record_that_names_a_function_is_not_called(tmp_path, capsys, monkeypatch):
    """Plain data that names ``os.system`` as an objective's class: not in the registry of objectives, so it
    is skipped (named in one line with the file and the field), never imported or called."""
    import unisent

    monkeypatch.chdir(ROOT)  # the legacy checkpoint names its backbone relative to the repository
    marker = tmp_path / "PWNED"
    ckpt = torch.load(LEGACY, map_location="cpu", weights_only=False)  # the project's own fixture
    ckpt["unisent"]["objectives"] = [{"class_path": "os.system", "init_args": {"command": f"touch {marker}"}}]
    path = tmp_path / "named.ckpt"
    torch.save(ckpt, path)
    unisent.load(path)
    err = capsys.readouterr().err
    assert f"{path}: skipped objective(s) os.system (unisent.objectives: not registered objectives" in err, err
    assert not marker.exists()


def test_a_harmless_object_is_refused_with_the_converter_and_loads_converted(tmp_path, capsys, monkeypatch):
    """A checkpoint of an earlier format holding a non-data object (here a ``pathlib.Path`` in the
    hyperparameters): refused in one line with the converting command; converted with ``--trust``, it
    loads and embeds exactly as the original."""
    import unisent
    from unisent.io import UnsafeCheckpointError

    monkeypatch.chdir(ROOT)  # the legacy checkpoint names its backbone relative to the repository
    ckpt = torch.load(LEGACY, map_location="cpu", weights_only=False)
    ckpt["hyper_parameters"]["data_dir"] = Path("data")
    old = tmp_path / "old.ckpt"
    torch.save(ckpt, old)
    with pytest.raises(UnsafeCheckpointError, match=r"unisent convert-checkpoint .*old\.ckpt --trust") as refused:
        unisent.load(old)
    assert "pathlib" in str(refused.value)

    code, err = _cli(capsys, "convert-checkpoint", str(old), "--trust")
    converted = tmp_path / "old.data.ckpt"
    assert code == 0 and converted.is_file(), err
    assert torch.serialization.get_unsafe_globals_in_checkpoint(converted) == []
    plain = torch.load(converted, map_location="cpu", weights_only=True)
    assert plain["hyper_parameters"]["data_dir"] == "data"
    assert plain["hyper_parameters"]["encoder"]["max_length"] == 32  # the dataclass as a dict

    sentences = ["A man plays a guitar.", "Someone is cooking."]
    before = unisent.load(LEGACY).encode(sentences)
    after = unisent.load(converted).encode(sentences)
    assert torch.equal(torch.as_tensor(before), torch.as_tensor(after))


def test_new_checkpoints_hold_plain_data_only(tmp_path):
    """What ``on_save_checkpoint`` writes: no Python object beyond tensors and plain data, even when
    the module was built in Python with the config dataclasses."""
    from unisent.encoders import EncoderConfig
    from unisent.lightning_module import UnisentModule
    from unisent.training_config import EvaluationConfig

    module = UnisentModule(
        encoder=EncoderConfig(model=str(ROOT / "tests" / "fixtures" / "legacy" / "tiny-bert"), max_length=16),
        evaluation=EvaluationConfig(val_tasks=[]),
    )
    checkpoint = {"state_dict": module.state_dict(), "hyper_parameters": dict(module.hparams)}
    module.on_save_checkpoint(checkpoint)
    path = tmp_path / "new.ckpt"
    torch.save(checkpoint, path)
    with torch.serialization.safe_globals([]):
        assert torch.serialization.get_unsafe_globals_in_checkpoint(path) == []
    rebuilt = UnisentModule(**torch.load(path, weights_only=True)["hyper_parameters"])
    assert rebuilt.encoder_config.max_length == 16 and rebuilt.evaluation.val_tasks == []
