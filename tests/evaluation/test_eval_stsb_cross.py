"""Cross-lingual STS-B (issue 68): English sentence 1 against the other language's sentence 2 of the aligned
stsb-multi-mt files, the tasks ``stsb-multi-en-{de,es}`` (test) and ``-dev``, and the panel columns of them."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from unisent.data.benchmark_readers import DataFormatError, read_stsb_multi_cross
from unisent.evaluation import GROUPS, PANEL_COLUMNS, TASKS, evaluate
from unisent.evaluation.panel import _TASK_COLUMNS

EN = 'A man plays.,"A man, playing.",4.5\nA dog runs.,A cat sleeps.,0.5\nKids eat.,"Children\nare eating.",4.0\n'
DE = (
    'Ein Mann spielt.,"Ein Mann, spielend.",4.5\nEin Hund rennt.,Eine Katze schläft.,0.5\n'
    "Kinder essen.,Kinder essen mit dem Hund.,4.0\n"
)


def write(folder: Path, lang: str, split: str, text: str) -> Path:
    path = folder / "sts" / "stsb-multi-mt" / f"stsb-{lang}-{split}.csv"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def test_reader_pairs_english_s1_with_foreign_s2(tmp_path: Path) -> None:
    data = read_stsb_multi_cross(write(tmp_path, "en", "test", EN), write(tmp_path, "de", "test", DE))
    assert data.sentences1 == ["A man plays.", "A dog runs.", "Kids eat."]
    assert data.sentences2 == ["Ein Mann, spielend.", "Eine Katze schläft.", "Kinder essen mit dem Hund."]
    assert data.scores == [4.5, 0.5, 4.0]


def test_misaligned_files_are_one_line_naming_file_and_line(tmp_path: Path) -> None:
    english = write(tmp_path, "en", "test", EN)
    short = write(tmp_path, "de", "dev", DE.split("\n", 1)[1])
    with pytest.raises(DataFormatError, match=r"stsb-de-dev\.csv.*has 2 rows but .*stsb-en-test\.csv has 3") as info:
        read_stsb_multi_cross(english, short)
    assert "\n" not in str(info.value)
    # the fourth row's score differs; it starts on line 5, after the third row's quoted newline
    english = write(tmp_path, "en", "dev", EN + "Last.,The last.,1.0\n")
    other = write(tmp_path, "es", "dev", EN + "Last.,El último.,2.0\n")
    with pytest.raises(DataFormatError, match=r"stsb-es-dev\.csv:line 5\b.*score 2 differs from 1 in row 4") as info:
        read_stsb_multi_cross(english, other)
    assert "\n" not in str(info.value) and "stsb-en-dev.csv" in str(info.value)


def test_tasks_registered_listed_and_panel_columns(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from unisent.commands.evaluate import main as evaluate_main

    tests = {"stsb-multi-en-de", "stsb-multi-en-es"}
    devs = {f"{name}-dev" for name in tests}
    assert tests | devs <= set(TASKS) and set(GROUPS["stsb-multi-cross"]) == tests
    assert tests <= set(GROUPS["multilingual"]) and not devs & set(GROUPS["multilingual"])  # dev: out of averages
    assert TASKS["stsb-multi-en-de-dev"].files() == tuple(f"sts/stsb-multi-mt/stsb-{x}-dev.csv" for x in ("en", "de"))
    assert all(name in _TASK_COLUMNS and name in PANEL_COLUMNS for name in tests | devs)
    evaluate_main(["--list"])
    listing = capsys.readouterr().out
    assert all(name in listing for name in tests | devs | {"stsb-multi-cross"})


class Words:
    """A sentence's vector counts the words of a tiny bilingual lexicon, each word's translation alike."""

    WORDS = {"man": 0, "mann": 0, "dog": 1, "hund": 1, "cat": 2, "katze": 2, "kids": 3, "kinder": 3, "children": 3}

    def encode(self, sentences: list[str], batch_size: int = 64, **kwargs) -> np.ndarray:
        out = np.full((len(sentences), 4), 0.01, dtype=np.float32)
        for i, sentence in enumerate(sentences):
            for word in sentence.lower().replace(",", " ").replace(".", " ").split():
                if word in self.WORDS:
                    out[i, self.WORDS[word]] += 1
        return out


def test_task_runs_on_the_aligned_files(tmp_path: Path) -> None:
    write(tmp_path, "en", "test", EN)
    write(tmp_path, "de", "test", DE)
    result = evaluate(Words(), ["stsb-multi-en-de"], tmp_path, progress=False)["tasks"]["stsb-multi-en-de"]
    # cosines: man/mann ~1, dog/katze ~0, kids/kinder+hund ~0.71: the gold order (4.5, 0.5, 4.0), Spearman 1
    assert result["score"] == pytest.approx(100.0)
