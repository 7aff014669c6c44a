"""Presets embed exactly as the models they name; ``EncoderConfig.normalize`` is saved, exported and loaded."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml

import unisent
from unisent.commands.evaluate import main as evaluate_main
from unisent.encoders import Encoder, EncoderConfig, resolve_encoder_config
from unisent.encoders.presets import PRESETS, resolve_preset_path
from unisent.evaluation import evaluate
from unisent.export import export_model, hf_usage_code
from unisent.models import GaussianEncoder
from unisent.models.gaussian import GaussianHead

#: the repository's training, benchmark and test samples (not in the wheel)
SAMPLE_DIR = Path(__file__).resolve().parents[1] / "samples"

pytestmark = pytest.mark.usefixtures("one_thread")

ROOT = Path(__file__).resolve().parents[1]
FIXTURE_DATA = ROOT / "tests" / "evaluation" / "fixtures" / "data"
CLAUSE = (
    "The committee reviewed the proposal for the new bridge across the river and asked the engineers to "
    "report on its cost, its safety and its effect on the traffic in the old town."
)
LONG, LONGER = " ".join([CLAUSE] * 6), " ".join([CLAUSE] * 9)  # about 210 and 320 tokens
SENTENCES = [
    "A man is playing a guitar.",
    "Someone plays music.",
    "The cat sleeps on the warm windowsill.",
    LONG,
    LONGER,
]


@pytest.fixture(scope="module")
def minilm_path() -> Path:
    return Path(resolve_preset_path(PRESETS["minilm-l6"]))


@pytest.fixture(scope="module")
def sentence_transformer(minilm_path):
    from sentence_transformers import SentenceTransformer

    return SentenceTransformer(str(minilm_path), device="cpu")


@pytest.fixture(scope="module")
def minilm():
    return unisent.load("minilm-l6")


def test_minilm_preset_declares_the_packaged_models_settings(minilm_path):
    """Pooling, normalisation and maximum length, read from the package's Sentence Transformers files."""
    modules = [m["type"].rsplit(".", 1)[-1] for m in json.loads((minilm_path / "modules.json").read_text())]
    pooling = json.loads((minilm_path / "1_Pooling" / "config.json").read_text())
    st_config = json.loads((minilm_path / "sentence_bert_config.json").read_text())
    preset = PRESETS["minilm-l6"]
    assert modules == ["Transformer", "Pooling", "Normalize"] and preset.normalize is True
    assert pooling["pooling_mode_mean_tokens"] and preset.pooler == "mean"
    assert preset.max_length == st_config["max_seq_length"] == 256
    config = resolve_encoder_config(EncoderConfig(model="minilm-l6"))
    assert (config.pooler, config.max_length, config.normalize) == ("mean", 256, True)


def test_minilm_preset_encodes_as_sentence_transformers(minilm, sentence_transformer):
    lengths = [len(ids) for ids in minilm.tokenizer([LONG, LONGER])["input_ids"]]
    assert 128 < lengths[0] <= 256 < lengths[1]  # LONG is cut at 128 only, LONGER at 256 too
    got = minilm.encode(SENTENCES)
    want = torch.as_tensor(sentence_transformer.encode(SENTENCES, convert_to_numpy=True))
    torch.testing.assert_close(got, want, atol=1e-5, rtol=0)
    torch.testing.assert_close(got.norm(dim=-1), torch.ones(len(SENTENCES)), atol=1e-5, rtol=0)
    # the pooled vectors (what training sees) are the unnormalised means; 128 tokens would embed LONG otherwise
    pooled = minilm.encode_pooled(SENTENCES)
    assert pooled.norm(dim=-1).min() > 2.0
    torch.testing.assert_close(torch.nn.functional.normalize(pooled, dim=-1), got, atol=1e-6, rtol=0)
    short = Encoder(EncoderConfig(model="minilm-l6", max_length=128)).eval()
    assert (short.encode([LONG]) - got[3:4]).abs().max() > 1e-3


def test_explicit_settings_win_over_the_preset():
    config = resolve_encoder_config(EncoderConfig(model="minilm-l6", max_length=32, normalize=False, pooler="cls"))
    assert (config.pooler, config.max_length, config.normalize) == ("cls", 32, False)
    recipe = yaml.safe_load((ROOT / "recipes" / "quickstart.yaml").read_text())["model"]["encoder"]
    assert recipe["model"] == "minilm-l6" and recipe["max_length"] == 32
    from_recipe = resolve_encoder_config(EncoderConfig(**recipe))
    assert from_recipe.max_length == 32 and from_recipe.normalize is True  # unset: the preset's
    assert resolve_encoder_config(EncoderConfig(model="some/hub-id")).normalize is False  # not a preset: as before
    with pytest.raises(ValueError, match="normalize must be true or false"):
        EncoderConfig(model="minilm-l6", normalize="yes")


@pytest.mark.integration
def test_kmeans_through_unisent_evaluate_equals_sentence_transformers(sentence_transformer, tmp_path):
    tasks = ["stc-searchsnippets", "stc-agnews", "mewsc16-pl"]
    out = tmp_path / "results.json"
    evaluate_main(
        [
            "--model",
            "minilm-l6",
            "--tasks",
            ",".join(tasks),
            "--data-dir",
            str(FIXTURE_DATA),
            "--output",
            str(out),
            "--quiet",
        ]
    )
    ours = json.loads(out.read_text())["tasks"]
    theirs = evaluate(sentence_transformer, tasks, FIXTURE_DATA, progress=False)["tasks"]
    assert set(ours) == set(theirs) == set(tasks)
    for task in tasks:
        assert ours[task]["score"] == pytest.approx(theirs[task]["score"], abs=1e-9), task
        assert set(ours[task]["metrics"]) == set(theirs[task]["metrics"]) >= {"nmi", "accuracy_std"}
        for key, value in theirs[task]["metrics"].items():
            assert ours[task]["metrics"][key] == pytest.approx(value, abs=1e-9), (task, key)
    # the unnormalised vectors (the preset before it normalised) cluster differently on these texts
    unnormalised = Encoder(EncoderConfig(model="minilm-l6", normalize=False)).eval()
    before = evaluate(unnormalised, tasks, FIXTURE_DATA, progress=False)["tasks"]
    assert any(abs(before[t]["score"] - theirs[t]["score"]) > 1.0 for t in tasks)


def _save_without_key(encoder: Encoder, directory: Path) -> Path:
    """A directory as ``save_pretrained`` wrote it before ``normalize`` existed."""
    encoder.save_pretrained(directory)
    settings = json.loads((directory / "unisent_encoder.json").read_text())
    del settings["normalize"]
    (directory / "unisent_encoder.json").write_text(json.dumps(settings))
    return directory


def test_normalize_is_saved_and_old_directories_load_as_before(tiny_model_dir, tmp_path):
    encoder = Encoder(EncoderConfig(model=str(tiny_model_dir), pooler="mean", normalize=True)).eval()
    expected = encoder.encode(SENTENCES)
    torch.testing.assert_close(expected.norm(dim=-1), torch.ones(len(SENTENCES)), atol=1e-5, rtol=0)
    saved = encoder.save_pretrained(tmp_path / "saved")
    assert json.loads((saved / "unisent_encoder.json").read_text())["normalize"] is True
    loaded = unisent.load(str(saved))
    assert loaded.config.normalize is True
    torch.testing.assert_close(loaded.encode(SENTENCES), expected, atol=1e-6, rtol=0)
    old = unisent.load(str(_save_without_key(encoder, tmp_path / "old")))
    assert old.config.normalize is False
    torch.testing.assert_close(old.encode(SENTENCES), encoder.encode_pooled(SENTENCES), atol=1e-6, rtol=0)


def test_export_writes_a_normalize_module(tiny_model_dir, tmp_path, monkeypatch):
    from sentence_transformers import SentenceTransformer

    encoder = Encoder(EncoderConfig(model=str(tiny_model_dir), pooler="mean", normalize=True)).eval()
    expected = encoder.encode(SENTENCES)
    st_dir = export_model(encoder, tmp_path / "st", "sentence-transformers").out
    modules = [m["type"] for m in json.loads((st_dir / "modules.json").read_text())]
    assert modules[-2:] == ["sentence_transformers.models.Pooling", "sentence_transformers.models.Normalize"]
    assert "Normalize" in (st_dir / "README.md").read_text()
    st = SentenceTransformer(str(st_dir), device="cpu")
    torch.testing.assert_close(torch.as_tensor(st.encode(SENTENCES)), expected, atol=1e-5, rtol=0)
    torch.testing.assert_close(unisent.load(str(st_dir)).encode(SENTENCES), expected, atol=1e-5, rtol=0)
    # without normalisation nothing changes: no Normalize module
    plain = Encoder(EncoderConfig(model=str(tiny_model_dir), pooler="mean"))
    assert [m.name for m in plain.sentence_transformers_modules()] == ["Pooling"]
    # the transformers recipe of the card normalises too
    hf_dir = export_model(encoder, tmp_path / "hf", "huggingface").out
    monkeypatch.chdir(hf_dir)
    namespace: dict = {}
    exec(hf_usage_code("mean", encoder.config.max_length, normalize=True), namespace)
    torch.testing.assert_close(namespace["embed"](SENTENCES), expected, atol=1e-5, rtol=0)
    assert "normalize" not in hf_usage_code("mean", 32)


def test_a_head_runs_on_the_pooled_vectors_not_the_normalised_ones(tiny_model_dir, tmp_path):
    """GaussCSE's head was trained on the pooler's output: the encoder's normalisation stays out of its way."""
    from sentence_transformers import SentenceTransformer

    torch.manual_seed(0)
    encoder = Encoder(EncoderConfig(model=str(tiny_model_dir), pooler="mean", normalize=True)).eval()
    head = GaussianHead(encoder.hidden_size)
    model = GaussianEncoder(encoder, head).eval()
    with torch.no_grad():
        want = head(encoder.encode_pooled(SENTENCES))[0]
    torch.testing.assert_close(model.encode(SENTENCES), want, atol=1e-6, rtol=0)
    assert [m.name for m in model.sentence_transformers_modules()] == ["Pooling", "Dense"]
    st_dir = export_model(model, tmp_path / "st", "sentence-transformers").out
    got = SentenceTransformer(str(st_dir), device="cpu").encode(SENTENCES)
    np.testing.assert_allclose(got, want.numpy(), atol=1e-5)


def test_pcr_follows_the_normalisation_it_was_fitted_after(tiny_model_dir, tmp_path):
    """PCR is fitted on the model's embeddings (normalised here): its export keeps the Normalize before it."""
    from sentence_transformers import SentenceTransformer

    from unisent.models.pcr import fit_pcr

    sentences = (SAMPLE_DIR / "sentences.txt").read_text(encoding="utf-8").splitlines()[:64]
    encoder = Encoder(EncoderConfig(model=str(tiny_model_dir), pooler="mean", normalize=True)).eval()
    model = fit_pcr(encoder, {"en": sentences}, k=1)
    want = model.encode(SENTENCES)
    names = [m.name for m in model.sentence_transformers_modules()]
    assert names == ["Pooling", "Normalize", "Dense"]
    st_dir = export_model(model, tmp_path / "st", "sentence-transformers").out
    got = SentenceTransformer(str(st_dir), device="cpu").encode(SENTENCES)
    np.testing.assert_allclose(got, want.numpy(), atol=1e-5)


@pytest.mark.integration
def test_the_evaluation_embeds_bit_identically_to_sentence_transformers(minilm, sentence_transformer):
    """K-means on 20,000 texts moves by a point for 2e-7 differences: the evaluation's batches are Sentence
    Transformers' own, so its vectors are the same bits (at the same batch size and thread count)."""
    from unisent.data.benchmark_readers import read_text_and_labels
    from unisent.encoders import reference_batching
    from unisent.evaluation.encoding import Embedder

    stc = FIXTURE_DATA / "clustering" / "stc"
    texts = read_text_and_labels(stc / "searchsnippets.txt", stc / "searchsnippets_label.txt").texts + SENTENCES
    for batch_size in (128, 5):
        want = torch.as_tensor(sentence_transformer.encode(texts, batch_size=batch_size))
        with reference_batching():
            assert torch.equal(minilm.encode(texts, batch_size=batch_size), want), batch_size
        ours = Embedder(minilm, batch_size=batch_size).encode(texts)
        assert torch.equal(ours, Embedder(sentence_transformer, batch_size=batch_size).encode(texts)), batch_size
    # unisent's default (faster) batching differs in the last bits only
    torch.testing.assert_close(minilm.encode(texts, batch_size=5), want, atol=1e-5, rtol=0)
