"""``snli-direction-sample``: the bundled 1,000 SNLI test entailment pairs (the quickstart's held-out test)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from unisent.evaluation import GROUPS, evaluate, get_task, list_tasks
from unisent.evaluation.similarities import get_similarity
from unisent.resources import EVALUATION_DATA_DIR, RESOURCES  # noqa: E402

#: the repository's training, benchmark and test samples (not in the wheel)
SAMPLE_DIR = Path(__file__).resolve().parents[2] / "samples"

SAMPLE = EVALUATION_DATA_DIR / "snli_test_entailment.tsv"
TRAINING = ("nli_triples.jsonl", "snli_dev_triples.jsonl")  # the bundled SNLI-dev training triples


def _pairs() -> list[tuple[str, str]]:
    rows = [line.split("\t") for line in SAMPLE.read_text(encoding="utf-8").splitlines()]
    assert all(len(row) == 3 and row[2] == "entailment" for row in rows)
    return [(premise, hypothesis) for premise, hypothesis, _ in rows]


def test_the_bundled_sample_is_held_out_from_the_training_triples() -> None:
    pairs = _pairs()
    assert len(pairs) == len(set(pairs)) == 1000
    training = {
        s.strip()
        for name in TRAINING
        if (SAMPLE_DIR / name).is_file()
        for line in (SAMPLE_DIR / name).read_text(encoding="utf-8").splitlines()
        for s in json.loads(line).values()
    }
    assert len(training) > 1000  # at least nli_triples.jsonl was read
    assert not {s for pair in pairs for s in pair} & training
    assert "snli_test_entailment.tsv" in (RESOURCES / "LICENSE.md").read_text(encoding="utf-8")


def test_the_task_reads_the_bundled_file_by_default(tmp_path: Path) -> None:
    task = get_task("snli-direction-sample")
    assert task.missing_files(EVALUATION_DATA_DIR) == [] and task.files() == ("snli_test_entailment.tsv",)
    assert task.main_metric == "direction_sim" and task.optional
    # not in the "nli" group (which runs the full SNLI/SICK test sets of a --data-dir), only in "all"
    assert "snli-direction-sample" not in GROUPS["nli"] and "snli-direction-sample" in GROUPS["all"]
    assert "snli-direction-sample" in list_tasks(str(EVALUATION_DATA_DIR))
    with pytest.raises(FileNotFoundError, match="snli-direction-sample"):
        task.check_files(tmp_path)  # another data directory does not have it: named explicitly it fails


def test_direction_on_the_sample_with_a_gaussian_model(gaussian_model, model) -> None:
    pairs = _pairs()
    # the fixture's variance grows with the word count: "the premise has the larger variance" is
    # "the premise is longer"
    longer = sum(len(p.split()) > len(h.split()) for p, h in pairs)
    results = evaluate(
        gaussian_model, ["snli-direction-sample"], EVALUATION_DATA_DIR, progress=False, similarity=get_similarity("kl")
    )
    metrics = results["tasks"]["snli-direction-sample"]["metrics"]
    assert metrics["n_pairs"] == 1000
    assert metrics["direction_var"] == pytest.approx(100.0 * longer / 1000)
    assert 50.0 < metrics["direction_var"] < 100.0  # SNLI premises are mostly the longer sentence
    assert 0.0 <= results["tasks"]["snli-direction-sample"]["score"] <= 100.0
    # a symmetric similarity (cosine) ties on every pair: 0, not chance
    cosine = evaluate(model, ["snli-direction-sample"], EVALUATION_DATA_DIR, progress=False)
    assert cosine["tasks"]["snli-direction-sample"]["score"] == 0.0


def test_evaluate_takes_a_similarity_by_name(gaussian_model) -> None:
    by_name = evaluate(gaussian_model, ["snli-direction-sample"], EVALUATION_DATA_DIR, progress=False, similarity="kl")
    by_object = evaluate(
        gaussian_model, ["snli-direction-sample"], EVALUATION_DATA_DIR, progress=False, similarity=get_similarity("kl")
    )
    assert by_name["config"]["similarity"] == "kl"
    assert (
        by_name["tasks"]["snli-direction-sample"]["metrics"] == by_object["tasks"]["snli-direction-sample"]["metrics"]
    )
