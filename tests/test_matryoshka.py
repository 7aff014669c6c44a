"""Matryoshka (Kusupati et al. 2022): the wrapper's loss against the wrapped objective's, one encoder pass per
step, the documented YAML trained with `unisent fit`, and the one-line refusals."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pandas as pd
import pytest
import torch
import torch.nn.functional as F
import yaml

from tests.conftest import run_cli
from unisent.encoders import EncoderConfig
from unisent.encoders.encoder import Encoder
from unisent.objectives import CMLM, EASE, BitextRetrieval, GaussCSE, Matryoshka, SimCSE

ROOT = Path(__file__).resolve().parents[1]
SAMPLE_DIR = ROOT / "samples"

pytestmark = pytest.mark.usefixtures("one_thread")


def _encoder(model_dir) -> Encoder:
    return Encoder(EncoderConfig(model=str(model_dir), pooler="mean", max_length=48, dropout=0.2))


def _triples(encoder: Encoder, objective, n: int = 6) -> dict:
    lines = (SAMPLE_DIR / "nli_triples.jsonl").read_text(encoding="utf-8").splitlines()[:n]
    rows = [json.loads(line) for line in lines]
    features = [{k: encoder.tokenize_ids([r[k]])[0] for k in ("anchor", "positive", "negative")} for r in rows]
    return objective.collate(features, encoder.pad_token_id)


def _sentences(encoder: Encoder, objective, n: int = 8) -> dict:
    texts = (SAMPLE_DIR / "sentences.txt").read_text(encoding="utf-8").splitlines()[:n]
    return objective.collate([{"text": ids} for ids in encoder.tokenize_ids(texts)], encoder.pad_token_id)


def test_one_full_dim_is_the_wrapped_objective(tiny_bert_dir):
    """dims = [hidden], weight 1: the same loss as the wrapped objective, dropout on, same seed (the wrapper
    draws the same dropout masks: it runs the encoder once, as the wrapped objective does)."""
    encoder = _encoder(tiny_bert_dir)
    assert encoder.training and encoder.hidden_size == 32
    simcse = SimCSE()
    wrapper = Matryoshka(SimCSE(), dims=[32])
    assert wrapper.name == "simcse" and wrapper.schema == simcse.schema
    batch = _sentences(encoder, simcse)
    torch.manual_seed(7)
    plain = simcse(encoder, batch)["contrastive"]
    torch.manual_seed(7)
    out = wrapper(encoder, batch)
    assert set(out.terms) == {"contrastive@32"}
    assert torch.allclose(out["contrastive@32"], plain, atol=1e-6)
    assert torch.allclose(wrapper.total(out.terms), plain, atol=1e-6)
    assert plain.item() > 0.1  # dropout views of a random model: far from a zero loss


def _by_hand(anchor, positive, negative, temperature=0.05) -> torch.Tensor:
    """Supervised SimCSE's loss written out: cos(anchor_i, [positives; negatives]_j) / tau, label i."""
    a, c = F.normalize(anchor, dim=-1), F.normalize(torch.cat([positive, negative]), dim=-1)
    return F.cross_entropy(a @ c.T / temperature, torch.arange(len(a)))


def test_two_dims_are_two_losses_from_one_encoder_pass(tiny_bert_dir):
    encoder = _encoder(tiny_bert_dir).eval()
    calls = []
    encoder.register_forward_hook(lambda module, args, output: calls.append(output.shape))
    wrapper = Matryoshka(SimCSE(supervised=True), dims=[32, 16], weights=[1.0, 0.5])
    wrapper.setup_for(encoder)
    batch = _triples(encoder, wrapper)
    out = wrapper(encoder, batch)
    assert calls == [torch.Size([18, 32])]  # anchors, positives and negatives of 6 triples, stacked: ONE pass
    assert set(out.terms) == {"contrastive@32", "contrastive@16"}

    calls.clear()
    with torch.no_grad():
        views = encoder(
            torch.cat([batch[k]["input_ids"] for k in ("anchor", "positive", "negative")]),
            torch.cat([batch[k]["attention_mask"] for k in ("anchor", "positive", "negative")]),
        ).chunk(3)
    full = _by_hand(*views)
    cut = _by_hand(*(v[:, :16] for v in views))
    assert torch.allclose(out["contrastive@32"], full, atol=1e-5)
    assert torch.allclose(out["contrastive@16"], cut, atol=1e-5)
    assert not torch.allclose(full, cut, atol=1e-3)  # the prefix is a different problem
    assert torch.allclose(wrapper.total(out.terms), full + 0.5 * cut, atol=1e-5)

    # both terms flow back through the one graph: the encoder's gradient is that of the sum
    wrapper.total(out.terms).backward()
    grad = encoder.backbone.embeddings.word_embeddings.weight.grad
    assert grad is not None and grad.abs().sum() > 0


def test_config_round_trip(tiny_bert_dir):
    """A checkpoint's record rebuilds the wrapper with the wrapped objective (plain dicts, no modules)."""
    wrapper = Matryoshka(BitextRetrieval(margin=0.2), dims=[32, 8], weights=[2.0, 1.0], weight=0.5)
    spec = wrapper.config()
    assert spec["init_args"]["objective"] == {
        "class_path": "unisent.objectives.bitext.BitextRetrieval",
        "init_args": BitextRetrieval(margin=0.2).config()["init_args"],
    }
    again = Matryoshka(**spec["init_args"])
    assert isinstance(again.objective, BitextRetrieval) and again.objective.margin == 0.2
    assert (again.dims, again.weights, again.weight, again.name) == ([32, 8], [2.0, 1.0], 0.5, "bitext")


def _doc_yaml() -> dict:
    text = (ROOT / "docs" / "training.md").read_text()
    section = text.split("## Matryoshka embeddings", 1)[1]
    return yaml.safe_load(re.search(r"```yaml\n(.*?)```", section, flags=re.S).group(1))


@pytest.mark.integration
def test_documented_yaml_trains(tmp_path, tiny_bert_dir):
    config = _doc_yaml()
    spec = config["model"]["objectives"][0]["init_args"]
    spec["dims"], spec["weights"] = [32, 16], [1.0, 0.5]  # the tiny model's hidden size is 32
    config["model"]["encoder"] = {"model": str(tiny_bert_dir), "pooler": "cls", "max_length": 32}
    config["data"]["train"]["simcse"]["path"] = str(ROOT / config["data"]["train"]["simcse"]["path"])
    config["data"]["batch_size"] = 8
    config["seed_everything"] = 1
    config["trainer"] = {
        "max_steps": 2,
        "log_every_n_steps": 1,
        "enable_progress_bar": False,
        "default_root_dir": str(tmp_path),
        "precision": "32-true",
        "logger": {
            "class_path": "lightning.pytorch.loggers.CSVLogger",
            "init_args": {"save_dir": str(tmp_path / "runs")},
        },
    }
    (tmp_path / "matryoshka.yaml").write_text(yaml.safe_dump(config))
    done = run_cli(["fit", "-c", "matryoshka.yaml"], cwd=tmp_path, env=dict(os.environ), timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    metrics = pd.read_csv(next((tmp_path / "runs").rglob("metrics.csv")))
    at32, at16 = metrics["train/simcse/contrastive@32"].dropna(), metrics["train/simcse/contrastive@16"].dropna()
    loss = metrics["train/loss"].dropna()
    assert len(at32) == len(at16) == len(loss) == 2
    assert (at32 > 0).all() and (at16 > 0).all()
    assert ((at32.to_numpy() + 0.5 * at16.to_numpy()) - loss.to_numpy()).__abs__().max() < 1e-4

    from unisent.lightning_module import UnisentModule

    module = UnisentModule.from_checkpoint(next(tmp_path.rglob("*.ckpt")))
    (objective,) = module.objectives
    assert isinstance(objective, Matryoshka) and isinstance(objective.objective, SimCSE)
    assert objective.dims == [32, 16] and objective.objective.supervised

    # the model card cites the wrapper's paper and the wrapped objective's
    out = tmp_path / "exported"
    last = next(tmp_path.rglob("last.ckpt"))
    done = run_cli(["export", last, "--format", "sentence-transformers", "--out", out], cwd=tmp_path, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    card = (out / "README.md").read_text(encoding="utf-8")
    cited = card.split("## Citation", 1)[1]
    assert "Matryoshka Representation Learning" in cited and "SimCSE: Simple Contrastive Learning" in cited
    assert "Citation: Kusupati" in card and "; Gao, Yao and Chen" in card


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"dims": []}, "strictly decreasing"),
        ({"dims": [16, 16]}, "strictly decreasing"),
        ({"dims": [16, 32]}, "strictly decreasing"),
        ({"dims": [32, 0]}, "strictly decreasing"),
        ({"dims": [32, 16], "weights": [1.0]}, "one weight >= 0 per dim"),
    ],
)
def test_bad_dims_and_weights(kwargs, message):
    with pytest.raises(ValueError, match=message) as err:
        Matryoshka(SimCSE(), **kwargs)
    assert "\n" not in str(err.value)


def test_dim_above_hidden_size(tiny_bert_dir):
    with pytest.raises(ValueError, match="dim 64 exceeds the encoder's hidden size 32") as err:
        Matryoshka(SimCSE(), dims=[64, 16]).setup_for(_encoder(tiny_bert_dir))
    assert "\n" not in str(err.value)


def test_gausscse_is_cut_mean_and_variance_together(tiny_bert_dir):
    """GaussCSE's head reads the whole pooled vector; at each dim the loss is the KL of the first d coordinates of
    every mean and variance (one encoder pass); ``point: pooled`` is refused (encode's vector would not be the
    one whose prefixes are trained)."""
    from unisent.losses.gaussian_kl import gauss_cse_loss

    encoder = _encoder(tiny_bert_dir).eval()
    calls = []
    encoder.register_forward_hook(lambda module, args, output: calls.append(output.shape))
    torch.manual_seed(0)
    wrapper = Matryoshka(GaussCSE(sets=["ent", "con", "rev"]), dims=[32, 8], weights=[1.0, 0.5])
    wrapper.setup_for(encoder)
    batch = _triples(encoder, wrapper)
    out = wrapper(encoder, batch)
    assert calls == [torch.Size([18, 32])] and set(out.terms) == {"contrastive@32", "contrastive@8"}
    assert not hasattr(wrapper.objective, "output_dim")  # the dim is an argument of loss_at, no state set per pass
    with torch.no_grad():
        keys = ("anchor", "positive", "negative")
        pooled = encoder(
            torch.cat([batch[k]["input_ids"] for k in keys]), torch.cat([batch[k]["attention_mask"] for k in keys])
        ).chunk(3)
        gaussians = [wrapper.objective.head(v) for v in pooled]
    settings = {"sets": ("ent", "con", "rev"), "temperature": 0.05, "reduction": "sum"}
    full = gauss_cse_loss(*gaussians, **settings)
    cut = gauss_cse_loss(*[(mu[:, :8], var[:, :8]) for mu, var in gaussians], **settings)
    assert torch.allclose(out["contrastive@32"], full, atol=1e-5)
    assert torch.allclose(out["contrastive@8"], cut, atol=1e-5)
    assert not torch.allclose(full, cut, atol=1e-3)
    with pytest.raises(ValueError, match="with point: pooled"):
        Matryoshka(GaussCSE(point="pooled"), dims=[16])


@pytest.mark.parametrize("objective", [CMLM, EASE], ids=lambda c: c.__name__)
def test_objectives_not_on_pooled_vectors_are_refused(objective):
    with pytest.raises(ValueError, match=rf"cannot wrap {objective.__name__}: its loss is not computed") as err:
        Matryoshka(objective(), dims=[16])
    assert "\n" not in str(err.value)
    with pytest.raises(ValueError, match="cannot wrap Matryoshka"):
        Matryoshka(Matryoshka(SimCSE(), dims=[16]), dims=[8])


def test_an_objective_written_for_the_old_flags_is_told_what_replaced_them():
    """``cache_ready``/``matryoshka_ready`` are gone: a class that still sets them and writes only ``forward`` gets
    one warning naming ``embed`` and ``loss``; a class with ``embed`` is in-batch whatever it sets."""
    from unisent.objectives import Objective

    with pytest.warns(UserWarning, match="cache_ready and matryoshka_ready no longer mean anything.*embed and loss"):

        class Old(Objective):
            cache_ready = True
            matryoshka_ready = True

            def forward(self, encoder, batch):
                return {}

    assert not Old().in_batch
    with pytest.raises(ValueError, match="cannot wrap Old: its loss is not computed from the vectors embed returns"):
        Matryoshka(Old(), dims=[8])
