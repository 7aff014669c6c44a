"""Everything a user receives is data (issue 67, part A): one reader for the folders a user hands over. A
training data folder (a dataset card, a ``save_to_disk`` folder) is checked before ``datasets`` opens it, a
model folder's ``auto_map`` is refused and no transformers loader asks on stdin, ``.git`` is walked like any
folder, and ``unisent merge`` refuses a run's ``last.ckpt`` linked out of the run folder; each refusal one
line naming the file (and field). In-process and fast; the same kinds through every command are in the
hostile corpus (tests/hostile_received_cases.py), and one ``fit`` on a FIFO ``.arrow`` runs as a command here."""

from __future__ import annotations

import io
import json
import os
import shutil
import sys
import time
from pathlib import Path

import pytest

from unisent.data.file_checks import check_data_folder
from unisent.io.model_files import ModelFileError, check_model_directory

CARD = "---\nconfigs:\n- config_name: default\n  data_files:\n  - split: train\n    path: {files}\n---\n# sentences\n"
ARROW = "data-00000-of-00001.arrow"
SENTENCES = [f"sentence number {i} is here." for i in range(8)]


def _one_line(err: pytest.ExceptionInfo, *words: str) -> str:
    text = str(err.value)
    assert "\n" not in text.strip(), text
    assert all(w in text for w in words), (words, text)
    return text


@pytest.fixture
def card(tmp_path) -> Path:
    """A dataset card folder (README.md naming train.txt), with secret.txt beside it."""
    folder = tmp_path / "card"
    folder.mkdir()
    (folder / "train.txt").write_text("\n".join(SENTENCES) + "\n", encoding="utf-8")
    (folder / "README.md").write_text(CARD.format(files="train.txt"), encoding="utf-8")
    (tmp_path / "secret.txt").write_text("SECRET\n", encoding="utf-8")
    return folder


@pytest.fixture
def saved(tmp_path) -> Path:
    import datasets

    folder = tmp_path / "saved"
    datasets.Dataset.from_dict({"text": SENTENCES}).save_to_disk(folder)
    return folder


@pytest.mark.parametrize(
    ("files", "why"),
    [("../secret.txt", "climbs out"), ("/etc/passwd", "absolute path"), ("hf://datasets/x/y/a.txt", "URL")],
)
def test_a_card_whose_data_files_leave_the_folder_is_one_line(card, files, why):
    (card / "README.md").write_text(CARD.format(files=files), encoding="utf-8")
    with pytest.raises(ModelFileError) as err:
        check_data_folder(card)
    _one_line(err, "README.md", "configs[0].data_files[0].path", why)


def test_a_save_to_disk_state_naming_a_file_outside_is_one_line(saved):
    state = json.loads((saved / "state.json").read_text(encoding="utf-8"))
    state["_data_files"][0]["filename"] = "../outside.arrow"
    (saved / "state.json").write_text(json.dumps(state), encoding="utf-8")
    with pytest.raises(ModelFileError) as err:
        check_data_folder(saved)
    _one_line(err, "state.json", "_data_files[0].filename", "climbs out")


def test_a_fifo_arrow_is_refused_unopened_at_once(saved):
    (saved / ARROW).unlink()
    os.mkfifo(saved / ARROW)
    start = time.monotonic()
    with pytest.raises(ModelFileError) as err:
        check_data_folder(saved)
    assert time.monotonic() - start < 5
    _one_line(err, ARROW, "FIFO")


def test_a_loading_script_and_a_link_out_are_one_line_each(card, tmp_path):
    (card / "card.py").write_text("raise SystemExit('ran')\n", encoding="utf-8")
    with pytest.raises(ModelFileError) as err:
        check_data_folder(card)
    _one_line(err, "card.py", "loading script")
    (card / "card.py").unlink()
    (card / "train.txt").unlink()
    (card / "train.txt").symlink_to(tmp_path / "secret.txt")
    with pytest.raises(ModelFileError) as err:
        check_data_folder(card)
    _one_line(err, "train.txt", "outside the data folder")


def test_benign_data_folders_and_the_hub_cache_layout_are_read(card, saved, tmp_path):
    from unisent.data.sources import DataSource, load_source

    for folder in (card, saved):
        assert load_source(DataSource(path=str(folder)), ["text"])["text"] == SENTENCES
    snapshot = tmp_path / "datasets--o--n" / "snapshots" / "abc"  # files link into ../../blobs, as the cache has them
    blobs = tmp_path / "datasets--o--n" / "blobs"
    blobs.mkdir(parents=True)
    snapshot.mkdir(parents=True)
    for name in ("README.md", "train.txt"):
        shutil.copy2(card / name, blobs / name)
        (snapshot / name).symlink_to(Path("../../blobs") / name)
    assert check_data_folder(snapshot) == snapshot


def test_git_is_walked_like_any_folder(tmp_path):
    model = tmp_path / "model"
    (model / ".git" / "pool").mkdir(parents=True)
    (model / "config.json").write_text("{}", encoding="utf-8")
    (tmp_path / "outside.json").write_text("{}", encoding="utf-8")
    (model / ".git" / "pool" / "config.json").symlink_to(tmp_path / "outside.json")
    with pytest.raises(ModelFileError) as err:
        check_model_directory(model)
    _one_line(err, ".git/pool/config.json", "outside the model directory")
    (model / ".git" / "pool" / "config.json").unlink()
    os.mkfifo(model / ".git" / "pool" / "config.json")
    with pytest.raises(ModelFileError) as err:
        check_model_directory(model)
    _one_line(err, ".git/pool/config.json", "FIFO")


@pytest.mark.parametrize("name", ["config.json", "tokenizer_config.json"])
def test_an_auto_map_is_refused_before_any_loader(tmp_path, name):
    model = tmp_path / "model"
    model.mkdir()
    (model / name).write_text(json.dumps({"auto_map": {"AutoConfig": "evil_code.C"}}), encoding="utf-8")
    with pytest.raises(ModelFileError) as err:
        check_model_directory(model)
    _one_line(err, name, "auto_map")


def test_transformers_never_asks_and_never_runs_a_models_code(tiny_bert_dir, tmp_path, monkeypatch):
    """Past the folder check (a hub id is not walked), transformers is told trust_remote_code=False: a "y" on
    stdin would otherwise run the folder's Python (transformers asks when it does not know the model type)."""
    from unisent.encoders.loading import load_backbone

    model = shutil.copytree(tiny_bert_dir, tmp_path / "model")
    marker = tmp_path / "PWNED"
    (model / "evil_code.py").write_text(f"import pathlib\npathlib.Path({str(marker)!r}).touch()\n", encoding="utf-8")
    config = json.loads((model / "config.json").read_text(encoding="utf-8"))
    config |= {"model_type": "evilbert", "auto_map": {"AutoConfig": "evil_code.C", "AutoModel": "evil_code.M"}}
    (model / "config.json").write_text(json.dumps(config), encoding="utf-8")
    monkeypatch.setattr(sys, "stdin", io.StringIO("y\n" * 10))
    with pytest.raises(ValueError, match="trust_remote_code"):
        load_backbone(str(model))
    assert not marker.exists()


def test_merge_refuses_a_last_ckpt_linked_out_of_the_run_folder(tmp_path):
    from unisent.merging.runs import _checkpoint_of

    run = tmp_path / "run"
    (run / "checkpoints").mkdir(parents=True)
    (run / "checkpoints" / "epoch=0.ckpt").write_bytes(b"inside")
    (run / "checkpoints" / "last.ckpt").symlink_to("epoch=0.ckpt")  # Lightning's save_last="link": accepted
    assert _checkpoint_of(run) == run / "checkpoints" / "last.ckpt"
    (tmp_path / "private.ckpt").write_bytes(b"outside")
    (run / "checkpoints" / "last.ckpt").unlink()
    (run / "checkpoints" / "last.ckpt").symlink_to(tmp_path / "private.ckpt")
    with pytest.raises(ModelFileError) as err:
        _checkpoint_of(run)
    _one_line(err, "checkpoints/last.ckpt", "outside the run folder")


@pytest.mark.integration
def test_fit_on_a_fifo_arrow_ends_at_once_in_one_line(saved, tmp_path, tiny_bert_dir):
    """The issue's hang (SIGTERM did not end it): the FIFO is refused before anything opens it."""
    from tests.conftest import run_cli

    config = {
        "model": {"encoder": {"model": str(tiny_bert_dir), "max_length": 16}},
        "data": {"train": {"simcse": {"path": str(saved)}}, "batch_size": 2},
        "trainer": {"max_steps": 1, "logger": False, "enable_checkpointing": False, "default_root_dir": str(tmp_path)},
    }
    (tmp_path / "fit.yaml").write_text(json.dumps(config), encoding="utf-8")
    (saved / ARROW).unlink()
    os.mkfifo(saved / ARROW)
    start = time.monotonic()
    done = run_cli(["fit", "-c", str(tmp_path / "fit.yaml")], cwd=tmp_path, timeout=120)
    assert time.monotonic() - start < 60 and done.returncode == 1, (done.returncode, done.stderr[-2000:])
    errors = [line for line in done.stderr.splitlines() if line.startswith("unisent fit: error:")]
    assert len(errors) == 1 and ARROW in errors[0] and "FIFO" in errors[0], done.stderr[-2000:]
    assert "Traceback" not in done.stderr


def test_a_card_header_nested_past_the_parser_is_one_line(card):
    """A YAML header that nests deeper than the parser can go (RecursionError) is a malformed card, one line."""
    (card / "README.md").write_text("---\n" + "[" * 5000 + "\n---\n# card\n", encoding="utf-8")
    with pytest.raises(ModelFileError) as err:
        check_data_folder(card)
    _one_line(err, "README.md", "YAML header is malformed")
