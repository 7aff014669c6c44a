"""Evaluation as a Lightning callback: the scores it logs, its place in the CLI, and the encoding
sharded across processes (2 gloo processes score exactly as one)."""

from pathlib import Path

import lightning as L
import pytest
import torch
import torch.distributed as dist

from unisent.data import UnisentDataModule
from unisent.encoders import Encoder, EncoderConfig
from unisent.evaluation import evaluate
from unisent.evaluation.callback import (
    EvaluationCallback,
    ShardedModel,
    add_evaluation_callback,
    evaluate_config,
)
from unisent.lightning_module import UnisentModule
from unisent.objectives import GaussCSE
from unisent.resources import EVALUATION_DATA_DIR  # noqa: E402
from unisent.testing import run_distributed
from unisent.training_config import EvaluationConfig

#: the repository's training, benchmark and test samples (not in the wheel)
SAMPLE_DIR = Path(__file__).resolve().parents[1] / "samples"

SENTENCES = [
    "a man plays a guitar .",
    "two dogs run on the grass in the park .",
    "rain .",
    "the cat sleeps .",
    "a woman is slicing an onion on a wooden board .",
    "kids play football .",
    "the sun sets .",
]


def _models(model_dir):
    """A plain encoder and a Gaussian one, built the same way in every process."""
    torch.manual_seed(0)
    encoder = Encoder(EncoderConfig(model=str(model_dir), pooler="mean")).eval()
    gauss = GaussCSE()
    gauss.setup_for(encoder)
    return encoder, gauss.inference_model(encoder).eval()


class _Counting:
    """Records how many sentences each ``encode`` call of this process gets."""

    def __init__(self, model):
        self.model, self.calls = model, []

    def encode(self, sentences, batch_size=64, **kw):
        self.calls.append(len(sentences))
        return self.model.encode(sentences, batch_size, **kw)


def _flat(results):
    return {f"{task}/{metric}": value for task, r in results["tasks"].items() for metric, value in r["metrics"].items()}


def _sharded_worker(rank, world, model_dir):
    encoder, gaussian = _models(model_dir)
    counting = _Counting(encoder)
    sharded = ShardedModel(counting, rank, world)
    # fp32, as the evaluation encodes (its Embedder passes precision="fp32"): a spawned process has this machine's
    # CPU flags, not the tests' (conftest.py), and `auto` would be bf16 on a CPU with AVX512-BF16
    rows = {n: sharded.encode(SENTENCES[:n], batch_size=2, precision="fp32") for n in (1, 2, 7)}  # <, =, > ranks
    shard_sizes = list(counting.calls)
    mu, var = ShardedModel(gaussian, rank, world).encode_gaussian(SENTENCES, batch_size=3, precision="fp32")
    counting.calls.clear()
    scores = _flat(
        evaluate_config(counting, ["stsb-dev"], EvaluationConfig(batch_size=16), rank=rank, world_size=world)
    )
    encoded = [0] * world
    dist.all_gather_object(encoded, sum(counting.calls))  # sentences each process encoded for stsb-dev
    # numpy, not tensors: a tensor sent through torch's queue shares memory with a process that exits
    return {n: r.numpy() for n, r in rows.items()}, shard_sizes, (mu.numpy(), var.numpy()), scores, encoded


@pytest.mark.integration
@pytest.mark.distributed
def test_two_processes_shard_the_encoding_and_score_as_one(tiny_bert_dir):
    rows, shard_sizes, (mu, var), scores, encoded = run_distributed(_sharded_worker, str(tiny_bert_dir), world_size=2)
    encoder, gaussian = _models(tiny_bert_dir)
    for n, got in rows.items():
        torch.testing.assert_close(
            torch.from_numpy(got), encoder.encode(SENTENCES[:n], batch_size=2), rtol=1e-4, atol=1e-5
        )
    assert shard_sizes == [1, 1, 4]  # ceil(n / 2) sentences per process
    want_mu, want_var = gaussian.encode_gaussian(SENTENCES, batch_size=3)
    torch.testing.assert_close(torch.from_numpy(mu), want_mu, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(torch.from_numpy(var), want_var, rtol=1e-4, atol=1e-5)
    # the scores (x 100) equal one process's; the encodings differ only by float rounding (other batches,
    # another process's threads), which can reorder near-tied cosines of this random model: fresh-clone CI
    # runs saw 1.4e-4 on Spearman (Zen 3) and 3.8e-3 (Zen 4, AVX-512 kernels); a sentence lost or scored twice
    # by the sharding misaligns the pairs after it (far more than rounding) and changes n_pairs
    single = _flat(evaluate_config(encoder, ["stsb-dev"], EvaluationConfig(batch_size=16)))
    assert scores == pytest.approx(single, abs=2e-2)
    pairs = {k: v for k, v in scores.items() if k.endswith("n_pairs")}
    assert pairs and pairs == {k: v for k, v in single.items() if k.endswith("n_pairs")}
    # each process encoded about half of the distinct sentences (the rest came from the other one)
    assert abs(encoded[0] - encoded[1]) <= 1 and encoded[0] > 0


def test_sharded_model_checks_its_rank():
    with pytest.raises(ValueError, match="rank 2 of 2"):
        ShardedModel(object(), 2, 2)


def _trainer(tmp_path, **kw):
    return L.Trainer(
        default_root_dir=tmp_path,
        logger=L.pytorch.loggers.CSVLogger(tmp_path, name="run"),
        enable_progress_bar=False,
        enable_model_summary=False,
        accelerator="cpu",
        **kw,
    )


@pytest.mark.integration
def test_callback_logs_the_scores_of_the_modules_tasks(tiny_bert_dir, tmp_path):
    module = UnisentModule(
        encoder=EncoderConfig(model=str(tiny_bert_dir), pooler="mean"),
        evaluation=EvaluationConfig(val_tasks=["stsb-dev"], test_tasks=["stsb-test"], batch_size=16),
    )
    callback = EvaluationCallback()
    trainer = _trainer(tmp_path, callbacks=[callback])
    data = UnisentDataModule()
    [val] = trainer.validate(module, datamodule=data)
    [test] = trainer.test(module, datamodule=data)
    want = evaluate(
        module.inference_model(), ["stsb-dev", "stsb-test"], EVALUATION_DATA_DIR, batch_size=16, progress=False
    )["tasks"]
    # what is logged is what the callback computed (to float32, the logger's type) ...
    ran = {stage: callback_results["tasks"] for stage, callback_results in callback.last_results.items()}
    assert val["val/stsb-dev"] == pytest.approx(ran["val"]["stsb-dev"]["score"], abs=1e-5)
    assert val["val/score"] == pytest.approx(ran["val"]["stsb-dev"]["score"], abs=1e-5)
    assert val["val/stsb-dev/pearson"] == pytest.approx(ran["val"]["stsb-dev"]["metrics"]["pearson"], abs=1e-5)
    assert test["test/score"] == pytest.approx(ran["test"]["stsb-test"]["score"], abs=1e-5)
    # ... and that is the evaluation of the module's model: the tiny random model's cosines are near-tied, so
    # float32 noise between two encodings moves its spearman (by 1.9e-4 once in a full run): 1e-3
    assert val["val/stsb-dev"] == pytest.approx(want["stsb-dev"]["score"], abs=1e-3)
    assert val["val/stsb-dev/pearson"] == pytest.approx(want["stsb-dev"]["metrics"]["pearson"], abs=1e-3)
    assert test["test/score"] == pytest.approx(want["stsb-test"]["score"], abs=1e-3)
    assert callback.last_results["val"]["tasks"]["stsb-dev"]["main_metric"] == "spearman"
    # without the callback the loops run over the placeholder and log no score
    [plain] = _trainer(tmp_path).validate(module, datamodule=data)
    assert "val/score" not in plain


def test_callback_with_its_own_config_and_errors(tiny_bert_dir):
    callback = EvaluationCallback(EvaluationConfig(val_tasks=["stsb-test"]))
    module = UnisentModule(encoder=EncoderConfig(model=str(tiny_bert_dir)))
    assert callback._config(module).val_tasks == ["stsb-test"]
    with pytest.raises(ValueError, match="pass config=EvaluationConfig.*LightningModule has none"):
        EvaluationCallback()._config(L.LightningModule())


def test_the_cli_helper_adds_one_callback_only_when_tasks_are_asked_for(tiny_bert_dir):
    module = UnisentModule(encoder=EncoderConfig(model=str(tiny_bert_dir)))
    trainer = L.Trainer(accelerator="cpu", logger=False, enable_progress_bar=False)
    added = add_evaluation_callback(trainer, module)
    assert isinstance(added, EvaluationCallback) and added in trainer.callbacks
    assert add_evaluation_callback(trainer, module) is None  # one is enough
    none = UnisentModule(
        encoder=EncoderConfig(model=str(tiny_bert_dir)), evaluation=EvaluationConfig(val_tasks=[], test_tasks=[])
    )
    bare = L.Trainer(accelerator="cpu", logger=False, enable_progress_bar=False)
    assert add_evaluation_callback(bare, none) is None
    assert not any(isinstance(c, EvaluationCallback) for c in bare.callbacks)
