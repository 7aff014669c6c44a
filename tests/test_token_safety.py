"""A Hugging Face token in the environment never reaches a file, a log or the terminal (issue 37).

``unisent export --push-to`` runs against a stubbed ``huggingface_hub`` (``create_repo``/``upload_folder``,
module functions and ``HfApi`` methods) that checks the token was there to be used and keeps a copy of
what would have been uploaded; ``unisent fit`` runs two steps with the W&B logger offline. Neither the
export folder (its model card included), the upload, the run folder (config.yaml, hparams, checkpoints,
W&B's offline files), stdout/stderr nor the log records hold the token's text.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import huggingface_hub
import pytest

from unisent.cli import main
from unisent.encoders import Encoder, EncoderConfig

ROOT = Path(__file__).resolve().parents[1]
SAMPLE = ROOT / "samples" / "nli_triples.jsonl"
#: built at run time, so that no file of the repository holds the whole text
TOKEN = "hf_" + "UnisentLeakCheck" + "7Qx2Zp9Lm4Kd8Vw3"

pytestmark = pytest.mark.usefixtures("one_thread")


def files_holding(root: Path, secret: str = TOKEN) -> list[Path]:
    """Every file under ``root`` whose bytes hold ``secret`` (UTF-8, or UTF-16 as some tools write)."""
    needles = (secret.encode(), secret.encode("utf-16-le"))
    found = []
    for path in sorted(root.rglob("*")):
        if path.is_file() and not path.is_symlink():
            data = path.read_bytes()
            if any(needle in data for needle in needles):
                found.append(path)
    return found


@pytest.fixture
def fake_hub(tmp_path, monkeypatch):
    """``huggingface_hub`` with its network calls replaced: what was created and uploaded (a copy of the
    folder under ``tmp_path/hub``), and the token each call would have sent."""
    monkeypatch.setenv("HF_TOKEN", TOKEN)
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")  # anything not stubbed fails at once, offline
    monkeypatch.setattr("unisent.encoders.loading._hub_reachable", lambda timeout=3.0: True)
    hub = SimpleNamespace(root=tmp_path / "hub", calls=[], error=None)

    def create_repo(repo_id, *args, **kwargs):
        hub.calls.append(("create_repo", repo_id, huggingface_hub.get_token()))
        return f"https://huggingface.co/{repo_id}"

    def upload_folder(*args, repo_id, folder_path, **kwargs):
        hub.calls.append(("upload_folder", repo_id, huggingface_hub.get_token()))
        if hub.error is not None:
            raise hub.error
        shutil.copytree(folder_path, hub.root / repo_id)
        return SimpleNamespace(commit_url=f"https://huggingface.co/{repo_id}/commit/0123abc")

    for name, fake in (("create_repo", create_repo), ("upload_folder", upload_folder)):
        monkeypatch.setattr(huggingface_hub, name, fake)
        monkeypatch.setattr(huggingface_hub.HfApi, name, lambda self, *a, _fake=fake, **k: _fake(*a, **k))
    return hub


def _export(saved: Path, out: Path) -> list[str]:
    return ["export", str(saved), "--format", "sentence-transformers", "--out", str(out), "--push-to", "my-org/tiny"]


def test_export_push_to_keeps_the_token_out_of_files_card_and_logs(tiny_bert_dir, tmp_path, fake_hub, capfd, caplog):
    saved = Encoder(EncoderConfig(model=str(tiny_bert_dir), pooler="mean")).save_pretrained(tmp_path / "model")
    out = tmp_path / "export"
    with caplog.at_level("DEBUG"):
        main(_export(saved, out))
    printed = capfd.readouterr()

    # the token was in reach of every call: this is a test of what unisent does with it
    assert [call[0] for call in fake_hub.calls] == ["create_repo", "upload_folder"]
    assert all(call[1] == "my-org/tiny" and call[2] == TOKEN for call in fake_hub.calls)
    assert "pushed to https://huggingface.co/my-org/tiny" in printed.out

    assert (out / "README.md").is_file() and (fake_hub.root / "my-org" / "tiny" / "README.md").is_file()
    assert files_holding(out) == [] and files_holding(fake_hub.root) == []
    assert TOKEN not in (out / "README.md").read_text(encoding="utf-8")  # the model card, as pushed
    assert TOKEN not in printed.out + printed.err
    assert TOKEN not in caplog.text


def test_a_refused_upload_that_echoes_the_token_is_reported_without_it(tiny_bert_dir, tmp_path, fake_hub, capfd):
    fake_hub.error = RuntimeError(f"401 Client Error: Unauthorized for token {TOKEN} (Invalid credentials)")
    saved = Encoder(EncoderConfig(model=str(tiny_bert_dir), pooler="mean")).save_pretrained(tmp_path / "model")
    out = tmp_path / "export"
    with pytest.raises(SystemExit) as exit_:
        main([*_export(saved, out), "--no-verify"])
    message = exit_.value.code
    assert isinstance(message, str) and "\n" not in message
    assert "the upload failed (RuntimeError: 401 Client Error" in message and "hf_***" in message
    assert TOKEN not in message and TOKEN not in "".join(capfd.readouterr())
    assert (out / "README.md").is_file() and files_holding(out) == []  # the export stays, without the token


@pytest.mark.integration
def test_fit_with_the_token_in_the_environment_writes_it_nowhere(tiny_bert_dir, tmp_path):
    """Two steps with the W&B logger (offline): config.yaml, hparams, checkpoints, the encoder and W&B's
    offline files (config, metadata, the .wandb log) under the run folder, and the terminal."""
    env = {
        **os.environ,
        "HF_TOKEN": TOKEN,
        "HUGGING_FACE_HUB_TOKEN": TOKEN,
        "WANDB_MODE": "offline",
        "WANDB_DIR": str(tmp_path / "runs"),
        "WANDB_SILENT": "true",
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
    }
    command = [
        sys.executable,
        "-c",
        "from unisent.cli import main; main()",
        "fit",
        "-c",
        str(ROOT / "recipes" / "quickstart.yaml"),
        "-c",
        str(ROOT / "recipes" / "loggers" / "wandb.yaml"),
        "--model.encoder.model",
        str(tiny_bert_dir),
        "--data.train.simcse.path",
        str(SAMPLE),
        "--trainer.max_steps=2",
        "--data.batch_size=8",
        "--trainer.logger.init_args.save_dir",
        str(tmp_path / "runs"),
        "--trainer.default_root_dir",
        str(tmp_path / "runs"),
        "--trainer.enable_progress_bar=false",
    ]
    done = subprocess.run(command, capture_output=True, text=True, timeout=600, env=env, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    assert TOKEN not in done.stdout + done.stderr

    runs = tmp_path / "runs"
    names = {path.name for path in runs.rglob("*") if path.is_file()}
    assert "config.yaml" in names and any(name.endswith(".ckpt") for name in names), sorted(names)
    assert any(name.endswith(".wandb") for name in names), sorted(names)  # W&B's offline run was written
    assert files_holding(runs, str(SAMPLE))  # the scan reads these files: the recipe's data path is in them
    assert files_holding(tmp_path) == []
