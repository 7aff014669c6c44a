"""The EASE short-text clustering suite: the paper's eight sets, GoogleNews-TS/-T/-S in EASE's layout."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from unisent.data.benchmark_readers import read_labeled_tsv
from unisent.evaluation import GROUPS, DataFormatError, evaluate, get_task

GOOGLENEWS = {"stc-googlenews-s": "s.txt", "stc-googlenews-t": "t.txt", "stc-googlenews-ts": "ts.txt"}
# EASE (Nishikawa et al., 2022), Tables 1 and 15: AgNews, Biomedical, GoogleNews-S/-T/-TS, SearchSnippets,
# StackOverflow, Tweet.
PAPER_EIGHT = {
    "stc-agnews",
    "stc-biomedical",
    "stc-googlenews-s",
    "stc-googlenews-t",
    "stc-googlenews-ts",
    "stc-searchsnippets",
    "stc-stackoverflow",
    "stc-tweet",
}


def test_stc_group_is_the_papers_eight() -> None:
    assert set(GROUPS["stc"]) == PAPER_EIGHT and len(GROUPS["stc"]) == 8
    for name, filename in GOOGLENEWS.items():
        task = get_task(name)
        assert task.files() == (f"clustering/stc/{filename}",)
        assert task.optional and task.main_metric == "accuracy"


def test_googlenews_reader_on_the_ease_layout(data_dir: Path) -> None:
    for filename in GOOGLENEWS.values():
        data = read_labeled_tsv(data_dir / "clustering" / "stc" / filename)
        assert len(data) == 12 and sorted(set(data.labels)) == ["108", "17", "42"]
        assert all(text and "\t" not in text for text in data.texts)
    title = read_labeled_tsv(data_dir / "clustering" / "stc" / "t.txt").texts[0]
    both = read_labeled_tsv(data_dir / "clustering" / "stc" / "ts.txt").texts[0]
    assert both.startswith(title + " ")


def test_googlenews_malformed_line_is_named(tmp_path: Path) -> None:
    path = tmp_path / "ts.txt"
    path.write_text("3\tfirst title\nno label here\n", encoding="utf-8")
    with pytest.raises(DataFormatError, match=r"ts\.txt:line 2: expected 'label<TAB>text'"):
        read_labeled_tsv(path)


def test_googlenews_tasks_cluster_their_topics(data_dir: Path, model) -> None:
    results = evaluate(model, list(GOOGLENEWS), data_dir, progress=False)
    assert list(results["tasks"]) == list(GOOGLENEWS)
    for entry in results["tasks"].values():
        assert entry["group"] == "stc"
        assert 100 / 3 <= entry["score"] <= 100  # 3 balanced classes: any clustering scores >= 1/3
    assert results["groups"]["stc"]["n_tasks"] == 3


def test_stc_group_skips_absent_googlenews_files(tmp_path: Path, data_dir: Path, model) -> None:
    stc = tmp_path / "clustering" / "stc"
    stc.mkdir(parents=True)
    for name in ("agnews.txt", "searchsnippets.txt", "searchsnippets_label.txt", "tweet.txt"):
        shutil.copy(data_dir / "clustering" / "stc" / name, stc / name)
    for other in ("stackoverflow", "biomedical"):  # the same layout as SearchSnippets
        shutil.copy(stc / "searchsnippets.txt", stc / f"{other}.txt")
        shutil.copy(stc / "searchsnippets_label.txt", stc / f"{other}_label.txt")
    results = evaluate(model, ["stc"], tmp_path, progress=False)
    assert set(results["tasks"]) == PAPER_EIGHT - set(GOOGLENEWS)
    assert set(results["skipped"]) == set(GOOGLENEWS)
    assert "clustering/stc/ts.txt" in results["skipped"]["stc-googlenews-ts"]
    with pytest.raises(FileNotFoundError, match=r"clustering/stc/s\.txt"):
        evaluate(model, ["stc-googlenews-s"], tmp_path, progress=False)
