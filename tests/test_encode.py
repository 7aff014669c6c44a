"""unisent encode: every input format, row alignment across chunks, empty/undecodable lines, missing files."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch

import unisent
from unisent.cli import main
from unisent.encoders import Encoder, EncoderConfig
from unisent.encoders.batching import TruncationWarning
from unisent.export import EmptyInputError, EncodeInputError, OutputExistsError, encode_file

#: the repository's training, benchmark and test samples (not in the wheel)
SAMPLE_DIR = Path(__file__).resolve().parents[1] / "samples"

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def model_dir(tiny_bert_dir, tmp_path_factory) -> Path:
    directory = tmp_path_factory.mktemp("encoder")
    Encoder(EncoderConfig(model=str(tiny_bert_dir), pooler="mean", max_length=48)).save_pretrained(directory)
    return directory


@pytest.fixture(scope="module")
def model(model_dir):
    return unisent.load(str(model_dir))


@pytest.fixture(scope="module")
def sentences() -> list[str]:
    lines = (SAMPLE_DIR / "sentences.txt").read_text(encoding="utf-8").splitlines()[:40]
    # varied lengths, so that each chunk is reordered by length, and a comma and a quote for csv
    return [line if i % 3 else f'{line} {line}, "quoted" {line}' for i, line in enumerate(lines)]


def _write_input(path: Path, sentences: list[str]) -> Path:
    if path.suffix == ".txt":
        path.write_text("".join(s + "\n" for s in sentences), encoding="utf-8")
    elif path.suffix == ".jsonl":
        path.write_text("".join(json.dumps({"id": i, "sentence": s}) + "\n" for i, s in enumerate(sentences)))
    elif path.suffix == ".csv":
        with path.open("w", newline="", encoding="utf-8") as fh:
            writer = csv.writer(fh)
            writer.writerow(["id", "sentence"])
            writer.writerows(enumerate(sentences))
    else:
        pq.write_table(pa.table({"id": list(range(len(sentences))), "sentence": sentences}), path, row_group_size=7)
    return path


@pytest.mark.parametrize("suffix", [".txt", ".jsonl", ".csv", ".parquet"])
def test_each_input_format_gives_rows_aligned_with_input_lines(suffix, model_dir, model, sentences, tmp_path, capsys):
    source = _write_input(tmp_path / f"in{suffix}", sentences)
    out = tmp_path / "emb.npy"
    column = [] if suffix == ".txt" else ["--column", "sentence"]
    main(
        [
            "encode",
            "--model",
            str(model_dir),
            "--input",
            str(source),
            "--output",
            str(out),
            "--quiet",
            "--precision",
            "fp32",  # compared with fp32 encode() below (auto would pick bf16 on an AVX512-BF16/AMX CPU)
            "--chunk-size",
            "7",
            "--batch-size",
            "3",
            *column,
        ]
    )
    assert f"wrote {len(sentences)} x 32 float32 embeddings" in capsys.readouterr().out
    got = np.load(out, mmap_mode="r")
    assert got.shape == (len(sentences), 32) and got.dtype == np.float32
    singles = torch.cat([model.encode([s]) for s in sentences]).numpy()  # each row is its own line's embedding
    np.testing.assert_allclose(got, singles, atol=1e-5, rtol=0)
    assert not list(tmp_path.glob(".*.tmp"))


def test_parquet_output_normalized_and_python_api(model, sentences, tmp_path):
    source = _write_input(tmp_path / "in.txt", sentences[:10])
    summary = encode_file(model, source, tmp_path / "emb.parquet", chunk_size=4, normalize=True, progress=False)
    assert (summary.rows, summary.dim, summary.empty_rows) == (10, 32, 0)
    table = pq.read_table(tmp_path / "emb.parquet")
    assert table.column("row").to_pylist() == list(range(10))
    got = np.stack(table.column("embedding").to_numpy(zero_copy_only=False))
    np.testing.assert_allclose(got, model.encode(sentences[:10], normalize=True).numpy(), atol=1e-5, rtol=0)
    assert json.loads(table.schema.metadata[b"unisent"])["normalize"] is True


def test_empty_line_is_an_error_naming_it_or_a_zero_row(model_dir, model, tmp_path):
    source = tmp_path / "in.txt"
    source.write_text("a man plays a guitar .\ntwo dogs run .\n\nthe sun sets .\n   \n")
    out = tmp_path / "emb.npy"
    with pytest.raises(
        SystemExit,
        match=r"line 3 is empty: 2 empty row\(s\) of 5: line 3 \(output row 2\); line 5 "
        r"\(output row 4\).*--on-empty zero",
    ):
        main(["encode", "--model", str(model_dir), "--input", str(source), "--output", str(out), "--quiet"])
    assert not out.exists() and not list(tmp_path.glob(".*.tmp"))

    main(
        [
            "encode",
            "--model",
            str(model_dir),
            "--input",
            str(source),
            "--output",
            str(out),
            "--quiet",
            "--on-empty",
            "zero",
            "--precision",
            "fp32",
            "--chunk-size",
            "2",
        ]
    )
    got = np.load(out)
    assert got.shape == (5, 32) and not got[2].any() and not got[4].any()
    expected = model.encode(["a man plays a guitar .", "two dogs run .", "the sun sets ."]).numpy()
    np.testing.assert_allclose(got[[0, 1, 3]], expected, atol=1e-5, rtol=0)


def test_unreadable_rows_and_missing_files_are_named(model_dir, model, tmp_path):
    out = tmp_path / "emb.npy"
    with pytest.raises(SystemExit, match=r"input file '.*nope\.txt' does not exist"):
        main(["encode", "--model", str(model_dir), "--input", str(tmp_path / "nope.txt"), "--output", str(out)])
    bad = tmp_path / "bad.txt"
    bad.write_bytes(b"fine line\ncaf\xe9 latin-1\n")
    with pytest.raises(SystemExit, match=r"bad\.txt:line 2: cannot be decoded as utf-8"):
        main(["encode", "--model", str(model_dir), "--input", str(bad), "--output", str(out), "--quiet"])
    encode_file(model, bad, out, encoding="latin-1", progress=False)
    np.testing.assert_allclose(np.load(out)[1], model.encode(["café latin-1"])[0].numpy(), atol=1e-5, rtol=0)

    out = tmp_path / "other.npy"  # (an existing output is refused before the input is read)
    jsonl = tmp_path / "in.jsonl"
    jsonl.write_text('{"text": "one"}\n{"sentence": "two"}\n')
    with pytest.raises(
        EncodeInputError,
        match=r"in\.jsonl:line 2: field 'text' is missing \(record has: sentence\); choose one with --column",
    ):
        encode_file(model, jsonl, out, progress=False)
    jsonl.write_text('{"text": "one"}\n{"text": 2}\n')
    with pytest.raises(EncodeInputError, match="line 2: 'text' is int 2, not a string"):
        encode_file(model, jsonl, out, progress=False)
    table = tmp_path / "in.csv"
    table.write_text("id,sentence\n1,one\n")
    with pytest.raises(EncodeInputError, match=r"no column 'text' in the header \(columns: id, sentence\)"):
        encode_file(model, table, out, progress=False)
    with pytest.raises(EncodeInputError, match="unsupported output format '.txt'"):
        encode_file(model, table, tmp_path / "emb.txt", column="sentence", progress=False)


def test_csv_records_with_newlines_and_an_empty_file(model, tmp_path):
    table = tmp_path / "in.csv"
    table.write_text('text\n"first line\nsecond line"\nplain one\n')
    summary = encode_file(model, table, tmp_path / "emb.npy", progress=False)
    assert summary.rows == 2
    np.testing.assert_allclose(
        np.load(tmp_path / "emb.npy"), model.encode(["first line\nsecond line", "plain one"]).numpy(), atol=1e-5, rtol=0
    )
    for name, content in (("empty.txt", ""), ("header.csv", "text\n")):  # no sentence: an error, not a 0-row file
        empty = tmp_path / name
        empty.write_text(content)
        with pytest.raises(EmptyInputError, match=rf"{name}: has no sentences to encode \(the file is empty"):
            encode_file(model, empty, tmp_path / "none.npy", progress=False)
        assert not (tmp_path / "none.npy").exists()


def _error_line(capsys, argv) -> str:
    with pytest.raises(SystemExit) as exit_:
        main(argv)
    assert exit_.value.code == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    return err


def test_an_existing_output_is_kept_unless_overwrite(model_dir, model, sentences, tmp_path, capsys):
    source = _write_input(tmp_path / "in.txt", sentences[:5])
    out = tmp_path / "emb.npy"
    out.write_bytes(b"previous")
    argv = ["encode", "--model", str(model_dir), "--input", str(source), "--output", str(out), "--quiet"]
    err = _error_line(capsys, argv)
    assert err.startswith("unisent encode: error:") and str(out) in err and "--overwrite" in err
    assert out.read_bytes() == b"previous"
    with pytest.raises(OutputExistsError, match="overwrite=True"):
        encode_file(model, source, out, progress=False)
    main([*argv, "--overwrite"])
    assert np.load(out).shape == (5, 32)


def test_an_empty_input_is_an_error_naming_it(model_dir, tmp_path, capsys):
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    out = tmp_path / "emb.npy"
    err = _error_line(capsys, ["encode", "--model", str(model_dir), "--input", str(empty), "--output", str(out)])
    assert "empty.jsonl: has no sentences to encode" in err
    assert not out.exists() and not list(tmp_path.glob(".*"))


def test_truncation_is_reported_once_with_its_count(model_dir, model, sentences, tmp_path, capsys):
    short = ["a man plays a guitar .", "two dogs run .", "the sun sets .", "a woman slices an onion .", "ok", "yes"]
    long = " ".join(short * 3)
    assert 48 < len(model.tokenizer(long)["input_ids"]) <= 128  # longer than the model's 48, within the backbone's
    texts = [long, *short, long]
    source = _write_input(tmp_path / "in.txt", texts)
    out = tmp_path / "emb.npy"
    main(
        [
            "encode",
            "--model",
            str(model_dir),
            "--input",
            str(source),
            "--output",
            str(out),
            "--quiet",
            "--chunk-size",
            "3",
            "--batch-size",
            "2",
        ]
    )
    err = capsys.readouterr().err
    assert err.count("warning") == 1, err  # one line for the whole file, not one per chunk
    assert (
        "unisent encode: warning: 2 of 8 inputs were longer than 48 tokens and were truncated; pass --max-length" in err
    )
    # a longer limit (up to the tiny BERT's 128 positions) embeds them whole
    main(
        [
            "encode",
            "--model",
            str(model_dir),
            "--input",
            str(source),
            "--output",
            str(out),
            "--quiet",
            "--max-length",
            "128",
            "--overwrite",
        ]
    )
    assert "warning" not in capsys.readouterr().err
    with pytest.raises(SystemExit, match="exceeds the 128 positions"):
        main(
            [
                "encode",
                "--model",
                str(model_dir),
                "--input",
                str(source),
                "--output",
                str(tmp_path / "x.npy"),
                "--max-length",
                "500",
            ]
        )

    # Python: encode warns once per call, with the count, however many batches
    with pytest.warns(TruncationWarning) as caught:
        model.encode(texts, batch_size=2)
    assert [str(w.message) for w in caught] == [
        "2 of 8 inputs were longer than 48 tokens and were truncated; set model.config.max_length to change"
    ]
    with pytest.warns(TruncationWarning) as caught:
        summary = encode_file(model, source, tmp_path / "py.npy", chunk_size=3, progress=False)
    assert len(caught) == 1 and summary.truncated == 2 and summary.max_length == 48
    assert "pass --max-length (max_length=...)" in str(caught[0].message)
    whole = encode_file(model, source, tmp_path / "long.npy", max_length=128, progress=False)
    assert whole.truncated == 0 and model.config.max_length == 48  # restored after the call


@pytest.mark.parametrize("side", ["right", "left"])
def test_counting_truncation_tokenizes_as_plain_truncation(model, sentences, side, monkeypatch):
    """The count costs one tokenisation: the truncated rows are cut by slicing (right) or tokenised again (left)."""
    monkeypatch.setattr(model.tokenizer, "truncation_side", side)
    texts = [" ".join(sentences[i : i + 1 + i % 5]) for i in range(30)]
    ids, truncated = model._tokenize_counting(texts)
    assert ids == model.tokenize_ids(texts)
    assert truncated == sum(len(row) > 48 for row in model.tokenizer(texts)["input_ids"]) > 0


@pytest.mark.integration
def test_quiet_encode_prints_only_its_summary(model_dir, tmp_path):
    """--quiet: no encoding bar and no weight-loading bar (transformers'), one line on stdout, nothing else."""
    import os
    import subprocess
    import sys

    source = tmp_path / "in.txt"
    source.write_text("a man plays a guitar .\ntwo dogs run .\n")
    out = tmp_path / "emb.npy"
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    for key in ("HF_HUB_DISABLE_PROGRESS_BARS", "TRANSFORMERS_VERBOSITY", "PYTHONWARNINGS"):
        env.pop(key, None)
    command = [sys.executable, "-m", "unisent.cli", "encode", "--model", str(model_dir), "--input", str(source)]
    done = subprocess.run(
        [*command, "--output", str(out), "--quiet"], env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr
    assert done.stderr == "" and len(done.stdout.splitlines()) == 1 and done.stdout.startswith("wrote 2 x 32")
