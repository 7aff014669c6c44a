"""Readers on tiny fixtures in the real layouts, and their error messages."""

from __future__ import annotations

from pathlib import Path

import pytest

from unisent.data.benchmark_readers import (
    DataFormatError,
    read_aligned_nli,
    read_binary_files,
    read_labeled_jsonl,
    read_labeled_tsv,
    read_lines,
    read_mrpc,
    read_pair_tsv,
    read_senteval_sts,
    read_sick_entailment,
    read_sick_relatedness,
    read_snli,
    read_sst,
    read_sts17,
    read_stsb_multi,
    read_stsbenchmark,
    read_tatoeba,
    read_text_and_labels,
    read_trec,
)
from unisent.evaluation import get_task


def test_stsbenchmark(data_dir: Path) -> None:
    data = read_stsbenchmark(data_dir / "sts/stsbenchmark/sts-test.csv")
    assert len(data) == 12
    assert data.sentences1[0] == "A girl is styling her hair."
    assert data.sentences2[0] == "A girl is brushing her hair."
    assert data.scores[:3] == [2.5, 3.6, 5.0]
    # quotes are text, not csv quoting
    assert data.sentences1[-1] == 'A young boy jumping into a pool that says "no diving".'


def test_stsbenchmark_ignores_extra_columns_and_names_bad_lines(tmp_path: Path) -> None:
    path = tmp_path / "sts-test.csv"
    path.write_text("g\ts\t2012\t1\t4.0\tA b.\tC d.\tsource-note\textra\ng\ts\t2012\t2\tx\tE.\tF.\n")
    with pytest.raises(DataFormatError) as info:
        read_stsbenchmark(path)
    assert str(path) in str(info.value) and "line 2" in str(info.value) and "score" in str(info.value)
    path.write_text("g\ts\t2012\t1\t4.0\tA b.\tC d.\tsource-note\n")
    assert read_stsbenchmark(path).sentences2 == ["C d."]
    path.write_text("g\ts\t2012\t1\t4.0\tonly one sentence\n")
    with pytest.raises(DataFormatError, match="line 1: expected at least 7"):
        read_stsbenchmark(path)


def test_senteval_sts_skips_blank_gold(data_dir: Path) -> None:
    folder = data_dir / "sts/STS12-en-test"
    data = read_senteval_sts(folder / "STS.input.MSRvid.txt", folder / "STS.gs.MSRvid.txt")
    assert len(data) == 7  # 8 pairs, one without a gold score
    assert data.scores == [2.5, 3.6, 5.0, 1.5, 1.8, 3.5, 2.2]
    assert "A man is cutting up a cucumber." not in data.sentences1  # the pair with the blank gold line
    assert data.sentences1[3] == "A man is playing a harp."


def test_senteval_sts_misaligned(tmp_path: Path) -> None:
    (tmp_path / "in.txt").write_text("a\tb\nc\td\n")
    (tmp_path / "gs.txt").write_text("1.0\n")
    with pytest.raises(DataFormatError, match="not aligned"):
        read_senteval_sts(tmp_path / "in.txt", tmp_path / "gs.txt")


def test_sts17_three_columns_and_two_column_with_gold(data_dir: Path, tmp_path: Path) -> None:
    data = read_sts17(data_dir / "sts/STS17-test/STS.input.track5.en-en.txt")
    assert len(data) == 8 and data.scores[3] == 4.2
    (tmp_path / "STS.input.track1.ar-ar.txt").write_text("a\tb\nc\td\n", encoding="utf-8")
    with pytest.raises(FileNotFoundError, match=r"STS\.gs\.track1\.ar-ar\.txt"):
        read_sts17(tmp_path / "STS.input.track1.ar-ar.txt")
    (tmp_path / "STS.gs.track1.ar-ar.txt").write_text("1.0\n2.0\n")
    assert read_sts17(tmp_path / "STS.input.track1.ar-ar.txt").scores == [1.0, 2.0]


def test_sick(data_dir: Path) -> None:
    test = data_dir / "sts/sick/SICK_test_annotated.txt"  # CRLF line endings in the release
    related = read_sick_relatedness(test)
    entail = read_sick_entailment(test)
    assert len(related) == len(entail) == 15
    assert related.scores[0] == 3.3
    assert entail.labels[0] == "NEUTRAL"
    assert not any(s.endswith("\r") for s in related.sentences2 + entail.labels)


def test_sick_bad_label(tmp_path: Path) -> None:
    path = tmp_path / "SICK_train.txt"
    path.write_text("pair_ID\tsentence_A\tsentence_B\trelatedness_score\tentailment_judgment\n1\ta\tb\t3.0\tMAYBE\n")
    with pytest.raises(DataFormatError, match="line 2: field 'entailment_judgment'"):
        read_sick_entailment(path)


def test_stsb_multi(data_dir: Path) -> None:
    data = read_stsb_multi(data_dir / "sts/stsb-multi-mt/stsb-de-test.csv")
    assert len(data) == 10
    assert data.sentences1[0] == "Ein Mädchen frisiert ihr Haar."
    assert data.scores[0] == 2.5
    english = read_stsb_multi(data_dir / "sts/stsb-multi-mt/stsb-en-test.csv")
    assert english.sentences1[-1] == "Three young men run, jump, and kick off of a Coke machine."


def test_stc_layouts(data_dir: Path) -> None:
    stc = data_dir / "clustering/stc"
    agnews = read_labeled_tsv(stc / "agnews.txt")
    assert len(agnews) == 12 and sorted(set(agnews.labels)) == ["1", "2", "3", "4"]
    snippets = read_text_and_labels(stc / "searchsnippets.txt", stc / "searchsnippets_label.txt")
    assert snippets.texts[0].startswith("turtlesoft")  # the byte-order mark is stripped
    tweets = read_labeled_jsonl(stc / "tweet.txt")
    assert tweets.texts[0] == "brain fluid buildup delay giffords rehab" and tweets.labels[0] == "37"


def test_clustering_errors(tmp_path: Path) -> None:
    (tmp_path / "a.txt").write_text("1\tok\nno label here\n")
    with pytest.raises(DataFormatError, match="line 2"):
        read_labeled_tsv(tmp_path / "a.txt")
    (tmp_path / "t.jsonl").write_text('{"text": "x", "cluster": 1}\n{"text": "y"}\n')
    with pytest.raises(DataFormatError, match="line 2: field 'cluster' is missing"):
        read_labeled_jsonl(tmp_path / "t.jsonl")
    (tmp_path / "texts.txt").write_text("a\nb\n")
    (tmp_path / "labels.txt").write_text("1\n")
    with pytest.raises(DataFormatError, match="not aligned"):
        read_text_and_labels(tmp_path / "texts.txt", tmp_path / "labels.txt")


def test_mewsc16_drops_empty_sentences(data_dir: Path) -> None:
    lines = read_lines(data_dir / "clustering/mewsc16/pl_sentences.txt")
    data = get_task("mewsc16-pl").source.read(data_dir)  # read_text_and_labels(..., drop_empty=True)
    assert len(lines) == 10 and "" in lines
    assert len(data) == 9 and all(data.texts)
    assert set(data.labels) == {"Polityka", "Sport", "Kultura i rozrywka"}


def test_tatoeba(data_dir: Path) -> None:
    data = read_tatoeba(data_dir / "retrieval/tatoeba", "deu")
    assert len(data) == 10
    assert data.source[0] == "Maria sagte, sie wisse nicht, wo Tom sei."
    assert data.target[0] == "Mary said she didn't know where Tom was."


def test_bucc(data_dir: Path) -> None:
    corpus = get_task("bucc-de").source.read(data_dir)  # read_bucc_files on the release's de-en folder
    assert len(corpus.source) == 10 and len(corpus.target) == 14
    assert corpus.source_ids[0] == "de-000001" and corpus.gold[0] == ("de-000001", "en-000001")


def test_binary_senteval_files_latin1(data_dir: Path) -> None:
    mr = read_binary_files(data_dir / "senteval/rt-polarity.pos", data_dir / "senteval/rt-polarity.neg", "latin-1")
    assert len(mr) == 24 and mr.labels.count("1") == 12
    # byte 0x85 (Latin-1 NEL) stays inside its line instead of splitting it
    assert sum("\x85" in t for t in mr.texts) == 1
    cr = read_binary_files(data_dir / "senteval/custrev.pos", data_dir / "senteval/custrev.neg")
    assert len(cr) == 24  # the blank line is skipped


def test_latin1_file_read_as_utf8_names_the_line(data_dir: Path) -> None:
    with pytest.raises(DataFormatError, match=r"rt-polarity\.pos:line \d+: cannot be decoded as utf-8"):
        read_binary_files(data_dir / "senteval/rt-polarity.pos", data_dir / "senteval/rt-polarity.neg", "utf-8")


def test_trec_sst_mrpc(data_dir: Path) -> None:
    trec = read_trec(data_dir / "senteval/TREC.train")
    assert sorted(set(trec.labels)) == ["ABBR", "DESC", "ENTY", "HUM", "LOC", "NUM"]
    assert "sister\xf0city" in trec.texts[-1]  # byte 0xF0 of the Latin-1 file
    sst = read_sst(data_dir / "senteval/sst2/sentiment-dev")
    assert sst.texts[0] == "it 's a charming and often affecting journey ." and sst.labels[0] == "1"
    mrpc = read_mrpc(data_dir / "senteval/mrpc/msr_paraphrase_train.txt")
    assert len(mrpc) == 30 and mrpc.labels[:2] == ["1", "0"]
    assert mrpc.sentences1[0].startswith("Amrozi accused his brother")


def test_mrpc_and_trec_errors(tmp_path: Path) -> None:
    (tmp_path / "m.txt").write_text("Quality\t#1 ID\t#2 ID\t#1 String\t#2 String\n1\t1\t2\tonly four\n")
    with pytest.raises(DataFormatError, match="line 2: expected 5"):
        read_mrpc(tmp_path / "m.txt")
    (tmp_path / "t.txt").write_text("DESC:manner How ?\nnolabel question\n")
    with pytest.raises(DataFormatError, match="line 2"):
        read_trec(tmp_path / "t.txt")


def test_nli_readers(data_dir: Path) -> None:
    snli = read_snli(data_dir / "nli/snli", "dev")
    assert len(snli) == 15 and snli.labels[:3] == ["neutral", "entailment", "contradiction"]
    assert snli.sentences1[0] == "Two women are embracing while holding to go packages ."
    same = read_aligned_nli(*(data_dir / f"nli/snli/{n}.dev" for n in ("s1", "s2", "labels")))
    assert same == snli
    xnli = read_pair_tsv(data_dir / "nli/xnli/test-de.tsv", ("entailment", "neutral", "contradiction"))
    assert len(xnli) == 9
    paws = read_pair_tsv(data_dir / "nli/pawsx/dev-en.tsv", ("0", "1"))
    assert sorted(set(paws.labels)) == ["0", "1"]


def test_nli_errors(tmp_path: Path) -> None:
    (tmp_path / "dev-en.tsv").write_text("p\th\tentailment\np\th\tmaybe\n")
    with pytest.raises(DataFormatError, match="line 2: label field is 'maybe'"):
        read_pair_tsv(tmp_path / "dev-en.tsv", ("entailment", "neutral", "contradiction"))
    for name in ("s1.dev", "s2.dev"):
        (tmp_path / name).write_text("a\nb\n")
    (tmp_path / "labels.dev").write_text("entailment\n")
    with pytest.raises(DataFormatError, match="line counts differ"):
        read_snli(tmp_path, "dev")


def test_missing_file_is_named(tmp_path: Path) -> None:
    missing = tmp_path / "sts/stsbenchmark/sts-test.csv"
    with pytest.raises(FileNotFoundError, match=str(missing)):
        read_stsbenchmark(missing)
    with pytest.raises(FileNotFoundError, match=r"tatoeba\.xyz-eng\.xyz"):
        read_tatoeba(tmp_path, "xyz")
