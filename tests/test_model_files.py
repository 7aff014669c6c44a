"""A model directory is data: its paths stay inside it, only regular files are opened, the sizes its
configs declare are checked against its weights before anything is allocated, and every malformed file
is one line naming it (issue 46; :mod:`unisent.io.model_files`).

Each test breaks one rule on a copy of a tiny model and checks the one-line message (the file and the
field), that nothing outside the folder reaches an output, that nothing hangs and that nothing large is
allocated."""

from __future__ import annotations

import json
import os
import resource
import shutil
import socket
import struct
import threading
from pathlib import Path

import pytest
import torch

import unisent
from unisent.io.model_files import (
    ModelFileError,
    check_model_directory,
    inside,
    load_state,
    read_model_json,
    safetensors_shapes,
)

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "legacy"
SECRET = "PRIVATE-KEY-material-that-must-not-travel"

pytestmark = pytest.mark.usefixtures("one_thread")


def _one_line(err: BaseException, *names: str) -> str:
    text = str(err)
    assert "\n" not in text, text
    for name in names:
        assert name in text, f"{name!r} not in {text!r}"
    return text


def _edit_json(path: Path, edit) -> None:
    value = json.loads(path.read_text())
    edit(value)
    path.write_text(json.dumps(value))


@pytest.fixture
def st_dir(tmp_path) -> Path:
    """A Sentence Transformers directory (Transformer, Pooling, Dense) that unisent did not write."""
    directory = Path(shutil.copytree(FIXTURES / "st", tmp_path / "st"))
    for name in ("unisent_encoder.json", "gaussian_head.json", "gaussian_head.pt"):
        (directory / name).unlink()
    return directory


@pytest.fixture
def outside(tmp_path) -> Path:
    """A private file outside every model directory (``~/.ssh/id_rsa``-like)."""
    secret = tmp_path / "private" / "id_rsa"
    secret.parent.mkdir()
    secret.write_text(SECRET)
    secret.chmod(0o600)
    return secret


def _in_thread(function, timeout: float = 60.0):
    """``function()``'s exception (or result), failing when it does not return within ``timeout``."""
    box: dict = {}

    def run():
        try:
            box["result"] = function()
        except BaseException as err:  # noqa: BLE001 - handed to the test
            box["error"] = err

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(timeout)
    assert not thread.is_alive(), f"still running after {timeout} s: a hang"
    return box.get("error", box.get("result"))


# ------------------------------------------------------------------------------------------ paths
@pytest.mark.parametrize("path", ["../outside", "/etc", "1_Pooling/../../x"])
def test_a_module_path_in_modules_json_that_leaves_the_directory_is_one_line(st_dir, path):
    _edit_json(st_dir / "modules.json", lambda m: m[2].update(path=path))
    with pytest.raises(ModelFileError) as err:
        unisent.load(st_dir)
    _one_line(err.value, "modules.json", "module 2", "path", path)


def test_a_link_out_of_the_directory_is_refused_and_never_exported(tiny_model_dir, outside, tmp_path):
    (tiny_model_dir / "chat_template.jinja").symlink_to(outside)
    with pytest.raises(ModelFileError) as err:
        unisent.load(tiny_model_dir)
    text = _one_line(err.value, "chat_template.jinja", "outside the model directory")
    assert SECRET not in text
    from unisent.export import export_model

    out = tmp_path / "exported"
    with pytest.raises(ModelFileError):
        export_model(str(tiny_model_dir), out, "sentence-transformers")
    written = [p.read_bytes() for p in out.rglob("*") if p.is_file()] if out.exists() else []
    assert not any(SECRET.encode() in data for data in written)


def test_a_link_inside_the_directory_and_a_hub_cache_snapshot_are_accepted(tiny_model_dir, tmp_path):
    (tiny_model_dir / "vocab-link.json").symlink_to(tiny_model_dir / "config.json")
    assert check_model_directory(tiny_model_dir) == tiny_model_dir
    repo = tmp_path / "hub" / "models--org--tiny"
    (repo / "blobs").mkdir(parents=True)
    snapshot = repo / "snapshots" / "abc123"
    snapshot.mkdir(parents=True)
    for file in tiny_model_dir.glob("*.json"):
        shutil.copy(file, repo / "blobs" / file.name)
        (snapshot / file.name).symlink_to(Path("../../blobs") / file.name)
    check_model_directory(snapshot)  # links to ../../blobs: the cache's layout, not a way out


@pytest.mark.parametrize("kind", ["fifo", "socket", "device link", "broken link"])
def test_a_file_that_is_no_regular_file_is_refused_unread_without_hanging(tiny_model_dir, kind, monkeypatch):
    target, server = tiny_model_dir / "vocab.txt", socket.socket(socket.AF_UNIX)
    if kind == "fifo":
        os.mkfifo(target)
    elif kind == "socket":
        monkeypatch.chdir(tiny_model_dir)  # a relative name: socket paths are limited to ~100 bytes
        server.bind("vocab.txt")
    elif kind == "device link":
        target.symlink_to("/dev/zero")
    else:
        target.symlink_to(tiny_model_dir / "missing")
    error = _in_thread(lambda: unisent.load(tiny_model_dir))
    server.close()
    assert isinstance(error, ModelFileError), error
    _one_line(error, "vocab.txt")


def test_unisent_encode_with_a_fifo_in_the_model_is_one_line_not_a_hang(tiny_model_dir, tmp_path, capsys):
    from unisent.cli import main

    os.mkfifo(tiny_model_dir / "special_tokens_map.json")
    sentences = tmp_path / "in.txt"
    sentences.write_text("a sentence\n")
    args = ["encode", "--model", str(tiny_model_dir), "--input", str(sentences), "--output", str(tmp_path / "o.npy")]
    done = _in_thread(lambda: main(args))
    assert isinstance(done, SystemExit) and done.code not in (0, None)
    err = str(done.code) if isinstance(done.code, str) else capsys.readouterr().err.strip()  # sys.exit(message)
    assert err.startswith("unisent encode: error: ")
    _one_line(err, "special_tokens_map.json", "FIFO")


def test_retrofit_json_folders_and_parser_files_stay_inside(tmp_path, outside):
    directory = tmp_path / "retrofitted"
    directory.mkdir()
    record = {"combination": "concat", "text_encoder": {"path": "../../elsewhere"}, "amr_encoder": {"path": "amr"}}
    (directory / "retrofit.json").write_text(json.dumps(record))
    with pytest.raises(ModelFileError) as err:
        unisent.load(directory)
    _one_line(err.value, "retrofit.json", "text_encoder.path", "../../elsewhere")
    record["text_encoder"]["path"] = "text"
    record["parser"] = {"class_path": "unisent.amr.parsing.PreParsedAMR", "init_args": {"sources": [str(outside)]}}
    (directory / "retrofit.json").write_text(json.dumps(record))
    with pytest.raises(ModelFileError) as err:
        unisent.load(directory)
    assert SECRET not in _one_line(err.value, "retrofit.json", "parser.init_args.sources[0]", "absolute path")


def test_inside_refuses_every_way_out(tmp_path, outside):
    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "link").symlink_to(outside.parent)
    for value in ("../x", "/etc/passwd", "~/.ssh/id_rsa", "link/id_rsa", "C:\\x", 7):
        with pytest.raises(ModelFileError) as err:
            inside(tmp_path / "model", value, source="record.json", field="files.fp32")
        _one_line(err.value, "record.json: files.fp32")
    assert inside(tmp_path / "model", "onnx/model.onnx", source="r", field="f") == tmp_path / "model/onnx/model.onnx"


# ------------------------------------------------------------------------------------------ sizes
def _peak_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


@pytest.mark.parametrize(
    "field, value", [("vocab_size", 900_000_000), ("intermediate_size", 2**28), ("num_hidden_layers", 4000)]
)
def test_a_config_size_beyond_the_weights_is_refused_before_allocating(tiny_model_dir, field, value):
    _edit_json(tiny_model_dir / "config.json", lambda c: c.update({field: value}))
    before = _peak_mb()
    with pytest.raises(ModelFileError) as err:
        unisent.load(tiny_model_dir)
    _one_line(err.value, "config.json", "model.safetensors", f"{field}={value}")
    assert _peak_mb() - before < 300, "the refused config was allocated"


def test_a_dense_module_size_beyond_its_weights_is_refused(st_dir):
    _edit_json(st_dir / "2_Dense" / "config.json", lambda c: c.update(out_features=10**9))
    with pytest.raises(ModelFileError) as err:
        unisent.load(st_dir)
    _one_line(err.value, "2_Dense/config.json", "out_features=1000000000", "2_Dense/model.safetensors")


def test_sizes_in_unisent_encoder_json_and_a_head_json_are_checked_against_their_weights(st_dir, tmp_path):
    saved = unisent.load(st_dir).save_pretrained(tmp_path / "saved")  # unisent_encoder.json + pooler.pt
    _edit_json(
        saved / "unisent_encoder.json",
        lambda s: s["sentence_transformers"]["modules"][-1]["config"].update(out_features=10**9),
    )
    with pytest.raises(ModelFileError) as err:
        unisent.load(saved)
    _one_line(err.value, "unisent_encoder.json", "out_features=1000000000", "pooler.pt")
    gaussian = Path(shutil.copytree(FIXTURES / "encoder", tmp_path / "gaussian"))
    _edit_json(gaussian / "gaussian_head.json", lambda h: h.update(hidden_size=10**8))
    with pytest.raises(ModelFileError) as err:
        unisent.load(gaussian)
    _one_line(err.value, "gaussian_head.json", "hidden_size=100000000", "gaussian_head.pt")


def test_tensors_that_do_not_fit_are_one_line(tmp_path):
    torch.save({"weight": torch.zeros(3, 5), "bias": torch.zeros(3)}, tmp_path / "head.pt")
    with pytest.raises(ModelFileError) as err:
        load_state(torch.nn.Linear(5, 4), torch.load(tmp_path / "head.pt"), source=tmp_path / "head.pt")
    _one_line(err.value, "head.pt", "weight")
    ckpt = torch.load(FIXTURES / "legacy.ckpt", map_location="cpu", weights_only=False)  # the project's own fixture
    ckpt["unisent"]["encoder"]["model"] = str(FIXTURES / "tiny-bert")
    ckpt["state_dict"]["encoder.backbone.embeddings.word_embeddings.weight"] = torch.zeros(601, 32)
    torch.save(ckpt, tmp_path / "misfit.ckpt")
    from unisent.io import CheckpointError

    with pytest.raises(CheckpointError) as err:
        unisent.load(tmp_path / "misfit.ckpt")
    _one_line(err.value, "misfit.ckpt", "word_embeddings", "601")


# ------------------------------------------------------------------------------------------ malformed files
def _safetensors(header: bytes, data: bytes = b"", length: int | None = None) -> bytes:
    return struct.pack("<Q", len(header) if length is None else length) + header + data


GOOD_HEADER = {"w": {"dtype": "F32", "shape": [2, 2], "data_offsets": [0, 16]}}


@pytest.mark.parametrize(
    "content, says",
    [
        (b"\x01\x02", "truncated"),
        (_safetensors(b"{}", length=10**12), "beyond the file"),
        (_safetensors(b"{not json"), "not valid JSON"),
        (_safetensors(json.dumps(GOOD_HEADER).encode(), bytes(8)), "data_offsets"),
        (_safetensors(json.dumps({"w": {**GOOD_HEADER["w"], "shape": [3, 3]}}).encode(), bytes(16)), "needs 36 bytes"),
        (_safetensors(json.dumps({"w": {**GOOD_HEADER["w"], "shape": "big"}}).encode(), bytes(16)), "shape"),
    ],
)
def test_a_malformed_safetensors_header_is_one_line(tiny_model_dir, content, says):
    (tiny_model_dir / "model.safetensors").write_bytes(content)
    with pytest.raises(ModelFileError) as err:
        safetensors_shapes(tiny_model_dir / "model.safetensors")
    _one_line(err.value, "model.safetensors", says)
    with pytest.raises(ModelFileError) as err:
        check_model_directory(tiny_model_dir)  # before transformers reads it
    _one_line(err.value, "model.safetensors", says)


def test_deep_or_huge_json_is_one_line(tiny_model_dir, tmp_path):
    (tiny_model_dir / "tokenizer_config.json").write_text("[" * 100_000 + "]" * 100_000)
    with pytest.raises(ModelFileError) as err:
        unisent.load(tiny_model_dir)
    _one_line(err.value, "tokenizer_config.json", "nested")
    (tmp_path / "deep.json").write_text('{"a":' * 80 + "1" + "}" * 80)
    with pytest.raises(ModelFileError, match="deeper than 64 levels"):
        read_model_json(tmp_path / "deep.json")
    with pytest.raises(ModelFileError, match="more than the 10 a model file may have"):
        read_model_json(tmp_path / "deep.json", max_bytes=10)


@pytest.mark.parametrize(
    "modules, says",
    [
        ({"0": "Transformer"}, "expected a non-empty list"),
        ([{"idx": 0, "path": ""}], "type"),
        ("not json", "not valid JSON"),
    ],
)
def test_a_malformed_modules_json_is_one_line(st_dir, modules, says):
    text = modules if isinstance(modules, str) else json.dumps(modules)
    (st_dir / "modules.json").write_text(text)
    with pytest.raises(ValueError) as err:
        unisent.load(st_dir)
    _one_line(err.value, "modules.json", says)


def test_a_malformed_tokenizer_file_is_one_line(tiny_model_dir):
    _edit_json(tiny_model_dir / "tokenizer.json", lambda t: t.update(model={"type": "Nope"}))
    with pytest.raises(ModelFileError) as err:
        unisent.load(tiny_model_dir)
    _one_line(err.value, "tokenizer.json")


def test_an_onnx_record_and_file_are_checked(tiny_model_dir):
    pytest.importorskip("onnxruntime")
    onnx = tiny_model_dir / "onnx"
    onnx.mkdir()
    (onnx / "model.onnx").write_bytes(b"\x00garbage, not a protobuf" * 10)
    record = {"outputs": ["sentence_embedding"], "max_length": 16, "files": {"fp32": "../../../etc/passwd"}}
    (onnx / "unisent_onnx.json").write_text(json.dumps(record))
    with pytest.raises(ModelFileError) as err:
        unisent.load(tiny_model_dir, backend="onnx")
    _one_line(err.value, "unisent_onnx.json", "files.fp32", "climbs out")
    _edit_json(onnx / "unisent_onnx.json", lambda r: r.update(max_length="many"))
    with pytest.raises(ModelFileError) as err:
        unisent.load(tiny_model_dir, backend="onnx")
    _one_line(err.value, "unisent_onnx.json", "max_length")
    _edit_json(onnx / "unisent_onnx.json", lambda r: r.update(max_length=16, files={"fp32": "model.onnx"}))
    with pytest.raises(ModelFileError) as err:
        unisent.load(tiny_model_dir, backend="onnx").encode(["a sentence"])
    _one_line(err.value, "model.onnx", "not an ONNX model")


def test_a_run_config_yaml_alias_bomb_is_skipped_quickly(tmp_path):
    from unisent.export.source import _read_run_config

    lines = ["a: &a [x, x, x, x, x, x, x, x, x]"] + [
        f"{chr(98 + i)}: &{chr(98 + i)} [*{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}]"
        for i in range(12)
    ]
    (tmp_path / "config.yaml").write_text("\n".join(lines) + "\nmodel: {encoder: *m}\n")
    assert _in_thread(lambda: _read_run_config(tmp_path / "config.yaml"), timeout=20) == {}
