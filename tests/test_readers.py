import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from unisent.data import DataSource, RecordError, read_records

KEYS = ("anchor", "positive", "negative")


def _write_jsonl(path, rows):
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows))
    return path


def test_jsonl_errors_name_file_line_and_field(tmp_path):
    good = {"anchor": "a", "positive": "b", "negative": "c"}
    path = _write_jsonl(
        tmp_path / "d.jsonl",
        [good, "{not json", {"anchor": "a", "positive": "b"}, {"anchor": "a", "positive": "  ", "negative": "c"}, good],
    )
    with pytest.raises(RecordError) as err:
        read_records(str(path), KEYS, KEYS)
    msg = str(err.value)
    assert "3 malformed record(s)" in msg
    assert f"{path}:line 2: not valid JSON" in msg
    assert f"{path}:line 3: field 'negative' is missing (record has: anchor, positive)" in msg
    assert f"{path}:line 4: field 'positive' is an empty sentence" in msg


def test_skip_mode_counts_and_keeps_the_rest(tmp_path, capsys):
    path = _write_jsonl(tmp_path / "d.jsonl", [{"text": "one"}, {"text": ""}, {"txt": "x"}, {"text": "two"}])
    cols = read_records(DataSource(str(path), on_error="skip"), ("text",), ("text",), source_key="data.train.simcse")
    assert cols == {"text": ["one", "two"]}
    notice = capsys.readouterr().err
    assert notice.startswith(
        f"unisent: skipped 2 malformed record(s) of {path}, kept 2 (data.train.simcse.on_error=skip): {path}:line "
    )
    assert notice.count("\n") == 1 and f"{path}:line 2: " in notice and f"{path}:line 3: " in notice  # one line
    with pytest.raises(RecordError, match=r"--data\.train\.simcse\.on_error=skip"):
        read_records(DataSource(str(path)), ("text",), ("text",), source_key="data.train.simcse")


def test_csv_with_column_mapping_and_wrong_width(tmp_path):
    path = tmp_path / "nli.csv"
    path.write_text('sent0,sent1,hard_neg\n"A man, sitting.",A man sits.,Nobody sits.\nx,y\n')
    src = DataSource(str(path), columns={"sent0": "anchor", "sent1": "positive", "hard_neg": "negative"})
    with pytest.raises(RecordError, match=r"nli.csv:line 3: has 2 columns, the header has 3"):
        read_records(src, KEYS, KEYS)
    path.write_text('sent0,sent1,hard_neg\n"A man, sitting.",A man sits.,Nobody sits.\n')
    assert read_records(src, KEYS, KEYS)["anchor"] == ["A man, sitting."]


def test_txt_parquet_and_saved_dataset(tmp_path):
    txt = tmp_path / "s.txt"
    txt.write_text("first\n\nthird\n")
    with pytest.raises(RecordError, match="s.txt:line 2: field 'text' is an empty sentence"):
        read_records(str(txt), ("text",), ("text",))
    pq.write_table(pa.table({"text": ["p1", "p2"], "extra": [1, 2]}), tmp_path / "s.parquet")
    assert read_records(str(tmp_path / "s.parquet"), ("text",), ("text",)) == {"text": ["p1", "p2"]}
    from datasets import Dataset

    Dataset.from_dict({"text": ["d1", None]}).save_to_disk(str(tmp_path / "ds"))
    with pytest.raises(RecordError, match="ds:row 2: field 'text' is missing"):
        read_records(str(tmp_path / "ds"), ("text",), ("text",))


def test_missing_file_and_unknown_format(tmp_path):
    with pytest.raises(FileNotFoundError, match="nope.jsonl"):
        read_records(str(tmp_path / "nope.jsonl"), ("text",))
    (tmp_path / "x.xml").write_text("<a/>")
    with pytest.raises(ValueError, match="unsupported format '.xml'"):
        read_records(str(tmp_path / "x.xml"), ("text",))
