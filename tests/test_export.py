"""unisent export: round trips for every pooler, export from a checkpoint with its model card, the registry."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import lightning as L
import pytest
import torch
import yaml

import unisent
from tests.conftest import st_encode
from unisent.cli import main
from unisent.data import DataSource, UnisentDataModule
from unisent.encoders import POOLERS, Encoder, EncoderConfig
from unisent.export import (
    ExportCheckError,
    Exporter,
    HuggingFaceExporter,
    export_model,
    hf_usage_code,
    register_exporter,
    registered,
)
from unisent.export import exporters as export_registry
from unisent.lightning_module import UnisentModule
from unisent.objectives import SimCSE

#: the repository's training, benchmark and test samples (not in the wheel)
SAMPLE_DIR = Path(__file__).resolve().parents[1] / "samples"

SENTENCES = [
    "a man plays a guitar .",
    "two dogs run on the grass while a child throws a ball and the sun sets behind the trees .",
    "ok",
    "the quick brown fox jumps over the lazy dog " * 8,  # truncated at max_length
    "a woman is slicing an onion .",
]


pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def tiny3_dir(tiny_bert_dir, tmp_path_factory) -> Path:
    """The tiny BERT with 3 layers: avg_first_last then differs from an average over all layers."""
    from transformers import AutoConfig, AutoModel, AutoTokenizer

    directory = tmp_path_factory.mktemp("tiny-bert-3")
    config = AutoConfig.from_pretrained(tiny_bert_dir)
    config.num_hidden_layers = 3
    torch.manual_seed(1)
    AutoModel.from_config(config).save_pretrained(directory)
    AutoTokenizer.from_pretrained(tiny_bert_dir).save_pretrained(directory)
    return directory


def _card_code(readme: Path) -> str:
    """The first python block of a model card (the transformers recipe of a huggingface export)."""
    return re.search(r"```python\n(.*?)```", readme.read_text(), re.S).group(1)


# "sentence-transformers" runs a Sentence Transformers model's own modules: tests/test_sentence_transformers_in.py
@pytest.mark.integration
@pytest.mark.parametrize("pooler", [name for name in POOLERS if name != "sentence-transformers"])
def test_every_pooler_round_trips_through_both_formats(pooler, tiny3_dir, tmp_path, monkeypatch):
    encoder = Encoder(EncoderConfig(model=str(tiny3_dir), pooler=pooler, max_length=24)).eval()
    expected = encoder.encode(SENTENCES)

    st_dir = export_model(encoder, tmp_path / "st", "sentence-transformers").out
    types = [m["type"].rsplit(".", 1)[-1] for m in json.loads((st_dir / "modules.json").read_text())]
    assert types == {
        "cls_mlp": ["Transformer", "Pooling", "Dense"],
        "avg_first_last": ["Transformer", "WeightedLayerPooling", "Pooling"],
    }.get(pooler, ["Transformer", "Pooling"])
    torch.testing.assert_close(st_encode(st_dir, SENTENCES), expected, atol=1e-5, rtol=0)
    torch.testing.assert_close(unisent.load(str(st_dir)).encode(SENTENCES), expected, atol=1e-5, rtol=0)

    hf_dir = export_model(encoder, tmp_path / "hf", "huggingface").out
    from transformers import AutoModel

    assert AutoModel.from_pretrained(hf_dir).config.num_hidden_layers == 3
    monkeypatch.chdir(hf_dir)  # the card's recipe loads model_dir = "."
    namespace: dict = {}
    exec(_card_code(hf_dir / "README.md"), namespace)
    torch.testing.assert_close(namespace["embed"](SENTENCES), expected, atol=1e-5, rtol=0)
    if pooler == "cls_mlp":  # the MLP went into BERT's pooler; the pooler.pt recipe gives the same
        assert "pooler_output" in _card_code(hf_dir / "README.md")
        namespace = {}
        exec(hf_usage_code(pooler, 24, mlp_in_backbone=False), namespace)
        torch.testing.assert_close(namespace["embed"](SENTENCES), expected, atol=1e-5, rtol=0)
    torch.testing.assert_close(unisent.load(str(hf_dir)).encode(SENTENCES), expected, atol=1e-5, rtol=0)
    assert not list(tmp_path.glob(".*partial*"))
    assert json.loads((hf_dir / "unisent_encoder.json").read_text())["model"] == "."  # no absolute path


def _write_run_config(run: Path, model_dir: Path) -> None:
    """The parts of LightningCLI's config.yaml that the card reads."""
    config = {
        "seed_everything": 42,
        "model": {
            "encoder": {"model": str(model_dir), "pooler": "cls_mlp"},
            "optimizer": {"class_path": "unisent.optim.AdamW", "init_args": {"lr": 2e-3}},
        },
        "data": {
            "train": {
                "unsup": str(SAMPLE_DIR / "sentences.txt"),
                "sup": {"path": str(SAMPLE_DIR / "nli_triples.jsonl"), "max_records": 64},
            },
            "batch_size": 8,
        },
        "trainer": {"max_steps": 2, "precision": "32-true"},
    }
    (run / "config.yaml").write_text(yaml.safe_dump(config))


def test_export_from_a_checkpoint_writes_the_model_card(tiny_model_dir, tmp_path, capsys):
    module = UnisentModule(
        encoder=EncoderConfig(model=str(tiny_model_dir), pooler="cls_mlp"),
        objectives=[SimCSE(name="unsup"), SimCSE(supervised=True, name="sup", weight=0.5, hard_negative_weight=0.2)],
    )
    data = UnisentDataModule(
        train={
            "unsup": DataSource(str(SAMPLE_DIR / "sentences.txt")),
            "sup": DataSource(str(SAMPLE_DIR / "nli_triples.jsonl"), max_records=64),
        },
        batch_size=8,
    )
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
    ckpt = run / "checkpoints" / "last.ckpt"
    trainer.save_checkpoint(ckpt)
    _write_run_config(run, tiny_model_dir)
    results = tmp_path / "results.json"
    results.write_text(
        json.dumps(
            {
                "tasks": {"stsb-dev": {"main_metric": "spearman", "score": 61.234, "metrics": {}}},
                "groups": {},
                "config": {"data_dir": "bundled sample"},
            }
        )
    )

    out = tmp_path / "exported"
    main(
        [
            "export",
            str(ckpt),
            "--format",
            "sentence-transformers",
            "--out",
            str(out),
            "--results",
            str(results),
            "--training-data",
            "SimCSE's bundled sample (SNLI dev triples)",
        ]
    )
    assert "largest absolute difference" in capsys.readouterr().out
    expected = unisent.load(str(ckpt)).encode(SENTENCES)
    torch.testing.assert_close(st_encode(out, SENTENCES), expected, atol=1e-5, rtol=0)

    card = (out / "README.md").read_text()
    front = yaml.safe_load(card.split("---\n")[1])
    assert front["library_name"] == "sentence-transformers" and "unisent" in front["tags"]
    assert "simcse" in front["tags"] and front["license"] == "other"  # the tiny backbone declares none
    assert sorted(front["datasets"]) == ["sentence-transformers/stsb", "stanfordnlp/snli"]  # the bundled samples
    assert front["model-index"][0]["results"][0]["metrics"][0] == {
        "type": "spearman",
        "value": 61.234,
        "name": "spearman (%)",
    }
    assert str(tmp_path) not in card and "/tmp/" not in card  # no local path, the backbone's included
    for expected_text in (
        "# tiny-bert + SimCSE\n",  # the name: backbone and methods, not the output folder's
        "### `unsup`: `unisent.objectives.simcse.SimCSE` (weight 1)",
        "### `sup`: `unisent.objectives.simcse.SimCSE` (weight 0.5)",
        "`supervised=true`",
        "`hard_negative_weight=0.2`",
        "`temperature=0.05`",
        "SimCSE: Simple Contrastive Learning of Sentence Embeddings",  # the objective's citation
        "SimCSE's bundled sample (SNLI dev triples)",
        "nli_triples.jsonl` (first 64 records)",
        "sentences.txt`",
        "| base model | tiny-bert |",
        "SimCSE's `cls`; unisent `cls_mlp`",
        "| optimizer | AdamW (lr 0.002) |",
        "| batch size (per process) | 8 |",
        "| optimizer steps (at this checkpoint) | 2 |",
        "| max sequence length in training | 32 tokens (this export: 32) |",
        "| stsb-dev | spearman | 61.23 |",
        "`results.json`",
        "Transformer -> Pooling -> Dense",
    ):
        assert expected_text in card, expected_text

    hf = tmp_path / "hf"
    main(["export", str(ckpt), "--format", "huggingface", "--out", str(hf)])
    hf_card = (hf / "README.md").read_text()
    assert "library_name: transformers" in hf_card and "out.pooler_output" in hf_card and "## Evaluation" not in hf_card
    torch.testing.assert_close(unisent.load(str(hf)).encode(SENTENCES), expected, atol=1e-5, rtol=0)


def test_export_from_an_encoder_directory_reads_the_run_config(tiny_bert_dir, tmp_path):
    run = tmp_path / "run"
    Encoder(EncoderConfig(model=str(tiny_bert_dir), pooler="mean")).save_pretrained(run / "encoder")
    _write_run_config(run, tiny_bert_dir)
    config = yaml.safe_load((run / "config.yaml").read_text())
    config["model"]["objectives"] = [{"class_path": "unisent.objectives.SimCSE", "init_args": {"temperature": 0.1}}]
    (run / "config.yaml").write_text(yaml.safe_dump(config))
    out = export_model(run / "encoder", tmp_path / "out", "huggingface").out
    card = (out / "README.md").read_text()
    assert "### `simcse`: `unisent.objectives.simcse.SimCSE`" in card and "`temperature=0.1`" in card
    assert "Gao, Yao and Chen" in card and "sentences.txt" in card and "encoder directory `encoder`" in card


def test_export_errors_are_clear_and_leave_nothing(tiny_bert_dir, tmp_path, monkeypatch):
    encoder = Encoder(EncoderConfig(model=str(tiny_bert_dir), pooler="mean"))
    busy = tmp_path / "busy"
    busy.mkdir()
    (busy / "notes.txt").write_text("keep me")
    with pytest.raises(SystemExit, match="not empty; choose another --out or pass --overwrite"):
        main(["export", str(tiny_bert_dir), "--format", "huggingface", "--out", str(busy)])
    with pytest.raises(FileExistsError, match="does not look like a unisent export"):
        export_model(encoder, busy, "huggingface", overwrite=True)
    assert (busy / "notes.txt").read_text() == "keep me"

    with pytest.raises(SystemExit, match="does not exist"):
        main(["export", str(tmp_path / "missing.ckpt"), "--format", "huggingface", "--out", str(tmp_path / "x")])
    bad_results = tmp_path / "bad.json"
    bad_results.write_text('{"tasks": {"stsb-dev": {"score": 1}}}')
    with pytest.raises(SystemExit, match="'stsb-dev' has no 'main_metric'"):
        main(
            [
                "export",
                str(tiny_bert_dir),
                "--format",
                "huggingface",
                "--out",
                str(tmp_path / "y"),
                "--results",
                str(bad_results),
            ]
        )
    with pytest.raises(TypeError, match="no 'huggingface' exporter is registered for Linear"):
        export_model(torch.nn.Linear(2, 2), tmp_path / "z", "huggingface")

    monkeypatch.setattr(HuggingFaceExporter, "verify", lambda self, model, out, sentences: (0.5, "a check that fails"))
    with pytest.raises(ExportCheckError, match="differ by up to 0.5"):
        export_model(encoder, tmp_path / "checked", "huggingface")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.json", "busy"]

    first = export_model(encoder, tmp_path / "again", "sentence-transformers", verify=False)
    export_model(
        Encoder(EncoderConfig(model=str(tiny_bert_dir), pooler="cls")),
        first.out,
        "huggingface",
        overwrite=True,
        verify=False,
    )
    assert not (first.out / "modules.json").exists()  # a previous export is replaced, not merged


class _TwoHeads(torch.nn.Module):
    """A model type with its own output (as a Gaussian model with a variance head will have)."""

    def __init__(self) -> None:
        super().__init__()
        self.scale = torch.nn.Parameter(torch.tensor(2.0))

    def encode(self, sentences, batch_size=64, **kw):
        return self.scale * torch.ones(len(sentences), 3)


def test_a_model_type_registers_its_own_exporter(tmp_path):
    @register_exporter(_TwoHeads)
    class TwoHeadsExporter(Exporter):
        format = "two-heads-test"
        library_name = "unisent"

        def write(self, model, out):
            torch.save(model.state_dict(), out / "two_heads.pt")

        def facts(self, model):
            return [("heads", "2")]

        def usage(self, model):
            return "`torch.load('two_heads.pt')`"

    try:
        assert registered()["two-heads-test"] == ["_TwoHeads"]
        report = export_model(_TwoHeads(), tmp_path / "out", "two-heads-test")
        assert report.files == ["README.md", "two_heads.pt"] and report.max_diff is None
        card = (tmp_path / "out" / "README.md").read_text()
        assert "| heads | 2 |" in card and "two_heads.pt" in card
        with pytest.raises(TypeError, match="no 'two-heads-test' exporter is registered for Encoder"):
            export_registry.exporter_for(Encoder.__new__(Encoder), "two-heads-test")
    finally:
        export_registry._EXPORTERS.pop("two-heads-test", None)
    shutil.rmtree(tmp_path / "out")


@pytest.mark.parametrize("pooler,mean_activation", [("cls", "none"), ("cls_mlp", "tanh")])
def test_gaussian_model_exports_its_means_and_keeps_the_variances(pooler, mean_activation, tiny_bert_dir, tmp_path):
    from unisent.objectives import GaussianEncoder, GaussianHead

    encoder = Encoder(EncoderConfig(model=str(tiny_bert_dir), pooler=pooler, max_length=24))
    torch.manual_seed(3)
    model = GaussianEncoder(encoder, GaussianHead(encoder.hidden_size, mean_activation=mean_activation)).eval()
    mu, var = model.encode_gaussian(SENTENCES)
    report = export_model(model, tmp_path / "gauss", "sentence-transformers")
    out = report.out
    types = [m["type"].rsplit(".", 1)[-1] for m in json.loads((out / "modules.json").read_text())]
    assert types == (
        ["Transformer", "Pooling", "Dense", "Dense"] if pooler == "cls_mlp" else ["Transformer", "Pooling", "Dense"]
    )
    torch.testing.assert_close(st_encode(out, SENTENCES), mu, atol=1e-5, rtol=0)  # the means
    assert json.loads((out / "unisent_model.json").read_text())["type"] == "gaussian"  # what unisent.load reads
    loaded = unisent.load(str(out))
    assert isinstance(loaded, GaussianEncoder)
    mu2, var2 = loaded.encode_gaussian(SENTENCES)
    torch.testing.assert_close(mu2, mu, atol=1e-5, rtol=0)
    torch.testing.assert_close(var2, var, atol=1e-5, rtol=0)
    # the asymmetric KL similarity of the export is the original's
    torch.testing.assert_close(loaded.similarity(SENTENCES, SENTENCES[:2]), model.similarity(SENTENCES, SENTENCES[:2]))
    card = (out / "README.md").read_text()
    assert "gaussian-embeddings" in card and "encode_gaussian" in card and "Dense (mean)" in card


@pytest.mark.parametrize("center", [False, True])
def test_pcr_model_exports_one_language_as_a_dense_and_keeps_all(center, tiny_bert_dir, tmp_path):
    from unisent.models import PCREncoder, PrincipalComponentRemoval

    encoder = Encoder(EncoderConfig(model=str(tiny_bert_dir), pooler="mean", max_length=24)).eval()
    sentences = (SAMPLE_DIR / "sentences.txt").read_text().splitlines()
    pcr = PrincipalComponentRemoval(k=2, center=center).fit(
        {"en": encoder.encode(sentences[:60]), "de": encoder.encode(sentences[60:120])}
    )
    model = PCREncoder(encoder, pcr, default_language="de").eval()
    with pytest.raises(ValueError, match="default_language"):
        export_model(PCREncoder(encoder, pcr), tmp_path / "ambiguous", "sentence-transformers")
    out = export_model(model, tmp_path / "pcr", "sentence-transformers").out
    types = [m["type"].rsplit(".", 1)[-1] for m in json.loads((out / "modules.json").read_text())]
    assert types == ["Transformer", "Pooling", "Dense"]
    expected_de = model.encode(SENTENCES, language="de")
    torch.testing.assert_close(st_encode(out, SENTENCES), expected_de, atol=1e-5, rtol=0)
    assert not torch.allclose(expected_de, encoder.encode(SENTENCES), atol=1e-3)  # the PCR did something
    loaded = unisent.load(str(out))
    assert isinstance(loaded, PCREncoder) and loaded.pcr.languages == ["de", "en"]
    for language in ("de", "en"):
        torch.testing.assert_close(
            loaded.encode(SENTENCES, language=language), model.encode(SENTENCES, language=language), atol=1e-5, rtol=0
        )
    assert "Dense (PCR)" in (out / "README.md").read_text()
