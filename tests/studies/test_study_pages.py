"""This project's study pages (docs/results/unified.md and docs/results/unified/*.md) are written by
``python -m studies.ablation_pages`` and ``python -m studies.merge_parts`` from the results kept beside them: every
generated block is written again here byte for byte with nothing run, every block of the pages is one of them, and
every image and file the pages link to is there. The tool itself: a study run now goes onto a page with its plots
(its runs' conflicts plot too), its ``ablation.json`` alone writes the block again; a named block keeps the page's
other study; parts of one study are joined by seed."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

from studies import ablation_pages, merge_parts, own_layers
from studies.ablation_pages import combine, pages, publish
from unisent.commands.ablate.summarise import summarize, summary_table

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "docs" / "results"
UNIFIED = RESULTS / "unified"
#: every page of the unified studies, relative to docs/results
PAGES = ["unified.md", *(f"unified/{p.name}" for p in sorted(UNIFIED.glob("*.md")))]


def _fp32_block(stem: str, row: str, seeds: str) -> tuple[str, str, str, tuple[str, ...], tuple[bytes, ...]]:
    """A kept block of one fp32 row over three seeds, named ``stem``: its file, marker, plots (no conflicts plot for a
    single objective's row) and the lines the table must hold; the page comes first."""
    page = {"own": "own-layers", "own-fresh": "own-layers", "best": "best-on-dev"}.get(stem)
    page = page or ("cls" if stem.startswith("cls") else "own5")
    plots = ("ablation", "tradeoff") if row.startswith("only ") else ("ablation", "tradeoff", "conflicts")
    lines = (f"| {row} | 3 |", f"Training precision per seed: {row} 32-true ({seeds}).")
    return (
        f"{page}.md",
        f"{stem}-ablation.json",
        f" {stem}",
        tuple(f"{stem}-{name}.png" for name in plots),
        tuple(line.encode() for line in lines),
    )


BLOCKS = [
    (
        "distill.md",
        "distill-ablation.json",
        "",
        ("distill-ablation.png", "distill-conflicts.png"),
        (b"| without distill | 3 |", b"| unified (upgrad) | 3 |"),
    ),
    (
        "keep-or-merge.md",
        "merge-ablation.json",
        " merge",
        ("merge-ablation.png", "merge-tradeoff.png", "merge-conflicts.png"),
        (b"| merge (ties) | 3 |", b"| only cmlm | 3 |", b"| unified (imtlg) | 3 |", b"| unified (anchored) | 3 |"),
    ),
    (  # the same study on the fresh seeds 48-50
        "keep-or-merge.md",
        "merge-fresh-ablation.json",
        " merge-fresh",
        tuple(f"merge-fresh-{name}.png" for name in ("ablation", "tradeoff", "conflicts")),
        (b"| merge (ties) | 3 |", b"| only gausscse | 3 |", b"| unified (anchored) | 3 |"),
    ),
    (  # the next route: Anchored at 124 steps, seeds 42-44
        "anchored-long.md",
        "long-ablation.json",
        " long",
        tuple(f"long-{name}.png" for name in ("ablation", "tradeoff", "conflicts")),
        (b"| unified (anchored) | 3 |",),
    ),
    (  # the same on the fresh seeds (48 and 49; 50 not run)
        "anchored-long.md",
        "long-fresh-ablation.json",
        " long-fresh",
        tuple(f"long-fresh-{name}.png" for name in ("ablation", "tradeoff", "conflicts")),
        (b"| unified (anchored) | 2 |",),
    ),
    (  # the [CLS] route: Anchored at 124 steps, GaussCSE's head reading [CLS], seeds 42-44 (42 kept, 43-44 joined)
        "cls.md",
        "cls-ablation.json",
        " cls",
        tuple(f"cls-{name}.png" for name in ("ablation", "tradeoff", "conflicts")),
        (b"| unified (anchored) | 3 |",),
    ),
    (  # GaussCSE alone with the [CLS] head, seeds 42-44
        "cls.md",
        "cls-single-ablation.json",
        " cls-single",
        tuple(f"cls-single-{name}.png" for name in ("ablation", "tradeoff")),
        (b"| only gausscse | 3 |",),
    ),
    (  # the [CLS] route on the fresh seeds, trained in bf16 on a Zen 4 (recorded per seed)
        "cls.md",
        "cls-fresh-ablation.json",
        " cls-fresh",
        tuple(f"cls-fresh-{name}.png" for name in ("ablation", "tradeoff", "conflicts")),
        (
            b"| unified (anchored) | 3 |",
            b"Training precision per seed: unified (anchored) bf16-mixed (48, 49, 50).",
        ),
    ),
    (  # GaussCSE alone with the [CLS] head on the fresh seeds, the same machine and precision
        "cls.md",
        "cls-single-fresh-ablation.json",
        " cls-single-fresh",
        tuple(f"cls-single-fresh-{name}.png" for name in ("ablation", "tradeoff")),
        (b"| only gausscse | 3 |",),
    ),
    (  # seeds 43 and 44 of the [CLS] route in bf16, kept beside their fp32 runs
        "cls.md",
        "cls-bf16-ablation.json",
        " cls-bf16",
        tuple(f"cls-bf16-{name}.png" for name in ("ablation", "tradeoff", "conflicts")),
        (b"| unified (anchored) | 2 |",),
    ),
    _fp32_block(
        "cls-fresh-fp32", "unified (anchored)", "48, 49, 50"
    ),  # the [CLS] route on the fresh seeds again, in fp32 (--precision fp32)
    _fp32_block(
        "cls-single-fresh-fp32", "only gausscse", "48, 49, 50"
    ),  # GaussCSE alone with the [CLS] head on the fresh seeds, in fp32
    _fp32_block(
        "own", "unified (anchored)", "42, 43, 44"
    ),  # the route with GaussCSE's head over its own top layers (own_layers: 2), fp32
    _fp32_block("own-fresh", "unified (anchored)", "48, 49, 50"),  # the same route on the fresh seeds
    _fp32_block(
        "own5", "unified (anchored)", "42, 43, 44"
    ),  # the route with GaussCSE's head over its own top five layers (own_layers: 5), fp32
    _fp32_block("own5-fresh", "unified (anchored)", "48, 49, 50"),  # the same route on the fresh seeds
    _fp32_block(
        "single124", "only gausscse", "42, 43, 44"
    ),  # GaussCSE alone at the routes' 124 steps (the head on the mean), fp32
    _fp32_block("single124-fresh", "only gausscse", "48, 49, 50"),  # the same on the fresh seeds
    _fp32_block("best", "unified (anchored)", "42, 43, 44"),  # the five-layer route with BestOnDev, fp32
]


@pytest.mark.parametrize(("page_name", "kept_name", "block", "plots", "rows"), BLOCKS)
def test_the_real_study_page_is_written_again_from_its_kept_results(tmp_path, page_name, kept_name, block, plots, rows):
    """docs/results/unified/'s generated blocks (the Distill study; the joint-or-merge study, on seeds 42-44
    and on the fresh seeds 48-50; Anchored at 124 steps, on both seed sets; the [CLS] route and GaussCSE alone with
    its head, on both seed sets, the fresh seeds in bf16 and in fp32, and the route's bf16 seeds; the routes over
    GaussCSE's own top two and five layers, and GaussCSE alone at their 124 steps, on both seed sets; the five-layer
    route with early stopping per objective, seeds 42-44) come from the ``ablation.json`` kept beside the page:
    ``python -m studies.ablation_pages`` writes each block again byte for byte, with nothing run."""
    kept = UNIFIED / kept_name
    page = tmp_path / page_name
    shutil.copyfile(UNIFIED / page_name, page)
    for plot in plots:
        if (UNIFIED / plot).exists():
            shutil.copyfile(UNIFIED / plot, tmp_path / plot)
    committed = page.read_bytes()
    start_marker, end_marker = f"<!-- unisent ablate{block} -->".encode(), f"<!-- /unisent ablate{block} -->".encode()
    start, end = committed.index(start_marker), committed.index(end_marker)
    page.write_bytes(committed[:start] + start_marker + b"\nstale\n" + committed[end:])
    ablation_pages.main([str(kept), "--page", str(page), "--out", str(tmp_path / "out")])
    assert page.read_bytes() == committed
    assert all(row in committed for row in rows)
    assert {p.name for p in (tmp_path / "out").iterdir()} <= {"ablation.md", "ablation.png", "tradeoff.png"}


#: the merge-of-parts tables (``merge_parts.py --table``): the page, its kept JSON (both relative to docs/results)
PARTS = [
    ("unified.md", "unified/parts.json"),
    ("unified.md", "unified/parts-fresh.json"),
    ("unified/merge-of-parts.md", "unified/parts.json"),
    ("unified/merge-of-parts.md", "unified/parts-fresh.json"),
]
#: the route's trade-off blocks (``merge_parts.py --table --tradeoff``): the kept route, the study it joins
PARTS_TRADEOFFS = [("parts.json", "merge-ablation.json"), ("parts-fresh.json", "merge-fresh-ablation.json")]


@pytest.mark.parametrize(("page", "kept"), PARTS)
def test_the_merge_of_parts_tables_on_the_page_come_from_their_kept_results(page, kept):
    """The merge-of-parts tables (on the route's page, and the answer of docs/results/unified.md) are
    ``python -m studies.merge_parts --table`` of the JSON kept beside the route's page."""
    text = (RESULTS / page).read_text(encoding="utf-8")
    name = Path(kept).name
    start, end = f"<!-- merge_parts {name} -->\n", f"<!-- /merge_parts {name} -->"
    block = text[text.index(start) + len(start) : text.index(end)]
    assert block == "\n" + merge_parts.table(json.loads((RESULTS / kept).read_text(encoding="utf-8"))) + "\n\n"


@pytest.mark.parametrize(("kept", "study"), PARTS_TRADEOFFS)
def test_the_merge_of_parts_tradeoffs_on_the_page_come_from_their_kept_results(kept, study, capsys):
    """The route's trade-off blocks on docs/results/unified/merge-of-parts.md are ``merge_parts --table
    --tradeoff`` of the kept JSONs, and their figures are beside the page."""
    page = (UNIFIED / "merge-of-parts.md").read_text(encoding="utf-8")
    start, end = f"<!-- merge_parts tradeoff {kept} -->\n", f"<!-- /merge_parts tradeoff {kept} -->"
    block = page[page.index(start) + len(start) : page.index(end)]
    merge_parts.main(["--table", str(UNIFIED / kept), "--tradeoff", str(UNIFIED / study)])
    assert block == "\n" + capsys.readouterr().out + "\n"
    assert (UNIFIED / kept.replace(".json", "-tradeoff.png")).is_file()


def test_the_own_layers_page_comes_from_its_kept_results():
    """docs/results/unified/own-layers-cost.md's table is ``python -m studies.own_layers table`` of the JSON kept
    beside it, and its plot is there."""
    page = (UNIFIED / "own-layers-cost.md").read_text(encoding="utf-8")
    start, end = "<!-- own_layers own-layers-cost.json -->\n", "<!-- /own_layers own-layers-cost.json -->"
    block = page[page.index(start) + len(start) : page.index(end)]
    record = json.loads((UNIFIED / "own-layers-cost.json").read_text(encoding="utf-8"))
    assert block == "\n" + own_layers.page(record, "own-layers-cost.png") + "\n"
    assert (UNIFIED / "own-layers-cost.png").is_file()
    assert {r["own_layers"] for r in record["rows"]} == set(range(6))


def test_every_generated_block_of_the_pages_is_written_again_by_a_test():
    """No block of the pages escapes the tests above: each ``<!-- unisent ablate NAME -->`` block is a case of
    the kept-results test (on the page it is on), each ``<!-- merge_parts ... -->`` block one of the parts' cases;
    and every marker has its end."""
    found, parts, tradeoffs = set(), set(), set()
    for name in PAGES:
        text = (RESULTS / name).read_text(encoding="utf-8")
        for marker in re.findall(r"<!-- (unisent ablate|merge_parts|own_layers)( [^>]*)? -->", text):
            kind, rest = marker[0], marker[1]
            end = f"<!-- /{kind}{rest} -->"
            assert text.count(end) == 1, f"{name}: {kind}{rest} has no single end marker"
            if kind == "own_layers":
                assert (name, rest) == ("unified/own-layers-cost.md", " own-layers-cost.json")
            elif kind == "unisent ablate":
                found.add((name.removeprefix("unified/"), rest))
            elif rest.startswith(" tradeoff "):
                tradeoffs.add((name, rest.removeprefix(" tradeoff ")))
            else:
                parts.add((name, rest.strip()))
    assert found == {(page, block) for page, _, block, _, _ in BLOCKS}
    assert parts == {(page, Path(kept).name) for page, kept in PARTS}
    assert tradeoffs == {("unified/merge-of-parts.md", kept) for kept, _ in PARTS_TRADEOFFS}


def _anchors(page: Path) -> set[str]:
    """The anchors of a markdown page's headings, as GitHub makes them (code blocks left out)."""
    anchors, fenced = set(), False
    for line in page.read_text(encoding="utf-8").splitlines():
        fenced ^= line.startswith("```")
        if not fenced and line.startswith("#"):
            title = line.lstrip("#").strip().lower()
            anchors.add(re.sub(r"[^\w\- ]", "", title).replace(" ", "-"))
    return anchors


def test_every_image_and_file_the_pages_link_to_is_there():
    """The plots, kept results and pages each page links to (``![..](x.png)``, ``[..](x.json)``, ``[..](y.md#z)``)
    exist, relative to the page, with the heading an anchor names; and unified.md is one screen: the question, the
    answer and the studies' list."""
    for name in PAGES:
        page = RESULTS / name
        text = page.read_text(encoding="utf-8")
        for target, anchor in re.findall(r"\]\(([^)#\s]*)(?:#([^)\s]*))?\)", text):
            if "://" in target:
                continue
            linked = page.parent / target if target else page
            assert linked.exists(), f"{name} links to {target}, which is not there"
            if anchor and linked.suffix == ".md":
                assert anchor in _anchors(linked), f"{name} links to {target}#{anchor}: no such heading"
    assert len((RESULTS / "unified.md").read_text(encoding="utf-8").splitlines()) < 250


def _part(summary: dict, seeds: set[int]) -> dict:
    """The summary a study tabulated on ``seeds`` alone would have kept (cells left out: joining recomputes them)."""
    rows = []
    for row in summary["rows"]:
        index = [i for i, seed in enumerate(row["seeds"]) if seed in seeds]
        if index:
            picked = {k: [row[k][i] for i in index] for k in ("seeds", "per_seed", "train_minutes")}
            rows.append({k: row[k] for k in ("row", "kind", "slug")} | picked)
    return {k: v for k, v in summary.items() if k not in ("rows", "seeds")} | {"rows": rows, "seeds": sorted(seeds)}


def test_parts_of_a_study_are_joined_by_seed(tmp_path):
    """A study whose seed 42 was kept from an earlier round (its runs gone) and whose seeds 43 and 44 were
    tabulated now: ``python -m studies.ablation_pages A B`` joins the rows by seed and writes the same table,
    intervals, verdicts and trade-off as the whole study's summary, names the parts on the page and keeps the
    joined summary; a seed in both parts, or parts of different studies, is refused naming the file."""
    whole = json.loads((UNIFIED / "merge-ablation.json").read_text(encoding="utf-8"))
    parts = []
    for name, seeds in (("kept42.json", {42}), ("now.json", {43, 44})):
        parts.append(tmp_path / name)
        parts[-1].write_text(json.dumps(_part(whole, seeds)), encoding="utf-8")
    (tmp_path / "whole.json").write_text(json.dumps(whole), encoding="utf-8")
    page = tmp_path / "page.md"
    page.write_text("# Results\n", encoding="utf-8")
    pages([tmp_path / "whole.json"], tmp_path / "whole", page)
    expected = page.read_text(encoding="utf-8")

    joined = pages(parts, tmp_path / "joined", page)
    assert joined["seeds"] == [42, 43, 44] and joined["targets"] == whole["targets"]
    assert joined["best_balancer"] == whole["best_balancer"]
    by_row = {r["row"]: r for r in joined["rows"]}
    for row in whole["rows"]:
        assert by_row[row["row"]]["seeds"] == row["seeds"] and by_row[row["row"]]["cells"] == row["cells"]
    written = page.read_text(encoding="utf-8")
    assert f", joined by seed from {parts[0]}, {parts[1]}." in written
    assert written.replace(f", joined by seed from {parts[0]}, {parts[1]}.", ".") == expected
    assert "--seeds 42 43 44 --runs untrained unified" in written
    kept = json.loads((tmp_path / "joined" / "ablation.json").read_text(encoding="utf-8"))
    assert kept["rows"] == joined["rows"] and kept["from_json"] == [str(p) for p in parts]

    with pytest.raises(ValueError, match=r"now.json: row 'untrained' has seed 42 twice"):
        twice = _part(whole, {42, 43})
        parts[1].write_text(json.dumps(twice), encoding="utf-8")
        pages(parts, tmp_path / "bad")
    with pytest.raises(ValueError, match="needs at least one ablation.json"):
        pages([], tmp_path / "bad")
    other = _part(whole, {43, 44}) | {"steps": 124}
    parts[1].write_text(json.dumps(other), encoding="utf-8")
    with pytest.raises(ValueError, match=r"now.json: steps 124 is not .*kept42.json's 62"):
        pages(parts, tmp_path / "bad")
    with pytest.raises(SystemExit, match=r"ablation_pages: .*page.md: not JSON"):  # the command: one line
        ablation_pages.main([str(page)])


def test_joined_parts_name_each_seeds_precision():
    """The table names each row's training precision by seed, also after parts are joined (a part written before
    result files recorded it: not recorded)."""
    results = []
    for seed, precision in ((1, "bf16-mixed"), (2, "32-true")):
        run = {"row": "only ease", "kind": "single", "objectives": ["ease"], "balancer": "static", "seed": seed}
        results.append({"run": run, "train_seconds": 0.0, "scores": {"stsb-test": 1.0}, "precision": precision})
    rows = summarize(results, ["stsb-test"])
    summary = {"rows": rows, "columns": ["stsb-test"], "own": {}, "units": {}, "panel_targets": {}}
    assert "Training precision per seed: only ease bf16-mixed (1), 32-true (2)." in summary_table(summary)
    part = {"recipe": "r.yaml", "steps": 2, "columns": ["stsb-test"], "seeds": [3], "command": "unisent ablate"}
    old = dict(rows[0], seeds=[3], per_seed=[{"stsb-test": 2.0}], train_minutes=[0.0])
    old.pop("precision")  # a summary written before results recorded it
    joined = combine([("a.json", part | {"rows": rows, "seeds": [1, 2]}), ("b.json", part | {"rows": [old]})])
    assert joined["rows"][0]["precision"] == ["bf16-mixed", "32-true", None]
    assert "only ease bf16-mixed (1), 32-true (2), not recorded (3)" in summary_table(
        joined | summary | {"rows": joined["rows"]}
    )


def test_a_named_block_keeps_the_pages_other_study(tmp_path):
    """A named block (``--block NAME``, or the summary's own): the study goes between its own markers with its own
    plots (``NAME-*.png``); the page's other block stays, and the block is written again in place."""
    page = tmp_path / "page.md"
    page.write_text("# R\n\n<!-- unisent ablate -->\nthe other study\n<!-- /unisent ablate -->\n\ntail\n")
    row = {"row": "only a", "kind": "single", "slug": "only-a", "seeds": [1], "train_minutes": [0.0]}
    row["cells"] = {"stsb-test": {"mean": 80.0, "ci": None, "values": [80.0]}}
    summary = {"rows": [row], "columns": ["stsb-test"], "own": {}, "units": {"a": ["a"]}, "panel_targets": {}}
    summary |= {"command": "unisent ablate r.yaml", "block": "merge", "seeds": [1], "steps": 2}
    publish(summary, tmp_path / "out", page)
    text = page.read_text()
    assert "<!-- unisent ablate -->\nthe other study\n<!-- /unisent ablate -->" in text
    assert text.count("<!-- unisent ablate merge -->") == 1 and text.endswith("<!-- /unisent ablate merge -->\n")
    assert "| only a | 1 | 80.00 |" in text and "(merge-ablation.png)" in text
    assert (tmp_path / "merge-ablation.png").exists()
    summary["rows"][0]["cells"]["stsb-test"]["mean"] = 81.0
    publish(summary, tmp_path / "out", page)  # written again in place
    again = page.read_text()
    assert again.count("<!-- unisent ablate merge -->") == 1 and "| only a | 1 | 81.00 |" in again
    publish(summary | {"block": None}, tmp_path / "out", page, block="other")  # --block names it
    assert "<!-- unisent ablate other -->" in page.read_text() and (tmp_path / "other-ablation.png").exists()


@pytest.mark.parametrize(
    ("field", "value", "says"),
    [("rows", 5, "a field of the wrong type"), ("rows", [{"a": 1}], "missing field"), ("seeds", "abc", "")],
)
def test_a_malformed_summary_is_one_line_naming_the_file(tmp_path, monkeypatch, field, value, says):
    """Issue 67: what ``unisent ablate --from_json`` became reads a received file: a field of the wrong type or
    missing is one line naming it (``UNISENT_TRACEBACK=1``: the traceback)."""
    summary = dict.fromkeys(ablation_pages.NEEDED, "x") | {"rows": [], "seeds": [1], "columns": [], "own": {}}
    path = tmp_path / "ablation.json"
    path.write_text(json.dumps(summary | {"units": {}, "panel_targets": {}, field: value}), encoding="utf-8")
    monkeypatch.delenv("UNISENT_TRACEBACK", raising=False)
    with pytest.raises(SystemExit) as stop:
        ablation_pages.main([str(path), "--out", str(tmp_path / "out")])
    assert str(stop.value.code).startswith(f"ablation_pages: {path}") and "\n" not in str(stop.value.code)
    assert says in str(stop.value.code)
    monkeypatch.setenv("UNISENT_TRACEBACK", "1")
    with pytest.raises((KeyError, TypeError, AttributeError, IndexError, ArithmeticError)):
        ablation_pages.main([str(path), "--out", str(tmp_path / "out")])
