"""Export details (issue 18, point 8): the backbone's maximum length, one file mode, the Hub card.

An export keeps the backbone's own maximum length (not the training recipe's), every file it writes
has the usual permissions, and its README.md carries Hub front matter (base model, licence, language,
datasets, tags, model-index) and no local path.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
import yaml

import unisent
from unisent.cli import main
from unisent.encoders import Encoder, EncoderConfig
from unisent.encoders.export_declarations import EncoderModel
from unisent.export import export_model

#: the repository's training, benchmark and test samples (not in the wheel)
SAMPLE_DIR = Path(__file__).resolve().parents[1] / "samples"

pytestmark = pytest.mark.usefixtures("one_thread")

LONG = " ".join(["a man plays a guitar while two dogs run across the grass ."] * 5)  # ~65 tokens


@pytest.fixture
def described_bert(tiny_bert_dir, tmp_path) -> Path:
    """The tiny BERT as a hub model describes itself: a tokenizer with ``model_max_length`` and a model
    card with a licence and languages."""
    directory = Path(shutil.copytree(tiny_bert_dir, tmp_path / "described-bert"))
    config = json.loads((directory / "tokenizer_config.json").read_text())
    (directory / "tokenizer_config.json").write_text(json.dumps({**config, "model_max_length": 100}))
    (directory / "README.md").write_text("---\nlicense: mit\nlanguage:\n- en\n- de\n---\n# described-bert\n")
    return directory


@pytest.fixture
def run_dir(described_bert, tmp_path) -> Path:
    """``<run>/encoder`` trained at 24 tokens, and the run's config.yaml naming absolute files."""
    run = tmp_path / "runs" / "version_0"
    Encoder(EncoderConfig(model=str(described_bert), pooler="mean", max_length=24)).save_pretrained(run / "encoder")
    own = tmp_path / "my_pairs.jsonl"
    own.write_text('{"anchor": "a", "positive": "b"}\n')
    config = {
        "model": {
            "encoder": {"model": str(described_bert), "pooler": "mean", "max_length": 24},
            "objectives": [{"class_path": "unisent.objectives.SimCSE", "init_args": {"supervised": True}}],
        },
        "data": {
            "train": {"simcse": str(SAMPLE_DIR / "nli_triples.jsonl"), "own": {"path": str(own)}},
            "batch_size": 8,
        },
        "trainer": {"max_steps": 2},
    }
    (run / "config.yaml").write_text(yaml.safe_dump(config))
    return run


def _results(tmp_path: Path) -> Path:
    path = tmp_path / "results.json"
    path.write_text(
        json.dumps(
            {
                "tasks": {
                    "stsb-test": {"group": "sts", "main_metric": "spearman", "score": 81.2345, "metrics": {}},
                    "stc-agnews": {"group": "stc", "main_metric": "accuracy", "score": 60.5, "metrics": {}},
                },
                "groups": {},
                "config": {"data_dir": str(tmp_path / "eval-data")},
            }
        )
    )
    return path


def _front(card: str) -> dict:
    assert card.startswith("---\n")
    return yaml.safe_load(card.split("---\n")[1])


def test_export_keeps_the_backbones_max_length(run_dir, described_bert, tmp_path, capsys):
    out = tmp_path / "exported"
    main(["export", str(run_dir / "encoder"), "--format", "sentence-transformers", "--out", str(out)])
    assert "max sequence length: 100 tokens (trained with 24; --max-seq-length to change)" in capsys.readouterr().out
    assert json.loads((out / "sentence_bert_config.json").read_text())["max_seq_length"] == 100
    loaded = unisent.load(str(out))
    assert loaded.config.max_length == 100  # what unisent.load(DIR) and unisent encode use
    full = Encoder(EncoderConfig(model=str(described_bert), pooler="mean", max_length=100)).eval()
    from sentence_transformers import SentenceTransformer

    st = torch.as_tensor(SentenceTransformer(str(out), device="cpu").encode([LONG]))
    torch.testing.assert_close(st, full.encode([LONG]), atol=1e-5, rtol=0)  # the long input is not cut at 24
    card = (out / "README.md").read_text()
    assert "| max sequence length | 100 tokens (longer inputs are truncated) |" in card
    assert "| max sequence length in training | 24 tokens (this export: 100) |" in card
    # the encoder directory itself keeps its training length
    assert unisent.load(str(run_dir / "encoder")).config.max_length == 24

    hf = export_model(run_dir / "encoder", tmp_path / "hf", "huggingface", max_seq_length=50)
    assert hf.max_seq_length == 50 and hf.trained_max_length == 24
    assert unisent.load(str(hf.out)).config.max_length == 50 and "max_length=50" in (hf.out / "README.md").read_text()
    with pytest.raises(SystemExit, match="a maximum length of 200 tokens exceeds the 128 positions of the backbone"):
        main(
            [
                "export",
                str(run_dir / "encoder"),
                "--format",
                "huggingface",
                "--out",
                str(tmp_path / "x"),
                "--max-seq-length",
                "200",
            ]
        )
    assert not (tmp_path / "x").exists()


def test_the_backbones_length_is_its_sentence_transformers_one_else_the_tokenizers(tiny_bert_dir, tmp_path):
    encoder = Encoder(EncoderConfig(model=str(tiny_bert_dir), max_length=24))
    assert encoder.position_limit() == 128  # the tiny BERT's max_position_embeddings
    assert encoder.native_max_length() is None  # its tokenizer declares no length: an export keeps 24
    encoder.tokenizer.model_max_length = 512
    assert encoder.native_max_length() == 128  # capped by the positions
    encoder.tokenizer.model_max_length = 64
    assert encoder.native_max_length() == 64
    published = tmp_path / "published"  # a Sentence Transformers model as the base: its max_seq_length wins
    published.mkdir()
    (published / "sentence_bert_config.json").write_text('{"max_seq_length": 77, "do_lower_case": false}')
    assert encoder.native_max_length(base_model=str(published)) == 77
    assert encoder.native_max_length(base_model="minilm-l6") == 128  # the packaged model's 256, capped
    assert encoder.native_max_length(base_model="bert-base-uncased") == 64  # not the preset's training 32
    from transformers import RobertaConfig, RobertaModel

    roberta = RobertaModel(
        RobertaConfig(
            vocab_size=50,
            hidden_size=8,
            num_hidden_layers=1,
            num_attention_heads=2,
            intermediate_size=16,
            max_position_embeddings=130,
            pad_token_id=1,
        )
    )
    assert EncoderModel.position_limit(SimpleNamespace(backbone=roberta)) == 128  # positions start at pad + 1


def test_card_front_matter_is_hub_metadata_without_local_paths(run_dir, tmp_path):
    out = tmp_path / "exported"
    main(
        [
            "export",
            str(run_dir / "encoder"),
            "--format",
            "sentence-transformers",
            "--out",
            str(out),
            "--results",
            str(_results(tmp_path)),
            "--name",
            "tiny-simcse",
        ]
    )
    card = (out / "README.md").read_text()
    front = _front(card)
    assert front["license"] == "mit" and front["language"] == ["en", "de"]  # from the backbone's own card
    assert "base_model" not in front  # a local directory has no hub id
    assert sorted(front["datasets"]) == ["my_pairs.jsonl", "stanfordnlp/snli"]  # a hub id where known, else the name
    assert {"sentence-transformers", "sentence-similarity", "feature-extraction", "unisent", "simcse"} <= set(
        front["tags"]
    )
    assert front["library_name"] == "sentence-transformers" and front["pipeline_tag"] == "sentence-similarity"
    index = front["model-index"]
    assert index[0]["name"] == "tiny-simcse"
    first = index[0]["results"][0]
    assert first["task"] == {"type": "STS"} and first["dataset"]["split"] == "test"
    assert first["metrics"] == [{"type": "spearman", "value": 81.2345, "name": "spearman (%)"}]
    assert index[0]["results"][1]["task"] == {"type": "Clustering"}
    assert "\n# tiny-simcse\n" in card and "\n# exported\n" not in card  # the name, not the folder's
    for local in (str(tmp_path), "/tmp/", "/work", str(Path.home()) + "/"):
        assert local not in card, local
    assert "Evaluation data: `eval-data`." in card and "`own`: `my_pairs.jsonl`" in card
    assert "| base model | described-bert |" in card

    from huggingface_hub import ModelCard, metadata_load

    assert metadata_load(out / "README.md")["license"] == "mit"
    results = ModelCard.load(out / "README.md").data.eval_results
    assert [(r.task_type, r.dataset_type, r.metric_type, r.metric_value) for r in results] == [
        ("STS", "stsb-test", "spearman", 81.2345),
        ("Clustering", "stc-agnews", "accuracy", 60.5),
    ]

    # without --name: the backbone and the methods; without --results: no model-index; --license wins
    hf = export_model(run_dir / "encoder", tmp_path / "hf", "huggingface", license="apache-2.0", language=["en"])
    hf_card = (hf.out / "README.md").read_text()
    hf_front = _front(hf_card)
    assert "\n# described-bert + SimCSE\n" in hf_card and "model-index" not in hf_front
    assert hf_front["license"] == "apache-2.0" and hf_front["language"] == ["en"]
    assert {"sentence-similarity", "feature-extraction", "unisent", "simcse"} <= set(hf_front["tags"])
    assert hf_front["library_name"] == "transformers" and str(tmp_path) not in hf_card


def test_an_unknown_licence_is_other_and_the_card_says_so(tiny_bert_dir, tmp_path):
    report = export_model(
        Encoder(EncoderConfig(model=str(tiny_bert_dir), pooler="mean")), tmp_path / "out", "huggingface", verify=False
    )
    card = (report.out / "README.md").read_text()
    assert _front(card)["license"] == "other" and "language" not in _front(card)
    assert "give it with `unisent export --license`" in card


def _modes(directory: Path) -> dict[str, int]:
    return {str(p.relative_to(directory)): stat.S_IMODE(p.stat().st_mode) for p in directory.rglob("*")}


@pytest.mark.parametrize("umask", [0o022, 0o027], ids=["umask-022", "umask-027"])
def test_every_exported_file_has_the_usual_permissions(tiny_bert_dir, tmp_path, umask):
    previous = os.umask(umask)
    try:
        encoder = Encoder(EncoderConfig(model=str(tiny_bert_dir), pooler="cls_mlp"))
        saved = encoder.save_pretrained(tmp_path / "saved")
        st = export_model(encoder, tmp_path / "st", "sentence-transformers").out
        hf = export_model(encoder, tmp_path / "hf", "huggingface").out
    finally:
        os.umask(previous)
    file_mode, dir_mode = 0o666 & ~umask, 0o777 & ~umask
    for directory in (saved, st, hf):
        modes = _modes(directory)
        assert "model.safetensors" in modes  # safetensors writes it 0o600 by itself
        files = {name: mode for name, mode in modes.items() if not (directory / name).is_dir()}
        assert set(files.values()) == {file_mode}, files
        assert {mode for name, mode in modes.items() if (directory / name).is_dir()} <= {dir_mode}
    assert stat.S_IMODE(st.stat().st_mode) == dir_mode
    assert "2_Dense/model.safetensors" in _modes(st)


def test_the_packaged_minilm_names_its_hub_base_model_and_keeps_256_tokens(tmp_path):
    """The quickstart's case: all-MiniLM-L6-v2 trained at 32 tokens exports with its published 256."""
    model = Encoder(EncoderConfig(model="minilm-l6", max_length=32)).eval()
    report = export_model(model, tmp_path / "out", "sentence-transformers")
    assert (report.max_seq_length, report.trained_max_length, model.config.max_length) == (256, 32, 32)
    assert report.max_diff is not None and report.max_diff < 1e-4  # checked at 256 tokens
    assert json.loads((report.out / "sentence_bert_config.json").read_text())["max_seq_length"] == 256
    card = (report.out / "README.md").read_text()
    front = _front(card)
    assert front["base_model"] == "sentence-transformers/all-MiniLM-L6-v2"
    assert front["license"] == "apache-2.0" and front["language"] == ["en"]
    assert (
        "\n# all-MiniLM-L6-v2\n" in card
        and "| max sequence length in training | 32 tokens (this export: 256) |" in card
    )
    assert "site-packages" not in card and str(tmp_path) not in card
