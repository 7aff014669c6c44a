"""AMR: linearisation, vocabulary extension, parsers and translators (issue 7, parts 1-3)."""

from __future__ import annotations

import json
import logging
import sys
import types
from collections import Counter
from pathlib import Path

import penman
import pytest
import torch

from unisent.amr import (
    AmrlibParser,
    AMRParser,
    MarianTranslator,
    NotInLookupError,
    PreParsedAMR,
    PreTranslated,
    Translator,
    count_symbols,
    count_symbols_in_file,
    extend_vocabulary,
    iter_penman_blocks,
    linearize,
    linearize_file,
    linearize_string,
    linearize_tokens,
    read_counts,
    read_symbols,
    readable_form,
    select_symbols,
)
from unisent.cli import main

#: the repository's training, benchmark and test samples (not in the wheel)
SAMPLE_DIR = Path(__file__).resolve().parents[1] / "samples"

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "amr"
LPP = FIXTURES / "little-prince.txt"
IDS = ["lpp_1943.1", "lpp_1943.2", "lpp_1943.3", "lpp_1943.23", "lpp_1943.155", "lpp_1943.389", "lpp_1943.475"]


def graph_text(graph_id: str) -> str:
    return next(b.graph for b in iter_penman_blocks(LPP.read_text(), str(LPP)) if b.id == graph_id)


# ------------------------------------------------------------------------------------ linearisation
def test_exact_linearisation_checked_by_hand():
    # lpp_1943.2: `:wiki -` dropped, quotes removed, `:ARG1 i` is a re-entrancy written as its concept
    assert linearize(graph_text("lpp_1943.2")) == (
        "( see-01 :ARG0 ( i ) :ARG1 ( picture :mod ( magnificent ) :location ( book :name ( name :op1 True "
        ":op2 Stories :op3 from :op4 Nature ) :topic ( forest :mod ( primeval ) ) ) ) :mod ( once ) "
        ":time ( age-01 :ARG1 i :ARG2 ( temporal-quantity :quant 6 :unit ( year ) ) ) )"
    )
    # lpp_1943.155: the variable `a` is used twice before the node that defines it
    assert linearize(graph_text("lpp_1943.155")) == (
        "( present-01 :ARG0 astronomer :ARG1 ( it ) :ARG2 ( organization :name ( name :op1 International "
        ":op2 Astronomical :op3 Congress ) ) :manner ( demonstrate-01 :ARG0 astronomer :mod ( great ) ) "
        ":time ( discover-01 :ARG0 ( astronomer ) ) )"
    )
    assert linearize(graph_text("lpp_1943.3"), parentheses=False) == (
        "picture :domain it :topic boa :mod constrictor :ARG0-of swallow-01 :ARG1 animal"
    )
    assert linearize("(w / want-01 :ARG0 (b / boy) :ARG1 (g / go-02 :ARG0 b))") == (
        "( want-01 :ARG0 ( boy ) :ARG1 ( go-02 :ARG0 boy ) )"
    )


@pytest.mark.parametrize("graph_id", IDS)
def test_no_variables_every_concept_and_reentrancies_repeated(graph_id):
    text = graph_text(graph_id)
    graph = penman.decode(text)
    tokens = linearize_tokens(text)
    concepts = {i.source: i.target for i in graph.instances()}
    # each reference to a node (the defining one and every re-entrancy) writes its concept once;
    # references are counted in the tree, where inverse roles (:ARG0-of) point from parent to child
    tree = penman.parse(text)
    references = Counter([tree.node[0]])
    for _, (role, target) in tree.walk():
        if isinstance(target, tuple):
            references[target[0]] += 1
        elif role != "/" and target in concepts:
            references[target] += 1
    expected = Counter()
    for var, concept in concepts.items():
        expected[concept] += references[var]
    found = Counter(t for t in tokens if t in expected)
    assert found == expected
    literals = {a.target.strip('"') for a in graph.attributes()}
    for var in concepts:
        if var not in expected and var not in literals:
            assert var not in tokens, f"variable {var} in {tokens}"
    assert tokens.count("(") == tokens.count(")") == len(concepts)


def test_reentrancy_counts_on_real_graphs():
    assert linearize_tokens(graph_text("lpp_1943.155")).count("astronomer") == 3
    assert linearize_tokens(graph_text("lpp_1943.389")).count("prince") == 2  # :ARG0 p of admire-01
    assert linearize_tokens(graph_text("lpp_1943.23")).count("i") == 2


def test_wiki_and_literals():
    china = graph_text("lpp_1943.23")
    tokens = linearize_tokens(china)
    assert ":wiki" not in tokens and tokens.count("China") == 1  # only the name's :op1
    kept = linearize_tokens(china, drop_wiki=False)
    assert kept[kept.index(":wiki") + 1] == "China" and kept.count("China") == 2
    polarity = linearize(graph_text("lpp_1943.389"))
    assert ":polarity - :ARG1 ( restrain-01" in polarity and "( oh :mode expressive )" in polarity
    assert '( oh :mode "expressive" )' in linearize(graph_text("lpp_1943.389"), quote_strings=True)
    assert ":polarity - :mode imperative" in linearize(graph_text("lpp_1943.475"))
    assert linearize(graph_text("lpp_1943.1")) == "( chapter :mod 1 )"
    assert linearize('(n / name~e.1 :op1~e.2 "New York"~e.3 :op2 "a\\"b")') == '( name :op1 New York :op2 a"b )'


def test_deterministic_and_same_from_tree_and_graph():
    for graph_id in IDS:
        text = graph_text(graph_id)
        first = linearize(text)
        assert linearize(text) == first
        assert linearize(penman.parse(text)) == first
        assert linearize(penman.decode(text)) == first
    assert [e.graph for e in linearize_file(LPP)] == [e.graph for e in linearize_file(LPP)]


def test_corpus_metadata_and_header():
    entries = list(linearize_file(LPP))
    assert [e.id for e in entries] == IDS  # the file header (comments only) is not a graph
    graph_id, metadata, graph = entries[1]
    assert graph_id == "lpp_1943.2" and graph.startswith("( see-01 ")
    assert metadata["snt"].startswith("Once when I was six years old")
    assert metadata["annotator"] == "ISI-AMR-05" and metadata["preferred"] == ""
    assert metadata["save-date"] == "Mon May 13, 2013" and metadata["file"] == "lpp_1943_2.txt"
    assert entries[5].metadata["snt"] == 'But the little prince could not restrain his admiration : " Oh !'


def malformed_corpus() -> str:
    text = LPP.read_text()
    broken = graph_text("lpp_1943.3")
    assert broken.endswith("))))")
    text = text.replace(broken, broken[:-2])  # two closing parentheses missing
    return text + "\n# ::id no-concept\n# ::snt x\n(x :ARG0 (b / boy))\n\n# ::snt no id, no graph\n"


def test_malformed_graph_reported_with_id_and_rest_processed(caplog):
    errors = []
    entries = list(linearize_string(malformed_corpus(), source="lpp.txt", errors=errors))
    assert [e.id for e in entries] == [i for i in IDS if i != "lpp_1943.3"]
    assert [e.id for e in errors] == ["lpp_1943.3", "no-concept", "#9"]
    decode = errors[0]
    assert "DecodeError" in decode.message and "Unexpected end of input" in decode.message
    assert decode.source == "lpp.txt" and str(decode).startswith(f"lpp.txt:{decode.line}: graph lpp_1943.3:")
    lines = malformed_corpus().splitlines()
    assert lines[decode.line - 1].strip().startswith(":ARG1 (a / animal")  # the line where input ended
    assert "no concept" in errors[1].message and "metadata without a graph" in errors[2].message
    with caplog.at_level(logging.WARNING):
        assert len(list(linearize_string(malformed_corpus()))) == len(IDS) - 1
    assert "lpp_1943.3" in caplog.text
    with pytest.raises(penman.DecodeError):
        linearize("(a / b")
    with pytest.raises(ValueError, match="found 2"):
        linearize("(a / b) (c / d)")
    with pytest.raises(FileNotFoundError, match="nope"):
        linearize_file(FIXTURES / "nope.txt")


def test_amr_linearize_command(tmp_path, capsys):
    out = tmp_path / "amr.jsonl"
    main(["data", "amr-linearize", "--input", str(LPP), "--output", str(out)])
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["id"] for r in rows] == IDS
    assert rows[0] == {
        "id": "lpp_1943.1",
        "text": "Chapter 1 .",
        "graph": "( chapter :mod 1 )",
        "penman": "(c / chapter\n  :mod 1)",
        "metadata": rows[0]["metadata"],
    }
    assert rows[0]["metadata"]["file"] == "lpp_1943_1.txt"
    assert f"{len(IDS)} linearised AMR graphs" in capsys.readouterr().out

    main(["data", "amr-linearize", "--input", str(LPP), str(LPP), "--output", str(out), "--no-parentheses"])
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(rows) == 2 * len(IDS) and rows[2]["graph"].startswith("picture :domain it :topic boa")


def test_amr_linearize_command_malformed(tmp_path, capsys):
    bad = tmp_path / "bad.txt"
    bad.write_text(malformed_corpus())
    out = tmp_path / "amr.jsonl"
    main(["data", "amr-linearize", "--input", str(bad), "--output", str(out)])  # reported, exit status 0
    captured = capsys.readouterr()
    assert "lpp_1943.3" in captured.err and "DecodeError" in captured.err and "3 malformed" in captured.out
    assert len(out.read_text().splitlines()) == len(IDS) - 1
    out.unlink()
    with pytest.raises(SystemExit, match="--strict"):
        main(["data", "amr-linearize", "--input", str(bad), "--output", str(out), "--strict"])
    assert len(out.read_text().splitlines()) == len(IDS) - 1  # the good graphs are still written
    with pytest.raises(SystemExit, match="nope"):
        main(["data", "amr-linearize", "--input", str(tmp_path / "nope.txt"), "--output", str(out)])


# ------------------------------------------------------------------------------------ vocabulary
def expected_at_least(path: Path, threshold: int) -> set[str]:
    names = set()
    for line in path.read_text().splitlines():
        name, count = line.split("\t")
        if int(count) >= threshold:
            names.add(name)
    return names


def test_read_and_select_counts():
    counts = read_counts(FIXTURES / "predicates.txt")
    assert counts["cause-01"] == 4563 and len(counts) == 57
    selected = select_symbols(counts, 5)
    assert set(selected) == expected_at_least(FIXTURES / "predicates.txt", 5) and len(selected) == 35
    assert selected[:2] == ["cause-01", "possible-01"]
    additions = read_symbols(FIXTURES / "additions.txt")
    assert additions[0] == "date-entity" and ":ARG0" in additions and len(additions) == len(set(additions))
    with pytest.raises(ValueError, match="additions.txt:1: expected 'NAME COUNT'"):
        read_counts(FIXTURES / "additions.txt")


def test_readable_forms():
    assert readable_form(":ARG0") == "relation argument 0"
    assert readable_form(":ARG0-of") == "relation argument 0 of"
    assert readable_form(":op1") == "relation operator 1"
    assert readable_form(":snt2") == "relation sentence 2"
    assert readable_form(":mod") == "relation mod"
    assert readable_form(":compared-to") == "relation compared to"
    assert readable_form(":location-of") == "relation location of"
    assert readable_form("cause-01") == "cause 01"
    assert readable_form("have-rel-role-91") == "have rel role 91"
    assert readable_form("-of") == "of"
    assert readable_form("date-entity") == "date entity"


def test_count_symbols_from_penman_and_linearised():
    from_penman = count_symbols_in_file(LPP)
    linearised = [e.graph for e in linearize_file(LPP)]
    assert count_symbols(linearised) == from_penman
    assert from_penman["possible-01"] == 2 and from_penman[":ARG0-of"] == 2 and ":wiki" not in from_penman
    assert "i" not in from_penman and "chapter" not in from_penman  # only frames and relations
    assert count_symbols([graph_text("lpp_1943.23")], drop_wiki=False)[":wiki"] == 2


def test_extend_plain_hf_model_rows_are_subword_means(tiny_bert_dir):
    from transformers import AutoModel, AutoTokenizer

    model = AutoModel.from_pretrained(tiny_bert_dir)
    tokenizer = AutoTokenizer.from_pretrained(tiny_bert_dir)
    original = AutoTokenizer.from_pretrained(tiny_bert_dir)  # an independent, unextended copy
    before = model.get_input_embeddings().weight.detach().clone()
    extra = [":ARG0", ":ARG0-of", ":op1", "日本-01"]
    symbols = select_symbols(read_counts(FIXTURES / "predicates.txt"), 5) + extra
    added = extend_vocabulary(model, symbols, tokenizer=tokenizer)

    assert added == symbols
    assert set(added) - set(extra) == expected_at_least(FIXTURES / "predicates.txt", 5)
    assert len(tokenizer) == len(original) + len(symbols)
    weight = model.get_input_embeddings().weight
    assert weight.shape[0] == len(tokenizer) and model.config.vocab_size == len(tokenizer)
    torch.testing.assert_close(weight[: len(original)], before)  # old rows untouched
    readable = {
        ":ARG0": "relation argument 0",
        ":ARG0-of": "relation argument 0 of",
        ":op1": "relation operator 1",
        "cause-01": "cause 01",
        "get-through-13": "get through 13",
    }
    # the tiny WordPiece vocabulary has no CJK characters: [UNK] rows count in the mean
    assert original("日本 01", add_special_tokens=False)["input_ids"][:2] == [original.unk_token_id] * 2
    for symbol in added:
        token_id = tokenizer.convert_tokens_to_ids(symbol)
        assert tokenizer.tokenize(f"( {symbol} )") == ["(", symbol, ")"]
        words = readable.get(symbol, " ".join(symbol.split("-")))
        ids = original(words, add_special_tokens=False)["input_ids"]
        torch.testing.assert_close(weight[token_id], before[ids].mean(0))
    # whole tokens only: no match inside a longer word
    assert "cause-01" not in tokenizer.tokenize("because-01") and ":ARG0" not in tokenizer.tokenize(":ARG01")
    assert extend_vocabulary(model, symbols, tokenizer=tokenizer) == []  # already there
    with pytest.raises(TypeError, match="tokenizer"):
        extend_vocabulary(model, ["x-01"])


def test_extend_encoder_and_save(tiny_model_dir, tmp_path):
    from unisent.encoders import Encoder, EncoderConfig

    encoder = Encoder(EncoderConfig(model=str(tiny_model_dir), max_length=64))
    n_before = len(encoder.tokenizer)
    symbols = select_symbols(count_symbols_in_file(LPP), 1)
    added = extend_vocabulary(encoder, symbols)
    assert set(added) == set(symbols) and len(encoder.tokenizer) == n_before + len(symbols)
    graph = linearize(graph_text("lpp_1943.389"))
    ids = encoder.tokenize_ids([graph])[0]
    assert encoder.tokenizer.convert_tokens_to_ids("contrast-01") in ids
    assert encoder.tokenizer.convert_tokens_to_ids(":ARG0-of") in ids
    saved = encoder.save_pretrained(tmp_path / "amr-encoder")
    again = Encoder.from_pretrained(saved)
    assert again.tokenize_ids([graph]) == encoder.tokenize_ids([graph])
    torch.testing.assert_close(
        again.backbone.get_input_embeddings().weight, encoder.backbone.get_input_embeddings().weight
    )
    torch.testing.assert_close(again.encode([graph]), encoder.encode([graph]))


# ------------------------------------------------------------------------------------ parsers and translators
def test_pre_parsed_lookup(tmp_path):
    parser = PreParsedAMR(LPP)
    assert isinstance(parser, AMRParser) and len(parser) == len(IDS)
    assert parser.parse(["Chapter 1 .", "  Chapter   1 . "]) == ["(c / chapter\n  :mod 1)"] * 2
    with pytest.raises(NotInLookupError, match="'The boa is asleep.'"):
        parser.parse(["Chapter 1 .", "The boa is asleep."], "de")
    with pytest.raises(TypeError):
        parser.parse("Chapter 1 .")
    out = tmp_path / "amr.jsonl"
    main(["data", "amr-linearize", "--input", str(LPP), "--output", str(out)])
    from_jsonl = PreParsedAMR([out])
    assert from_jsonl.graphs == parser.graphs
    assert PreParsedAMR({"A cat .": "(c / cat)"}).parse(["A cat ."]) == ["(c / cat)"]
    with pytest.raises(FileNotFoundError, match="nope"):
        PreParsedAMR(tmp_path / "nope.txt")
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"text": "a"}\n')
    with pytest.raises(ValueError, match="bad.jsonl:1: no string field 'penman' or 'amr'"):
        PreParsedAMR(bad)


def test_pre_translated_then_pre_parsed(tmp_path):
    path = tmp_path / "translations.jsonl"
    path.write_text(
        json.dumps({"text": "Chapter 1.", "lang": "de", "translation": "Kapitel 1 ."})
        + "\n"
        + json.dumps({"text": "Chapter 1.", "lang": "fr", "translation": "Chapitre 1 ."})
        + "\n"
    )
    translator = PreTranslated(path)
    assert isinstance(translator, Translator) and translator.languages == ["de", "fr"]
    assert translator.translate(["Chapter 1."], "fr") == ["Chapitre 1 ."]
    assert translator.translate(["Chapter 1."], "en") == ["Chapter 1."]
    with pytest.raises(NotInLookupError, match="'Chapter 2.'.*'de'"):
        translator.translate(["Chapter 2."], "de")
    with pytest.raises(NotInLookupError, match="no translations into 'es'.*de, fr"):
        translator.translate(["Chapter 1."], "es")
    parser = PreParsedAMR({"Kapitel 1 .": "(c / chapter :mod 1)"})
    graphs = parser.parse(translator.translate(["Chapter 1."], "de"), "de")
    assert [linearize(g) for g in graphs] == ["( chapter :mod 1 )"]
    assert PreTranslated({"de": {"a": "b"}}).translate(["a"], "de") == ["b"]


def test_amrlib_parser_errors(monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "amrlib", None)
    with pytest.raises(ImportError, match=r"pip install 'unisent\[amr\]'"):
        AmrlibParser()

    class FakeModel:
        def parse_sents(self, sents, add_metadata=True):
            return [None if s == "bad" else f'(s / say-01 :ARG1 "{s}")' for s in sents]

    fake = types.ModuleType("amrlib")
    fake.defaults = types.SimpleNamespace(data_dir=str(tmp_path))
    fake.load_stog_model = lambda model_dir=None, **kwargs: FakeModel()
    monkeypatch.setitem(sys.modules, "amrlib", fake)
    monkeypatch.setitem(sys.modules, "amrlib.defaults", fake.defaults)
    with pytest.raises(FileNotFoundError, match="model_stog"):
        AmrlibParser()
    (tmp_path / "model_stog").mkdir()
    parser = AmrlibParser()
    assert isinstance(parser, AMRParser)
    assert parser.parse(["hi"]) == ['(s / say-01 :ARG1 "hi")']
    with pytest.raises(ValueError, match="'bad'"):
        parser.parse(["bad"])
    with pytest.raises(ValueError, match="not 'de'"):
        parser.parse(["hallo"], "de")


@pytest.fixture(scope="module")
def tiny_marian_dir(tmp_path_factory) -> Path:
    """A 1-layer MarianMT with a 100-piece sentencepiece vocabulary (random weights)."""
    import io

    import sentencepiece as spm
    from transformers import MarianConfig, MarianMTModel, MarianTokenizer

    directory = tmp_path_factory.mktemp("tiny-marian")
    sentences = (SAMPLE_DIR / "sentences.txt").read_text().splitlines()
    buffer = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(sentences), model_writer=buffer, vocab_size=100, minloglevel=2
    )
    for name in ("source.spm", "target.spm"):
        (directory / name).write_bytes(buffer.getvalue())
    pieces = spm.SentencePieceProcessor(model_proto=buffer.getvalue())
    vocab = {"</s>": 0, "<unk>": 1}
    for i in range(pieces.get_piece_size()):
        vocab.setdefault(pieces.id_to_piece(i), len(vocab))
    vocab["<pad>"] = len(vocab)
    (directory / "vocab.json").write_text(json.dumps(vocab))
    tokenizer = MarianTokenizer(*(str(directory / f) for f in ("source.spm", "target.spm", "vocab.json")))
    config = MarianConfig(
        vocab_size=len(vocab),
        d_model=16,
        encoder_layers=1,
        decoder_layers=1,
        encoder_attention_heads=2,
        decoder_attention_heads=2,
        encoder_ffn_dim=32,
        decoder_ffn_dim=32,
        max_position_embeddings=64,
        pad_token_id=vocab["<pad>"],
        eos_token_id=0,
        decoder_start_token_id=vocab["<pad>"],
    )
    torch.manual_seed(0)
    MarianMTModel(config).save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    return directory


@pytest.mark.filterwarnings("ignore:Recommended. pip install sacremoses")
def test_marian_translator(tiny_marian_dir, tmp_path):
    with pytest.raises(FileNotFoundError, match="'de'.*nope"):
        MarianTranslator({"de": tmp_path / "nope"})
    translator = MarianTranslator({"de": tiny_marian_dir, "fr": tiny_marian_dir}, max_new_tokens=5, batch_size=2)
    assert isinstance(translator, Translator)
    out = translator.translate(["The cat sits on the mat.", "A dog.", "Hello there."], "de")
    assert len(out) == 3 and all(isinstance(s, str) for s in out)
    assert translator.translate(["A dog."], "de") == out[1:2]  # greedy decoding: deterministic
    assert translator.translate(["The cat."], "en") == ["The cat."]
    with pytest.raises(ValueError, match="no MarianMT model for 'es'.*de, fr"):
        translator.translate(["The cat."], "es")


def test_counting_symbols_in_a_jsonl_names_the_bad_line(tmp_path):
    graphs = tmp_path / "graphs.jsonl"
    graphs.write_text('{"graph": "( want-01 :ARG0 ( boy ) )"}\n\n{"graph": "( go-02 \n', encoding="utf-8")
    with pytest.raises(ValueError, match=r"graphs.jsonl:line 3: not valid JSON"):
        count_symbols_in_file(graphs)
    graphs.write_text('{"graph": "( want-01 :ARG0 ( boy ) )"}\n["not", "an object"]\n', encoding="utf-8")
    with pytest.raises(ValueError, match=r"graphs.jsonl:2: no string field 'graph' in list"):
        count_symbols_in_file(graphs)
    graphs.write_text('{"graph": "( want-01 :ARG0 ( boy ) )"}\n\n', encoding="utf-8")
    assert count_symbols_in_file(graphs)["want-01"] == 1
