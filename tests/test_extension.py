"""Extending unisent from outside the package: a pooler, and an objective with its own inference head.

Both come from the documentation (``docs/export.md``: adding a pooler; ``docs/new-objective.md``: an
inference head), written to a module in a temporary directory and imported from there, so they use
only the public API; unisent is not edited.
"""

from __future__ import annotations

import importlib
import json
import re
import sys
from pathlib import Path

import lightning as L
import pytest
import torch

import unisent
from tests.conftest import st_encode
from unisent.data import DataSource, UnisentDataModule
from unisent.encoders import POOLERS, Encoder, EncoderConfig
from unisent.export import export_model
from unisent.inference import model_types as model_registry
from unisent.lightning_module import UnisentModule

#: the repository's training, benchmark and test samples (not in the wheel)
SAMPLE_DIR = Path(__file__).resolve().parents[1] / "samples"

ROOT = Path(__file__).resolve().parents[1]
SENTENCES = [
    "a man plays a guitar .",
    "two dogs run on the grass while a child throws a ball and the sun sets behind the trees .",
    "ok",
    "the quick brown fox jumps over the lazy dog " * 8,  # truncated at max_length
]

pytestmark = pytest.mark.usefixtures("one_thread")


def _doc_block(page: str, marker: str) -> str:
    """The python block of ``docs/<page>`` that contains ``marker``."""
    blocks = re.findall(r"```python\n(.*?)```", (ROOT / "docs" / page).read_text(), flags=re.S)
    found = [b for b in blocks if marker in b]
    assert len(found) == 1, f"expected one python block with {marker!r} in docs/{page}"
    return found[0]


@pytest.fixture
def user_module(tmp_path, monkeypatch):
    """Write a documented example as a module outside the package and import it; afterwards forget it
    (module and registrations)."""
    names: list[str] = []
    poolers, models = dict(POOLERS), dict(model_registry._MODELS)

    def make(name: str, page: str, marker: str):
        (tmp_path / f"{name}.py").write_text(_doc_block(page, marker))
        names.append(name)
        return importlib.import_module(name)

    monkeypatch.syspath_prepend(str(tmp_path))
    yield make
    for name in names:
        sys.modules.pop(name, None)
    POOLERS.clear()
    POOLERS.update(poolers)
    model_registry._MODELS.clear()
    model_registry._MODELS.update(models)


def _card_code(readme: Path) -> str:
    return re.search(r"```python\n(.*?)```", readme.read_text(), re.S).group(1)


def test_a_pooler_added_in_one_file_exports_and_reloads(user_module, tiny_bert_dir, tmp_path, monkeypatch):
    with pytest.raises(ValueError, match=r"pooler 'mean_sqrt_len' is not a registered pooler \(avg_first_last, cls"):
        EncoderConfig(model=str(tiny_bert_dir), pooler="mean_sqrt_len")
    my_poolers = user_module("my_poolers", "export.md", "register_pooler(")
    assert POOLERS["mean_sqrt_len"] is my_poolers.MeanSqrtLenPooler

    encoder = Encoder(EncoderConfig(model=str(tiny_bert_dir), pooler="mean_sqrt_len", max_length=24)).eval()
    expected = encoder.encode(SENTENCES)
    mean = Encoder(EncoderConfig(model=str(tiny_bert_dir), pooler="mean", max_length=24)).eval().encode(SENTENCES)
    assert not torch.allclose(expected, mean, atol=1e-3)  # the pooler is not the mean under another name

    st_dir = export_model(encoder, tmp_path / "st", "sentence-transformers").out
    modules = json.loads((st_dir / "modules.json").read_text())
    assert [m["type"].rsplit(".", 1)[-1] for m in modules] == ["Transformer", "Pooling"]
    assert json.loads((st_dir / "1_Pooling" / "config.json").read_text())["pooling_mode_mean_sqrt_len_tokens"]
    torch.testing.assert_close(st_encode(st_dir, SENTENCES), expected, atol=1e-5, rtol=0)
    torch.testing.assert_close(unisent.load(str(st_dir)).encode(SENTENCES), expected, atol=1e-5, rtol=0)
    assert "sqrt(their number)" in (st_dir / "README.md").read_text()  # the pooler's own card text
    # a pooler from outside unisent is recorded by its class path, so a fresh process can import it
    settings = json.loads((st_dir / "unisent_encoder.json").read_text())
    assert settings["pooler"] == "my_poolers.MeanSqrtLenPooler"

    hf_dir = export_model(encoder, tmp_path / "hf", "huggingface").out
    monkeypatch.chdir(hf_dir)  # the card's recipe loads model_dir = "."
    namespace: dict = {}
    exec(_card_code(hf_dir / "README.md"), namespace)
    torch.testing.assert_close(namespace["embed"](SENTENCES), expected, atol=1e-5, rtol=0)
    torch.testing.assert_close(unisent.load(str(hf_dir)).encode(SENTENCES), expected, atol=1e-5, rtol=0)

    # the class path works where nothing registered the name, and the config parser takes both
    POOLERS.pop("mean_sqrt_len")
    by_path = Encoder(EncoderConfig(model=str(tiny_bert_dir), pooler="my_poolers.MeanSqrtLenPooler", max_length=24))
    torch.testing.assert_close(by_path.eval().encode(SENTENCES), expected, atol=1e-6, rtol=0)
    from jsonargparse import ArgumentError, ArgumentParser

    parser = ArgumentParser(exit_on_error=False)
    parser.add_class_arguments(EncoderConfig, "encoder")
    args = parser.parse_args(
        ["--encoder.pooler", "my_poolers.MeanSqrtLenPooler", "--encoder.model", str(tiny_bert_dir)]
    )
    config = parser.instantiate(args).encoder
    assert config.pooler == "my_poolers.MeanSqrtLenPooler" and type(config.pooler) is str
    with pytest.raises(ArgumentError, match="avg_first_last"):  # an unknown name fails when parsed, listing the choices
        parser.parse_args(["--encoder.pooler", "nope"])


def test_an_objective_with_its_own_inference_head_trains_saves_loads_and_exports(user_module, tiny_bert_dir, tmp_path):
    my_heads = user_module("my_heads", "new-objective.md", "register_model(")
    module = UnisentModule(
        encoder=EncoderConfig(model=str(tiny_bert_dir), pooler="cls", max_length=24),
        objectives=[my_heads.ReducedSimCSE(dim=8, name="reduced")],
    )
    before = module.objectives[0].head.linear.weight.detach().clone()
    data = UnisentDataModule(train={"reduced": DataSource(str(SAMPLE_DIR / "sentences.txt"))}, batch_size=8)
    run = tmp_path / "run"
    trainer = L.Trainer(
        default_root_dir=run,
        max_steps=2,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        accelerator="cpu",
    )
    trainer.fit(module, datamodule=data)
    assert not torch.equal(module.objectives[0].head.linear.weight, before)  # the head was trained
    ckpt = run / "last.ckpt"
    trainer.save_checkpoint(ckpt)

    model = module.inference_model().eval()
    assert isinstance(model, my_heads.ReducedEncoder)
    expected = model.encode(SENTENCES)
    assert expected.shape == (len(SENTENCES), 8)

    saved = run / "encoder"  # written by fit (UnisentModule.on_train_end)
    assert json.loads((saved / "unisent_model.json").read_text()) == {
        "type": "reduced",
        "class_path": "my_heads.ReducedEncoder",
    }
    assert {"reducer.pt", "reducer.json"} <= {p.name for p in saved.iterdir()}
    for source in (saved, ckpt):
        loaded = unisent.load(str(source))
        assert isinstance(loaded, my_heads.ReducedEncoder)
        torch.testing.assert_close(loaded.encode(SENTENCES), expected, atol=1e-5, rtol=0)

    out = export_model(saved, tmp_path / "exported", "sentence-transformers").out
    modules = [m["type"].rsplit(".", 1)[-1] for m in json.loads((out / "modules.json").read_text())]
    assert modules == ["Transformer", "Pooling", "Dense"]
    torch.testing.assert_close(st_encode(out, SENTENCES), expected, atol=1e-5, rtol=0)
    torch.testing.assert_close(unisent.load(str(out)).encode(SENTENCES), expected, atol=1e-5, rtol=0)
    card = (out / "README.md").read_text()
    assert "Transformer -> Pooling -> Dense (reducer)" in card and "| reducer | Linear 32 -> 8 |" in card

    # the type's name unregistered: the record's class path finds the class among those defined (never imported)
    model_registry._MODELS.pop("reduced")
    assert isinstance(unisent.load(str(saved)), my_heads.ReducedEncoder)
    with pytest.raises(TypeError, match="no 'huggingface' exporter is registered for ReducedEncoder"):
        export_model(saved, tmp_path / "hf", "huggingface")


def test_a_pooler_without_export_knowledge_fails_at_export_and_names_itself(tiny_bert_dir, tmp_path):
    from unisent.encoders import Pooler, register_pooler
    from unisent.export import NoExporterError

    class FirstTokenTwice(Pooler):
        def forward(self, last_hidden, attention_mask, hidden_states=None):
            return 2 * last_hidden[:, 0]

    register_pooler("first_twice")(FirstTokenTwice)
    try:
        encoder = Encoder(EncoderConfig(model=str(tiny_bert_dir), pooler="first_twice"))
        with pytest.raises(NoExporterError, match="pooler 'first_twice' declares no Sentence Transformers modules"):
            export_model(encoder, tmp_path / "st", "sentence-transformers")
        with pytest.raises(NoExporterError, match="pooler 'first_twice' declares no transformers recipe"):
            export_model(encoder, tmp_path / "hf", "huggingface")
    finally:
        POOLERS.pop("first_twice", None)
    assert list(tmp_path.iterdir()) == []  # nothing left behind


def test_registries_refuse_a_second_class_under_a_taken_name():
    from unisent.encoders import Pooler, register_pooler
    from unisent.inference import register_model
    from unisent.models import EncoderWrapper

    class Other(Pooler):
        pass

    class OtherModel(EncoderWrapper):
        pass

    with pytest.raises(ValueError, match="pooler 'mean' is already registered"):
        register_pooler("mean")(Other)
    with pytest.raises(ValueError, match="model type 'gaussian' is already registered"):
        register_model("gaussian")(OtherModel)
    with pytest.raises(TypeError, match="not an InferenceModel subclass"):
        register_model("plain-module")(torch.nn.Linear)
    assert POOLERS["mean"].__name__ == "MeanPooler"
