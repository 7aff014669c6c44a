"""``--truncate-dim``: encode, evaluate and export at the first D coordinates (Matryoshka models), as
Sentence Transformers' ``truncate_dim``: normalised after the cut, cosine on the cut vectors."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

import unisent
from unisent.cli import main
from unisent.encoders import Encoder, EncoderConfig
from unisent.inference.truncation import TruncatedModel

ROOT = Path(__file__).resolve().parents[1]

pytestmark = pytest.mark.usefixtures("one_thread")

SENTENCES = ["A man is playing a guitar.", "Two dogs run on the beach.", "The stock market fell today.", "Hi"]


@pytest.fixture(scope="module")
def model_dir(tiny_bert_dir, tmp_path_factory) -> Path:
    directory = tmp_path_factory.mktemp("encoder")
    Encoder(EncoderConfig(model=str(tiny_bert_dir), pooler="mean", max_length=32)).save_pretrained(directory)
    return directory


@pytest.fixture()
def sentences_file(tmp_path) -> Path:
    path = tmp_path / "in.txt"
    path.write_text("".join(s + "\n" for s in SENTENCES), encoding="utf-8")
    return path


def _error_line(excinfo, capsys) -> str:
    """The one line a command failed with: its ``sys.exit`` message, or what it printed on stderr."""
    code = excinfo.value.code
    text = (code if isinstance(code, str) else "") + capsys.readouterr().err
    lines = text.strip().splitlines()
    assert len(lines) == 1, text
    return lines[0]


def _encode(model_dir: Path, source: Path, out: Path, *extra: str) -> np.ndarray:
    main(["encode", "--model", str(model_dir), "--input", str(source), "--output", str(out), "--quiet", *extra])
    return np.load(out)


def test_encode_writes_the_first_d_coordinates_normalised_after_the_cut(model_dir, sentences_file, tmp_path):
    full = _encode(model_dir, sentences_file, tmp_path / "full.npy")
    assert full.shape == (len(SENTENCES), 32)
    cut = _encode(model_dir, sentences_file, tmp_path / "cut.npy", "--truncate-dim", "16")
    assert cut.shape == (len(SENTENCES), 16)
    np.testing.assert_allclose(cut, full[:, :16], atol=1e-5, rtol=0)
    unit = _encode(model_dir, sentences_file, tmp_path / "unit.npy", "--truncate-dim", "16", "--normalize")
    expected = full[:, :16] / np.linalg.norm(full[:, :16], axis=1, keepdims=True)
    np.testing.assert_allclose(unit, expected, atol=1e-5, rtol=0)
    np.testing.assert_allclose(np.linalg.norm(unit, axis=1), 1.0, atol=1e-5)
    # the whole dimension is allowed (and changes nothing)
    whole = _encode(model_dir, sentences_file, tmp_path / "whole.npy", "--truncate-dim", "32")
    np.testing.assert_allclose(whole, full, atol=1e-5, rtol=0)


@pytest.mark.parametrize("dim,words", [("33", "above the model's embedding dimension 32"), ("0", "positive")])
def test_encode_refuses_a_dim_out_of_range_in_one_line(dim, words, model_dir, sentences_file, tmp_path, capsys):
    out = tmp_path / "out.npy"
    with pytest.raises(SystemExit) as excinfo:
        _encode(model_dir, sentences_file, out, "--truncate-dim", dim)
    err = _error_line(excinfo, capsys)
    assert err.startswith("unisent encode: error: ") and "--truncate-dim" in err and words in err, err
    assert not out.exists()


class _FirstCoordinates:
    """A reference written independently of TruncatedModel: ``encode`` returns the first ``dim`` coordinates."""

    def __init__(self, model, dim: int) -> None:
        self.model, self.dim = model, dim

    def encode(self, sentences, batch_size=64, **kwargs):
        return self.model.encode(sentences, batch_size, **kwargs)[:, : self.dim]


def test_evaluate_scores_the_truncated_vectors(model_dir, tmp_path, capsys):
    from unisent.evaluation import evaluate

    out = tmp_path / "res.json"
    argv = ["evaluate", "--model", str(model_dir), "--tasks", "stsb-dev", "--truncate-dim", "16", "--quiet"]
    main([*argv, "--output", str(out)])
    capsys.readouterr()
    written = json.loads(out.read_text())
    assert written["config"]["truncate_dim"] == 16
    # the command's batch of 128 (another batch size moves the scores by ~1e-4: other float sums)
    reference = evaluate(
        _FirstCoordinates(unisent.load(str(model_dir)), 16), "stsb-dev", batch_size=128, progress=False
    )
    full = evaluate(unisent.load(str(model_dir)), "stsb-dev", batch_size=128, progress=False)
    score = written["tasks"]["stsb-dev"]["score"]
    assert score == pytest.approx(reference["tasks"]["stsb-dev"]["score"], abs=1e-6)
    assert score != pytest.approx(full["tasks"]["stsb-dev"]["score"], abs=1e-6)  # it did cut


def test_evaluate_refuses_out_of_range_and_mteb_in_one_line(model_dir, capsys):
    for extra, words in (
        (["--truncate-dim", "64"], "above the model's embedding dimension 32"),
        (["--truncate-dim", "-1"], "positive"),
        (["--truncate-dim", "8", "--mteb", "STSBenchmark"], "applies to --tasks"),
    ):
        with pytest.raises(SystemExit) as excinfo:
            main(["evaluate", "--model", str(model_dir), "--tasks", "stsb-dev", "--quiet", *extra])
        err = _error_line(excinfo, capsys)
        assert "--truncate-dim" in err and words in err, err


def test_export_writes_truncate_dim_where_sentence_transformers_reads_it(model_dir, tmp_path, capsys):
    from sentence_transformers import SentenceTransformer

    out = tmp_path / "st"
    main(["export", str(model_dir), "--format", "sentence-transformers", "--out", str(out), "--truncate-dim", "16"])
    assert "truncate_dim: 16" in capsys.readouterr().out
    assert json.loads((out / "config_sentence_transformers.json").read_text())["truncate_dim"] == 16
    st = SentenceTransformer(str(out), device="cpu")
    assert st.truncate_dim == 16 and st.get_embedding_dimension() == 16
    got = st.encode(SENTENCES, convert_to_numpy=True)
    assert got.shape == (len(SENTENCES), 16)
    ours = TruncatedModel(unisent.load(str(model_dir)), 16).encode(SENTENCES)
    np.testing.assert_allclose(got, ours.numpy(), atol=1e-5, rtol=0)
    normalised = st.encode(SENTENCES, convert_to_numpy=True, normalize_embeddings=True)
    unit = TruncatedModel(unisent.load(str(model_dir)), 16).encode(SENTENCES, normalize=True)
    np.testing.assert_allclose(normalised, unit.numpy(), atol=1e-5, rtol=0)
    assert "`truncate_dim`" in (out / "README.md").read_text()


def test_export_refuses_bad_dims_and_other_formats(model_dir, tmp_path, capsys):

    for fmt, dim, words in (
        ("sentence-transformers", "48", "above the model's embedding dimension 32"),
        ("sentence-transformers", "0", "positive"),
        ("huggingface", "16", "--format huggingface"),
    ):
        out = tmp_path / f"x-{fmt}-{dim}"
        with pytest.raises(SystemExit) as excinfo:
            main(["export", str(model_dir), "--format", fmt, "--out", str(out), "--truncate-dim", dim])
        err = _error_line(excinfo, capsys)
        assert "--truncate-dim" in err and words in err, err
        assert not out.exists() and not list(tmp_path.glob(f".x-{fmt}-{dim}*"))


def test_a_gaussian_model_is_cut_mean_and_variance_together(tiny_bert_dir, tmp_path):
    """GaussCSE's model (Matryoshka trains the prefixes of its means and variances): ``encode`` gives the cut means,
    ``encode_gaussian`` both cut, the direction tasks score the marginal Gaussians, and the Sentence Transformers
    export carries ``truncate_dim`` and gives the cut means."""
    from sentence_transformers import SentenceTransformer

    from unisent.evaluation import evaluate
    from unisent.evaluation.metrics.similarity import kl_similarity
    from unisent.export import export_model
    from unisent.objectives import GaussianEncoder, GaussianHead

    encoder = Encoder(EncoderConfig(model=str(tiny_bert_dir), pooler="cls", max_length=24))
    torch.manual_seed(0)
    gaussian = GaussianEncoder(encoder, GaussianHead(encoder.hidden_size)).eval()
    with torch.no_grad():  # the first 16 dims: one variance for every sentence (a symmetric KL, no direction);
        gaussian.head.var.weight[:16].zero_()  # the other 16: variances that differ from sentence to sentence
        gaussian.head.var.weight[16:].mul_(5.0)
    cut = TruncatedModel(gaussian, 16)
    mu, var = gaussian.encode_gaussian(SENTENCES)
    mu16, var16 = cut.encode_gaussian(SENTENCES)
    assert torch.equal(mu16, mu[:, :16]) and torch.equal(var16, var[:, :16])
    assert torch.equal(cut.encode(SENTENCES), mu[:, :16])
    assert not hasattr(TruncatedModel(unisent.load(str(tiny_bert_dir)), 16), "encode_gaussian")
    # the direction task (entailment pairs: right when sim(hyp || pre) > sim(pre || hyp)) scores the 16-dim
    # marginals: equal variances there, so both directions tie on every pair (0 right), where the whole
    # Gaussians have a direction
    triples = [json.loads(line) for line in (ROOT / "samples/nli_triples.jsonl").read_text().splitlines()[:24]]
    snli = tmp_path / "nli" / "snli"
    snli.mkdir(parents=True)
    for name, column in (("s1", "anchor"), ("s2", "positive")):
        (snli / f"{name}.test").write_text("".join(t[column] + "\n" for t in triples))
    (snli / "labels.test").write_text("entailment\n" * len(triples))

    def right(model) -> torch.Tensor:
        pre, hyp = [model.encode_gaussian([t[k] for t in triples]) for k in ("anchor", "positive")]
        return kl_similarity(hyp, pre) > kl_similarity(pre, hyp)  # sim(a || b), row by row

    assert not right(cut).any() and right(gaussian).any()
    result = evaluate(cut, ["snli-direction"], tmp_path, progress=False, similarity="kl")["tasks"]["snli-direction"]
    assert result["score"] == 0.0
    whole = evaluate(gaussian, ["snli-direction"], tmp_path, progress=False, similarity="kl")["tasks"]["snli-direction"]
    assert whole["score"] == pytest.approx(100 * float(right(gaussian).double().mean())) and whole["score"] > 0
    export_model(gaussian, tmp_path / "gauss", "sentence-transformers", truncate_dim=16)
    st = SentenceTransformer(str(tmp_path / "gauss"), device="cpu")
    np.testing.assert_allclose(st.encode(SENTENCES, convert_to_numpy=True), mu16.numpy(), atol=1e-5, rtol=0)


def test_truncated_model_delegates_and_keeps_tensors(model_dir):
    model = unisent.load(str(model_dir))
    cut = TruncatedModel(model, 8)
    vectors = cut.encode(SENTENCES, 2, normalize=True)
    assert isinstance(vectors, torch.Tensor) and vectors.shape == (len(SENTENCES), 8)
    torch.testing.assert_close(vectors.norm(dim=1), torch.ones(len(SENTENCES)))
    assert cut.config is model.config and not hasattr(cut, "encode_gaussian")
