import math
from pathlib import Path

import lightning as L
import pytest
import torch
from torch.distributions import Independent, Normal, kl_divergence

import unisent
from unisent.data import UnisentDataModule
from unisent.encoders import EncoderConfig
from unisent.lightning_module import UnisentModule
from unisent.losses import gauss_cse_loss, gaussian_similarity_matrix, kl_matrix
from unisent.objectives import GaussCSE, GaussianEncoder, GaussianHead

#: the repository's training, benchmark and test samples (not in the wheel)
SAMPLE_DIR = Path(__file__).resolve().parents[1] / "samples"


def _gauss(n, d=6, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(n, d, generator=g), torch.rand(n, d, generator=g) + 0.2


def test_kl_matrix_matches_torch_distributions():
    (mu_a, var_a), (mu_b, var_b) = _gauss(4, seed=1), _gauss(3, seed=2)
    got = kl_matrix(mu_a, var_a, mu_b, var_b)
    for i in range(4):
        for j in range(3):
            p = Independent(Normal(mu_a[i], var_a[i].sqrt()), 1)
            q = Independent(Normal(mu_b[j], var_b[j].sqrt()), 1)
            assert got[i, j].item() == pytest.approx(kl_divergence(p, q).item(), abs=1e-5)


def test_similarity_sum_and_mean_forms():
    (mu_a, var_a), (mu_b, var_b) = _gauss(2, seed=3), _gauss(2, seed=4)
    s = gaussian_similarity_matrix(mu_a, var_a, mu_b, var_b, "sum")
    torch.testing.assert_close(s, 1 / (1 + kl_matrix(mu_a, var_a, mu_b, var_b)))
    m = gaussian_similarity_matrix(mu_a, var_a, mu_b, var_b, "mean")
    kl_d = 0.5 * (torch.log(var_b[1] / var_a[0]) + (var_a[0] + (mu_a[0] - mu_b[1]) ** 2) / var_b[1] - 1)
    assert m[0, 1].item() == pytest.approx((1 / (1 + kl_d)).mean().item(), rel=1e-5)
    same = gaussian_similarity_matrix(mu_a, var_a, mu_a, var_a)
    torch.testing.assert_close(same.diagonal(), torch.ones(2))


def _sim(a, b):  # sim(a || b) for one pair, from torch.distributions
    kl = kl_divergence(Independent(Normal(a[0], a[1].sqrt()), 1), Independent(Normal(b[0], b[1].sqrt()), 1))
    return 1 / (1 + kl.item())


@pytest.mark.parametrize("sets", [("ent",), ("ent", "con"), ("ent", "rev"), ("ent", "con", "rev")])
def test_loss_matches_hand_computation_of_eq4(sets):
    n, tau = 3, 0.05
    pre, ent, con = _gauss(n, seed=5), _gauss(n, seed=6), _gauss(n, seed=7)
    row = lambda x, i: (x[0][i], x[1][i])  # noqa: E731
    expected = 0.0
    for i in range(n):
        num = math.exp(_sim(row(ent, i), row(pre, i)) / tau)
        den = sum(math.exp(_sim(row(ent, j), row(pre, i)) / tau) for j in range(n))
        if "con" in sets:
            den += sum(math.exp(_sim(row(con, j), row(pre, i)) / tau) for j in range(n))
        if "rev" in sets:
            den += sum(math.exp(_sim(row(pre, j), row(ent, i)) / tau) for j in range(n))
        expected += -math.log(num / den) / n
    got = gauss_cse_loss(pre, ent, con, sets=sets, temperature=tau)
    assert got.item() == pytest.approx(expected, rel=1e-5)


def test_bad_sets_are_rejected():
    with pytest.raises(ValueError, match="must contain 'ent'"):
        GaussCSE(sets=["rev"])
    with pytest.raises(ValueError, match="must contain 'ent'"):
        GaussCSE(sets=["ent", "swap"])


def test_head_variances_are_positive_for_every_parametrisation():
    x = torch.randn(5, 8) * 30
    for kind in ("exp", "softplus", "elu"):
        mu, var = GaussianHead(8, variance=kind)(x)
        assert (var > 0).all() and torch.isfinite(var).all() and mu.shape == (5, 8)


def test_training_bf16_has_no_nan_and_saved_model_round_trips(tiny_bert_dir, tmp_path):
    module = UnisentModule(
        encoder=EncoderConfig(model=str(tiny_bert_dir), pooler="cls"), objectives=[GaussCSE(sets=["ent", "con", "rev"])]
    )
    data = UnisentDataModule(train={"gausscse": str(SAMPLE_DIR / "nli_triples.jsonl")}, batch_size=8)
    trainer = L.Trainer(
        max_steps=4,
        precision="bf16-mixed",
        logger=False,
        enable_progress_bar=False,
        enable_checkpointing=False,
        default_root_dir=tmp_path,
        limit_val_batches=0,
    )
    trainer.fit(module, datamodule=data)
    assert torch.isfinite(trainer.callback_metrics["train/loss"])
    model = module.inference_model()
    assert isinstance(model, GaussianEncoder)
    sents = ["a man is playing a guitar .", "a person plays music ."]
    mu, var = model.encode_gaussian(sents)
    assert torch.isfinite(mu).all() and (var > 0).all()
    saved = model.save_pretrained(tmp_path / "g")
    loaded = unisent.load(str(saved))
    assert isinstance(loaded, GaussianEncoder)
    for a, b in zip(loaded.encode_gaussian(sents), (mu, var)):
        torch.testing.assert_close(a, b)
    ckpt = tmp_path / "g.ckpt"
    trainer.save_checkpoint(ckpt)
    torch.testing.assert_close(unisent.load(str(ckpt)).encode_gaussian(sents)[1], var)


def test_the_gaussian_head_computes_in_float32_under_bf16_autocast():
    """The variance is exp of the head's output: under bf16 autocast the head still runs in float32, so its
    outputs are those of a float32 call on the same (bf16-rounded) input, and differ from a bf16 matmul's."""
    from unisent.models.gaussian import GaussianHead

    torch.manual_seed(0)
    head = GaussianHead(64)
    with torch.no_grad():
        head.var.weight.mul_(20.0)  # log-variances of several units, where bf16's steps are coarse
    pooled = torch.randn(8, 64).bfloat16()  # an encoder under autocast may hand over bf16 vectors
    with torch.no_grad():
        expected = head(pooled.float())
        with torch.autocast("cpu", dtype=torch.bfloat16):
            mu, var = head(pooled)
        assert mu.dtype == var.dtype == torch.float32
        assert torch.equal(mu, expected[0]) and torch.equal(var, expected[1])
        # what the head computed before: its layers under autocast (bf16 outputs), exp after
        with torch.autocast("cpu", dtype=torch.bfloat16):
            raw = head.var(pooled).float()
        assert (torch.exp(raw) + 1e-6 - var).abs().max() / var.abs().max() > 1e-3
