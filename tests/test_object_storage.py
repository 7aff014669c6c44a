"""Object storage (``s3://``), against a local S3-compatible server (moto, started by the ``s3_bucket``
fixture of conftest.py): runs written to and resumed from S3 exactly, a killed checkpoint upload never taken
as the newest, training data read and streamed from S3 as from local files, and models and checkpoints loaded,
encoded, evaluated and exported from S3."""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path

import fsspec
import numpy as np
import pytest
import torch
import yaml

import unisent
from tests.conftest import run_cli
from unisent.data.sources import DataSource, load_source, open_dataset, resolve_source
from unisent.encoders import Encoder, EncoderConfig
from unisent.io.remote import RemoteError, is_remote, localize

ROOT = Path(__file__).resolve().parents[1]
SAMPLE_DIR = ROOT / "samples"

pytestmark = [pytest.mark.usefixtures("one_thread"), pytest.mark.integration]


def _fs():
    return fsspec.filesystem("s3")


def _put(local: Path, url: str) -> str:
    _fs().put_file(str(local), url)
    return url


def _sentences_jsonl(directory: Path, parts: int = 2) -> list[Path]:
    """The bundled sentences as ``part-<i>.jsonl`` files (field ``text``)."""
    import json

    lines = (SAMPLE_DIR / "sentences.txt").read_text(encoding="utf-8").splitlines()
    directory.mkdir(parents=True, exist_ok=True)
    files = []
    for i in range(parts):
        path = directory / f"part-{i}.jsonl"
        path.write_text("".join(json.dumps({"text": t}) + "\n" for t in lines[i::parts]), encoding="utf-8")
        files.append(path)
    return files


# ------------------------------------------------------------------------------------------ remote paths
def test_is_remote_and_localize_refuse_what_is_odd(s3_bucket, tmp_path, monkeypatch):
    assert is_remote("s3://b/k") and is_remote("gs://b/k") and not is_remote("file:///x") and not is_remote("/a/b")
    assert localize("/some/local/dir") == "/some/local/dir"
    fs = _fs()
    fs.pipe(f"{s3_bucket}/evil/config.json", b"{}")
    fs.pipe(f"{s3_bucket}/evil/sub/../../escape.json", b"{}")  # a key with '..' in it
    with pytest.raises(RemoteError, match=r"refused: key 'sub/\.\./\.\./escape\.json'"):
        localize(f"{s3_bucket}/evil")
    assert not list((tmp_path / "cache").rglob("escape.json"))
    with pytest.raises(RemoteError, match=rf"{s3_bucket}/missing: no such bucket or key"):
        localize(f"{s3_bucket}/missing")
    fs.pipe(f"{s3_bucket}/big/model.bin", b"x" * 4096)
    monkeypatch.setenv("UNISENT_REMOTE_MAX_BYTES", "1024")
    with pytest.raises(RemoteError, match="over the cap.*UNISENT_REMOTE_MAX_BYTES"):
        localize(f"{s3_bucket}/big")


def test_an_unreachable_endpoint_is_one_line(s3_bucket, monkeypatch, tmp_path):
    from s3fs import S3FileSystem

    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:9")  # nothing listens there
    monkeypatch.setenv("AWS_MAX_ATTEMPTS", "1")
    S3FileSystem.clear_instance_cache()
    (tmp_path / "x.txt").write_text("a sentence\n", encoding="utf-8")
    result = run_cli(
        ["encode", "--model", f"{s3_bucket}/m/encoder", "--input", tmp_path / "x.txt", "--output", tmp_path / "o.npy"],
        env={**os.environ, "AWS_MAX_ATTEMPTS": "1", "AWS_RETRY_MODE": "standard"},
        timeout=120,
    )
    assert result.returncode != 0
    lines = result.stderr.strip().splitlines()
    assert "Traceback" not in result.stderr and len(lines) == 1, result.stderr[-2000:]
    assert f"{s3_bucket}/m/encoder" in lines[0] and "AWS_ENDPOINT_URL" in lines[0]


# ------------------------------------------------------------------------------------------ models
@pytest.fixture(scope="module")
def encoder_dir(tiny_bert_dir, tmp_path_factory) -> Path:
    directory = tmp_path_factory.mktemp("encoder")
    Encoder(EncoderConfig(model=str(tiny_bert_dir), pooler="mean", max_length=32)).save_pretrained(directory)
    return directory


def test_load_encode_evaluate_export_an_s3_model(s3_bucket, encoder_dir, tmp_path, unisent_cli, capsys):
    url = f"{s3_bucket}/runs/run/version_0/encoder"
    _fs().put(str(encoder_dir) + "/", url + "/", recursive=True)
    sentences = ["A man is playing a guitar.", "The cat sleeps.", "Stocks fell sharply today."]
    local = unisent.load(str(encoder_dir)).encode(sentences)
    remote = unisent.load(url).encode(sentences)
    assert np.allclose(np.asarray(local), np.asarray(remote), atol=1e-6)
    # the second load reads the cache (nothing changed); a changed object is downloaded again
    cached = localize(url)
    assert Path(cached).is_dir() and str(tmp_path / "cache") in cached
    assert localize(url) == cached

    text = tmp_path / "in.txt"
    text.write_text("\n".join(sentences) + "\n", encoding="utf-8")
    unisent_cli("encode", "--model", url, "--input", str(text), "--output", str(tmp_path / "e.npy"), "--quiet")
    assert np.allclose(np.load(tmp_path / "e.npy"), np.asarray(local), atol=1e-6)

    unisent_cli("evaluate", "--model", url, "--tasks", "stsb-dev", "--quiet", "--output", str(tmp_path / "r.json"))
    assert "stsb-dev" in (tmp_path / "r.json").read_text()

    out = tmp_path / "exported"
    unisent_cli("export", url, "--format", "sentence-transformers", "--out", str(out), "--no-verify")
    assert (out / "README.md").is_file()
    assert f"exported {url}" in capsys.readouterr().out


# ------------------------------------------------------------------------------------------ data
def test_training_data_from_s3_equals_the_local_files(s3_bucket, tmp_path):
    parts = _sentences_jsonl(tmp_path / "data")
    for part in parts:
        _put(part, f"{s3_bucket}/data/{part.name}")
    _put(SAMPLE_DIR / "sentences.txt", f"{s3_bucket}/data/sentences.txt")
    cases = [
        (f"{s3_bucket}/data/part-*.jsonl", str(tmp_path / "data" / "part-*.jsonl")),
        (f"{s3_bucket}/data/sentences.txt", str(SAMPLE_DIR / "sentences.txt")),
    ]
    for remote, local in cases:
        # map-style: downloaded into the cache, then read (and checked) as the local files are
        a = load_source(DataSource(remote), ["text"], ["text"])
        b = load_source(DataSource(local), ["text"], ["text"])
        assert a["text"] == b["text"] and len(a) == 1024
        # streamed from S3: the same records in the same order
        streamed = [r["text"] for r in open_dataset(resolve_source(DataSource(remote, streaming=True)), streaming=True)]
        assert streamed == b["text"]
    # a glob streamed through a shuffle buffer (files and records shuffled): the same order as locally
    remote, local = (resolve_source(DataSource(p, streaming=True)) for p in (cases[0][0], cases[0][1]))
    assert remote.urls and not remote.files
    a, b = (open_dataset(r, streaming=True).shuffle(seed=3, buffer_size=32) for r in (remote, local))
    assert [r["text"] for r in a] == [r["text"] for r in b]
    with pytest.raises(FileNotFoundError, match="no object matches"):
        resolve_source(DataSource(f"{s3_bucket}/data/nothing-*.jsonl"))


# ------------------------------------------------------------------------------------------ runs on S3
def _config(directory: Path, model_dir: Path, unsup: str, sup: str) -> Path:
    """Unsupervised SimCSE streamed (a shuffle buffer) + supervised SimCSE, 8 steps of 16, a resume point
    every 2 steps, no validation; dropout makes the random states matter."""
    config = {
        "seed_everything": 7,
        "model": {
            "encoder": {"model": str(model_dir), "pooler": "cls_mlp_train_only", "max_length": 32},
            "objectives": [
                {"class_path": "unisent.objectives.SimCSE", "init_args": {"name": "unsup"}},
                {
                    "class_path": "unisent.objectives.SimCSE",
                    "init_args": {"name": "sup", "supervised": True, "weight": 0.5},
                },
            ],
            "optimizer": {"class_path": "unisent.optim.AdamW", "init_args": {"lr": 1.0e-3}},
            "train": {"schedule": {"warmup_steps": 2}},
        },
        "data": {
            "train": {
                "unsup": {"path": unsup, "max_records": 160, "streaming": True, "shuffle_buffer": 32},
                "sup": {"path": sup, "max_records": 64},
            },
            "batch_size": 16,
        },
        "trainer": {
            "max_steps": 8,
            "max_epochs": 100,
            "limit_val_batches": 0,
            "deterministic": True,
            "accelerator": "cpu",
            "enable_progress_bar": False,
            "enable_model_summary": False,
            "log_every_n_steps": 1,
        },
        "checkpoint": {"every_n_train_steps": 2},
    }
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "config.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def _command(config: Path, save_dir: str, *extra: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "unisent.cli",
        "fit",
        "-c",
        str(config),
        "--trainer.logger.class_path=lightning.pytorch.loggers.CSVLogger",
        "--trainer.logger.init_args.name=run",
        f"--trainer.logger.init_args.save_dir={save_dir}",
        f"--trainer.default_root_dir={save_dir}",
        *extra,
    ]


def _env(**extra: str) -> dict[str, str]:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false", **extra}
    if "UNISENT_FAULT" not in extra:
        env.pop("UNISENT_FAULT", None)
    return env


def _checkpoint(path: str | Path) -> dict:
    with fsspec.open(str(path), "rb") as f:
        import io

        return torch.load(io.BytesIO(f.read()), map_location="cpu", weights_only=True)


def _assert_same_training(a: dict, b: dict) -> None:
    assert a["global_step"] == b["global_step"] == 8
    for name, tensor in a["state_dict"].items():
        assert torch.equal(tensor, b["state_dict"][name]), name
    for k, state in a["optimizer_states"][0]["state"].items():
        for key, value in state.items():
            assert torch.equal(value, b["optimizer_states"][0]["state"][k][key]), (k, key)
    assert a["lr_schedulers"] == b["lr_schedulers"]


@pytest.fixture(scope="module")
def local_run(tiny_bert_dir, tmp_path_factory):
    """The uninterrupted run, local files and logs: its config, data files and final checkpoint."""
    directory = tmp_path_factory.mktemp("local-run")
    parts = _sentences_jsonl(directory / "data")
    config = _config(
        directory, tiny_bert_dir, str(directory / "data" / "part-*.jsonl"), str(SAMPLE_DIR / "nli_triples.jsonl")
    )
    done = run_cli(_command(config, str(directory / "runs")), env=_env(), cwd=ROOT)
    assert done.returncode == 0, done.stderr[-3000:]
    return parts, _checkpoint(directory / "runs" / "run" / "version_0" / "checkpoints" / "last.ckpt")


def _s3_run(s3_bucket: str, tiny_bert_dir: Path, tmp_path: Path, parts: list[Path]) -> tuple[Path, str, str]:
    for part in parts:
        _put(part, f"{s3_bucket}/data/{part.name}")
    _put(SAMPLE_DIR / "nli_triples.jsonl", f"{s3_bucket}/data/nli.jsonl")
    config = _config(tmp_path, tiny_bert_dir, f"{s3_bucket}/data/part-*.jsonl", f"{s3_bucket}/data/nli.jsonl")
    save_dir = f"{s3_bucket}/runs"
    return config, save_dir, f"{save_dir}/run/version_0"


def _killed_then_resumed(config: Path, save_dir: str, run: str, fault: str) -> str:
    victim = run_cli(_command(config, save_dir), env=_env(UNISENT_FAULT=fault), cwd=ROOT)
    assert victim.returncode == -signal.SIGKILL, victim.stderr[-3000:]
    assert not _fs().exists(f"{run}/encoder")  # the run did not finish
    killed_at = _checkpoint(f"{run}/checkpoints/last.ckpt")["global_step"]
    resumed = run_cli(_command(config, save_dir, "--ckpt_path", "last"), env=_env(), cwd=ROOT)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert f"unisent fit: resuming {run} from checkpoints/last.ckpt (step {killed_at}," in resumed.stderr
    assert _fs().exists(f"{run}/encoder/model.safetensors") and _fs().exists(f"{run}/metrics-0.csv")
    return killed_at


def test_a_run_on_s3_killed_mid_step_resumes_exactly(s3_bucket, tiny_bert_dir, tmp_path, local_run):
    """SIGKILL in the middle of step 6 (global step 5): the newest resume point on S3 is step 4; ``--ckpt_path
    last`` finds the run there and ends with the uninterrupted local run's weights and optimiser state, bit for
    bit (the data streamed and read from S3 too)."""
    parts, reference = local_run
    config, save_dir, run = _s3_run(s3_bucket, tiny_bert_dir, tmp_path, parts)
    assert _killed_then_resumed(config, save_dir, run, "train_step@6=SIGKILL") == 4
    _assert_same_training(reference, _checkpoint(f"{run}/checkpoints/last.ckpt"))


@pytest.mark.slow  # 30 s: the run killed mid-step keeps the S3 resume in the default run
def test_a_killed_checkpoint_upload_leaves_the_previous_one(s3_bucket, tiny_bert_dir, tmp_path, local_run):
    """SIGKILL during the second checkpoint write (step 4, bytes written, upload not completed): S3 still holds
    step 2's complete last.ckpt, which ``--ckpt_path last`` resumes, exactly."""
    parts, reference = local_run
    config, save_dir, run = _s3_run(s3_bucket, tiny_bert_dir, tmp_path, parts)
    assert _killed_then_resumed(config, save_dir, run, "checkpoint_write@2=SIGKILL") == 2
    _assert_same_training(reference, _checkpoint(f"{run}/checkpoints/last.ckpt"))


def test_latest_run_on_s3_is_the_newest_complete_checkpoint(s3_bucket, tmp_path):
    from unisent.run_progress import last_checkpoint, latest_run

    root = f"{s3_bucket}/runs/run"
    assert latest_run(root) is None and last_checkpoint(f"{root}/version_0/checkpoints") is None
    for version, step in (("version_0", 3), ("version_1", 9), ("version_2", 5)):  # same second: ties by step
        buffer = tmp_path / f"{version}.ckpt"
        torch.save({"global_step": step}, buffer)
        _put(buffer, f"{root}/{version}/checkpoints/last.ckpt")
    assert latest_run(root) == f"{root}/version_1"
    assert last_checkpoint(f"{root}/version_2/checkpoints") == f"{root}/version_2/checkpoints/last.ckpt"


def test_load_and_export_a_checkpoint_on_s3(s3_bucket, tiny_bert_dir, tmp_path, unisent_cli, capsys):
    """A checkpoint of ``unisent fit`` read from S3 (checked as data on the local copy that is loaded)."""
    from unisent.lightning_module import UnisentModule
    from unisent.objectives import SimCSE

    module = UnisentModule(encoder=EncoderConfig(model=str(tiny_bert_dir), max_length=32), objectives=[SimCSE()])
    import lightning as L

    trainer = L.Trainer(logger=False, enable_checkpointing=False, accelerator="cpu")
    trainer.strategy.connect(module)
    ckpt = tmp_path / "last.ckpt"
    trainer.save_checkpoint(ckpt)
    url = _put(ckpt, f"{s3_bucket}/runs/run/version_0/checkpoints/last.ckpt")
    sentences = ["A dog runs.", "Two people talk."]
    assert np.allclose(
        np.asarray(unisent.load(str(ckpt)).encode(sentences)),
        np.asarray(unisent.load(url).encode(sentences)),
        atol=1e-6,
    )
    unisent_cli("export", url, "--format", "huggingface", "--out", str(tmp_path / "hf"), "--no-verify")
    assert (tmp_path / "hf" / "README.md").is_file()
