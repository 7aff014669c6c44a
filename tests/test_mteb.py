"""MTEB on unisent models: the adapter in MTEB's encoder protocol, with MTEB's own evaluator, on local
data built from the bundled STS-B test file, gives the score ``unisent evaluate --tasks stsb-test`` gives."""

from __future__ import annotations

import json

import pytest
import torch

from unisent.cli import main
from unisent.encoders import Encoder, EncoderConfig
from unisent.evaluation import evaluate
from unisent.integrations.mteb import MTEBDataError, MTEBEncoder, run_tasks, write_sts_dataset
from unisent.models import GaussianEncoder, GaussianHead
from unisent.resources import EVALUATION_DATA_DIR

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def mteb_data(tmp_path_factory):
    """MTEB's STSBenchmark test split, written from the bundled STS-B test file (no download)."""
    root = tmp_path_factory.mktemp("mteb-data")
    path = write_sts_dataset("stsb-test", root / "STSBenchmark")
    rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
    assert len(rows) == 1379 and set(rows[0]) == {"sentence1", "sentence2", "score"}
    return root


@pytest.mark.integration
def test_mteb_sts_through_the_cli_equals_unisent_evaluate(tiny_bert_dir, mteb_data, tmp_path, capsys):
    model = Encoder(EncoderConfig(model=str(tiny_bert_dir), pooler="mean", max_length=64))
    saved = model.save_pretrained(tmp_path / "model")
    main(
        [
            "evaluate",
            "--model",
            str(saved),
            "--tasks",
            "stsb-test",
            "--output",
            str(tmp_path / "unisent.json"),
            "--quiet",
        ]
    )
    main(
        [
            "evaluate",
            "--model",
            str(saved),
            "--mteb",
            "STSBenchmark",
            "--mteb-data",
            str(mteb_data),
            "--output",
            str(tmp_path / "mteb.json"),
            "--quiet",
        ]
    )
    ours = json.loads((tmp_path / "unisent.json").read_text())["tasks"]["stsb-test"]
    theirs = json.loads((tmp_path / "mteb.json").read_text())["tasks"]["STSBenchmark"]
    assert "| STSBenchmark | cosine_spearman |" in capsys.readouterr().out
    assert theirs["main_metric"] == "cosine_spearman" and theirs["task_type"] == "STS"
    print(f"tiny model: unisent stsb-test {ours['score']:.4f}, MTEB STSBenchmark {theirs['score']:.4f}")
    assert abs(theirs["score"] - ours["score"]) < 0.01
    assert abs(theirs["metrics"]["spearman"] - ours["score"]) < 0.01  # the model's similarity: cosine


@pytest.mark.integration
@pytest.mark.parametrize("similarity", ["kl", "kl_symmetric"])
def test_mteb_uses_the_gaussian_similarity_of_a_gausscse_model(similarity, tiny_bert_dir, mteb_data):
    torch.manual_seed(0)
    model = GaussianEncoder(
        Encoder(EncoderConfig(model=str(tiny_bert_dir), pooler="mean", max_length=64)), GaussianHead(32)
    ).eval()
    with torch.no_grad():  # variances that differ from sentence to sentence: a KL ranking that is not the cosine's
        model.head.var.weight.mul_(5.0)  # (with the fresh head's, the two Spearmans were 0.006-0.009 apart)
    ours = evaluate(model, ["stsb-test"], EVALUATION_DATA_DIR, batch_size=128, progress=False, similarity=similarity)
    theirs = run_tasks(model, ["STSBenchmark"], data_dir=mteb_data, similarity=similarity)["tasks"]["STSBenchmark"]
    score = ours["tasks"]["stsb-test"]["score"]
    metrics = theirs["metrics"]
    print(
        f"GaussCSE {similarity}: unisent {score:.4f}, MTEB {metrics['spearman']:.4f},",
        f"cosine {metrics['cosine_spearman']:.4f}",
    )
    assert abs(theirs["metrics"]["spearman"] - score) < 0.01
    assert abs(theirs["metrics"]["cosine_spearman"] - theirs["metrics"]["spearman"]) > 0.01  # not the cosine
    encoder = MTEBEncoder(model, similarity)
    emb = encoder.encode(
        [{"text": ["A man plays.", "A dog runs."]}], task_metadata=None, hf_split="test", hf_subset="default"
    )
    matrix = encoder.similarity(emb, emb[::-1].copy())
    torch.testing.assert_close(torch.diagonal(matrix), encoder.similarity_pairwise(emb, emb[::-1].copy()))


def test_a_dot_product_model_is_scored_with_the_dot_product(tiny_bert_dir):
    model = Encoder(EncoderConfig(model=str(tiny_bert_dir), pooler="mean", similarity="dot"))
    encoder = MTEBEncoder(model)
    assert encoder.similarity_name == "dot" and encoder.mteb_model_meta.similarity_fn_name == "dot"
    a, b = torch.randn(3, 4), torch.randn(3, 4)
    torch.testing.assert_close(encoder.similarity(a.numpy(), b.numpy()), a @ b.T)
    with pytest.raises(ValueError, match="needs a Gaussian model"):
        MTEBEncoder(model, "kl")


def test_a_task_without_local_or_cached_data_fails_in_one_line(tiny_bert_dir, tmp_path):
    model = Encoder(EncoderConfig(model=str(tiny_bert_dir), pooler="mean"))
    with pytest.raises(MTEBDataError) as err:
        run_tasks(model, ["STS12"], data_dir=tmp_path)
    message = str(err.value)
    assert "\n" not in message and "MTEB task STS12" in message and "mteb/sts12-sts" in message
    assert f"{tmp_path}/STS12" in message and "--mteb-data" in message
    saved = model.save_pretrained(tmp_path / "model")
    with pytest.raises(SystemExit) as exit_:  # a message as the exit code: printed on stderr, status 1
        main(["evaluate", "--model", str(saved), "--mteb", "STS12", "--quiet"])
    code = exit_.value.code
    assert isinstance(code, str) and code.startswith("unisent evaluate: error: MTEB task STS12:") and "\n" not in code


@pytest.mark.slow
def test_minilm_scores_the_same_through_mteb_and_unisent_evaluate(mteb_data):
    import unisent

    model = unisent.load("minilm-l6")
    ours = evaluate(model, ["stsb-test"], EVALUATION_DATA_DIR, batch_size=128, progress=False)["tasks"]["stsb-test"][
        "score"
    ]
    theirs = run_tasks(model, ["STSBenchmark"], data_dir=mteb_data)["tasks"]["STSBenchmark"]["score"]
    print(f"all-MiniLM-L6-v2: unisent stsb-test {ours:.4f}, MTEB STSBenchmark {theirs:.4f}")
    assert abs(theirs - ours) < 0.01
