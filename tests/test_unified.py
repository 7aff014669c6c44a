"""The unified recipe (recipes/unified/minilm-cpu.yaml): GaussCSE, EASE, the AMR objective, CMLM and its
bitext term train ONE encoder in one run. On the tiny BERT and the bundled samples:

- every objective gets a batch of its own data at every step, every loss term is finite and sends
  gradient into the shared encoder (and into the objective's own head where it has one);
- the per-objective logs (terms, batch sizes, forward-time shares) are written;
- ``fit`` -> ``encoder/`` -> ``unisent.load`` gives the trained model exactly (a Gaussian head with
  the pooled vector as ``encode``, the AMR vocabulary in the tokenizer), and the
  sentence-transformers export embeds as ``unisent.load`` does.
"""

from __future__ import annotations

import csv
import sys
from pathlib import Path

import pytest
import torch
import yaml

ROOT = Path(__file__).resolve().parents[1]
RECIPE = ROOT / "recipes" / "unified" / "minilm-cpu.yaml"
SENTENCES = ["A man is playing a guitar.", "The little prince asked for a sheep.", "Bonn liegt am Rhein."]

pytestmark = pytest.mark.usefixtures("one_thread")


def test_the_recipe_keeps_each_objectives_own_data_batch_and_length():
    config = yaml.safe_load(RECIPE.read_text(encoding="utf-8"))
    names = [o["class_path"].rsplit(".", 1)[-1] for o in config["model"]["objectives"]]
    assert names == ["GaussCSE", "EASE", "AMRSimCSE", "CMLM", "BitextRetrieval"]
    train = config["data"]["train"]
    assert set(train) == set(config["data"]["batch_size"]) == {"gausscse", "ease", "amr", "cmlm", "bitext"}
    for source in train.values():  # every file is bundled: the recipe runs on a clean checkout
        assert (ROOT / source["path"]).is_file(), source["path"]
    assert "amr_lpp16_train" in train["amr"]["path"]  # the v1.6 TRAINING split: its test split stays held out


def test_every_term_of_every_objective_is_finite_and_gets_gradient(tiny_unified, tmp_path, monkeypatch):
    from unisent.commands.train import TRAINER_DEFAULTS, UnisentCLI
    from unisent.data import UnisentDataModule
    from unisent.lightning_module import UnisentModule
    from unisent.objectives import ObjectiveOutput

    monkeypatch.setattr(sys, "argv", ["unisent"])
    cli = UnisentCLI(
        UnisentModule,
        UnisentDataModule,
        trainer_defaults=TRAINER_DEFAULTS,
        auto_configure_optimizers=False,
        save_config_callback=None,
        run=False,
        args=["-c", str(tiny_unified(reverse=True)), "--trainer.logger=false"],
    )
    module, datamodule = cli.model, cli.datamodule
    # AMR extends the vocabulary before CMLM sizes its MLM head by it, whatever the order in the recipe
    vocabulary = module.encoder.backbone.get_input_embeddings().weight.shape[0]
    cmlm = next(o for o in module.objectives if o.name == "cmlm")
    amr = next(o for o in module.objectives if o.name == "amr")
    assert amr.added_symbols and cmlm.head.bias.shape[0] == vocabulary == len(module.encoder.tokenizer)

    datamodule.attach(module)
    datamodule.setup("fit")
    batch, _, _ = next(iter(datamodule.train_dataloader()))
    assert set(batch) == {"gausscse", "ease", "amr", "cmlm", "bitext"}
    module.train()
    encoder_params = [p for p in module.encoder.parameters() if p.requires_grad]
    checked = 0
    for objective in module.objectives:
        out = ObjectiveOutput.of(objective(module.encoder, batch[objective.name]))
        own = [p for p in objective.parameters() if p.requires_grad]
        for term, value in out.terms.items():
            assert torch.isfinite(value), (objective.name, term, value)
            grads = torch.autograd.grad(value, encoder_params + own, retain_graph=True, allow_unused=True)
            reach = sum(float(g.abs().sum()) for g in grads[: len(encoder_params)] if g is not None)
            if getattr(objective, "encoder_grad", 1.0) == 0:  # the recipe's GaussCSE trains only its head
                assert reach == 0, f"{objective.name}/{term} has encoder_grad 0 but reaches the encoder"
                assert all(g is not None and g.abs().sum() > 0 for g in grads[len(encoder_params) :]), objective.name
            else:
                assert reach > 0, f"{objective.name}/{term} sends no gradient into the shared encoder"
            if own and term != "contrastive":  # the entity term, the Gaussian loss, the MLM, the bitext term
                assert any(g is not None and g.abs().sum() > 0 for g in grads[len(encoder_params) :]), (
                    objective.name,
                    term,
                )
            checked += 1
    # gausscse/contrastive, ease/{entity, contrastive}, amr/contrastive, cmlm/mlm, bitext/retrieval
    assert checked == 6


@pytest.mark.integration
def test_fit_logs_every_objective_and_save_load_encode_is_exact(unisent_cli, tiny_unified, tmp_path, monkeypatch):
    import unisent
    from unisent.models import GaussianEncoder

    monkeypatch.chdir(ROOT)
    unisent_cli("fit", "-c", str(tiny_unified()))
    run = tmp_path / "runs" / "unified" / "version_0"
    rows = list(csv.DictReader((run / "metrics.csv").open(encoding="utf-8")))
    columns = set(rows[0])
    for name in ("gausscse", "ease", "amr", "cmlm", "bitext"):
        assert f"train/{name}/batch_size" in columns and f"train/{name}/forward_share" in columns, name
    steps = [r for r in rows if r.get("train/loss")]
    assert len(steps) == 4
    sizes = {float(r["train/ease/batch_size"]) for r in steps} | {float(r["train/amr/batch_size"]) for r in steps}
    assert sizes == {8.0, 4.0}  # each objective its own batch size
    shares = [
        sum(
            float(r[f"train/{n}/forward_share"])
            for n in ("gausscse", "ease", "amr", "cmlm")
            + (("bitext",) if r["train/bitext/forward_share"] not in ("", "nan") else ())
        )
        for r in steps
    ]
    assert all(abs(s - 1.0) < 1e-4 for s in shares), shares
    bitext = [r["train/bitext/retrieval"] for r in steps]
    assert all(v in ("", "nan") for v in bitext[:2]) and all(v not in ("", "nan") for v in bitext[2:])  # on at step 2

    model = unisent.load(run / "encoder")
    assert isinstance(model, GaussianEncoder) and model.point == "pooled"
    ckpt = unisent.load(run / "checkpoints" / "last.ckpt")
    torch.testing.assert_close(model.encode(SENTENCES), ckpt.encode(SENTENCES), rtol=0, atol=0)
    mu, var = model.encode_gaussian(SENTENCES)
    mu2, var2 = ckpt.encode_gaussian(SENTENCES)
    torch.testing.assert_close((mu, var), (mu2, var2), rtol=0, atol=0)
    assert bool((var > 0).all())
    # encode gives the pooled vector, not the mean
    torch.testing.assert_close(model.encode(SENTENCES), model.encoder.encode(SENTENCES), rtol=0, atol=0)
    assert not torch.allclose(model.encode(SENTENCES), mu)
    # an AMR graph is tokenised with the extended vocabulary after loading
    graph = "( want-01 :ARG0 ( boy ) :ARG1 ( go-02 :ARG0 boy ) )"
    added = set(model.tokenizer.get_added_vocab())
    assert {":ARG0", ":ARG1"} <= added and ":ARG0" in model.tokenizer.tokenize(graph)
    torch.testing.assert_close(model.encode([graph]), ckpt.encode([graph]), rtol=0, atol=0)
    # training-only parts stay out of the saved model
    saved = {p.name for p in (run / "encoder").iterdir()}
    assert not any("entit" in n or "mlm" in n for n in saved), saved


@pytest.mark.integration
def test_the_sentence_transformers_export_embeds_as_unisent_load(unisent_cli, tiny_unified, tmp_path, monkeypatch):
    import sentence_transformers  # the dev extra: a missing install fails, not skips

    import unisent

    monkeypatch.chdir(ROOT)
    unisent_cli("fit", "-c", str(tiny_unified(max_steps=2)))
    run = tmp_path / "runs" / "unified" / "version_0"
    out = tmp_path / "st"
    unisent_cli(
        "export", str(run / "checkpoints" / "last.ckpt"), "--format", "sentence-transformers", "--out", str(out)
    )
    ours = unisent.load(out).encode(SENTENCES)
    theirs = torch.as_tensor(sentence_transformers.SentenceTransformer(str(out), device="cpu").encode(SENTENCES))
    torch.testing.assert_close(theirs, ours, rtol=0, atol=1e-5)
    card = (out / "README.md").read_text(encoding="utf-8")
    for name in ("gausscse", "ease", "amr", "cmlm", "bitext"):
        assert name in card, name


def test_the_paper_scale_recipe_keeps_each_papers_global_batch_and_its_cpu_override_runs_the_samples(
    unisent_cli, capsys
):
    paper = yaml.safe_load((ROOT / "recipes/unified/bert-base.yaml").read_text(encoding="utf-8"))
    devices = yaml.safe_load((ROOT / "recipes/trainers/8xa100-ddp.yaml").read_text(encoding="utf-8"))["trainer"][
        "devices"
    ]
    # GaussCSE Table 3: 16; EASE Table 9: 64; AMR Sec. 6.2: 512; CMLM Sec. 3 and its bitext term: 2048
    assert {k: v * devices for k, v in paper["data"]["batch_size"].items()} == {
        "gausscse": 16,
        "ease": 64,
        "amr": 512,
        "cmlm": 2048,
        "bitext": 2048,
    }
    assert paper["trainer"]["precision"] == "bf16-mixed"
    unisent_cli(
        "fit",
        "-c",
        str(ROOT / "recipes/unified/bert-base.yaml"),
        "-c",
        str(ROOT / "recipes/overrides/unified-on-cpu.yaml"),
        "--print_config",
    )
    merged = yaml.safe_load(capsys.readouterr().out)
    assert merged["model"]["encoder"]["model"] == "minilm-l6" and merged["trainer"]["precision"] == "auto"
    for source in merged["data"]["train"].values():  # every file of the override is bundled
        assert (ROOT / source["path"]).is_file(), source["path"]
    ease = next(o for o in merged["model"]["objectives"] if o["class_path"].endswith("EASE"))["init_args"]
    # the paper's loss settings survive the override; only what needs the paper's data is swapped
    assert ease["entity_temperature"] == 100.0 and ease["hard_negative_weight"] == 1.0 and ease["wikipedia2vec"] is None
