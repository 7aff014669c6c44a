"""GaussCSE's head over its own copies of the encoder's top layers (``own_layers``)."""

from pathlib import Path

import lightning as L
import pytest
import torch

import unisent
from unisent.data import UnisentDataModule
from unisent.encoders import Encoder, EncoderConfig
from unisent.export.api import export_model
from unisent.lightning_module import UnisentModule
from unisent.objectives import GaussCSE, GaussianEncoder, GaussianHead
from unisent.objectives.distill import Distill
from unisent.training_config import HeadsConfig, TrainConfig

SAMPLE_DIR = Path(__file__).resolve().parents[1] / "samples"
SENTS = ["a man is playing a guitar .", "a person plays music .", "two dogs run ."]


def _batch(encoder):
    tok = encoder.tokenizer(SENTS, padding=True, return_tensors="pt")
    return tok["input_ids"], tok["attention_mask"]


def test_copies_of_the_top_layers_give_the_encoders_vectors_and_then_their_own(tiny_bert_dir):
    encoder = Encoder(EncoderConfig(model=str(tiny_bert_dir), pooler="mean")).eval()
    ids, mask = _batch(encoder)
    top = encoder.top_layer_copies(1)
    with torch.no_grad():
        torch.testing.assert_close(encoder(ids, mask, top_layers=top), encoder(ids, mask), atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(encoder(ids, mask, top_layers=top), encoder(ids, mask, unpad=False))
        weight = top[0].output.dense.weight
        weight.add_(torch.randn_like(weight))  # the copy moves (LayerNorm drops a constant shift); the top does not
        assert not torch.allclose(encoder(ids, mask, top_layers=top), encoder(ids, mask), atol=1e-3)
    assert top[0].output.dense.weight.data_ptr() != encoder.backbone.encoder.layer[-1].output.dense.weight.data_ptr()
    n = len(encoder.backbone.encoder.layer)
    with pytest.raises(ValueError, match=rf"k must be in \[1, {n - 1}\]"):
        encoder.top_layer_copies(n)
    with pytest.raises(ValueError, match="own_layers must be an integer >= 0"):
        GaussianHead(8, own_layers=-1)


def test_the_loss_moves_the_copies_and_lower_layers_not_the_encoders_top(tiny_bert_dir):
    module = UnisentModule(
        encoder=EncoderConfig(model=str(tiny_bert_dir), pooler="mean"), objectives=[GaussCSE(own_layers=1)]
    )
    objective = module.objectives[0]
    ids, mask = _batch(module.encoder)
    batch = {k: {"input_ids": ids, "attention_mask": mask} for k in ("anchor", "positive")}
    objective.total(objective(module.encoder, batch)).backward()
    top, low = module.encoder.backbone.encoder.layer[-1], module.encoder.backbone.encoder.layer[0]
    assert all(p.grad is None for p in top.parameters())
    assert any(p.grad is not None and p.grad.abs().sum() > 0 for p in low.parameters())
    assert all(p.grad is not None for p in objective.head.layers.parameters())


def test_the_copies_learn_at_the_encoders_rate_and_are_held_with_it(tiny_bert_dir):
    module = UnisentModule(
        encoder=EncoderConfig(model=str(tiny_bert_dir), pooler="mean"),
        objectives=[GaussCSE(own_layers=1)],
        train=TrainConfig(heads=HeadsConfig(lr=1e-2, only_ratio=0.5)),
    )
    copies = {id(p) for p in module.objectives[0].head.layers.parameters()}
    head = {id(p) for p in (*module.objectives[0].head.mean.parameters(), *module.objectives[0].head.var.parameters())}
    groups = module.optimizer_groups()
    for group in groups:
        ids = {id(p) for p in group["params"]}
        if ids & copies:
            assert group.get("encoder") and "lr" not in group  # the encoder's group: its rate, held with it
        if ids & head:
            assert group["lr"] == 1e-2 and not group.get("encoder")
    assert copies <= {id(p) for g in groups for p in g["params"]}
    module._head_only = 2
    module.train()
    module.on_train_batch_start(None, 0)  # step 0: held, so the copies are in eval mode like the encoder
    assert not module.encoder.training and not module.objectives[0].head.layers.training


def test_trained_with_distill_it_saves_loads_and_exports(tiny_bert_dir, tmp_path):
    module = UnisentModule(
        encoder=EncoderConfig(model=str(tiny_bert_dir), pooler="mean"),
        objectives=[GaussCSE(own_layers=1, point="pooled"), Distill()],
    )
    data = UnisentDataModule(
        train={"gausscse": str(SAMPLE_DIR / "nli_triples.jsonl"), "distill": str(SAMPLE_DIR / "sentences.txt")},
        batch_size=8,
    )
    start = module.encoder.encode(SENTS, precision="fp32")
    trainer = L.Trainer(
        max_steps=3, logger=False, enable_progress_bar=False, enable_checkpointing=False, default_root_dir=tmp_path
    )
    trainer.fit(module, datamodule=data)
    model = module.inference_model()
    mu, var = model.encode_gaussian(SENTS, precision="fp32")
    # the head reads its copies: after training they differ from the encoder's top layer
    own = module.encoder.backbone.encoder.layer[-1].output.dense.weight
    assert not torch.allclose(model.head.layers[0].output.dense.weight, own)
    assert not torch.allclose(model.encode(SENTS, precision="fp32"), start, atol=0)  # encode: the encoder's vectors
    saved = model.save_pretrained(tmp_path / "g")
    loaded = unisent.load(str(saved))
    assert isinstance(loaded, GaussianEncoder) and len(loaded.head.layers) == 1
    for a, b in zip(loaded.encode_gaussian(SENTS, precision="fp32"), (mu, var)):
        torch.testing.assert_close(a, b)
    ckpt = tmp_path / "g.ckpt"
    trainer.save_checkpoint(ckpt)
    torch.testing.assert_close(unisent.load(str(ckpt)).encode_gaussian(SENTS, precision="fp32")[1], var)
    export_model(saved, tmp_path / "st", format="sentence-transformers")  # the pooled vectors, checked on export
    torch.testing.assert_close(unisent.load(str(tmp_path / "st")).encode_gaussian(SENTS, precision="fp32")[1], var)
    # ONNX: the copies run padded in the graph; means and variances equal encode_gaussian's (the export checks
    # them too, and refuses a file above 1e-4)
    runner = unisent.load(str(export_model(saved, tmp_path / "onnx", format="onnx").out), backend="onnx")
    mu2, var2 = runner.encode_gaussian(SENTS)
    assert float((mu2 - mu).abs().max()) <= 1e-5 and float(((var2 - var).abs() / var).max()) <= 1e-5
    assert float((runner.encode(SENTS) - model.encode(SENTS, precision="fp32")).abs().max()) <= 1e-5


@pytest.mark.parametrize(
    ("own_layers", "words"),
    [(0, ["gaussian_head.pt", "layers.0"]), (9, ["gaussian_head.json", "k must be in"]), ("x", ["own_layers", "'x'"])],
)
def test_a_head_file_whose_own_layers_do_not_fit_is_refused_by_name(tiny_bert_dir, tmp_path, own_layers, words):
    import json

    from unisent.io.model_files import ModelFileError

    encoder = Encoder(EncoderConfig(model=str(tiny_bert_dir), pooler="mean"))
    saved = GaussianEncoder(encoder, GaussianHead(encoder.hidden_size, own_layers=1)).save_pretrained(tmp_path / "g")
    settings = json.loads((saved / "gaussian_head.json").read_text())
    (saved / "gaussian_head.json").write_text(json.dumps(settings | {"own_layers": own_layers}))
    with pytest.raises(ModelFileError) as err:
        unisent.load(str(saved))
    message = str(err.value)
    assert "\n" not in message and all(w in message for w in words), message
