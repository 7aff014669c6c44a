"""The knobs that let objectives of different papers share one encoder (docs/training.md, "Combining
objectives"): an objective's own learning rate for its head, a scaled encoder gradient, and
length-grouped batches for one objective only."""

from pathlib import Path

import pytest
import torch

from unisent.data import DataSource, UnisentDataModule
from unisent.encoders import EncoderConfig
from unisent.lightning_module import UnisentModule, parameter_groups
from unisent.objectives import GaussCSE, SimCSE
from unisent.optim import AdamW
from unisent.training_config import HeadsConfig, ScheduleConfig, TrainConfig

#: the repository's training, benchmark and test samples (not in the wheel)
SAMPLE_DIR = Path(__file__).resolve().parents[1] / "samples"


def _module(model_dir, **gauss):
    return UnisentModule(
        encoder=EncoderConfig(model=str(model_dir), pooler="mean"),
        objectives=[SimCSE(name="unsup"), GaussCSE(**gauss)],
        optimizer=lambda p: AdamW(p, lr=2e-5),
    )


def test_head_lr_puts_the_head_in_its_own_groups_and_nothing_else(tiny_model_dir):
    module = _module(tiny_model_dir, head_lr=3e-3)
    groups = parameter_groups(module.named_parameters(), module.objectives)
    head = {id(p) for p in module.objectives[1].head.parameters()}
    own = [g for g in groups if "lr" in g]
    assert {id(p) for g in own for p in g["params"]} == head
    assert all(g["lr"] == 3e-3 for g in own) and [g.get("weight_decay") for g in own] == [None, 0.0]
    everything = [id(p) for g in groups for p in g["params"]]
    assert sorted(everything) == sorted(id(p) for p in module.parameters())  # each parameter exactly once
    optimizer = module.optimizer_factory(groups)
    assert sorted({g["lr"] for g in optimizer.param_groups}) == [2e-5, 3e-3]
    plain = _module(tiny_model_dir)  # no head_lr: the two groups of before
    assert len(parameter_groups(plain.named_parameters(), plain.objectives)) == 2


def test_the_module_head_lr_gives_every_objectives_own_parameters_one_rate(tiny_model_dir):
    """model.train.heads.lr: one rate for the own parameters of every objective (a fifth one too), an objective's
    own head_lr still wins, a balancer's parameters keep theirs, and the encoder keeps the optimiser's."""
    from unisent.balancers import Uncertainty
    from unisent.objectives import EASE

    def build(gauss_lr=None, head_lr=None):
        return UnisentModule(
            encoder=EncoderConfig(model=str(tiny_model_dir), pooler="mean"),
            objectives=[GaussCSE(head_lr=gauss_lr), EASE(entity_dim=8)],
            optimizer=lambda p: AdamW(p, lr=2e-5),
            balancer=Uncertainty(lr=0.5),
            train=TrainConfig(heads=HeadsConfig(lr=head_lr)),
        )

    def lr_of(module):
        optimizer = module.optimizer_factory(module.optimizer_groups())
        return {id(p): g["lr"] for g in optimizer.param_groups for p in g["params"]}

    module = build(head_lr=1e-2)
    lrs = lr_of(module)
    gauss, ease = module.objectives
    assert {lrs[id(p)] for p in gauss.parameters()} == {1e-2}
    assert {lrs[id(p)] for p in ease.parameters()} == {1e-2} and len(list(ease.parameters())) > 0
    assert {lrs[id(p)] for p in module.encoder.parameters()} == {2e-5}
    assert {lrs[id(p)] for p in module.balancer.parameters()} == {0.5}
    assert len(lrs) == len(list(module.parameters()))  # each parameter in exactly one group
    mixed = build(gauss_lr=3e-3, head_lr=1e-2)  # GaussCSE's own head_lr wins over the module's
    lrs = lr_of(mixed)
    assert {lrs[id(p)] for p in mixed.objectives[0].parameters()} == {3e-3}
    assert {lrs[id(p)] for p in mixed.objectives[1].parameters()} == {1e-2}
    plain = build()  # unset: EASE's parameters learn at the optimiser's rate
    lrs = lr_of(plain)
    assert {lrs[id(p)] for p in plain.objectives[1].parameters()} == {2e-5}
    with pytest.raises(ValueError, match="model.train.heads.lr must be > 0"):
        build(head_lr=0.0)


def _grads(model_dir, encoder_grad):
    torch.manual_seed(0)
    module = _module(model_dir, encoder_grad=encoder_grad)
    module.eval()  # no dropout: the same forward for every setting
    objective = module.objectives[1]
    ids = torch.tensor([[2, 5, 6, 7, 3], [2, 8, 9, 3, 0], [2, 10, 11, 12, 3]])
    mask = (ids != 0).long()
    batch = {
        k: {"input_ids": ids.roll(i, 0), "attention_mask": mask.roll(i, 0)}
        for i, k in enumerate(("anchor", "positive"))
    }
    loss = objective(module.encoder, batch)["contrastive"]
    loss.backward()
    encoder = torch.cat(
        [p.grad.flatten() if p.grad is not None else torch.zeros(p.numel()) for p in module.encoder.parameters()]
    )
    head = torch.cat([p.grad.flatten() for p in objective.head.parameters()])
    return loss.detach(), encoder, head


def test_encoder_grad_scales_only_the_encoders_gradient(tiny_model_dir):
    loss1, enc1, head1 = _grads(tiny_model_dir, 1.0)
    loss_s, enc_s, head_s = _grads(tiny_model_dir, 0.1)
    loss0, enc0, head0 = _grads(tiny_model_dir, 0.0)
    assert enc1.abs().sum() > 0
    # scaled inside the chain rule, not after it: rounding differs where terms cancel, so the tolerance
    # is relative to the gradient's scale (a knob that did nothing would be off by 0.9 of it)
    torch.testing.assert_close(enc_s, 0.1 * enc1, rtol=1e-4, atol=1e-5 * float(0.1 * enc1.abs().max()))
    assert torch.count_nonzero(enc0) == 0  # the encoder ran without a graph for this objective
    for loss, head in ((loss_s, head_s), (loss0, head0)):
        torch.testing.assert_close(loss, loss1)
        torch.testing.assert_close(head, head1, rtol=1e-4, atol=1e-7)
    with pytest.raises(ValueError, match="encoder_grad must be in \\[0, 1\\]"):
        GaussCSE(encoder_grad=2.0)


def test_length_grouped_per_objective(tiny_model_dir, tmp_path):
    module = UnisentModule(
        encoder=EncoderConfig(model=str(tiny_model_dir), pooler="mean"),
        objectives=[SimCSE(name="unsup"), SimCSE(supervised=True, name="sup")],
    )
    train = {
        "unsup": DataSource(str(SAMPLE_DIR / "sentences.txt")),
        "sup": DataSource(str(SAMPLE_DIR / "nli_triples.jsonl")),
    }
    dm = UnisentDataModule(train=train, batch_size=8, length_grouped={"sup": True}, cache_dir=str(tmp_path)).attach(
        module
    )
    dm.setup("fit")
    dm._loader("unsup"), dm._loader("sup")
    assert dm.samplers["sup"].lengths is not None and dm.samplers["unsup"].lengths is None
    bad = UnisentDataModule(train=train, length_grouped={"supp": True}, cache_dir=str(tmp_path)).attach(module)
    with pytest.raises(ValueError, match="data.length_grouped names 'supp'.*objectives are: unsup, sup"):
        bad.setup("fit")


def test_length_input_head_reads_token_counts_in_training_and_after_loading(tiny_model_dir, tmp_path):
    import unisent
    from unisent.objectives import GaussianHead

    head = GaussianHead(8, length_input=True)
    with pytest.raises(ValueError, match="token count"):
        head(torch.zeros(2, 8))
    pooled = torch.randn(1, 8).repeat(2, 1)
    _, var = head(pooled, torch.tensor([4, 40]))
    assert not torch.allclose(var[0], var[1])  # same vector, other length: other variance
    module = _module(tiny_model_dir, length_input=True, point="pooled")
    model = module.inference_model().eval()
    sentences = ["a man plays .", "a man is playing a guitar on a stage tonight ."]
    mu, var = model.encode_gaussian(sentences)
    ids = module.encoder.tokenize_ids(sentences)
    from unisent.data.schema import pad_batch

    batch_ids, mask = pad_batch(ids, module.encoder.pad_token_id)
    with torch.no_grad():  # the training path: lengths from the batch's attention mask
        mu2, var2 = module.objectives[1].head(module.encoder(batch_ids, mask), mask.sum(dim=1))
    torch.testing.assert_close(var, var2, rtol=1e-4, atol=1e-6)
    loaded = unisent.load(str(model.save_pretrained(tmp_path / "g")))
    for a, b in zip(loaded.encode_gaussian(sentences), (mu, var)):
        torch.testing.assert_close(a, b)


def test_head_only_steps_hold_the_encoder_then_start_it_with_a_fresh_optimiser_state(tiny_model_dir, tmp_path):
    """model.train.heads.only_ratio=0.5 of 6 steps (LP-FT): for 3 optimiser steps the heads learn and the encoder
    does not (in eval mode); at step 3 the encoder starts, its AdamW state begun afresh, its warm-up over the remaining
    steps."""
    import lightning as L

    module = UnisentModule(
        encoder=EncoderConfig(model=str(tiny_model_dir), pooler="mean", max_length=24),
        objectives=[SimCSE(name="unsup"), GaussCSE(sets=["ent", "rev"])],
        optimizer=lambda p: AdamW(p, lr=1e-3),
        # only_ratio: of 6 steps, 3
        train=TrainConfig(schedule=ScheduleConfig(warmup_steps=2), heads=HeadsConfig(lr=1e-2, only_ratio=0.5)),
    )
    module.evaluation.val_tasks = []
    seen: list[dict] = []

    class Watch(L.Callback):
        def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
            optimizer = trainer.optimizers[0]
            first = next(pl_module.encoder.parameters())
            seen.append(
                {
                    "encoder": torch.cat([p.detach().flatten() for p in pl_module.encoder.parameters()]).clone(),
                    "head": torch.cat([p.detach().flatten() for p in pl_module.objectives[1].parameters()]).clone(),
                    "encoder_adam_step": float(optimizer.state.get(first, {}).get("step", 0)),
                    "lrs": sorted({g["lr"] for g in optimizer.param_groups if g.get("encoder")}),
                    "encoder_training": pl_module.encoder.training,
                    "head_training": pl_module.objectives[1].training,
                }
            )

    encoder0 = torch.cat([p.detach().flatten() for p in module.encoder.parameters()]).clone()
    head0 = torch.cat([p.detach().flatten() for p in module.objectives[1].parameters()]).clone()
    data = UnisentDataModule(
        train={
            "unsup": DataSource(str(SAMPLE_DIR / "sentences.txt"), max_records=64),
            "gausscse": DataSource(str(SAMPLE_DIR / "nli_triples.jsonl"), max_records=64),
        },
        batch_size=8,
        cache_dir=str(tmp_path),
    )
    trainer = L.Trainer(
        default_root_dir=tmp_path,
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        accelerator="cpu",
        max_steps=6,
        enable_checkpointing=False,
        callbacks=[Watch()],
    )
    trainer.fit(module, datamodule=data)
    assert len(seen) == 6
    for step in range(3):  # steps 0-2: the encoder exactly as loaded, the head moving
        assert torch.equal(seen[step]["encoder"], encoder0)
        assert not torch.equal(seen[step]["head"], head0 if step == 0 else seen[step - 1]["head"])
    assert not torch.equal(seen[3]["encoder"], encoder0) and not torch.equal(seen[4]["encoder"], seen[3]["encoder"])
    # the encoder's AdamW state counted 3 steps at rate 0, then began again at step 3
    assert [s["encoder_adam_step"] for s in seen] == [1.0, 2.0, 3.0, 1.0, 2.0, 3.0]
    # the rate after each step: 0 through step 2 (the scheduler has stepped to 1, 2, 3), then the warm-up of
    # 2 steps over the remaining 3: 1e-3 * (1/2, 1, then decay (3 - 2) / (3 - 2))
    assert [s["lrs"] for s in seen] == [[0.0], [0.0], [5e-4], [1e-3], [1e-3], [0.0]]
    # the encoder runs as at inference (no dropout) while only the heads learn, then in train mode
    assert [s["encoder_training"] for s in seen] == [False] * 3 + [True] * 3
    assert all(s["head_training"] for s in seen)
    with pytest.raises(ValueError, match="model.train.heads.only_steps must be >= 0"):
        HeadsConfig(only_steps=-1)
    with pytest.raises(ValueError, match=r"model.train.heads.only_ratio must be in \[0, 1\)"):
        HeadsConfig(only_ratio=1.0)


def test_a_gaussian_head_can_read_cls_while_the_encoder_pools_mean(tiny_model_dir, tmp_path):
    """GaussCSE's ``pooler: cls`` (the paper's [CLS]) under a ``mean`` encoder: the loss's views, the inference
    model's Gaussians and a reloaded model's all read the first token's state, ``encode`` stays the mean;
    GradCache passes the pooler on to its replay; a model file naming another pooler is refused, naming it."""
    import json

    import unisent
    from unisent.data.schema import pad_batch
    from unisent.objectives.grad_cache import CachedEncode

    module = _module(tiny_model_dir, pooler="cls", point="pooled")
    encoder, gauss = module.encoder, module.objectives[1]
    sentences = ["a man plays .", "a man is playing a guitar on a stage tonight ."]
    ids, mask = pad_batch(encoder.tokenize_ids(sentences), encoder.pad_token_id)
    encoder.eval()
    with torch.no_grad():
        cls = encoder.backbone(input_ids=ids, attention_mask=mask).last_hidden_state[:, 0]
        torch.testing.assert_close(encoder(ids, mask, pooler="cls"), cls)
        assert not torch.allclose(encoder(ids, mask), cls)  # the encoder's own vectors are the mean
        batch = {
            "anchor": {"input_ids": ids, "attention_mask": mask},
            "positive": {"input_ids": ids, "attention_mask": mask},
        }
        gauss.setup_for(encoder)
        views = gauss.embed(encoder, batch)
        torch.testing.assert_close(views[0], cls)
    model = module.inference_model().eval()
    mu, var = model.encode_gaussian(sentences)
    with torch.no_grad():
        expected = gauss.head(cls)
    torch.testing.assert_close(mu, expected[0], rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(var, expected[1], rtol=1e-4, atol=1e-6)
    torch.testing.assert_close(model.encode(sentences), encoder.encode(sentences))  # point: pooled, the mean
    saved = model.save_pretrained(tmp_path / "g")
    assert json.loads((saved / "gaussian_head.json").read_text())["pooler"] == "cls"
    for a, b in zip(unisent.load(str(saved)).encode_gaussian(sentences), (mu, var)):
        torch.testing.assert_close(a, b)
    cached = CachedEncode(encoder, chunk=1)
    leaf = cached(ids, mask, pooler="cls")
    torch.testing.assert_close(leaf.detach(), cls)
    (replayed, _), (second, _) = list(cached.replay([torch.ones_like(leaf)]))
    torch.testing.assert_close(torch.cat([replayed, second]).detach(), cls)
    settings = json.loads((saved / "gaussian_head.json").read_text())
    (saved / "gaussian_head.json").write_text(json.dumps(settings | {"pooler": "os.system"}))
    with pytest.raises(ValueError, match=r"gaussian_head\.json.*'os\.system' is not a built-in pooler without weights"):
        unisent.load(str(saved))
    with pytest.raises(ValueError, match="GaussCSE pooler: 'cls_mlp' is not a built-in pooler without weights"):
        GaussCSE(pooler="cls_mlp")
