"""``unisent merge`` (unisent.merging): each method against a hand computation on tiny tensors; on runs of the
tiny BERT (EASE, the AMR objective, which adds tokens, and GaussCSE, with its head), the merged encoder is
the hand-computed combination of the runs' weights, every objective keeps its run's parameters, the model
loads with ``unisent.load``, scores on the panel and exports to Sentence Transformers and ONNX equal to 1e-5;
runs that cannot be merged are refused in one line before anything is written."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml

import unisent
from unisent.cli import main
from unisent.commands.fitting import fit
from unisent.lightning_module import UnisentModule
from unisent.merging import MergeError, merge_runs, merge_tensors

pytestmark = pytest.mark.usefixtures("one_thread")

SENTENCES = ["A man is playing a guitar.", "Two dogs run in the park.", "ok", "A woman slices an onion."]


# ------------------------------------------------------------------------------------ the arithmetic
def test_linear_is_the_weighted_mean():
    out = merge_tensors(None, [torch.tensor([1.0, 2.0]), torch.tensor([3.0, 6.0])], [1, 3], "linear")
    assert out.tolist() == [2.5, 5.0]  # (1 + 9) / 4, (2 + 18) / 4


def test_task_arithmetic_adds_the_weighted_task_vectors():
    base = torch.tensor([0.0, 1.0])
    runs = [torch.tensor([1.0, 2.0]), torch.tensor([3.0, -1.0])]  # task vectors [1, 1] and [3, -2]
    assert merge_tensors(base, runs, [1, 0.5], "task_arithmetic").tolist() == [2.5, 1.0]
    assert merge_tensors(base, runs, [1, 0.5], "task_arithmetic", scale=2.0).tolist() == [5.0, 1.0]


def test_ties_trims_elects_signs_and_averages_the_agreeing_entries():
    base = torch.zeros(5)
    first = torch.tensor([3.0, -1.0, 0.5, 2.0, -4.0])  # top 40%: 3 and -4
    second = torch.tensor([-2.0, 2.0, 1.0, 0.1, -1.0])  # top 40%: -2 and 2
    # signs of the sum of trimmed vectors [1, 2, 0, 0, -4]: +, +, none, none, -; entry 0 keeps only the 3
    out = merge_tensors(base, [first, second], [1, 1], "ties", density=0.4)
    assert out.tolist() == [3.0, 2.0, 0.0, 0.0, -4.0]
    # weights 1 and 3: weighted sums [-3, 6, 0, 0, -4] elect - at entry 0 (the second run's -2 alone)
    out = merge_tensors(base, [first, second], [1, 3], "ties", density=0.4)
    assert out.tolist() == [-2.0, 2.0, 0.0, 0.0, -4.0]
    # the start is added back, scaled merged vector
    shifted = merge_tensors(base + 1, [first + 1, second + 1], [1, 1], "ties", density=0.4, scale=0.5)
    assert shifted.tolist() == [2.5, 2.0, 1.0, 1.0, -1.0]


def test_dare_ties_drops_at_random_rescales_and_is_reproduced_by_its_seed():
    base = torch.zeros(20_000)
    run = torch.ones(20_000)
    out = merge_tensors(base, [run], [1], "dare_ties", density=0.25, generator=torch.Generator().manual_seed(7))
    assert set(out.unique().tolist()) == {0.0, 4.0}  # kept entries divided by the density
    assert abs(out.mean().item() - 1.0) < 0.05  # the expectation kept (DARE's rescale)
    again = merge_tensors(base, [run], [1], "dare_ties", density=0.25, generator=torch.Generator().manual_seed(7))
    other = merge_tensors(base, [run], [1], "dare_ties", density=0.25, generator=torch.Generator().manual_seed(8))
    assert torch.equal(out, again) and not torch.equal(out, other)
    # with every entry kept it is TIES without trimming
    first, second = torch.tensor([3.0, -1.0, 2.0]), torch.tensor([-2.0, 2.0, 1.0])
    dense = merge_tensors(torch.zeros(3), [first, second], [1, 1], "dare_ties", density=1.0)
    assert dense.tolist() == [3.0, 2.0, 1.5]


def test_a_method_that_needs_the_start_refuses_without_it():
    with pytest.raises(ValueError, match="needs the starting model"):
        merge_tensors(None, [torch.ones(2)], [1], "ties")
    with pytest.raises(ValueError, match="unknown merge method 'soup'"):
        merge_tensors(None, [torch.ones(2)], [1], "soup")


# ------------------------------------------------------------------------------------ runs
@pytest.fixture(scope="module")
def runs(tiny_bert_dir, tmp_path_factory) -> dict[str, Path]:
    """Runs of the tiny BERT from one start: EASE, the AMR objective (adds tokens), GaussCSE (a head), and GaussCSE
    with its head over its own copy of the top layer."""
    from tests.conftest import tiny_recipe_config

    root = tmp_path_factory.mktemp("merge-runs")
    recipe = Path(__file__).resolve().parents[1] / "recipes" / "unified" / "minilm-cpu.yaml"
    base = tiny_recipe_config(recipe, tiny_bert_dir, root, max_records=32)
    # the last: GaussCSE with its head over its own copy of the top layer (own_layers)
    names = [("EASE", "ease", {}), ("AMRSimCSE", "amr", {}), ("GaussCSE", "gausscse", {})]
    names.append(("GaussCSE", "gausscse-own", {"own_layers": 1}))
    folders = {}
    for cls, name, extra in names:
        config = yaml.safe_load(yaml.safe_dump(base))
        config["model"]["objectives"] = [o for o in config["model"]["objectives"] if o["class_path"].endswith(cls)]
        config["model"]["objectives"][0]["init_args"].update(extra)
        data_name = name.removesuffix("-own")
        config["data"]["train"] = {data_name: config["data"]["train"][data_name]}
        config["data"]["batch_size"] = 8
        config["data"]["cache_dir"] = str(root / "cache")
        config["data"].pop("length_grouped", None)
        config["model"]["train"]["weight_schedule"] = {}
        config["model"]["evaluation"]["val_tasks"] = []
        config["trainer"].update(max_steps=3, val_check_interval=None, enable_progress_bar=False)
        config["trainer"]["logger"] = {
            "class_path": "lightning.pytorch.loggers.CSVLogger",
            "init_args": {"save_dir": str(root / "runs"), "name": name, "version": "seed0"},
        }
        path = root / f"{name}.yaml"
        path.write_text(yaml.safe_dump(config, sort_keys=False), encoding="utf-8")
        fit([path], [])
        folders[name] = root / "runs" / name / "seed0"
    return folders


def _start(out: Path) -> UnisentModule:
    """The untrained model the merge's task vectors start from, rebuilt from the merged checkpoint's record."""
    from unisent.encoders import EncoderConfig
    from unisent.io import load_checkpoint
    from unisent.objectives import objective_from_record

    record = load_checkpoint(out / "checkpoints" / "last.ckpt")["unisent"]
    objectives = [objective_from_record(s, source="test", field="objectives") for s in record["objectives"]]
    return UnisentModule(encoder=EncoderConfig(**record["encoder"]), objectives=objectives)


def _state(folder: Path) -> dict[str, torch.Tensor]:
    return UnisentModule.from_checkpoint(folder / "checkpoints" / "last.ckpt").state_dict()


@pytest.mark.integration
def test_task_arithmetic_of_runs_by_hand_with_added_tokens_and_every_head_carried(runs, tmp_path):
    out = tmp_path / "merged"
    record = merge_runs([runs["ease"], runs["amr"]], out, method="task_arithmetic", weights=[1.0, 0.5])
    assert json.loads((out / "merge.json").read_text()) == record
    assert record["method"] == "task_arithmetic" and record["weights"] == [1.0, 0.5]
    assert len(record["runs"]) == 2 and all(len(r["sha256"]) == 64 for r in record["runs"])
    merged = UnisentModule.from_checkpoint(out / "checkpoints" / "last.ckpt")
    assert [o.name for o in merged.objectives] == ["ease", "amr"]
    ease, amr = _state(runs["ease"]), _state(runs["amr"])
    base = _start(out).state_dict()
    state = merged.state_dict()
    key = "encoder.model.encoder.layer.0.attention.self.query.weight"
    key = key if key in state else next(k for k in state if k.endswith("query.weight"))
    expected = base[key] + (ease[key] - base[key]) + 0.5 * (amr[key] - base[key])
    torch.testing.assert_close(state[key], expected, atol=1e-6, rtol=0)
    # the rows of AMR's added tokens: EASE never had them (task vector 0), AMR's half-weighted
    word = next(k for k in state if k.endswith("word_embeddings.weight"))
    rows = ease[word].shape[0]
    assert state[word].shape[0] == amr[word].shape[0] > rows
    expected_new = base[word][rows:] + 0.5 * (amr[word][rows:] - base[word][rows:])
    torch.testing.assert_close(state[word][rows:], expected_new, atol=1e-6, rtol=0)
    # every objective's own parameters are its run's
    for run, position in ((ease, 0), (amr, 1)):
        own = [k for k in run if k.startswith("objectives.0.")]
        assert own or position == 1  # EASE has its entity table; the AMR objective no parameters of its own
        for k in own:
            mine = state[k.replace("objectives.0.", f"objectives.{position}.")]
            assert torch.equal(mine, run[k]) if isinstance(mine, torch.Tensor) else mine == run[k], k


@pytest.mark.integration
def test_the_merged_model_loads_scores_and_exports_to_st_and_onnx_equal_to_1e_5(runs, tmp_path, capsys):
    pytest.importorskip("onnxruntime")
    out = tmp_path / "merged"
    main(["merge", str(runs["ease"]), str(runs["gausscse"]), "--out", str(out), "--method", "dare_ties", "--seed", "3"])
    assert json.loads((out / "merge.json").read_text())["seed"] == 3
    model = unisent.load(str(out / "encoder"))
    assert callable(getattr(model, "encode_gaussian", None))  # GaussCSE's head carried
    vectors = model.encode(SENTENCES, precision="fp32")
    assert vectors.shape[0] == len(SENTENCES) and torch.isfinite(vectors).all()
    from unisent.evaluation.panel import evaluate_panel

    records = tmp_path / "entity-records.jsonl"  # the 32 records the tiny run's entity table was built from
    lines = (Path(__file__).resolve().parents[1] / "samples" / "ease_fewrel.jsonl").read_text().splitlines(True)
    records.write_text("".join(lines[:32]))
    panel = evaluate_panel(
        str(out / "encoder"),
        ["stsb-test", "entity-top10"],
        ckpt=out / "checkpoints" / "last.ckpt",
        entity_records=records,
    )
    assert panel["stsb-test"]["score"] is not None and panel["entity-top10"]["score"] is not None
    for fmt in ("sentence-transformers", "onnx"):
        main(["export", str(out / "encoder"), "--format", fmt, "--out", str(tmp_path / fmt)])
    from sentence_transformers import SentenceTransformer

    st = SentenceTransformer(str(tmp_path / "sentence-transformers"), device="cpu")
    np.testing.assert_allclose(st.encode(SENTENCES, convert_to_numpy=True), vectors.numpy(), atol=1e-5, rtol=0)
    onnx = unisent.load(str(tmp_path / "onnx"), backend="onnx")
    np.testing.assert_allclose(onnx.encode(SENTENCES).numpy(), vectors.numpy(), atol=1e-5, rtol=0)


def test_a_head_over_its_own_top_layers_is_carried_and_reads_the_merged_lower_layers(runs, tmp_path):
    """GaussCSE's own copies of the top layer are its head's (its run's, unmerged); the lower layers they read are
    merged; the merged model loads with the copies and its Gaussian reads them."""
    out = tmp_path / "merged"
    merge_runs([runs["ease"], runs["gausscse-own"]], out, method="task_arithmetic")
    merged, own, ease = _state(out), _state(runs["gausscse-own"]), _state(runs["ease"])
    copies = [k for k in own if k.startswith("objectives.0.") and ".layer" in k]
    assert copies, "the run has no copies of the top layer"
    for k in copies:
        torch.testing.assert_close(merged[k.replace("objectives.0.", "objectives.1.")], own[k], atol=0, rtol=0)
    base = _start(out).state_dict()
    lower = next(k for k in merged if k.startswith("encoder.") and k.endswith("layer.0.attention.self.query.weight"))
    expected = base[lower] + (ease[lower] - base[lower]) + (own[lower] - base[lower])
    torch.testing.assert_close(merged[lower], expected, atol=1e-6, rtol=0)
    model = unisent.load(str(out / "encoder"))
    assert model.head.top_layers is not None and len(model.head.top_layers) == 1
    mu, var = model.encode_gaussian(SENTENCES)
    assert torch.isfinite(mu).all() and (var > 0).all()
    # the Gaussian reads the copy: the run's own head over the merged encoder's lower layers, not the encoder's top
    alone = unisent.load(str(runs["gausscse-own"] / "encoder"))
    assert not torch.allclose(mu, alone.encode_gaussian(SENTENCES)[0], atol=1e-4)


@pytest.mark.integration
def test_two_merges_with_one_seed_are_equal_and_linear_of_one_run_twice_is_that_run(runs, tmp_path):
    merge_runs([runs["ease"], runs["amr"]], tmp_path / "a", method="dare_ties", seed=5)
    merge_runs([runs["ease"], runs["amr"]], tmp_path / "b", method="dare_ties", seed=5)
    a, b = _state(tmp_path / "a"), _state(tmp_path / "b")
    assert all(torch.equal(a[k], b[k]) if isinstance(a[k], torch.Tensor) else a[k] == b[k] for k in a)
    twice = tmp_path / "twice-src"
    shutil.copytree(runs["ease"], twice)
    merge_runs([runs["ease"], twice], tmp_path / "c", method="linear")
    c, ease = _state(tmp_path / "c"), _state(runs["ease"])
    for k in ease:
        if isinstance(ease[k], torch.Tensor):
            torch.testing.assert_close(c[k], ease[k], atol=1e-6, rtol=0)


def test_runs_that_cannot_be_merged_are_one_line_and_nothing_is_written(runs, tiny_cased_bert_dir, tmp_path, capsys):
    out = tmp_path / "never"
    with pytest.raises(MergeError, match="at least two runs"):
        merge_runs([runs["ease"]], out)
    with pytest.raises(MergeError, match="2 runs and 1 weights"):
        merge_runs([runs["ease"], runs["amr"]], out, weights=[1.0])
    with pytest.raises(MergeError, match="no checkpoints/last.ckpt"):
        merge_runs([runs["ease"], tmp_path], out)
    # another backbone: the same run's record pointed at the cased tiny BERT
    from unisent.io import load_checkpoint

    ckpt = load_checkpoint(runs["amr"] / "checkpoints" / "last.ckpt")
    ckpt["unisent"]["encoder"]["model"] = str(tiny_cased_bert_dir)
    other = tmp_path / "other.ckpt"
    torch.save(ckpt, other)
    with pytest.raises(MergeError, match="starts from model"):
        merge_runs([runs["ease"], other], out)
    assert not out.exists()
    out.mkdir()
    (out / "x").write_text("kept")
    with pytest.raises(MergeError, match="not an empty folder"):
        merge_runs([runs["ease"], runs["amr"]], out)
    with pytest.raises(SystemExit) as exit_:
        main(["merge", str(runs["ease"]), str(runs["amr"]), "--out", str(tmp_path / "y"), "--method", "soup"])
    assert exit_.value.code != 0
    assert "soup" in capsys.readouterr().err
