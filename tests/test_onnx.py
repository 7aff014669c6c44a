"""``unisent export --format onnx [--quantize int8]`` and the onnx backend of ``encode`` (issue 41).

On the tiny BERT of conftest.py: the ONNX file loads in onnxruntime with dynamic batch and length axes
and the names Sentence Transformers' ONNX backend reads; ``unisent.load(DIR, backend="onnx").encode``
equals the torch model's ``encode`` to 1e-5 (the export's own gate); the int8 file has Sentence
Transformers' name and its check is printed; a failing gate leaves nothing behind unless ``force``."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

pytest.importorskip("onnxruntime")

import onnxruntime as ort  # noqa: E402

import unisent  # noqa: E402
from unisent.cli import main  # noqa: E402
from unisent.encoders import Encoder, EncoderConfig  # noqa: E402
from unisent.export import ExportCheckError, OnnxEncoder, export_model  # noqa: E402
from unisent.export import onnx as onnx_export  # noqa: E402
from unisent.hardware import int8_arch  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_thread")

SENTENCES = [
    "A man is playing a guitar.",
    "Two dogs run across the grass in the park while a child throws a ball for them.",
    "ok",
    "the quick brown fox jumps over the lazy dog " * 10,  # truncated at 32 tokens
    "A woman slices an onion.",
]


@pytest.fixture(scope="module")
def encoder_dir(tiny_bert_dir, tmp_path_factory) -> Path:
    directory = tmp_path_factory.mktemp("encoder")
    config = EncoderConfig(model=str(tiny_bert_dir), pooler="mean", max_length=32, normalize=True)
    Encoder(config).save_pretrained(directory)
    return directory


@pytest.fixture(scope="module")
def int8_export(encoder_dir, tmp_path_factory):
    out = tmp_path_factory.mktemp("exports") / "onnx"
    return export_model(str(encoder_dir), out, "onnx", quantize="int8")


@pytest.mark.integration
def test_the_onnx_file_loads_in_onnxruntime_with_dynamic_axes(int8_export):
    out = int8_export.out
    assert {"onnx/model.onnx", "modules.json", "unisent_model.json", "README.md"} <= set(int8_export.files)
    session = ort.InferenceSession(str(out / "onnx" / "model.onnx"), providers=["CPUExecutionProvider"])
    inputs = {i.name: i.shape for i in session.get_inputs()}
    assert list(inputs) == ["input_ids", "attention_mask", "token_type_ids"]  # BERT has token types
    assert all(isinstance(dim, str) for shape in inputs.values() for dim in shape)  # batch and length are dynamic
    assert [o.name for o in session.get_outputs()] == ["last_hidden_state", "sentence_embedding"]
    for batch, length in ((1, 3), (4, 17)):
        ids = np.full((batch, length), 5, dtype=np.int64)
        feed = {"input_ids": ids, "attention_mask": np.ones_like(ids), "token_type_ids": np.zeros_like(ids)}
        last, pooled = session.run(None, feed)
        assert last.shape == (batch, length, 32) and pooled.shape == (batch, 32)
    # the directory is also a Sentence Transformers export
    from sentence_transformers import SentenceTransformer

    torch_vectors = unisent.load(str(out)).encode(SENTENCES, precision="fp32").numpy()
    st_vectors = SentenceTransformer(str(out), device="cpu").encode(SENTENCES)
    np.testing.assert_allclose(st_vectors, torch_vectors, atol=1e-5)


def test_the_onnx_backend_encodes_as_the_torch_model(int8_export, encoder_dir):
    expected = unisent.load(str(encoder_dir)).encode(SENTENCES, batch_size=2, precision="fp32")
    fp32 = unisent.load(str(int8_export.out), backend="onnx", onnx_file="fp32")
    assert isinstance(fp32, OnnxEncoder) and fp32.precision == "fp32"
    got = fp32.encode(SENTENCES, batch_size=2)
    assert got.dtype == torch.float32 and got.shape == expected.shape
    assert float((got - expected).abs().max()) <= 1e-5
    assert float((fp32.encode(SENTENCES[::-1], batch_size=3) - expected.flip(0)).abs().max()) <= 1e-5  # order kept
    assert int8_export.notes[0].startswith("onnx fp32 (onnx/model.onnx) against torch")
    with pytest.raises(ValueError, match="bf16 is the torch backend's"):
        fp32.encode(SENTENCES, precision="bf16")
    # the direction tasks count tokens as the torch model does (it returned (ids, truncated) and broke them)
    from unisent.evaluation.tasks.nli_tasks import token_counts

    torch_model = unisent.load(str(encoder_dir))
    assert token_counts(fp32, SENTENCES).tolist() == token_counts(torch_model, SENTENCES).tolist()


def test_the_int8_file_has_sentence_transformers_name_and_its_check_is_printed(int8_export, encoder_dir):
    name = f"model_qint8_{int8_arch()}.onnx"
    assert name == "model_qint8_avx2.onnx"  # the tests' CPU (conftest.py): AVX2, no VNNI (7-bit weights)
    assert int8_arch(frozenset({"avx2", "avx512f", "avx512_vnni"}), "x86_64") == "avx512_vnni"
    assert int8_arch(frozenset(), "aarch64") == "arm64"
    assert f"onnx/{name}" in int8_export.files
    line = int8_export.notes[1]
    assert line.startswith(f"int8 ({name}, int8, per channel): STS-B test ") and "smallest cosine to fp32" in line
    model = unisent.load(str(int8_export.out), backend="onnx")  # the int8 file by default
    assert model.precision == "int8" and model.path.name == name
    expected = unisent.load(str(encoder_dir)).encode(SENTENCES, precision="fp32")
    got = model.encode(SENTENCES)
    cosine = torch.nn.functional.cosine_similarity(got, expected)
    assert float(cosine.min()) > 0.9
    card = (int8_export.out / "README.md").read_text()
    assert "ONNX int8" in card and 'backend="onnx"' in card


@pytest.mark.integration
def test_a_failing_int8_check_leaves_nothing_behind_unless_forced(encoder_dir, tmp_path, monkeypatch):
    monkeypatch.setattr(onnx_export, "INT8_MIN_COSINE", 1.01)  # no int8 file gets there
    out = tmp_path / "refused"
    with pytest.raises(ExportCheckError, match=r"the int8 file is too far from fp32: .*--force"):
        export_model(str(encoder_dir), out, "onnx", quantize="int8")
    assert not out.exists() and list(tmp_path.iterdir()) == []  # nor a partial directory
    report = export_model(str(encoder_dir), out, "onnx", quantize="int8", force=True)
    assert "kept with --force" in report.notes[-1] and (out / "onnx" / "model_qint8_avx2.onnx").is_file()


def test_a_failing_fp32_check_is_refused(encoder_dir, tmp_path, monkeypatch):
    monkeypatch.setattr(onnx_export, "ONNX_MAX_DIFF", -1.0)
    with pytest.raises(ExportCheckError, match="the ONNX file does not reproduce the model"):
        export_model(str(encoder_dir), tmp_path / "out", "onnx")
    assert list(tmp_path.iterdir()) == []


def test_the_cli_exports_and_encodes_with_the_onnx_backend(encoder_dir, tmp_path, capsys):
    out = tmp_path / "exported"
    main(["export", str(encoder_dir), "--format", "onnx", "--out", str(out)])
    said = capsys.readouterr().out
    assert "check: onnx fp32 (onnx/model.onnx) against torch: largest absolute difference" in said
    source = tmp_path / "in.txt"
    source.write_text("\n".join(SENTENCES) + "\n")
    target = tmp_path / "out.npy"
    main(["encode", "--model", str(out), "--backend", "onnx", "--input", str(source), "--output", str(target)])
    assert "backend onnx: fp32, onnx/model.onnx" in capsys.readouterr().out
    expected = unisent.load(str(encoder_dir)).encode(SENTENCES, precision="fp32").numpy()
    np.testing.assert_allclose(np.load(target), expected, atol=1e-5, rtol=0)
    with pytest.raises(SystemExit):  # bf16 is the torch backend's
        main(
            ["encode", "--model", str(out), "--backend", "onnx", "--precision", "bf16", "--input", str(source)]
            + [
                "--output",
                str(tmp_path / "bf16.npy"),
            ]
        )
    assert "--precision bf16 is the torch backend's" in capsys.readouterr().err


def test_without_onnxruntime_the_error_names_the_install_command(int8_export, monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "onnxruntime", None)  # import onnxruntime raises ImportError
    with pytest.raises(ImportError, match=r"pip install 'unisent\[onnx\]'"):
        unisent.load(str(int8_export.out), backend="onnx")


def test_a_plain_directory_has_no_onnx_export(encoder_dir):
    with pytest.raises(FileNotFoundError, match="unisent export SOURCE --format onnx"):
        unisent.load(str(encoder_dir), backend="onnx")


def test_gausscse_exports_means_and_variances(tiny_bert_dir, tmp_path):
    from unisent.models import GaussianEncoder
    from unisent.models.gaussian import GaussianHead

    encoder = Encoder(EncoderConfig(model=str(tiny_bert_dir), pooler="mean", max_length=32))
    torch.manual_seed(1)
    model = GaussianEncoder(encoder, GaussianHead(32, length_input=True)).eval()
    report = export_model(model, tmp_path / "gauss", "onnx")
    runner = unisent.load(str(report.out), backend="onnx")
    assert runner.outputs == ["last_hidden_state", "sentence_embedding", "mean", "variance"]
    mu, var = model.encode_gaussian(SENTENCES, precision="fp32")
    mu2, var2 = runner.encode_gaussian(SENTENCES)
    assert float((mu2 - mu).abs().max()) <= 1e-5
    assert float(((var2 - var).abs() / var).max()) <= 1e-5
    assert float((runner.encode(SENTENCES) - model.encode(SENTENCES, precision="fp32")).abs().max()) <= 1e-5
    sim = runner.similarity(SENTENCES[:2], SENTENCES[2:])
    assert sim.shape == (2, 3)


def test_a_gaussian_head_that_reads_cls_exports_its_means_and_variances(tiny_bert_dir, tmp_path):
    """``GaussianHead(pooler="cls")`` under a ``mean`` encoder (``point: mean``): the ONNX graph feeds the head
    the first token's state (means and variances equal to 1e-5), and the Sentence Transformers pipeline pools
    ``cls_token`` before the mean layer (its means equal to 1e-5); the same weights on the mean differ."""
    from sentence_transformers import SentenceTransformer

    from unisent.models import GaussianEncoder
    from unisent.models.gaussian import GaussianHead

    encoder = Encoder(EncoderConfig(model=str(tiny_bert_dir), pooler="mean", max_length=32))
    torch.manual_seed(1)
    model = GaussianEncoder(encoder, GaussianHead(32, pooler="cls")).eval()
    runner = unisent.load(str(export_model(model, tmp_path / "gauss", "onnx").out), backend="onnx")
    mu, var = model.encode_gaussian(SENTENCES, precision="fp32")
    mu2, var2 = runner.encode_gaussian(SENTENCES)
    assert float((mu2 - mu).abs().max()) <= 1e-5 and float(((var2 - var).abs() / var).max()) <= 1e-5
    mean_head = GaussianEncoder(encoder, GaussianHead(32)).eval()  # the same head weights would read the mean
    mean_head.head.load_state_dict(model.head.state_dict())
    assert float((mean_head.encode_gaussian(SENTENCES, precision="fp32")[0] - mu).abs().max()) > 1e-3
    out = export_model(model, tmp_path / "st", "sentence-transformers").out
    st = SentenceTransformer(str(out), device="cpu")
    assert [type(m).__name__ for m in st][1:] == ["Pooling", "Dense"]
    assert st[1].get_config_dict()["pooling_mode"] == "cls"
    assert float((torch.as_tensor(st.encode(SENTENCES)) - mu).abs().max()) <= 1e-5
