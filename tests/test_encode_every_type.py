"""One ``encode`` for every model type: ``unisent encode --model DIR`` works for each registered type of unisent
(the registry is iterated: a type added without a tiny builder here fails), with the contract's signature;
``unisent.load`` of a ``--truncate-dim`` export gives the vectors ``SentenceTransformer(DIR)`` gives."""

from __future__ import annotations

import inspect
import json
from pathlib import Path

import numpy as np
import pytest
import torch

import unisent
import unisent.models  # noqa: F401 - registers every model type of unisent
from unisent.cli import main
from unisent.encoders import Encoder, EncoderConfig
from unisent.inference import registered_models

pytestmark = pytest.mark.usefixtures("one_thread")

SENTENCES = ["A man is playing a guitar.", "Two dogs run on the beach.", "The stock market fell today.", "Hi"] * 3


def _encoder(tiny_bert_dir: Path) -> Encoder:
    return Encoder(EncoderConfig(model=str(tiny_bert_dir), pooler="mean", max_length=32))


def _retrofitted(tiny_bert_dir: Path):
    from unisent.models import RetrofittedEncoder

    lookup = {s: "(p / play-01 :ARG0 (m / man))" for s in SENTENCES}  # the saved lookup gives every graph
    return RetrofittedEncoder(_encoder(tiny_bert_dir), _encoder(tiny_bert_dir), "norm_concat", parser=lookup)


def _pcr(tiny_bert_dir: Path):
    from unisent.models import fit_pcr

    return fit_pcr(_encoder(tiny_bert_dir), {"en": SENTENCES}, k=1)


#: a tiny model of each of unisent's registered types
BUILDERS = {
    "encoder": _encoder,
    "gaussian": lambda d: unisent.models.GaussianEncoder(_encoder(d), unisent.models.GaussianHead(32)),
    "cmlm-projection": lambda d: unisent.models.ProjectionEncoder(
        _encoder(d), unisent.models.SentenceProjection(32, num_projections=3)
    ),
    "pcr": _pcr,
    "retrofitted": _retrofitted,
}
TYPES = sorted(name for name, cls in registered_models().items() if cls.__module__.startswith("unisent."))


def test_the_registry_lists_every_type_of_unisent_and_each_has_a_builder_here():
    assert set(TYPES) >= {"encoder", "gaussian", "cmlm-projection", "pcr", "retrofitted"}
    assert not set(TYPES) - set(BUILDERS), f"model types without a tiny builder here: {set(TYPES) - set(BUILDERS)}"


@pytest.mark.parametrize("name", TYPES)
def test_every_type_takes_the_contracts_encode_keywords(name):
    parameters = inspect.signature(registered_models()[name].encode).parameters
    for keyword, default in (("normalize", False), ("precision", "auto"), ("show_progress_bar", False)):
        assert parameters[keyword].kind is inspect.Parameter.KEYWORD_ONLY and parameters[keyword].default == default
    assert "bf16" not in parameters


@pytest.mark.parametrize("name", TYPES)
def test_unisent_encode_runs_every_registered_type(name, tiny_bert_dir, tmp_path):
    torch.manual_seed(0)
    directory = tmp_path / name
    BUILDERS[name](tiny_bert_dir).eval().save_pretrained(directory)
    source, out = tmp_path / "in.txt", tmp_path / "out.npy"
    source.write_text("".join(s + "\n" for s in SENTENCES), encoding="utf-8")
    main(["encode", "--model", str(directory), "--input", str(source), "--output", str(out), "--quiet"])
    loaded = unisent.load(str(directory))
    assert loaded.model_type == name
    expected = loaded.encode(SENTENCES, precision="fp32").numpy()  # the tests' CPU (conftest.py): auto is fp32
    got = np.load(out)
    assert got.shape == expected.shape == (len(SENTENCES), expected.shape[1])
    np.testing.assert_allclose(got, expected, atol=1e-5, rtol=0)
    for precision in ("fp32", "bf16"):  # the one word reaches every type's encoder
        vectors = loaded.encode(SENTENCES[:4], 2, precision=precision, normalize=True)
        assert vectors.dtype == torch.float32 and vectors.shape == (4, expected.shape[1])


def test_unisent_load_of_a_truncated_export_gives_sentence_transformers_vectors(tiny_bert_dir, tmp_path, capsys):
    from sentence_transformers import SentenceTransformer

    from unisent.inference.truncation import TruncatedModel

    model_dir, out = tmp_path / "encoder", tmp_path / "st16"
    _encoder(tiny_bert_dir).save_pretrained(model_dir)
    main(["export", str(model_dir), "--format", "sentence-transformers", "--out", str(out), "--truncate-dim", "16"])
    capsys.readouterr()
    loaded = unisent.load(str(out))
    assert isinstance(loaded, TruncatedModel) and loaded.truncate_dim == 16 and not loaded.training
    ours = loaded.encode(SENTENCES)
    st = SentenceTransformer(str(out), device="cpu").encode(SENTENCES, convert_to_numpy=True)
    assert ours.shape == st.shape == (len(SENTENCES), 16)
    np.testing.assert_allclose(ours.numpy(), st, atol=1e-5, rtol=0)
    assert loaded.model.encode(SENTENCES).shape == (len(SENTENCES), 32)  # the full model is kept
    # `unisent encode` of the export writes what the export records, too
    source, npy = tmp_path / "in.txt", tmp_path / "out.npy"
    source.write_text("".join(s + "\n" for s in SENTENCES), encoding="utf-8")
    main(["encode", "--model", str(out), "--input", str(source), "--output", str(npy), "--quiet"])
    np.testing.assert_allclose(np.load(npy), st, atol=1e-5, rtol=0)
    # exported again, it keeps the recorded dim: the whole model is written, the dim recorded again
    again = tmp_path / "again"
    main(["export", str(out), "--format", "sentence-transformers", "--out", str(again)])
    assert json.loads((again / "config_sentence_transformers.json").read_text())["truncate_dim"] == 16
    np.testing.assert_allclose(unisent.load(str(again)).encode(SENTENCES).numpy(), st, atol=1e-5, rtol=0)


def test_a_bad_recorded_truncate_dim_is_one_line_naming_the_file(tiny_bert_dir, tmp_path):
    import json

    model_dir = tmp_path / "encoder"
    _encoder(tiny_bert_dir).save_pretrained(model_dir)
    config = model_dir / "config_sentence_transformers.json"
    for dim, words in ((48, "above the model's embedding dimension 32"), ("8", "positive number")):
        config.write_text(json.dumps({"truncate_dim": dim}))
        with pytest.raises(ValueError) as excinfo:
            unisent.load(str(model_dir))
        message = str(excinfo.value)
        assert len(message.splitlines()) == 1 and "config_sentence_transformers.json" in message and words in message


def test_truncation_forwards_by_name_not_by_getattr():
    source = (Path(unisent.__file__).parent / "inference").rglob("*.py")
    assert not [p for p in source if "def __getattr__" in p.read_text()]
