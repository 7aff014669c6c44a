"""The unified panel (unisent.evaluation.panel): every column against a hand computation on tiny files, the
columns that do not apply (None with a reason), the errors (unknown column, missing file), one model load
per call, and the benchmark scripts that wrap it (benchmarks/amr_retrieval.py, ease_entity_retrieval.py; the
unified panel's own script, studies/unified_panel.py, in tests/studies/test_study_scripts.py)."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from unisent.evaluation.panel import AMR_TEST, PANEL_COLUMNS, evaluate_panel, read_amr_pairs

pytestmark = pytest.mark.usefixtures("one_thread")

ROOT = Path(__file__).resolve().parents[1]

PENMAN = """# ::id t.1
# ::snt The boy wants to go .
(w / want-01
   :ARG0 (b / boy)
   :ARG1 (g / go-02
            :ARG0 b))

# ::id t.2
# ::snt The cat sleeps on the mat .
(s / sleep-01
   :ARG0 (c / cat)
   :location (m / mat))

# ::id t.3
# ::snt A little prince came from a planet .
(c / come-01
   :ARG1 (p / prince
            :mod (l / little))
   :ARG3 (p2 / planet))

# ::id t.4
# ::snt I drew a sheep .
(d / draw-01
   :ARG0 (i / i)
   :ARG1 (s / sheep))
"""

STS = [  # (score, sentence 1, sentence 2)
    (5.0, "a man plays a guitar .", "a man is playing a guitar ."),
    (0.5, "two dogs run on the grass .", "a woman is slicing onions ."),
    (3.2, "the cat sleeps .", "a cat is sleeping on the sofa ."),
    (1.0, "a child rides a bike .", "the man sings ."),
    (4.1, "a woman is slicing onions .", "a woman cuts an onion ."),
    (2.0, "the man sings .", "a man plays a guitar ."),
]

SICK = [  # (relatedness 1-5, sentence A, sentence B)
    (4.7, "a man is playing a flute .", "a man plays a flute ."),
    (1.2, "a dog runs in the park .", "a woman is cooking ."),
    (3.6, "two kids are playing outdoors .", "children play in the yard ."),
    (2.4, "a cat is sleeping .", "a man is sleeping ."),
    (3.1, "a woman is cooking .", "a woman cuts a tomato ."),
]

TATOEBA = [
    ("Der Junge will gehen.", "The boy wants to go."),
    ("Die Katze schläft.", "The cat sleeps."),
    ("Ich habe ein Schaf gezeichnet.", "I drew a sheep."),
    ("Er kam von einem Planeten.", "He came from a planet."),
]


class Lookup:
    """A model whose ``encode`` returns a fixed vector per sentence: the hand computations need nothing else."""

    def __init__(self, vectors: dict[str, list[float]]):
        self.vectors = vectors
        self.config = SimpleNamespace(max_length=0)

    def encode(self, sentences, batch_size=64, **kw):
        return torch.tensor([self.vectors[s] for s in sentences], dtype=torch.float32)


class GaussianLookup(Lookup):
    """Also ``encode_gaussian``: mean 0 and a fixed one-dimensional variance per sentence."""

    def __init__(self, variances: dict[str, float]):
        super().__init__({s: [1.0] for s in variances})
        self.variances = variances

    def encode_gaussian(self, sentences, batch_size=64, **kw):
        var = torch.tensor([[self.variances[s]] for s in sentences])
        return torch.zeros_like(var), var


def _amr_data(root: Path) -> Path:
    path = root / AMR_TEST
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(PENMAN, encoding="utf-8")
    return root


def _sts_data(root: Path, split: str = "test", rows=STS) -> Path:
    path = root / "sts" / "stsbenchmark" / f"sts-{split}.csv"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(f"g\tf\t2012\t{i:04d}\t{s}\t{a}\t{b}\n" for i, (s, a, b) in enumerate(rows)))
    return root


def _sick_data(root: Path, name: str = "SICK_trial.txt", rows=SICK) -> Path:
    """SICK's layout: a header, then pair_ID, sentence_A, sentence_B, relatedness_score, entailment_judgment."""
    path = root / "sts" / "sick" / name
    path.parent.mkdir(parents=True, exist_ok=True)
    header = "pair_ID\tsentence_A\tsentence_B\trelatedness_score\tentailment_judgment\n"
    path.write_text(header + "".join(f"{i}\t{a}\t{b}\t{s}\tNEUTRAL\n" for i, (s, a, b) in enumerate(rows, 1)))
    return root


def _tatoeba_data(root: Path) -> Path:
    folder = root / "retrieval" / "tatoeba"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "tatoeba.deu-eng.deu").write_text("".join(d + "\n" for d, _ in TATOEBA), encoding="utf-8")
    (folder / "tatoeba.deu-eng.eng").write_text("".join(e + "\n" for _, e in TATOEBA), encoding="utf-8")
    return root


def _script(name: str):
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        spec = importlib.util.spec_from_file_location(name, ROOT / "benchmarks" / f"{name}.py")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))
    return module


# ------------------------------------------------------------------------------------------------ errors
def test_an_unknown_column_is_named_with_a_close_match_and_the_list(tmp_path):
    with pytest.raises(ValueError, match=r"'stsb-tset' \(did you mean 'stsb-test'\?\)") as error:
        evaluate_panel(str(tmp_path / "no-model"), ["stsb-tset"])
    assert all(name in str(error.value) for name in PANEL_COLUMNS)
    with pytest.raises(ValueError, match="'nothing-like-it'"):
        evaluate_panel(str(tmp_path / "no-model"), ["tatoeba-deu", "nothing-like-it"])


def test_a_missing_file_names_the_column_and_the_path_before_the_model_is_loaded(tmp_path):
    model = str(tmp_path / "no-model")  # never loaded: the files are checked first
    with pytest.raises(FileNotFoundError, match=r"'amr-graph-to-text'.*amr-bank-struct-v1\.6-test\.txt"):
        evaluate_panel(model, ["amr-graph-to-text"], tmp_path)
    with pytest.raises(FileNotFoundError, match=r"'tatoeba-deu'.*retrieval/tatoeba/tatoeba\.deu-eng\.deu"):
        evaluate_panel(model, ["tatoeba-deu"], tmp_path)
    with pytest.raises(FileNotFoundError, match=r"'snli-direction-hyp-not-shorter'.*nli/snli/s1\.test"):
        evaluate_panel(model, ["snli-direction-hyp-not-shorter"], tmp_path)
    with pytest.raises(FileNotFoundError, match=r"'sick-r' needs data_dir"):
        evaluate_panel(model, ["sick-r"])
    with pytest.raises(FileNotFoundError, match=r"'sick-r-dev' needs data_dir"):  # not bundled
        evaluate_panel(model, ["sick-r-dev"])
    with pytest.raises(FileNotFoundError, match=r"'stsb-test': data directory .*nowhere"):
        evaluate_panel(model, ["stsb-test"], tmp_path / "nowhere")
    with pytest.raises(FileNotFoundError, match=r"'entity-top1'.*gone\.jsonl"):
        evaluate_panel(model, ["entity-top1"], ckpt=None, entity_records=tmp_path / "gone.jsonl")
    with pytest.raises(FileNotFoundError, match=r"'entity-top10': checkpoint .*none\.ckpt"):
        evaluate_panel(model, ["entity-top10"], ckpt=tmp_path / "none.ckpt")


# ------------------------------------------------------------------------------------------ AMR columns
def test_amr_columns_on_fixed_vectors_as_computed_by_hand(tmp_path):
    root = _amr_data(tmp_path)
    pairs, problems = read_amr_pairs(root / AMR_TEST)
    assert len(pairs) == 4 and not problems
    # texts are the basis vectors e0..e3; the graphs' cosines with them are their normalised coordinates:
    #   text -> graph: t0: g0 0.743, g3 0.8 -> g3 wrong; t1: g1 0.555 right; t2: g1 0.832, g2 1 right;
    #                  t3: g0 0.669, g3 0.6 -> g0 wrong                                         => 2 / 4
    #   graph -> text (largest coordinate): g0 t0 right; g1 t2 wrong; g2 t2 right; g3 t0 wrong  => 2 / 4
    graphs = [[1, 0, 0, 0.9], [0, 1, 1.5, 0], [0, 0, 1, 0], [0.8, 0, 0, 0.6]]
    vectors = {p["text"]: list(np.eye(4)[i]) for i, p in enumerate(pairs)}
    vectors |= {p["graph"]: graphs[i] for i, p in enumerate(pairs)}
    result = evaluate_panel(Lookup(vectors), ["amr-graph-to-text", "amr-text-to-graph"], root, max_length=64)
    assert list(result) == ["amr-graph-to-text", "amr-text-to-graph"]
    t2g, g2t = result["amr-text-to-graph"], result["amr-graph-to-text"]
    assert t2g["score"] == pytest.approx(50.0) and g2t["score"] == pytest.approx(50.0)
    assert t2g["text_to_graph_errors"] == ["t.1", "t.4"] and g2t["graph_to_text_errors"] == ["t.2", "t.4"]
    assert t2g["pairs"] == 4 and t2g["max_length"] == 64 and t2g["graphs_truncated"] is None  # no tokenizer
    assert t2g["input"] == str(root / AMR_TEST)
    # the mean cosine of each text with its own graph
    gold = [graphs[i][i] / np.linalg.norm(graphs[i]) for i in range(4)]
    assert t2g["mean_gold_cosine"] == pytest.approx(float(np.mean(gold)), abs=1e-4)


def test_identical_strings_are_not_wrong_for_picking_each_other(tmp_path):
    """A sentence twice (with two graphs): either graph's sentence is the gold string."""
    root = tmp_path
    path = root / AMR_TEST
    path.parent.mkdir(parents=True)
    path.write_text(PENMAN.replace("I drew a sheep .", "The cat sleeps on the mat ."), encoding="utf-8")
    pairs, _ = read_amr_pairs(path)
    vectors = {p["graph"]: list(np.eye(4)[i]) for i, p in enumerate(pairs)}
    vectors |= {"The boy wants to go .": [1, 0, 0, 0], "A little prince came from a planet .": [0, 0, 1, 0]}
    vectors["The cat sleeps on the mat ."] = [0, 1, 0, 0.5]  # nearer graph 2 than graph 4
    result = evaluate_panel(Lookup(vectors), ["amr-text-to-graph", "amr-graph-to-text"], root, max_length=None)
    # text -> graph: the 4th text (= the 2nd) retrieves graph 2, not its own: wrong; graph -> text: all right
    assert result["amr-text-to-graph"]["score"] == pytest.approx(75.0)
    assert result["amr-graph-to-text"]["score"] == pytest.approx(100.0)
    assert result["amr-text-to-graph"]["distinct_texts"] == 3


# ------------------------------------------------------------------------------------ direction columns
def test_direction_columns_count_the_pairs_by_length_relation(tmp_path):
    # equal means: sim(hyp || pre) > sim(pre || hyp) exactly when the premise has the larger variance
    pairs = [  # premise, var, hypothesis, var, label; lengths in words (the model has no tokenizer)
        ("a b c d", 2.0, "a b", 1.0, "entailment"),  # premise longer, right
        ("x y z", 2.0, "x y z w v", 1.0, "entailment"),  # hypothesis longer, right
        ("m n", 1.0, "m o", 2.0, "entailment"),  # equal length, wrong
        ("q r s t u", 1.0, "q r", 3.0, "entailment"),  # premise longer, wrong
        ("k l", 1.0, "k l j j", 2.0, "entailment"),  # hypothesis longer, wrong
        ("e f g", 5.0, "e", 0.1, "neutral"),  # not an entailment pair
    ]
    snli = tmp_path / "nli" / "snli"
    snli.mkdir(parents=True)
    for name, column in (("s1", 0), ("s2", 2), ("labels", 4)):
        (snli / f"{name}.test").write_text("".join(p[column] + "\n" for p in pairs))
    model = GaussianLookup({p[0]: p[1] for p in pairs} | {p[2]: p[3] for p in pairs})
    result = evaluate_panel(model, ["snli-direction-hyp-not-shorter", "snli-direction"], tmp_path)
    full, rest = result["snli-direction"], result["snli-direction-hyp-not-shorter"]
    assert full["score"] == pytest.approx(40.0) and rest["score"] == pytest.approx(100 / 3)
    assert full["similarity"] == "kl" and full["n_pairs"] == 5
    assert full["direction_sim_premise_longer"] == pytest.approx(50.0)
    assert full["direction_sim_equal_length"] == pytest.approx(0.0)
    assert full["direction_sim_hypothesis_longer"] == pytest.approx(50.0)
    assert full["share_hypothesis_not_shorter"] == pytest.approx(60.0)
    assert rest["share_premise_longer"] == pytest.approx(40.0)
    assert full["seconds"] == rest["seconds"]  # one evaluation for both columns
    # with the AMR columns in the same call, the AMR entry still names the model (not the direction task)
    pairs_amr, _ = read_amr_pairs(_amr_data(tmp_path) / AMR_TEST)
    model.vectors |= {s: [float(i + 1)] for i, p in enumerate(pairs_amr) for s in (p["text"], p["graph"])}
    both = evaluate_panel(model, ["snli-direction", "amr-text-to-graph"], tmp_path)
    assert both["amr-text-to-graph"]["model"] == "GaussianLookup"
    assert both["snli-direction"]["score"] == pytest.approx(40.0)
    # a model without a Gaussian head has no direction: None, with the reason
    plain = evaluate_panel(Lookup({}), ["snli-direction", "snli-direction-hyp-not-shorter"], tmp_path)
    for entry in plain.values():
        assert entry["score"] is None and "no Gaussian head" in entry["reason"]


def test_direction_dev_columns_read_sick_trial_not_snli(tmp_path):
    # SNLI test: both pairs right; SICK trial: one entailment pair of two right (the neutral pair is not
    # counted), and no trial pair with a hypothesis not shorter
    test = [("a b c", 2.0, "a b", 1.0), ("c d", 2.0, "c d e", 1.0)]
    trial = [("f g h", 2.0, "f g", 1.0, "ENTAILMENT"), ("i j k l", 1.0, "i j", 2.0, "ENTAILMENT")]
    trial.append(("m n", 1.0, "m n o p", 9.0, "NEUTRAL"))
    snli = tmp_path / "nli" / "snli"
    snli.mkdir(parents=True)
    for name, column in (("s1", 0), ("s2", 2)):
        (snli / f"{name}.test").write_text("".join(p[column] + "\n" for p in test))
    (snli / "labels.test").write_text("entailment\n" * len(test))
    sick = tmp_path / "sts" / "sick"
    sick.mkdir(parents=True)
    rows = [f"{i}\t{p[0]}\t{p[2]}\t3.0\t{p[4]}\n" for i, p in enumerate(trial)]
    (sick / "SICK_trial.txt").write_text(
        "pair_ID\tsentence_A\tsentence_B\trelatedness_score\tentailment_judgment\n" + "".join(rows)
    )
    model = GaussianLookup({p[0]: p[1] for p in test + trial} | {p[2]: p[3] for p in test + trial})
    columns = ["sick-direction-dev", "snli-direction", "sick-direction-hyp-not-shorter-dev"]
    result = evaluate_panel(model, columns, tmp_path)
    assert result["snli-direction"]["score"] == pytest.approx(100.0)
    dev = result["sick-direction-dev"]
    assert dev["score"] == pytest.approx(50.0) and dev["n_pairs"] == 2
    assert dev["share_premise_longer"] == pytest.approx(100.0)
    not_shorter = result["sick-direction-hyp-not-shorter-dev"]
    assert not_shorter["score"] is None and "no SICK trial entailment pair" in not_shorter["reason"]
    # a missing trial file is named before anything is encoded
    (sick / "SICK_trial.txt").unlink()
    with pytest.raises(FileNotFoundError, match=r"'sick-direction-dev'.*sts/sick/SICK_trial\.txt"):
        evaluate_panel(model, ["sick-direction-dev"], tmp_path)


# ------------------------------------------------------------------------------------------ task columns
def test_tatoeba_and_sts_columns_as_computed_by_hand(tmp_path):
    from scipy.stats import spearmanr

    root = _tatoeba_data(_sts_data(tmp_path))
    vectors = {d: list(np.eye(4)[i]) for i, (d, _) in enumerate(TATOEBA)}
    vectors |= {e: list(np.eye(4)[i]) for i, (_, e) in enumerate(TATOEBA)}
    # the first two English sentences swap vectors: 2 of 4 wrong in each direction
    vectors[TATOEBA[0][1]], vectors[TATOEBA[1][1]] = vectors[TATOEBA[1][1]], vectors[TATOEBA[0][1]]
    rng = np.random.default_rng(0)
    for _, a, b in STS:
        vectors.setdefault(a, list(rng.normal(size=4)))
        vectors.setdefault(b, list(rng.normal(size=4)))
    result = evaluate_panel(Lookup(vectors), ["tatoeba-deu", "stsb-test"], root)
    assert result["tatoeba-deu"]["score"] == pytest.approx(50.0)
    assert result["tatoeba-deu"]["metrics"]["accuracy_to_eng"] == pytest.approx(50.0)

    def cos(a, b):
        a, b = np.asarray(vectors[a]), np.asarray(vectors[b])
        return a @ b / np.linalg.norm(a) / np.linalg.norm(b)

    expected = 100 * spearmanr([s for s, _, _ in STS], [cos(a, b) for _, a, b in STS]).statistic
    assert result["stsb-test"]["score"] == pytest.approx(expected)
    assert result["stsb-test"]["metric"] == "spearman" and result["stsb-test"]["data_dir"] == str(root)


def _cosine_spearman(vectors: dict[str, list[float]], rows) -> float:
    from scipy.stats import spearmanr

    def cos(a, b):
        a, b = np.asarray(vectors[a]), np.asarray(vectors[b])
        return a @ b / np.linalg.norm(a) / np.linalg.norm(b)

    return 100 * spearmanr([s for s, _, _ in rows], [cos(a, b) for _, a, b in rows]).statistic


def test_the_dev_columns_as_computed_by_hand_and_as_their_tasks_score(tmp_path):
    """stsb-dev reads sts-dev.csv and sick-r-dev SICK_trial.txt (not the test files, here absent)."""
    from unisent.evaluation import evaluate

    root = _sick_data(_sts_data(tmp_path, "dev"))
    rng = np.random.default_rng(1)
    vectors: dict[str, list[float]] = {}
    for _, a, b in STS + SICK:
        vectors.setdefault(a, list(rng.normal(size=4)))
        vectors.setdefault(b, list(rng.normal(size=4)))
    model = Lookup(vectors)
    result = evaluate_panel(model, ["sick-r-dev", "stsb-dev"], root)
    assert list(result) == ["sick-r-dev", "stsb-dev"]
    assert result["stsb-dev"]["score"] == pytest.approx(_cosine_spearman(vectors, STS))
    assert result["sick-r-dev"]["score"] == pytest.approx(_cosine_spearman(vectors, SICK))
    tasks = evaluate(model, ["stsb-dev", "sick-r-dev"], root, progress=False, on_error="raise")["tasks"]
    for column in ("stsb-dev", "sick-r-dev"):
        entry = result[column]
        assert entry["score"] == pytest.approx(tasks[column]["score"])
        assert entry["metric"] == "spearman" and entry["similarity"] == "cosine" and entry["data_dir"] == str(root)
    assert result["sick-r-dev"]["metrics"]["n_pairs"] == len(SICK)


def test_the_dev_columns_score_a_tiny_model_as_their_tasks_do(tiny_model_dir, tmp_path):
    import unisent
    from unisent.evaluation import evaluate

    root = _sick_data(_sts_data(tmp_path / "data", "dev"))
    model = unisent.load(str(tiny_model_dir))
    result = evaluate_panel(model, ["stsb-dev", "sick-r-dev"], root, max_length=16, batch_size=4)
    tasks = evaluate(model, ["stsb-dev", "sick-r-dev"], root, batch_size=4, progress=False, on_error="raise")
    for column, n in (("stsb-dev", len(STS)), ("sick-r-dev", len(SICK))):
        assert result[column]["score"] == pytest.approx(tasks["tasks"][column]["score"])
        assert result[column]["metrics"]["n_pairs"] == n and -100 <= result[column]["score"] <= 100


def test_the_dev_columns_missing_files_and_the_bundled_stsb_dev(tmp_path):
    from unisent.evaluation import evaluate
    from unisent.evaluation.tasks import GROUPS
    from unisent.resources import EVALUATION_DATA_DIR

    model = str(tmp_path / "no-model")  # never loaded: the files are checked first
    root = _sick_data(tmp_path, "SICK_test_annotated.txt")  # the test split only: sick-r-dev needs the trial
    with pytest.raises(FileNotFoundError, match=r"'sick-r-dev'.*sts/sick/SICK_trial\.txt"):
        evaluate_panel(model, ["sick-r", "sick-r-dev"], root)
    with pytest.raises(FileNotFoundError, match=r"'stsb-dev'.*sts/stsbenchmark/sts-dev\.csv"):
        evaluate_panel(model, ["stsb-dev"], root)
    assert "sick-r-dev" not in GROUPS["sts"] and "stsb-dev" not in GROUPS["sts"]  # dev sets stay out of averages

    class Lengths(Lookup):  # cheap and deterministic on the bundled 1,500 pairs
        def encode(self, sentences, batch_size=64, **kw):
            return torch.tensor([[len(s), 1.0 + len(s.split()), 1.0] for s in sentences])

    # no data_dir: STS-B dev is bundled, as `evaluate` scores it there
    bundled = evaluate_panel(Lengths({}), ["stsb-dev"], max_length=None)["stsb-dev"]
    sample = evaluate(Lengths({}), ["stsb-dev"], EVALUATION_DATA_DIR, progress=False)["tasks"]["stsb-dev"]["score"]
    assert bundled["score"] == pytest.approx(sample) and bundled["data_dir"] == str(EVALUATION_DATA_DIR)
    assert bundled["metrics"]["n_pairs"] == 1500


def test_a_saved_model_is_loaded_once_and_cut_at_max_length(tiny_model_dir, tmp_path, monkeypatch):
    """The real path: a saved directory, STS-B on the bundled sample without data_dir, AMR by numpy."""
    import unisent
    import unisent._loader
    from unisent.evaluation import evaluate
    from unisent.resources import EVALUATION_DATA_DIR

    loads = []
    real = unisent._loader.load
    monkeypatch.setattr(unisent._loader, "load", lambda *a, **kw: loads.append(a) or real(*a, **kw))
    root = _sts_data(_amr_data(tmp_path / "data"))
    model_dir = str(tiny_model_dir)
    columns = ["stsb-test", "amr-text-to-graph", "amr-graph-to-text"]
    both = evaluate_panel(model_dir, columns, root, max_length=8, batch_size=4)
    assert len(loads) == 1 and both["stsb-test"]["data_dir"] == str(root)

    # the AMR scores themselves are checked by hand with fixed vectors above: this random tiny model's vectors
    # all have cosine ~0.99999 with each other, so its ranking is float noise (it flipped between runs)
    model = unisent.load(model_dir)
    model.config.max_length = 8
    for column in ("amr-text-to-graph", "amr-graph-to-text"):
        assert both[column]["pairs"] == 4 and 0 <= both[column]["score"] <= 100
    assert both["amr-text-to-graph"]["max_length"] == 8 and both["amr-text-to-graph"]["graphs_truncated"] == 4

    # no data_dir: STS-B test on the bundled sample, as `evaluate` scores it there
    bundled = evaluate_panel(model_dir, ["stsb-test"], max_length=8)["stsb-test"]
    sample = evaluate(model, ["stsb-test"], EVALUATION_DATA_DIR, progress=False)["tasks"]["stsb-test"]["score"]
    assert bundled["score"] == pytest.approx(sample) and bundled["data_dir"] == str(EVALUATION_DATA_DIR)
    assert bundled["metrics"]["n_pairs"] == 1379


# ---------------------------------------------------------------------------------------- entity columns
def _ease_checkpoint(model_dir: Path, path: Path, with_ease: bool = True):
    from unisent.encoders import EncoderConfig
    from unisent.lightning_module import UnisentModule
    from unisent.objectives import EASE, SimCSE

    ease = EASE(entity_dim=8, entity_temperature=0.1)
    objectives = [SimCSE(), ease] if with_ease else [SimCSE()]
    module = UnisentModule(encoder=EncoderConfig(model=str(model_dir), pooler="mean"), objectives=objectives)
    if with_ease:
        ease.build_vocabulary(["Q1", "Q2", "Q3", "Q4", "Q5"], [None] * 5)
    checkpoint = {"state_dict": module.state_dict(), "global_step": 7}
    module.on_save_checkpoint(checkpoint)  # what Lightning writes
    torch.save(checkpoint, path)
    return module, ease


def test_entity_columns_rank_the_checkpoints_table(tiny_model_dir, tmp_path):
    module, ease = _ease_checkpoint(tiny_model_dir, tmp_path / "run.ckpt")
    texts = ["a man plays a guitar .", "two dogs run on the grass .", "a woman is slicing onions .", "the cat sleeps ."]
    gold = ["Q1", "Q2", "Q3", "Q1"]
    records = tmp_path / "heldout.jsonl"
    records.write_text("".join(json.dumps({"text": t, "entity": e}) + "\n" for t, e in zip(texts, gold)))
    result = evaluate_panel(
        str(tmp_path / "never-loaded"),  # only entity columns: the model is not loaded
        ["entity-top10", "entity-top1"],
        ckpt=tmp_path / "run.ckpt",
        entity_records=records,
        max_length=6,
    )
    module.eval()
    module.encoder.config.max_length = 6
    expected = ease.retrieve_entities(module.encoder, texts, gold, ks=(1, 10))
    assert result["entity-top1"]["score"] == pytest.approx(100 * expected["top1"])
    assert result["entity-top10"]["score"] == pytest.approx(100.0)  # 5 entities: every gold is in the top 10
    top1 = result["entity-top1"]
    assert top1["max_length"] == 6 and top1["global_step"] == 7 and top1["entities"] == 5 and top1["records"] == 4
    assert top1["mean_reciprocal_rank"] == pytest.approx(expected["mean_reciprocal_rank"])


def test_entity_columns_without_a_table_are_none_with_a_reason(tiny_model_dir, tmp_path):
    result = evaluate_panel("never-loaded", ["entity-top1"])
    assert result["entity-top1"]["score"] is None and "checkpoint" in result["entity-top1"]["reason"]
    _ease_checkpoint(tiny_model_dir, tmp_path / "simcse.ckpt", with_ease=False)
    result = evaluate_panel("never-loaded", ["entity-top10"], ckpt=tmp_path / "simcse.ckpt")
    assert result["entity-top10"]["score"] is None
    assert (
        "no EASE objective" in result["entity-top10"]["reason"]
        and "simcse (SimCSE)" in result["entity-top10"]["reason"]
    )


# ------------------------------------------------------------------------------------- benchmark scripts
def test_the_amr_script_reports_the_panels_numbers_under_its_keys(tiny_model_dir, tmp_path):
    root = _tatoeba_data(_amr_data(tmp_path / "data"))
    model_dir = str(tiny_model_dir)
    panel = evaluate_panel(model_dir, ["amr-text-to-graph", "amr-graph-to-text", "tatoeba-deu"], root, max_length=16)

    out = tmp_path / "amr.json"
    amr_script = _script("amr_retrieval")
    argv = ["--model", model_dir, "--penman", str(root / AMR_TEST), "--max-length", "16", "--out", str(out)]
    assert amr_script.main(argv) == 0
    amr = json.loads(out.read_text())
    assert amr["text_to_graph_top1"] == pytest.approx(panel["amr-text-to-graph"]["score"], abs=0.005)
    assert amr["graph_to_text_top1"] == pytest.approx(panel["amr-graph-to-text"]["score"], abs=0.005)
    assert amr["pairs_read"] == amr["pairs"] == 4 and amr["max_length"] == 16 and amr["excluded"] == 0
    assert "text_to_graph_errors" not in amr  # only with --show-errors
    # studies/unified_panel.py's row of the same model: tests/studies/test_study_scripts.py


def test_the_entity_script_still_reads_its_records_at_the_runs_token_limit(tiny_model_dir, tmp_path):
    module, ease = _ease_checkpoint(tiny_model_dir, tmp_path / "run.ckpt")
    records = tmp_path / "heldout.jsonl"
    records.write_text(json.dumps({"text": "a man plays a guitar .", "entity": "Q2"}) + "\n")
    script = _script("ease_entity_retrieval")
    result = script.entity_retrieval(tmp_path / "run.ckpt", records)
    assert result["max_length"] == module.encoder.config.max_length and result["objective"] == "ease"
    assert script.main(["--ckpt", str(tmp_path / "run.ckpt"), "--records", str(tmp_path / "missing.jsonl")]) == 1


def test_the_amr_script_reads_the_jsonl_of_amr_linearize(tmp_path):
    """benchmarks/amr_retrieval.py's own reader of ``unisent data amr-linearize`` output (moved out of the panel,
    which reads PENMAN only): text and graph as written, a record without either named by its line."""
    path = tmp_path / "pairs.jsonl"
    rows = [{"id": "a", "text": "A dog runs.", "graph": "( run-01 :ARG0 ( dog ) )"}, {"text": "no graph"}]
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n\n", encoding="utf-8")
    pairs, problems = _script("amr_retrieval").read_pairs(path)
    assert pairs == [{"id": "a", "text": "A dog runs.", "graph": "( run-01 :ARG0 ( dog ) )"}]
    assert problems == [f"{path}:2: no text or graph"]
