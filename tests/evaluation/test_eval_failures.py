"""STS17 rows without a gold score, files checked before encoding, and failed tasks that keep the others."""

from __future__ import annotations

import json
import logging
import shutil
from pathlib import Path

import pytest

from unisent.data.benchmark_readers import read_senteval_sts, read_sts17
from unisent.evaluation import DataFormatError, evaluate, format_markdown, get_task, merge_results

STS17 = "sts/STS17-test"
TR_EN = f"{STS17}/STS.input.track6.tr-en.txt"

# The layout of the public track6.tr-en file: scored rows, then rows whose third field is empty.
SCORED = [
    ("A girl is styling her hair.", "Bir kız saçını tarıyor.", "2.5"),
    ("A group of men play soccer on the beach.", "Bir grup erkek sahilde futbol oynuyor.", "3.6"),
    ("One woman is measuring another woman's ankle.", "Bir kadın başka bir kadının bileğini ölçüyor.", "5.0"),
    ("A man is cutting up a cucumber.", "Bir adam salatalık doğruyor.", "4.2"),
    ("A man is playing a harp.", "Bir adam klavye çalıyor.", "1.5"),
]
UNSCORED = [
    ("The couple are asleep.", "Kanepede uyuyorlar."),
    ("A horse is running fast.", "At hızlı koşuyor."),
    ("A person is shopping.", "Kişi alışveriş yapıyor."),
]


def _tr_en_text(bad_line: int | None = None) -> str:
    rows = ["\t".join(row) for row in SCORED] + ["\t".join(row) + "\t" for row in UNSCORED]
    if bad_line is not None:
        first, second, _ = SCORED[bad_line - 1]
        rows[bad_line - 1] = f"{first}\t{second}\tfour"
    return "\n".join(rows) + "\n"


@pytest.fixture
def sts_dir(tmp_path: Path, data_dir: Path) -> Path:
    """A data directory with STS-B, STS17 en-en (from the fixtures) and a tr-en file with unscored rows."""
    for name in ("sts/stsbenchmark/sts-test.csv", f"{STS17}/STS.input.track5.en-en.txt"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(data_dir / name, tmp_path / name)
    (tmp_path / TR_EN).write_text(_tr_en_text(), encoding="utf-8")
    return tmp_path


class ExplodingModel:
    """A model that must not be called: the test fails if anything is encoded."""

    def encode(self, sentences, batch_size=64, **kwargs):
        raise AssertionError(f"encode was called with {len(sentences)} sentences")


def test_sts17_rows_without_score_are_skipped_and_counted(sts_dir: Path) -> None:
    data = read_sts17(sts_dir / TR_EN)
    assert len(data) == len(SCORED) and data.unscored == len(UNSCORED)
    assert data.scores == [float(row[2]) for row in SCORED]
    assert data.sentences2[-1] == SCORED[-1][1]
    # a row with only two fields in a three-column file has no score either
    path = sts_dir / "two-fields.txt"
    path.write_text("a b\tc d\t1.0\ne f\tg h\t2.0\ni j\tk l\t0.5\nm n\to p\n", encoding="utf-8")
    assert (len(read_sts17(path)), read_sts17(path).unscored) == (3, 1)


def test_sts17_unscored_count_is_a_metric_and_unscored_rows_are_not_encoded(sts_dir: Path, model) -> None:
    results = evaluate(model, ["sts17"], sts_dir, progress=False)
    assert set(results["tasks"]) == {"sts17-en-en", "sts17-tr-en"}
    metrics = results["tasks"]["sts17-tr-en"]["metrics"]
    assert metrics["n_pairs"] == len(SCORED)
    assert metrics["n_unscored"] == len(UNSCORED)
    assert "n_unscored" not in results["tasks"]["sts17-en-en"]["metrics"]  # every row scored
    encoded = {sentence for call in model.calls for sentence in call}
    assert not encoded & {sentence for row in UNSCORED for sentence in row}
    assert "n_unscored 3" in format_markdown(results)
    assert results["failed"] == {}


def test_senteval_blank_gold_lines_are_counted(data_dir: Path) -> None:
    folder = data_dir / "sts" / "STS12-en-test"
    gold = sorted(folder.glob("STS.gs.*.txt"))[0]
    data = read_senteval_sts(folder / gold.name.replace("STS.gs.", "STS.input."), gold)
    blank = sum(1 for line in gold.read_text(encoding="utf-8-sig").splitlines() if not line.strip())
    assert data.unscored == blank


def test_sts17_malformed_rows_name_the_line(tmp_path: Path) -> None:
    path = tmp_path / "STS.input.track6.tr-en.txt"
    path.write_text(_tr_en_text(bad_line=2), encoding="utf-8")
    with pytest.raises(DataFormatError, match=r"track6\.tr-en\.txt:line 2: .*score.*'four'"):
        read_sts17(path)
    path.write_text("only one field\n", encoding="utf-8")
    with pytest.raises(DataFormatError, match=r"line 1: expected sentence1, sentence2 and score, got 1"):
        read_sts17(path)
    path.write_text("a\tb\t\nc\td\t\n", encoding="utf-8")
    with pytest.raises(DataFormatError, match=r"no row has a gold score \(2 rows without one\)"):
        read_sts17(path)


def test_a_broken_file_fails_its_task_and_the_others_are_reported(sts_dir: Path, model, caplog) -> None:
    (sts_dir / TR_EN).write_text(_tr_en_text(bad_line=3), encoding="utf-8")
    with caplog.at_level(logging.ERROR, logger="unisent.evaluation.runner"):
        results = evaluate(model, ["stsb-test", "sts17"], sts_dir, progress=False)
    assert list(results["tasks"]) == ["stsb-test", "sts17-en-en"]
    assert list(results["failed"]) == ["sts17-tr-en"]
    error = results["failed"]["sts17-tr-en"]
    assert error.startswith("RecordError: ") and "track6.tr-en.txt:line 3" in error and "\n" not in error
    assert "sts17-tr-en" in caplog.text
    text = format_markdown(results)
    assert "### failed" in text and f"- sts17-tr-en: {error}" in text
    assert "| stsb-test | spearman |" in text
    json.dumps(results)  # still JSON-serialisable


def test_a_bad_file_fails_before_anything_is_encoded(sts_dir: Path, caplog) -> None:
    (sts_dir / TR_EN).write_text(_tr_en_text(bad_line=4), encoding="utf-8")
    # the broken task comes last, yet its file is read before the first task encodes anything
    with pytest.raises(DataFormatError, match=r"line 4"):
        evaluate(
            ExplodingModel(), ["stsb-test", "sts17-en-en", "sts17-tr-en"], sts_dir, progress=False, on_error="raise"
        )
    with pytest.raises(DataFormatError, match=r"line 4"):
        get_task("sts17-tr-en").run(ExplodingModel(), sts_dir)
    # reporting: the read failure is logged first, then the good task fails only when it encodes
    with caplog.at_level(logging.ERROR, logger="unisent.evaluation.runner"):
        results = evaluate(ExplodingModel(), ["stsb-test", "sts17-tr-en"], sts_dir, progress=False)
    assert results["tasks"] == {}
    assert "reading its data" in caplog.records[0].getMessage()
    assert "sts17-tr-en" in caplog.records[0].getMessage()
    assert "being scored" in caplog.records[1].getMessage()
    assert results["failed"]["stsb-test"].startswith("AssertionError: encode was called")


def test_each_file_is_read_once_per_run(sts_dir: Path, model, monkeypatch) -> None:
    from unisent.evaluation.tasks import task as base

    reads: list[tuple[str, ...]] = []
    original = base.Source.read

    def counting_read(self, data_dir):
        reads.append(self.files)
        return original(self, data_dir)

    monkeypatch.setattr(base.Source, "read", counting_read)
    # stsb-dev and stsb-align-uniform share sts-dev.csv: it is read once for both
    (sts_dir / "sts/stsbenchmark/sts-dev.csv").write_bytes((sts_dir / "sts/stsbenchmark/sts-test.csv").read_bytes())
    evaluate(model, ["stsb-test", "stsb-dev", "stsb-align-uniform", "sts17-en-en"], sts_dir, progress=False)
    assert sorted(reads) == sorted(set(reads)) and len(reads) == 3


def test_merge_results_keeps_failures_until_a_later_part_runs_the_task() -> None:
    entry = {"group": "sts17", "main_metric": "spearman", "score": 50.0, "metrics": {"spearman": 50.0}, "seconds": 0.1}
    first = {
        "tasks": {"sts17-en-en": entry},
        "failed": {"sts17-tr-en": "RecordError: x"},
        "skipped": {},
        "config": {"data_dir": "d"},
    }
    assert merge_results(first)["failed"] == {"sts17-tr-en": "RecordError: x"}
    second = {"tasks": {"sts17-tr-en": entry}, "failed": {}, "skipped": {}}
    merged = merge_results(first, second)
    assert merged["failed"] == {} and set(merged["tasks"]) == {"sts17-en-en", "sts17-tr-en"}
    assert merged["groups"]["sts17"]["n_tasks"] == 2
    third = {"tasks": {}, "failed": {"sts17-en-en": "ValueError: y"}}
    assert set(merge_results(first, second, third)["tasks"]) == {"sts17-tr-en"}


def test_evaluate_command_reports_good_tasks_and_exits_non_zero(sts_dir: Path, model, monkeypatch, capsys) -> None:
    import unisent
    from unisent.commands.evaluate import main as evaluate_main

    monkeypatch.setattr(unisent, "load", lambda name, device=None: model)
    (sts_dir / TR_EN).write_text(_tr_en_text(bad_line=2), encoding="utf-8")
    out = sts_dir / "results.json"
    with pytest.raises(SystemExit) as info:
        evaluate_main(
            [
                "--model",
                "fake",
                "--tasks",
                "stsb-test,sts17",
                "--data-dir",
                str(sts_dir),
                "--output",
                str(out),
                "--quiet",
            ]
        )
    assert info.value.code not in (0, None)
    assert "1 of 3 tasks failed: sts17-tr-en" in str(info.value.code)
    printed = capsys.readouterr().out
    assert "| stsb-test | spearman |" in printed and "| sts17-en-en | spearman |" in printed
    assert "- sts17-tr-en: RecordError:" in printed
    saved = json.loads(out.read_text())
    assert set(saved["tasks"]) == {"stsb-test", "sts17-en-en"} and set(saved["failed"]) == {"sts17-tr-en"}


def test_on_error_is_checked(sts_dir: Path, model) -> None:
    with pytest.raises(ValueError, match="on_error"):
        evaluate(model, ["stsb-test"], sts_dir, on_error="ignore")  # type: ignore[arg-type]
