import json
from pathlib import Path

import pytest

from unisent.builders import nli_triples
from unisent.cli import main

SNLI = Path(__file__).resolve().parent / "evaluation" / "fixtures" / "data" / "nli" / "snli"


def test_triples_take_first_entailment_and_contradiction_per_premise():
    premises = ["p1", "p1", "p1", "p2", "p2", "p3", "p1"]
    hypotheses = ["n", "e", "c", "e2", "n2", "c3", "e-late"]
    labels = ["neutral", "entailment", "contradiction", "entailment", "neutral", "contradiction", "entailment"]
    assert nli_triples(premises, hypotheses, labels) == [{"anchor": "p1", "positive": "e", "negative": "c"}]


def test_nli_triples_command_on_snli_layout(tmp_path, capsys):
    out = tmp_path / "triples.jsonl"
    main(["data", "nli-triples", "--format", "snli", "--input", str(SNLI), "--split", "dev", "--output", str(out)])
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    premises = (SNLI / "s1.dev").read_text().splitlines()
    hyps = (SNLI / "s2.dev").read_text().splitlines()
    labels = (SNLI / "labels.dev").read_text().splitlines()
    expected_first = {
        "anchor": premises[0].strip(),
        "positive": hyps[labels.index("entailment")].strip(),
        "negative": hyps[labels.index("contradiction")].strip(),
    }
    assert rows[0] == expected_first
    assert len(rows) == len({p for p in premises})  # every premise of the fixture has both labels
    assert f"{len(rows)} triples" in capsys.readouterr().out


def test_nli_triples_command_missing_input(tmp_path):
    with pytest.raises(SystemExit, match="nope"):
        main(
            [
                "data",
                "nli-triples",
                "--format",
                "snli",
                "--input",
                str(tmp_path / "nope"),
                "--output",
                str(tmp_path / "o.jsonl"),
            ]
        )


def test_builders_write_what_load_dataset_reads_jsonl_or_parquet(tmp_path, capsys):
    from datasets import load_dataset

    for name in ("triples.jsonl", "triples.parquet"):
        main(
            [
                "data",
                "nli-triples",
                "--format",
                "snli",
                "--input",
                str(SNLI),
                "--split",
                "dev",
                "--output",
                str(tmp_path / name),
            ]
        )
    builder = {"jsonl": "json", "parquet": "parquet"}
    a, b = (
        load_dataset(
            builder[suffix],
            data_files=str(tmp_path / f"triples.{suffix}"),
            split="train",
            cache_dir=str(tmp_path / "hf"),
        )
        for suffix in ("jsonl", "parquet")
    )
    assert a.column_names == b.column_names == ["anchor", "positive", "negative"]
    assert a.to_list() == b.to_list() and len(a) > 0
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # written atomically: no temporaries left
