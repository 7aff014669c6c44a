"""The task registry, ``evaluate`` end to end on the fixture data, the embedder, and the rendering."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest
import torch

from unisent.data.benchmark_readers import read_senteval_sts, read_snli, read_stsbenchmark
from unisent.evaluation import (
    GROUPS,
    TASKS,
    Embedder,
    Similarity,
    evaluate,
    format_markdown,
    get_task,
    kl_similarity,
    list_tasks,
    merge_results,
    symmetric_kl_similarity,
)
from unisent.evaluation.metrics import ProbeConfig, sts_correlation
from unisent.evaluation.tasks import (
    BuccTask,
    CrossValidatedProbeTask,
    Source,
    STSSubsetsTask,
    STSTask,
    resolve_tasks,
)
from unisent.resources import EVALUATION_DATA_DIR

# Tasks whose files are all in tests/evaluation/fixtures/data (one or more of every family).
FIXTURE_TASKS = [
    "stsb-dev",
    "stsb-test",
    "sick-r",
    "stsb-align-uniform",
    "stsb-multi-de",
    "stsb-multi-en",
    "sts17-en-en",
    "stc-agnews",
    "stc-searchsnippets",
    "stc-tweet",
    "mewsc16-pl",
    "tatoeba-deu",
    "bucc-de",
    "mr",
    "cr",
    "subj",
    "mpqa",
    "sst2",
    "trec",
    "mrpc",
    "sick-e",
    "snli-nli",
    "sick-nli",
    "snli-direction",
    "sick-direction",
    "xnli-de",
    "xnli-en",
    "pawsx-de",
]


def test_registry_names_and_groups() -> None:
    for name in ("stsb-dev", "stsb-test", "sick-r", "sts12", "sts16", "stsb-multi-de", "stc-agnews",
                 "stc-searchsnippets", "stc-stackoverflow", "stc-biomedical", "stc-tweet", "mewsc16-ja",
                 "tatoeba-deu", "mr", "cr", "subj", "mpqa", "sst2", "trec", "mrpc", "sick-e", "snli-nli",
                 "xnli-de", "pawsx-ja"):  # fmt: skip
        assert name in TASKS
    for group in ("sts", "stc", "transfer", "multilingual"):
        assert GROUPS[group]
    assert set(GROUPS["sts"]) == {"sts12", "sts13", "sts14", "sts15", "sts16", "stsb-test", "sick-r"}
    assert set(GROUPS["transfer"]) == {"mr", "cr", "subj", "mpqa", "sst2", "trec", "mrpc", "sick-e"}
    assert set(GROUPS["all"]) == set(TASKS)
    for task in TASKS.values():
        assert task.files() and all(not Path(f).is_absolute() for f in task.files())


def test_unknown_task_lists_valid_names() -> None:
    with pytest.raises(ValueError) as info:
        get_task("stsb-tset")
    message = str(info.value)
    assert "stsb-tset" in message and "stsb-test" in message and "transfer" in message
    with pytest.raises(ValueError, match="Groups: .*multilingual"):
        evaluate(object(), ["sts", "nope"], Path(__file__).parent)
    assert [t.name for t, _ in resolve_tasks("stsb-test, transfer")][:2] == ["stsb-test", "mr"]


def test_missing_data_file_names_the_path(tmp_path: Path, model) -> None:
    with pytest.raises(FileNotFoundError, match="data directory not found"):
        evaluate(model, ["stsb-test"], tmp_path / "nowhere")
    with pytest.raises(FileNotFoundError, match=r"sts/sick/SICK_test_annotated\.txt"):  # not bundled: no fallback
        evaluate(model, ["sick-r"], tmp_path)
    with pytest.raises(FileNotFoundError, match=r"sts/stsbenchmark/sts-test\.csv"):
        get_task("stsb-test").run(model, tmp_path)  # a task alone reads where it is told
    assert model.calls == []  # nothing was encoded
    # STS-B is bundled: a data directory without it reads the bundled copy, and the results say so
    out = evaluate(model, ["stsb-test"], tmp_path)
    assert out["config"]["bundled_data"] == {"stsb-test": str(EVALUATION_DATA_DIR)}
    assert out["config"]["data_dir"] == str(tmp_path)


def test_optional_tasks_skipped_in_groups_but_not_when_named(data_dir: Path, model) -> None:
    results = evaluate(model, ["sts"], data_dir, progress=False)
    assert set(results["tasks"]) == {"stsb-test", "sick-r"}
    assert set(results["skipped"]) == {"sts12", "sts13", "sts14", "sts15", "sts16"}
    assert "STS.input.MSRpar.txt" in results["skipped"]["sts12"]
    with pytest.raises(FileNotFoundError, match="STS.input.MSRpar.txt"):
        evaluate(model, ["sts12"], data_dir, progress=False)
    # a required task of a group with a missing file is an error, not a skip
    with pytest.raises(FileNotFoundError, match=r"stackoverflow\.txt"):
        evaluate(model, ["stc"], data_dir, progress=False)


@pytest.fixture
def fast_probes(monkeypatch: pytest.MonkeyPatch) -> None:
    """Registered probe tasks with 2 folds and a 2-value C grid, to keep the fixture run fast."""
    fast = ProbeConfig(c_grid=(0.1, 1.0), kfold=2, inner_kfold=2, max_iter=200)
    for name, task in list(TASKS.items()):
        if hasattr(task, "probe"):
            monkeypatch.setitem(TASKS, name, dataclasses.replace(task, probe=fast))


def test_evaluate_every_family_on_fixtures(data_dir: Path, model, fast_probes) -> None:
    results = evaluate(model, FIXTURE_TASKS, data_dir, batch_size=8, progress=False)
    assert list(results["tasks"]) == FIXTURE_TASKS
    for name, entry in results["tasks"].items():
        assert entry["score"] == entry["metrics"][entry["main_metric"]], name
        assert all(isinstance(v, float) for v in entry["metrics"].values()), name
        assert not np.isnan(entry["score"]), name
    tasks = results["tasks"]
    assert tasks["tatoeba-deu"]["metrics"]["n_pairs"] == 10
    assert tasks["mrpc"]["metrics"].keys() >= {"accuracy", "f1", "C"}
    assert tasks["sst2"]["metrics"].keys() >= {"accuracy", "dev_accuracy"}
    assert tasks["snli-nli"]["metrics"].keys() >= {"accuracy", "pr_auc", "average_precision", "threshold"}
    assert tasks["snli-direction"]["score"] == 0.0  # cosine is symmetric: every pair ties
    assert "direction_var" not in tasks["snli-direction"]["metrics"]
    assert tasks["stsb-align-uniform"]["metrics"].keys() >= {"alignment", "uniformity"}
    assert 0 <= tasks["bucc-de"]["score"] <= 100
    assert "transfer" in results["groups"] and results["groups"]["transfer"]["n_tasks"] == 8
    json.dumps(results)  # the CLI writes it as JSON


def test_sts_task_matches_reader_and_metric(data_dir: Path, model) -> None:
    data = read_stsbenchmark(data_dir / "sts/stsbenchmark/sts-test.csv")
    a = torch.as_tensor(model.encode(data.sentences1))
    b = torch.as_tensor(model.encode(data.sentences2))
    expected = sts_correlation(torch.nn.functional.cosine_similarity(a, b), data.scores)["spearman"]
    result = get_task("stsb-test").run(model, data_dir)
    assert result["spearman"] == pytest.approx(expected, abs=1e-6)


def test_sts_subsets_task_concatenates_subsets(data_dir: Path, model) -> None:
    folder = "sts/STS12-en-test"
    source = Source((f"{folder}/STS.input.MSRvid.txt", f"{folder}/STS.gs.MSRvid.txt"), read_senteval_sts)
    task = STSSubsetsTask(name="sts-demo", group="sts", description="demo", subsets=(("a", source), ("b", source)))
    result = task.run(model, data_dir)
    single = STSTask(name="one", group="sts", description="demo", source=source).run(model, data_dir)
    assert result["spearman_a"] == pytest.approx(single["spearman"])
    assert result["spearman_mean"] == pytest.approx(single["spearman"])
    assert result["n_pairs"] == 14


def test_embedder_deduplicates_sorts_and_caches(model) -> None:
    embedder = Embedder(model, batch_size=4)
    sentences = ["b", "a longer sentence", "b", "c"]
    out = embedder.encode(sentences)
    assert out.shape == (4, model.dim) and out.dtype == torch.float32
    assert torch.equal(out[0], out[2])
    assert model.calls == [["a longer sentence", "b", "c"]]  # each sentence once, longest first
    assert torch.allclose(out[1], torch.as_tensor(model.encode(["a longer sentence"]))[0])
    again = embedder.encode(["c", "d"])
    assert model.calls[-1] == ["d"] and torch.equal(again[0], out[3])
    with pytest.raises(ValueError, match="empty"):
        embedder.encode([])


def test_embedder_cache_is_bounded(model) -> None:
    embedder = Embedder(model, cache_size=2)
    embedder.encode(["one", "two", "three"])  # encoded (and cached) longest first: three, one, two
    embedder.encode(["three"])
    assert model.calls[-1] == ["three"]  # evicted first-in-first-out
    embedder.encode(["two"])
    assert len(model.calls) == 2  # still cached


def test_embedder_rejects_bad_model_output() -> None:
    class Broken:
        def encode(self, sentences, batch_size=64):
            return np.zeros((len(sentences) + 1, 3))

    with pytest.raises(ValueError, match=r"returned shape \(3, 3\) for 2 sentences"):
        Embedder(Broken()).encode(["x", "y"])
    with pytest.raises(TypeError, match="encode_gaussian"):
        Embedder(Broken(), similarity=Similarity("kl", kl_similarity, gaussian=True))


def test_zero_shot_probe_trained_once_for_all_languages(data_dir: Path, model, fast_probes) -> None:
    embedder = Embedder(model)
    get_task("xnli-en").run(model, data_dir, embedder=embedder)
    trained = len(embedder.memo)
    get_task("xnli-de").run(model, data_dir, embedder=embedder)
    assert trained == 1 and len(embedder.memo) == 1


def test_gaussian_similarity_end_to_end(data_dir: Path, gaussian_model) -> None:
    results = evaluate(
        gaussian_model,
        ["stsb-test", "snli-nli", "snli-direction"],
        data_dir,
        progress=False,
        similarity=Similarity("kl", kl_similarity, gaussian=True),
    )
    direction = results["tasks"]["snli-direction"]["metrics"]
    # the fake variance grows with the word count: "premise has the larger variance" = "premise is longer"
    snli = read_snli(data_dir / "nli/snli", "test")
    pairs = [(p, h) for p, h, y in zip(snli.sentences1, snli.sentences2, snli.labels) if y == "entailment"]
    longer = sum(len(p.split()) > len(h.split()) for p, h in pairs)
    assert direction["direction_var"] == pytest.approx(100.0 * longer / len(pairs))
    assert direction["n_pairs"] == len(pairs)
    # by length relation (the fake model has no tokenizer: whitespace words): by variance it is the length
    # rule, right on every pair whose premise is longer and on none of the others
    equal = sum(len(p.split()) == len(h.split()) for p, h in pairs)
    assert direction["share_premise_longer"] == pytest.approx(100.0 * longer / len(pairs))
    assert direction["share_equal_length"] == pytest.approx(100.0 * equal / len(pairs))
    assert direction["direction_var_premise_longer"] == 100.0
    if longer < len(pairs):
        assert direction["direction_var_hypothesis_not_shorter"] == 0.0
    assert "direction_sim_premise_longer" in direction
    assert results["config"]["similarity"] == "kl"
    sym = Similarity("kl-sym", symmetric_kl_similarity, gaussian=True)
    assert evaluate(gaussian_model, ["stsb-test"], data_dir, progress=False, similarity=sym)["tasks"]


def test_direction_defaults_to_kl_on_a_gaussian_model(data_dir: Path, gaussian_model, model) -> None:
    """No similarity named: direction tasks read a Gaussian model's KL (cosine would score every pair a tie), the
    other tasks cosine; a similarity named is every task's, and a model without a Gaussian head keeps cosine."""
    tasks = ["stsb-test", "snli-direction"]
    default = evaluate(gaussian_model, tasks, data_dir, progress=False)
    kl = evaluate(gaussian_model, tasks, data_dir, progress=False, similarity="kl")
    cosine = evaluate(gaussian_model, tasks, data_dir, progress=False, similarity="cosine")
    assert default["tasks"]["snli-direction"]["metrics"] == kl["tasks"]["snli-direction"]["metrics"]
    assert default["tasks"]["snli-direction"]["score"] > 0.0
    assert cosine["tasks"]["snli-direction"]["score"] == 0.0
    assert default["tasks"]["stsb-test"]["score"] == cosine["tasks"]["stsb-test"]["score"]
    assert default["tasks"]["stsb-test"]["score"] != kl["tasks"]["stsb-test"]["score"]
    assert default["config"]["similarity"] == "cosine"
    assert default["config"]["similarity_by_task"] == {"snli-direction": "kl"}
    assert "snli-direction: scored with kl" in format_markdown(default)
    assert "similarity_by_task" not in kl["config"] and "similarity_by_task" not in cosine["config"]
    plain = evaluate(model, tasks, data_dir, progress=False)
    assert "similarity_by_task" not in plain["config"] and plain["tasks"]["snli-direction"]["score"] == 0.0
    assert get_task("snli-direction").run(gaussian_model, data_dir) == default["tasks"]["snli-direction"]["metrics"]


def test_custom_task_with_custom_probe(data_dir: Path, model) -> None:
    from functools import partial

    from unisent.data.benchmark_readers import read_binary_files

    task = CrossValidatedProbeTask(
        name="mr-fast",
        group="transfer",
        description="MR with 2 folds",
        source=Source(
            ("senteval/rt-polarity.pos", "senteval/rt-polarity.neg"),
            partial(read_binary_files, encoding="latin-1"),
        ),
        probe=ProbeConfig(kfold=2, inner_kfold=2),
    )
    result = task.run(model, data_dir)
    assert result["n"] == 24 and 0 <= result["accuracy"] <= 100
    bucc = BuccTask(
        name="bucc-demo",
        group="bucc",
        description="demo",
        source=get_task("bucc-de").sources()[0],
        k=2,
    )
    assert bucc.run(model, data_dir)["n_gold"] == 8


def test_format_markdown_and_list_tasks(data_dir: Path, model) -> None:
    results = evaluate(model, ["stsb-test", "sick-r", "sts12", "mr"][:2], data_dir, progress=False)
    text = format_markdown(results)
    assert "| stsb-test | spearman |" in text and "### sts" in text
    assert f"{results['tasks']['stsb-test']['score']:.2f}" in text
    assert "| sts | spearman |" in text  # the group mean of stsb-test and sick-r
    roundtrip = format_markdown(json.loads(json.dumps(results)))
    assert roundtrip == text
    listing = list_tasks(data_dir)
    assert "stsb-test" in listing and "tatoeba-deu" in listing and "multilingual" in listing
    assert "[optional, missing]" in listing and "[ok]" in listing


def test_merge_results(data_dir: Path, model) -> None:
    first = evaluate(model, ["stsb-test"], data_dir, progress=False)
    second = evaluate(model, ["sts"], data_dir, progress=False)
    merged = merge_results(first, second)
    assert list(merged["tasks"]) == ["stsb-test", "sick-r"]
    assert merged["groups"]["sts"]["n_tasks"] == 2 and "sts12" in merged["skipped"]
    assert merged["config"] == first["config"]
