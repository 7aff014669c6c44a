"""The trade-off of this project's study pages (studies/tradeoff.py): general quality (STS-B and SICK-R test)
against the objectives' own columns, per seed, then mean and 95% interval over seeds, and the frontier, by hand;
and a study without its columns or per-seed scores writes exactly the tables it wrote before, without it."""

from __future__ import annotations

import json
import math

import pytest

from studies.ablation_pages import block_text, publish
from studies.tradeoff import tradeoff_points
from unisent.commands.ablate.summarise import summarize, table

pytestmark = pytest.mark.integration

T1, T2 = 12.706205, 4.302653  # Student's t(0.975) with 1 and 2 degrees of freedom


def _half(values: list[float], t: float) -> float:
    mean = sum(values) / len(values)
    sd = math.sqrt(sum((v - mean) ** 2 for v in values) / (len(values) - 1))
    return t * sd / math.sqrt(len(values))


def _tradeoff_summary() -> dict:
    """Four rows over stsb-test, sick-r and two own columns (amr's own column is not in the study)."""
    columns = ["stsb-test", "sick-r", "snli-direction-hyp-not-shorter", "entity-top10"]
    per_seed = {  # (row, kind): [(stsb-test, sick-r, direction, entity) per seed]
        ("untrained", "untrained"): [(82.0, 77.0, None, None)],
        ("unified (upgrad)", "unified"): [(80.0, 70.0, 60.0, 20.0), (82.0, 72.0, 64.0, 22.0), (81.0, 74.0, 62.0, 24.0)],
        ("only gausscse", "single"): [(70.0, 60.0, 90.0, None), (74.0, 62.0, 94.0, None)],
        ("without ease", "leave-one-out"): [(78.0, 70.0, 50.0, None), (80.0, 70.0, 52.0, None)],
    }
    results = []
    for (name, kind), seeds in per_seed.items():
        for seed, values in enumerate(seeds, 1):
            run = {"row": name, "kind": kind, "objectives": ["gausscse"], "balancer": "upgrad", "seed": seed}
            scores = {c: v for c, v in zip(columns, values) if v is not None}  # n/a: no score (as the panel's None)
            results.append({"run": run, "train_seconds": 60.0, "scores": scores})
    own = {"gausscse": "snli-direction-hyp-not-shorter", "ease": "entity-top10", "amr": "amr-text-to-graph"}
    own["ease2"] = "entity-top10"  # a column twice counts once
    units = {u: [u] for u in own}
    return {
        "recipe": "r.yaml", "steps": 2, "seeds": [1, 2, 3], "columns": columns, "rows": summarize(results, columns),
        "best_balancer": None, "own": own, "units": units, "panel_targets": {}, "command": "unisent ablate r.yaml",
    }  # fmt: skip


def test_the_tradeoff_by_hand(tmp_path):
    """Per seed: y = mean of stsb-test and sick-r, x = mean of the two own columns with n/a as 0; then the mean
    and t interval over seeds; the frontier by the means."""
    summary = _tradeoff_summary()
    rows = {r["row"]: r for r in summary["rows"]}
    assert rows["only gausscse"]["per_seed"][1] == {
        "stsb-test": 74.0, "sick-r": 62.0, "snli-direction-hyp-not-shorter": 94.0, "entity-top10": None,
    }  # fmt: skip
    # by hand, seed by seed (x: (direction + entity) / 2, None as 0; y: (stsb + sick) / 2)
    expected = {
        "untrained": ([0.0], [79.5], None),  # one seed: no interval
        "unified (upgrad)": ([40.0, 43.0, 43.0], [75.0, 77.0, 77.5], T2),
        "only gausscse": ([45.0, 47.0], [65.0, 68.0], T1),
        "without ease": ([25.0, 26.0], [74.0, 75.0], T1),
    }
    points, own_cols = tradeoff_points(summary)
    assert own_cols == ["snli-direction-hyp-not-shorter", "entity-top10"]
    assert [p["row"] for p in points] == list(expected)
    for p in points:
        xs, ys, t = expected[p["row"]]
        assert p["seeds"] == len(xs)
        assert p["own"]["mean"] == pytest.approx(sum(xs) / len(xs))
        assert p["general"]["mean"] == pytest.approx(sum(ys) / len(ys))
        if t is None:
            assert p["own"]["ci"] is None and p["general"]["ci"] is None
        else:
            assert p["own"]["ci"] == pytest.approx(_half(xs, t), rel=1e-5)
            assert p["general"]["ci"] == pytest.approx(_half(ys, t), rel=1e-5)
    # means: untrained (0, 79.5), upgrad (42, 76.5), only gausscse (46, 66.5), without ease (25.5, 74.5): the
    # last is below and left of upgrad; each of the others is best on one axis or between them
    assert {p["row"]: p["frontier"] for p in points} == {
        "untrained": True, "unified (upgrad)": True, "only gausscse": True, "without ease": False,
    }  # fmt: skip

    folder, page = tmp_path / "out", tmp_path / "docs" / "page.md"
    folder.mkdir()
    page.parent.mkdir()
    page.write_text("# Results\n", encoding="utf-8")
    text = publish(summary, folder, page)
    # upgrad: x 42 ± 4.302653 * sqrt(3) / sqrt(3) = 4.30; y 76.5 ± 4.302653 * sqrt(1.75) / sqrt(3) = 3.29
    # only gausscse: x 46 ± 12.706 * sqrt(2) / sqrt(2) = 12.71, y 66.5 ± 12.706 * 1.5 = 19.06
    table_lines = [
        "| run | seeds | general (STS-B, SICK-R) | own columns | frontier |",
        "| untrained | 1 | 79.50 | 0.00 | yes |",
        "| unified (upgrad) | 3 | 76.50 ± 3.29 | 42.00 ± 4.30 | yes |",
        "| only gausscse | 2 | 66.50 ± 19.06 | 46.00 ± 12.71 | yes |",
        "| without ease | 2 | 74.50 ± 6.35 | 25.50 ± 6.35 | no |",
    ]
    for line in table_lines:
        assert line + "\n" in text
    assert "own columns the mean of snli-direction-hyp-not-shorter, entity-top10;" in text and "counts as 0" in text
    assert text.endswith("\n![general quality against the objectives' own columns](tradeoff.png)\n")
    assert (folder / "ablation.md").read_text(encoding="utf-8") == text
    png = (folder / "tradeoff.png").read_bytes()
    assert png[:4] == b"\x89PNG"
    block = page.read_text(encoding="utf-8")
    assert all(line in block for line in table_lines)
    assert "![general quality against the objectives' own columns](page-tradeoff.png)" in block
    assert (page.parent / "page-tradeoff.png").read_bytes() == png
    assert block.index("| without ease | 2 | 74.50") < block.index("page-tradeoff.png") < block.index("page-ablation")
    # the same summary writes the same bytes again (no timestamp in the PNG)
    again = tmp_path / "again"
    again.mkdir()
    assert publish(summary, again, None) == text and (again / "tradeoff.png").read_bytes() == png


def test_no_tradeoff_without_its_columns_or_per_seed_scores(tmp_path):
    """An older summary (no ``per_seed``) or a study without sick-r or without an own column writes exactly
    the tables it wrote before, and no trade-off plot."""
    summary = _tradeoff_summary()
    old = json.loads(json.dumps(summary))
    for row in old["rows"]:
        del row["per_seed"]
    without_sick = summary | {"columns": ["stsb-test", "snli-direction-hyp-not-shorter", "entity-top10"]}
    without_own = summary | {"own": {"amr": "amr-text-to-graph"}}
    for case in (old, without_sick, without_own):
        expected = table(case["rows"], case["columns"], case["own"], case["units"], case["panel_targets"])
        assert block_text(case) == expected and "frontier" not in expected
        folder, page = tmp_path / str(id(case)), tmp_path / f"{id(case)}.md"
        folder.mkdir()
        assert publish(case, folder, page) == expected
        assert sorted(p.name for p in folder.iterdir()) == ["ablation.md", "ablation.png"]
        assert "tradeoff" not in page.read_text(encoding="utf-8")
