"""The I/O layer: the record iterator (every format, errors named by file/line/field, streaming),
atomic writes and the temporary files of killed writers."""

import json
import os
import pickle
import socket
import subprocess
import sys

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch
from torch import nn

from unisent.data.record_errors import RecordError
from unisent.data.records import Record, iter_records
from unisent.io import atomic_write, import_object, remove_stale_temporaries


def _data(records):
    return [r.data for r in records]


# ------------------------------------------------------------------------------------------ formats
def test_jsonl_records_with_line_numbers_and_field_checks(tmp_path):
    path = tmp_path / "d.jsonl"
    path.write_text('{"a": "x", "b": 1, "c": 2}\n"bare"\n[1, 2]\n{"b": 3}\n')
    raw = list(iter_records(path, blank_lines="skip"))
    assert [(r.line, r.data) for r in raw] == [(1, {"a": "x", "b": 1, "c": 2}), (2, "bare"), (3, [1, 2]), (4, {"b": 3})]
    problems = []
    got = list(iter_records(path, fields=["b"], optional=["a"], on_error=problems.append))
    # reduced to fields + optional; a bare JSON string is {text_field: string}, and has no "b"
    assert [(r.line, r.data) for r in got] == [(1, {"b": 1, "a": "x"}), (4, {"b": 3, "a": None})]
    assert [str(p) for p in problems] == [
        f"{path}:line 2: field 'b' is missing (record has: text)",
        f"{path}:line 3: is a JSON array, expected an object with field(s) 'b', 'a'",
    ]
    assert problems[0].field == "b" and problems[0].line == 2 and problems[0].path == path


def test_csv_tsv_header_quotes_rename_and_headerless_rows(tmp_path):
    csv_path = tmp_path / "nli.csv"
    csv_path.write_text('sent0,sent1\n"A man, sitting.","two\nlines"\nx,y\n', encoding="utf-8")
    got = list(iter_records(csv_path, fields=["anchor", "positive"], rename={"sent0": "anchor", "sent1": "positive"}))
    assert [(r.line, r.data) for r in got] == [
        (2, {"anchor": "A man, sitting.", "positive": "two\nlines"}),
        (4, {"anchor": "x", "positive": "y"}),
    ]  # a record starts at its line
    tsv = tmp_path / "pairs.txt"
    tsv.write_text('say "hi"\tb\n\nc\td\n', encoding="utf-8")
    rows = list(iter_records(tsv, "tsv", header=False, quoting=False, blank_lines="keep"))
    assert [(r.line, r.data) for r in rows] == [(1, ['say "hi"', "b"]), (2, None), (3, ["c", "d"])]
    with pytest.raises(RecordError, match=r"nli\.csv: no column 'text' in the header \(columns: sent0, sent1\)"):
        list(iter_records(csv_path, fields=["text"]))


def test_txt_keeps_blank_lines_and_handles_crlf_bom_and_latin1(tmp_path):
    path = tmp_path / "s.txt"
    path.write_bytes(b"one\r\nthird \x85 inside\n")  # Latin-1 0x85 (NEL) is no line break
    assert _data(iter_records(path, encoding="latin-1")) == [{"text": "one"}, {"text": "third \x85 inside"}]
    path.write_bytes(b"\xef\xbb\xbffirst\r\n\nthird\n")  # BOM, CRLF, a blank line, a final newline
    assert _data(iter_records(path, text_field="sentence")) == [
        {"sentence": "first"},
        {"sentence": ""},
        {"sentence": "third"},
    ]
    with pytest.raises(RecordError, match=r"s\.txt: a \.txt file has one field per line, 'text'; field\(s\) 'anchor'"):
        list(iter_records(path, fields=["text", "anchor"]))


def test_parquet_and_saved_dataset_rows(tmp_path):
    pq.write_table(pa.table({"text": ["p1", None, "p3"], "extra": [1, 2, 3]}), tmp_path / "s.parquet")
    problems = []
    got = list(iter_records(tmp_path / "s.parquet", fields=["text"], on_error=problems.append))
    assert [(r.where, r.data) for r in got] == [("row 1", {"text": "p1"}), ("row 3", {"text": "p3"})]
    assert [str(p) for p in problems] == [f"{tmp_path / 's.parquet'}:row 2: field 'text' is missing (null)"]
    assert _data(iter_records(tmp_path / "s.parquet", fields=["text"], allow_null=True))[1] == {"text": None}
    with pytest.raises(RecordError, match=r"no column 'sentence' \(columns: text, extra\)"):
        list(iter_records(tmp_path / "s.parquet", fields=["sentence"]))
    from datasets import Dataset

    Dataset.from_dict({"t": ["d1", "d2"], "n": [1, 2]}).save_to_disk(str(tmp_path / "ds"))
    got = list(iter_records(tmp_path / "ds", fields=["text"], rename={"t": "text"}))
    assert [(r.where, r.data) for r in got] == [("row 1", {"text": "d1"}), ("row 2", {"text": "d2"})]


# ------------------------------------------------------------------------------------------ errors
def test_a_bad_line_is_named_by_file_and_line(tmp_path):
    path = tmp_path / "d.jsonl"
    path.write_text('{"text": "ok"}\n{not json\n\n')
    records = iter_records(path, fields=["text"])
    assert next(records).data == {"text": "ok"}
    with pytest.raises(RecordError, match=r"d\.jsonl:line 2: not valid JSON \(Expecting property name") as err:
        next(records)
    assert (err.value.path, err.value.line) == (path, 2)
    problems = []
    assert len(list(iter_records(path, on_error=problems.append))) == 1
    assert [p.reason for p in problems] == [
        "not valid JSON (Expecting property name enclosed in double quotes at column 2)",
        "blank line (expected a JSON object)",
    ]
    table = tmp_path / "t.csv"
    table.write_text("a,b\n1,2\n3\n")
    with pytest.raises(RecordError, match=r"t\.csv:line 3: has 1 columns, the header has 2 \(a, b\)"):
        list(iter_records(table))
    bad = tmp_path / "bad.txt"
    bad.write_bytes(b"fine\ncaf\xe9\n")
    with pytest.raises(RecordError, match=r"bad\.txt:line 2: cannot be decoded as utf-8"):
        list(iter_records(bad))
    # the error survives a process pool (it is pickled with its location)
    again = pickle.loads(pickle.dumps(err.value))
    assert (str(again), again.line, again.field) == (str(err.value), 2, None)


def test_missing_files_unknown_formats_and_bad_arguments(tmp_path):
    with pytest.raises(FileNotFoundError, match="nope.jsonl' does not exist"):
        iter_records(tmp_path / "nope.jsonl")
    (tmp_path / "x.xml").write_text("<a/>")
    with pytest.raises(ValueError, match="unsupported format '.xml'"):
        iter_records(tmp_path / "x.xml")
    assert _data(iter_records(tmp_path / "x.xml", "txt")) == [{"text": "<a/>"}]
    with pytest.raises(ValueError, match="unknown text encoding 'nope'"):
        iter_records(tmp_path / "x.xml", "txt", encoding="nope")
    with pytest.raises(ValueError, match="header=False"):
        iter_records(tmp_path / "x.xml", "csv", header=False, fields=["a"])


# ------------------------------------------------------------------------------------------ streaming
def test_the_first_record_of_a_large_file_is_read_without_the_rest(tmp_path):
    """Everything after the first record is invalid: reading the whole file first would fail."""
    for name, first in (("big.jsonl", '{"text": "first"}\n'), ("big.csv", "text\nfirst\n"), ("big.txt", "first\n")):
        path = tmp_path / name
        with path.open("wb") as fh:
            fh.write(first.encode())
            fh.write(b'\xff{"broken", "row", \xfe\n' * 200_000)  # ~4 MB, neither JSON, csv nor utf-8
        records = iter_records(path, fields=["text"])
        assert next(records).data == {"text": "first"}
        records.close()


def test_parquet_is_read_in_row_batches(tmp_path, monkeypatch):
    path = tmp_path / "big.parquet"
    pq.write_table(pa.table({"text": [f"s{i}" for i in range(20_000)]}), path, row_group_size=1_000)
    batches = []
    real = pq.ParquetFile.iter_batches

    def counting(self, *args, **kwargs):
        for batch in real(self, *args, **kwargs):
            batches.append(len(batch))
            yield batch

    monkeypatch.setattr(pq.ParquetFile, "iter_batches", counting)
    records = iter_records(path, fields=["text"])
    assert next(records) == Record(path, 1, {"text": "s0"}, "row")
    assert sum(batches) < 20_000  # only the first batch was read
    assert sum(1 for _ in records) == 19_999


# ------------------------------------------------------------------------------------------ atomic writes
def test_atomic_write_replaces_or_leaves_the_old_file(tmp_path):
    target = tmp_path / "sub" / "out.json"
    with atomic_write(target) as fh:
        json.dump({"v": 1}, fh)
    assert json.loads(target.read_text()) == {"v": 1}
    assert oct(target.stat().st_mode & 0o777) == oct(0o666 & ~_umask())
    with pytest.raises(RuntimeError, match="boom"):
        with atomic_write(target) as fh:
            fh.write('{"v": 2, "half')
            fh.flush()
            raise RuntimeError("boom")
    assert json.loads(target.read_text()) == {"v": 1}
    assert sorted(p.name for p in target.parent.iterdir()) == ["out.json"]  # no temporary file left
    with atomic_write(target, "wb", durable=True) as fh:
        fh.write(b"{}")
    assert target.read_bytes() == b"{}" and sorted(p.name for p in target.parent.iterdir()) == ["out.json"]


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def test_stale_temporaries_of_dead_writers_are_removed(tmp_path):
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    host = socket.gethostname()
    stale = tmp_path / f".out.json.abc123.{dead.stdout.strip()}@{host}.tmp"
    live = tmp_path / f".out.json.def456.{os.getpid()}@{host}.tmp"
    other_host = tmp_path / f".out.json.ghi789.{dead.stdout.strip()}@elsewhere.example.tmp"
    for p in (stale, live, other_host):
        p.write_text("partial")
    assert remove_stale_temporaries(tmp_path) == [stale]
    assert live.exists() and other_host.exists()


def test_streaming_encode_never_leaves_a_half_written_output(tmp_path):
    """A failure in the middle of ``encode_file`` keeps the previous output and leaves no temporary."""
    from unisent.export import encode_file

    class Failing(nn.Module):
        def __init__(self):
            super().__init__()
            self.calls = 0

        def encode(self, sentences, batch_size=32, normalize=False, precision="auto"):
            self.calls += 1
            if self.calls > 1:
                raise RuntimeError("out of memory")
            return torch.ones(len(sentences), 4)

    source = tmp_path / "in.txt"
    source.write_text("".join(f"sentence {i}\n" for i in range(10)))
    for out in (tmp_path / "emb.npy", tmp_path / "emb.parquet"):
        out.write_bytes(b"previous")
        with pytest.raises(RuntimeError, match="out of memory"):
            encode_file(Failing(), source, out, chunk_size=4, progress=False, overwrite=True)
        assert out.read_bytes() == b"previous"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["emb.npy", "emb.parquet", "in.txt"]
    summary = encode_file(Failing(), source, tmp_path / "emb.npy", chunk_size=10, progress=False, overwrite=True)
    assert summary.rows == 10 and np.load(tmp_path / "emb.npy").shape == (10, 4)


def test_import_object_names_the_path():
    assert import_object("unisent.io.atomic_write") is atomic_write
    with pytest.raises(ValueError, match=r"layer class 'nowhere\.Layer' cannot be imported"):
        import_object("nowhere.Layer", "layer class")
    with pytest.raises(ValueError, match="is not a dotted path"):
        import_object("Layer")
