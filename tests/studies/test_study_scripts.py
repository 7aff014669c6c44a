"""The scripts of studies/ that make this project's results tables: the unified panel's rows and table (the panel's
own numbers under the scripts' keys), the Matryoshka table, the direction dev set and routes, and the merge-of-parts
route (merged once, scored, tabulated with the targets, its trade-off with a study's rows)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from studies import direction_dev, direction_routes, matryoshka_table, merge_parts, unified_panel
from tests.test_panel import PENMAN, TATOEBA
from unisent.evaluation.panel import AMR_TEST, evaluate_panel

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]


def test_unified_panel_table_reads_rows(tmp_path):
    table = unified_panel.table
    row = {
        "name": "m",
        "sts": {"stsb-test": {"metrics": {"spearman": 80.5}}},
        "entity": {"top10": 0.1116},
        "amr": {"text_to_graph_top1": 90.0},
        "train_minutes": 3.0,
        "stc": {"group": {"score": 68.377}},
    }
    path = tmp_path / "m.json"
    path.write_text(__import__("json").dumps(row))
    line = table([str(path)]).splitlines()[-1]
    assert line.startswith("| m | 80.50 | n/a | 68.38 |") and "| 11.16 |" in line and "| 90.00 |" in line


def test_length_rule_row_counts_longer_premises_and_ties(tmp_path):
    snli = tmp_path / "nli" / "snli"
    snli.mkdir(parents=True)
    pairs = [
        ("a man plays a guitar on stage .", "a man plays .", "entailment"),  # longer premise: right
        ("two dogs run .", "two dogs run fast in a park .", "entailment"),  # shorter premise: wrong
        ("a cat sleeps .", "a cat rests .", "entailment"),  # tie: wrong
        ("a boy eats an apple in the kitchen .", "a girl .", "neutral"),
    ]  # not an entailment pair
    for i, name in enumerate(("s1", "s2", "labels")):
        (snli / f"{name}.test").write_text("".join(p[i] + "\n" for p in pairs))
    row = unified_panel.length_rule_row(str(tmp_path))
    direction = row["snli"]["snli-direction"]
    assert direction["n_pairs"] == 3
    assert abs(direction["direction_sim"] - 100 / 3) < 1e-9 and abs(direction["ties"] - 100 / 3) < 1e-9


def test_matryoshka_table_scores_prefixes_of_one_encoding_and_tabulates_intervals():
    """studies/matryoshka_table.py: a model's vectors are computed once and cut per dimension; the table's
    cells are the mean and the 95% Student-t half-width over seeds."""
    import numpy as np

    module = matryoshka_table

    class Model:
        calls = 0

        def encode(self, sentences, batch_size=64, **kwargs):
            Model.calls += 1
            return np.array([[len(s), 1.0, 2.0, 3.0] for s in sentences], dtype=np.float32)

    cache: dict = {}
    model = Model()
    full = module.Prefix(model, 4, cache).encode(["ab", "abc"])
    cut = module.Prefix(model, 2, cache).encode(["abc", "ab"])
    assert full.shape == (2, 4) and cut.tolist() == [[3.0, 1.0], [2.0, 1.0]] and Model.calls == 1
    scores = {str(s): {t: {"64": v, "32": v - 1} for t in module.TASKS} for s, v in zip((1, 2, 3), (80.0, 81.0, 82.0))}
    text = module.table({"wrapped": scores}, [64, 32])
    # mean 81, stdev 1: half-width 4.303 / sqrt(3) = 2.48
    assert "| wrapped (3 seeds) | stsb-test | 81.00 ± 2.48 | 80.00 ± 2.48 |" in text


def test_direction_dev_reads_the_runs_with_a_direction_and_correlates_by_rank(tmp_path, monkeypatch):
    import json

    from unisent.evaluation import panel

    module = direction_dev
    test = {"a": (80.0, 60.0), "b": (85.0, 70.0), "c": (75.0, 50.0)}  # run: (all, hyp not shorter)
    dev = {"a": (50.0, 40.0), "b": (70.0, 45.0), "c": (60.0, 30.0)}
    for run, (full, rest) in [*test.items(), ("d", (None, None))]:  # d: no Gaussian head
        (tmp_path / "results" / run).mkdir(parents=True)
        scores = {"snli-direction": full, "snli-direction-hyp-not-shorter": rest}
        (tmp_path / "results" / run / "seed7.json").write_text(json.dumps({"scores": scores}))
        (tmp_path / "runs" / run / "seed7" / "encoder").mkdir(parents=True)
    asked = []

    def fake_panel(model, columns, data_dir):
        asked.append(Path(model).parts[-3])
        full, rest = dev[Path(model).parts[-3]]
        return {"sick-direction-dev": {"score": full}, "sick-direction-hyp-not-shorter-dev": {"score": rest}}

    monkeypatch.setattr(panel, "evaluate_panel", fake_panel)
    report = module.main([str(tmp_path), "--seeds", "7", "--data-dir", str(tmp_path)])
    assert asked == ["a", "b", "c"] and report["runs"] == 3
    assert report["rows"][1] == {"run": "b", "seed": 7, "test_all": 85.0, "test_hyp_not_shorter": 70.0} | {
        "dev_all": 70.0,
        "dev_hyp_not_shorter": 45.0,
    }
    rho = report["spearman"]
    # dev hyp-not-shorter ranks c < a < b, as both test measures do; dev all ranks a < c < b: rho 0.5
    assert rho["dev_hyp_not_shorter~test_hyp_not_shorter"] == pytest.approx(1.0)
    assert rho["dev_all~test_all"] == pytest.approx(0.5)
    # one seed: each run's mean is its row
    assert report["run_means"][2] == {"run": "c", "seeds": 1, "test_all": 75.0, "test_hyp_not_shorter": 50.0} | {
        "dev_all": 60.0,
        "dev_hyp_not_shorter": 30.0,
    }
    assert report["spearman_of_run_means"] == rho
    keys = ("test_all", "test_hyp_not_shorter", "dev_all", "dev_hyp_not_shorter")
    seeds = [{"run": "x"} | dict(zip(keys, (1.0, 2.0, 3.0, 4.0))), {"run": "x"} | dict(zip(keys, (3.0, 2.0, 1.0, 0.0)))]
    assert module.run_means(seeds) == [{"run": "x", "seeds": 2} | dict.fromkeys(keys, 2.0)]
    # --split train reads SICK train's columns; two study folders are pooled, each run named <folder>/<run>
    import shutil

    shutil.copytree(tmp_path / "results", tmp_path / "other" / "results")
    shutil.copytree(tmp_path / "runs", tmp_path / "other" / "runs")
    asked.clear()

    def fake_train(model, columns, data_dir):
        assert columns == ["sick-direction-train", "sick-direction-hyp-not-shorter-train"]
        asked.append(Path(model).parts[-3])
        return dict(zip(columns, ({"score": s} for s in dev[Path(model).parts[-3]])))

    monkeypatch.setattr(panel, "evaluate_panel", fake_train)
    pooled = module.main(
        [str(tmp_path), str(tmp_path / "other"), "--seeds", "7", "--data-dir", "x", "--split", "train"]
    )
    assert pooled["runs"] == 6 and pooled["split"] == "train" and len(asked) == 6
    assert [r["run"] for r in pooled["run_means"]][:4] == [
        f"{tmp_path.name}/a",
        f"{tmp_path.name}/b",
        f"{tmp_path.name}/c",
        "other/a",
    ]
    assert pooled["spearman"]["dev_hyp_not_shorter~test_hyp_not_shorter"] == pytest.approx(1.0)


def test_direction_routes_counts_as_the_panel_and_refits_heads_on_a_frozen_encoder(tmp_path, tiny_bert_dir):
    """studies/direction_routes.py: its direction count on hand-made Gaussians (KL(hyp||pre) < KL(pre||hyp):
    a premise wider than its hypothesis counts), then ``refit`` on the tiny BERT with one pass, reading only
    XNLI's entailment rows and counting the pairs whose hypothesis is not shorter."""
    import json

    module = direction_routes
    wide, narrow = torch.full((1, 1), 4.0), torch.ones(1, 1)
    zero = torch.zeros(2, 1)
    pre = (zero, torch.cat([wide, narrow]))  # pair 0: premise wide, hypothesis narrow; pair 1: the reverse
    hyp = (zero, torch.cat([narrow, wide]))
    # KL(N(0,1) || N(0,4)) = 0.5 (ln 4 + 1/4 - 1) = 0.318 < KL(N(0,4) || N(0,1)) = 0.5 (-ln 4 + 4 - 1) = 0.807
    assert module.direction(pre, hyp, torch.tensor([False, True])) == {"all": 50.0, "hns": 0.0}
    assert module.direction(pre, hyp, torch.tensor([True, False])) == {"all": 50.0, "hns": 100.0}
    xnli = tmp_path / "nli" / "xnli"
    xnli.mkdir(parents=True)
    rows = [
        ("a man plays a guitar on a stage tonight", "a man plays", "entailment"),
        ("a dog runs", "a dog runs in the park with a ball", "entailment"),
        ("a cat sleeps", "a cat is awake", "contradiction"),
        ("two women talk", "two women talk loudly", "entailment"),
    ]
    (xnli / "dev-en.tsv").write_text("".join("\t".join(r) + "\n" for r in rows), encoding="utf-8")
    out = tmp_path / "routes.json"
    argv = ["refit", str(tiny_bert_dir), "--epochs", "1", "--hidden", "8", "--data-dir", str(tmp_path)]
    assert module.main([*argv, "--output", str(out)]) == 0
    (row,) = json.loads(out.read_text())["refit"]
    assert row["pairs_hns"]["xnli-dev"] == 2 and "own head" not in row  # a plain encoder has no Gaussian head
    assert row["pairs_hns"]["held-fifth"] > 0
    for head in ("refit linear", "refit mlp"):
        assert row[head]["xnli-dev"]["all"] in (0.0, 33.33, 66.67, 100.0)  # three entailment pairs
        assert row[head]["xnli-dev"]["hns"] in (0.0, 50.0, 100.0)  # two of them with the hypothesis not shorter
    import unisent

    other = "mean" if unisent.load(str(tiny_bert_dir)).config.pooler == "cls" else "cls"  # not the encoder's own
    assert module.main([*argv, "--pooler", other, "--output", str(out)]) == 0
    own, read = json.loads(out.read_text())["refit"]
    assert own == row and read["pooler"] == other and own["pooler"] == "the encoder's"
    assert read["refit linear"] != own["refit linear"] or read["refit mlp"] != own["refit mlp"]  # other vectors


def test_merge_parts_pairs_the_runs_merges_once_and_tables_with_the_targets(tmp_path, monkeypatch):
    """studies/merge_parts.py: each seed's leave-one-out run and single run merged by task arithmetic (once),
    the merge scored on the recipe's panel, and the three rows' means, intervals and target verdicts."""
    import json

    import yaml

    from unisent import merging
    from unisent.evaluation import panel

    module = merge_parts
    recipe = tmp_path / "r.yaml"
    targets = {"stsb-test": 82.0, "snli-direction": 65.0}
    recipe.write_text(
        yaml.safe_dump({"model": {"evaluation": {"panel": ["stsb-test", "snli-direction"], "panel_targets": targets}}})
    )
    for study, slug, scores in (("joint", "without-g", (83.0, None)), ("single", "only-g", (80.0, 70.0))):
        for seed in (1, 2):
            (tmp_path / study / "results" / slug).mkdir(parents=True, exist_ok=True)
            result = {"scores": {"stsb-test": scores[0] + seed, "snli-direction": scores[1]}}
            (tmp_path / study / "results" / slug / f"seed{seed}.json").write_text(json.dumps(result))
    merged = []

    def fake_merge(runs, out, method):
        merged.append(([Path(r).parts[-3:] for r in runs], method))
        Path(out).mkdir(parents=True)
        (Path(out) / "merge.json").write_text("{}")

    def fake_panel(model, columns, data_dir, ckpt):
        seed = int(Path(model).parent.name[len("seed") :])
        assert ckpt.endswith("checkpoints/last.ckpt") and columns == ["stsb-test", "snli-direction"]
        return {"stsb-test": {"score": 82.0 + seed}, "snli-direction": {"score": 60.0 + 2 * seed}}

    monkeypatch.setattr(merging, "merge_runs", fake_merge)
    monkeypatch.setattr(panel, "evaluate_panel", fake_panel)
    argv = ["--recipe", str(recipe), "--joint", str(tmp_path / "joint"), "--single", str(tmp_path / "single")]
    argv += [
        "--objective",
        "g",
        "--seeds",
        "1",
        "2",
        "--out",
        str(tmp_path / "m"),
        "--output",
        str(tmp_path / "r.json"),
    ]
    report = module.main(argv)
    assert merged[0] == ([("runs", "without-g", "seed1"), ("runs", "only-g", "seed1")], "task_arithmetic")
    module.main(argv)  # merged before: scored again, not merged again
    assert len(merged) == 2
    assert report["seeds"][1]["merge"] == {"stsb-test": 84.0, "snli-direction": 64.0}
    text = module.table(json.loads((tmp_path / "r.json").read_text()))
    rows = text.splitlines()
    # merge: stsb 83, 84 -> 83.50 ± 6.35 (t 12.706 * 0.5); direction 62, 64 -> 63.00 ± 12.71
    assert rows[2] == "| without g | 2 | 84.50 ± 6.35 | n/a |"
    assert rows[4] == "| merge (without g + only g) | 2 | 83.50 ± 6.35 | 63.00 ± 12.71 |"
    assert rows[-1].endswith("snli-direction 63.00 **missed by 2.00**; stsb-test 83.50 met.")  # targets sorted
    # --alone: each own column against its objective alone's interval (the recipe's panel_own)
    config = yaml.safe_load(recipe.read_text())
    config["model"]["evaluation"]["panel_own"] = {"g": "snli-direction", "h": "stsb-test", "x": "stsb-test"}
    recipe.write_text(yaml.safe_dump(config))
    cells = {
        "only g": {"snli-direction": {"mean": 66.0, "ci": 3.0}},
        "only h": {"stsb-test": {"mean": 90.0, "ci": None}},
    }
    (tmp_path / "alone.json").write_text(json.dumps({"rows": [{"row": r, "cells": c} for r, c in cells.items()]}))
    report = module.main([*argv, "--alone", str(tmp_path / "alone.json")])
    assert report["alone"] == {
        "snli-direction": {"row": "only g", "mean": 66.0, "ci": 3.0},
        "stsb-test": {"row": "only h", "mean": 90.0, "ci": 0.0},
    }
    last = module.table(report).splitlines()[-1]
    assert last == (
        "The merge's own columns against each objective alone: snli-direction within or above (only g: 66.00 ± 3.00);"
        " stsb-test **below by 6.50** (only h: 90.00 ± 0.00)."
    )


def test_merge_parts_tradeoff_adds_the_routes_rows_to_a_study_and_refuses_other_seeds(tmp_path, capsys):
    """``--table JSON --tradeoff ABLATION_JSON``: the study's rows plus the route's three (``parts:``), each point
    the mean over seeds of general (STS-B, SICK-R) and own columns (n/a as 0), the frontier recomputed."""
    import json

    module = merge_parts

    def scores(sts, sick, own):
        return {"stsb-test": sts, "sick-r": sick, "snli-direction": own}

    report = {
        "objective": "g",
        "seeds": [
            {
                "seed": s,
                "joint": scores(80, 78, None),
                "single": scores(78, 76, 60 + s),
                "merge": scores(81, 79, 70 + s),
            }
            for s in (1, 2)
        ],
    }
    study = {
        "columns": ["stsb-test", "sick-r", "snli-direction"],
        "own": {"g": "snli-direction"},
        "rows": [
            {"row": "untrained", "kind": "untrained", "seeds": [1], "per_seed": [scores(79, 77, 50)]},
            {
                "row": "unified",
                "kind": "unified",
                "seeds": [1, 2],
                "per_seed": [scores(80, 79, 72), scores(80, 79, 74)],
            },
        ],
    }
    (tmp_path / "r.json").write_text(json.dumps(report))
    (tmp_path / "s.json").write_text(json.dumps(study))
    argv = [
        "--table",
        str(tmp_path / "r.json"),
        "--tradeoff",
        str(tmp_path / "s.json"),
        "--plot",
        str(tmp_path / "t.png"),
    ]
    module.main(argv)
    rows = {line.split(" | ")[0][2:]: line.split(" | ")[2:] for line in capsys.readouterr().out.splitlines()[4:9]}
    # merged: general (81+79)/2 = 80 both seeds, own 71, 72 -> 71.50 ± 6.35; unified: 79.50, own 73.00 ± 12.71
    assert rows["parts: merged"] == ["80.00 ± 0.00", "71.50 ± 6.35", "yes |"]
    assert rows["unified"] == ["79.50 ± 0.00", "73.00 ± 12.71", "yes |"]
    assert rows["parts: without g"] == ["79.00 ± 0.00", "0.00 ± 0.00", "no |"]  # n/a counts as 0
    assert rows["untrained"][-1] == "no |" and (tmp_path / "t.png").stat().st_size > 0
    with pytest.raises(SystemExit):  # --tradeoff without the kept JSON to add: one line from the parser
        module.main(argv[2:])
    assert "--tradeoff reads a kept JSON" in capsys.readouterr().err
    study["rows"][1]["seeds"] = [1, 3]
    (tmp_path / "s.json").write_text(json.dumps(study))
    with pytest.raises(SystemExit, match=r"seeds \[1, 2\] are not the study's \[1, 3\]"):
        module.main(argv)


# ------------------------------------------------------------------ the unified panel's script on the tiny model
# the panel's fixture data (tests/test_panel.py): the same four PENMAN graphs and Tatoeba pairs


def _panel_data(root: Path) -> Path:
    """The AMR test split and Tatoeba deu-eng of tests/test_panel.py, under ``root``."""
    path = root / AMR_TEST
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(PENMAN, encoding="utf-8")
    folder = root / "retrieval" / "tatoeba"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "tatoeba.deu-eng.deu").write_text("".join(d + "\n" for d, _ in TATOEBA), encoding="utf-8")
    (folder / "tatoeba.deu-eng.eng").write_text("".join(e + "\n" for _, e in TATOEBA), encoding="utf-8")
    return root


def _amr_script():
    import importlib.util
    import sys

    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        spec = importlib.util.spec_from_file_location("amr_retrieval", ROOT / "benchmarks" / "amr_retrieval.py")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))
    return module


def test_the_unified_panel_reports_the_panels_numbers_under_its_keys(tiny_model_dir, tmp_path):
    """studies/unified_panel.py's row and table hold the panel's numbers (and benchmarks/amr_retrieval.py's, the
    same computation) under their keys (tests/test_panel.py checks the AMR script against the panel)."""
    root = _panel_data(tmp_path / "data")
    model_dir = str(tiny_model_dir)
    panel = evaluate_panel(model_dir, ["amr-text-to-graph", "amr-graph-to-text", "tatoeba-deu"], root, max_length=16)

    out = tmp_path / "amr.json"
    argv = ["--model", model_dir, "--penman", str(root / AMR_TEST), "--max-length", "16", "--out", str(out)]
    assert _amr_script().main(argv) == 0
    amr = json.loads(out.read_text())

    unified = unified_panel
    row = unified.panel_row(model_dir, str(root), skip=("sts", "stc", "snli", "entity"), max_length=16)
    assert row["max_length"] == 16 and row["gaussian_head"] is False
    assert row["amr"]["text_to_graph_top1"] == amr["text_to_graph_top1"] and row["amr"]["pairs"] == 4
    tatoeba = row["tatoeba"]["tatoeba-deu"]
    assert tatoeba["main_metric"] == "accuracy" and tatoeba["score"] == pytest.approx(panel["tatoeba-deu"]["score"])
    path = tmp_path / "row.json"
    path.write_text(json.dumps(row | {"name": "tiny"}))
    line = unified.table([str(path)]).splitlines()[-1]
    assert line.startswith("| tiny | n/a | n/a | n/a | n/a | n/a | ")
    assert f"| {amr['text_to_graph_top1']:.2f} | {amr['graph_to_text_top1']:.2f} | n/a | " in line
    assert f"| {panel['tatoeba-deu']['score']:.2f} |" in line
