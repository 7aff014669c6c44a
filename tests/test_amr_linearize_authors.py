"""``unisent.amr.linearize(style="authors")``: MSE-AMR's ``amr/IO.py`` strings, exactly.

References: ``IO.load(dereify=True, remove_wiki=True)`` then ``IO.linearize(graph, True, False)`` with
the authors' vocabulary and penman 1.3.1 (the data checkout's amr/reference-linearized.jsonl). The suite
checks a fixture of 32 Little Prince graphs covering each difference from the clean style;
``benchmarks/check_shared_data.py`` checks all 2,979 graphs of the three Little Prince files.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import penman
import pytest

from unisent.amr.authors_style import authors_vocabulary
from unisent.amr.linearize import (
    linearize,
    linearize_blocks,
    linearize_file,
    linearize_string,
    linearize_tokens,
)

FIXTURES = Path(__file__).parent / "fixtures" / "amr"
GRAPHS = FIXTURES / "little-prince-authors.txt"
REFERENCES = FIXTURES / "little-prince-authors.jsonl"


def _references(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


# ------------------------------------------------------------------------------------------ fixture
def test_fixture_covers_every_difference():
    """The fixture is worth running only if it holds each difference and graphs of all three files."""
    refs = _references(REFERENCES)
    kinds = Counter(kind for ref in refs for kind in ref["differences"])
    assert len(refs) == 32
    assert {"a_of", "a_frame", "a_rel", "b"} <= set(kinds)
    assert kinds["b"] >= 5 and kinds["a_rel"] >= 3
    assert len({ref["file"] for ref in refs}) == 3
    assert any(not ref["differences"] for ref in refs)  # and graphs where the styles agree


def test_authors_style_equals_the_reference_on_the_fixture():
    refs = {ref["id"]: ref["reference"] for ref in _references(REFERENCES)}
    errors: list = []
    got = {graph_id: graph for graph_id, _, graph in linearize_file(GRAPHS, style="authors", errors=errors)}
    assert errors == []
    assert got.keys() == refs.keys()
    mismatches = [graph_id for graph_id in refs if got[graph_id] != refs[graph_id]]
    assert mismatches == []


def test_clean_style_is_unchanged_and_differs_where_the_fixture_says():
    """The default stays the clean form: it differs from the reference exactly on the graphs that show
    a difference, and its strings keep the clean conventions (``:ARG0-of`` as one token)."""
    refs = {ref["id"]: ref for ref in _references(REFERENCES)}
    for graph_id, _, graph in linearize_file(GRAPHS):
        ref = refs[graph_id]
        assert (graph != ref["reference"]) == bool(ref["differences"]), graph_id
        assert " -of " not in f" {graph} "
    text = GRAPHS.read_text(encoding="utf-8")
    assert [g for _, _, g in linearize_string(text)] == [g for _, _, g in linearize_string(text, style="clean")]


# ------------------------------------------------------------------------ one test per difference
def test_a_vocabulary_split():
    """(a): inverse roles, frames outside the vocabulary and unknown relations are split; known ones
    (``:ARG1``, ``swallow-01``, ``:consist-of`` of additions.txt) stay whole."""
    graph = (
        "(b / boa :ARG0-of (s / swallow-01 :ARG1 (a / animal)) :ARG1-of (t / tame-01)"
        " :prep-to (m / middling) :prep-on-of (x / table) :consist-of (w / wood))"
    )
    assert linearize(graph, style="authors") == (
        "( boa :ARG0 -of ( swallow-01 :ARG1 ( animal ) ) :ARG1 -of ( tame -01 ) : prep-to ( middling )"
        " : prep-on -of ( table ) :consist-of ( wood ) )"
    )
    assert linearize(graph) == (
        "( boa :ARG0-of ( swallow-01 :ARG1 ( animal ) ) :ARG1-of ( tame-01 ) :prep-to ( middling )"
        " :prep-on-of ( table ) :consist-of ( wood ) )"
    )


def test_b_wiki_removal_rebuilds_the_layout():
    """(b): the :wiki removal rebuilds the graph from its triples; the edge back to the re-entrant
    ``i`` moves into ``i`` and flips to ``-of``. Without the removal penman's layout is kept."""
    graph = "(s / say-01 :ARG0 (i / i) :ARG2 i)"
    assert linearize(graph, style="authors") == "( say-01 :ARG0 ( i :ARG2 -of say-01 ) )"
    assert linearize(graph) == "( say-01 :ARG0 ( i ) :ARG2 i )"
    assert linearize(graph, style="authors", drop_wiki=False) == "( say-01 :ARG0 ( i ) :ARG2 i )"
    wiki = '(c / city :wiki "Paris" :name (n / name :op1 "Paris"))'
    assert linearize(wiki, style="authors") == "( city :name ( name :op1 Paris ) )"
    assert linearize(wiki, style="authors", drop_wiki=False) == "( city :wiki Paris :name ( name :op1 Paris ) )"


def test_c_underscore_in_strings():
    """(c): ``_`` -> space inside a quoted string; a string with an inner space keeps its quotes."""
    graph = '(c / city :name (n / name :op1 "New_York"))'
    assert linearize(graph, style="authors") == "( city :name ( name :op1 New York ) )"
    assert linearize_tokens(graph, style="authors")[-3] == "New York"  # one token with a space
    assert linearize(graph) == "( city :name ( name :op1 New_York ) )"
    spaced = '(c / city :name (n / name :op1 "New York"))'
    assert linearize_tokens(spaced, style="authors")[-4:-2] == ['"New', 'York"']
    assert linearize(spaced) == "( city :name ( name :op1 New York ) )"


# ------------------------------------------------------------------------------------- the switch
def test_authors_options():
    graph = "(b / boa :ARG0-of (s / swallow-01))"
    assert linearize(graph, style="authors", parentheses=False) == "boa :ARG0 -of swallow-01"
    tree_input = linearize(penman.parse(graph), style="authors")
    graph_input = linearize(penman.decode(graph), style="authors")
    assert tree_input == graph_input == "( boa :ARG0 -of ( swallow-01 ) )"
    with pytest.raises(ValueError, match="style must be one of"):
        linearize(graph, style="author")
    with pytest.raises(ValueError, match="quote_strings"):
        linearize(graph, style="authors", quote_strings=True)
    with pytest.raises(ValueError, match="style must be one of"):
        linearize_file(GRAPHS, style="nope")  # at once, before iterating


def test_authors_style_reports_malformed_graphs_like_the_clean_style():
    text = "# ::id ok\n(a / and :op1 (b / boy))\n\n# ::id bad\n(a / and :op1 (b / boy)\n"
    errors: list = []
    out = list(linearize_string(text, style="authors", errors=errors))
    assert [(i, g) for i, _, g in out] == [("ok", "( and :op1 ( boy ) )")]
    assert [e.id for e in errors] == ["bad"] and "DecodeError" in errors[0].message
    blocks = list(linearize_blocks(iter([]), style="authors"))
    assert blocks == []


def test_authors_vocabulary_is_their_token_set():
    vocabulary = authors_vocabulary()
    # 2,523 frames counted >= 5 + 244 distinct additions + 6 special tokens + 512 pointers
    assert len(vocabulary) == 2523 + 244 + 6 + 512
    assert {"cause-01", "swallow-01", ":ARG1", "-of", "-01", ":consist-of", "<pointer:511>"} <= vocabulary
    assert "tame-01" not in vocabulary and "alleviate-01" not in vocabulary  # counted 4 times: below 5
    assert ":ARG1-of" not in vocabulary


# ------------------------------------------------------------------------------- CLI and objective
def test_amr_linearize_command_has_the_switch(tmp_path):
    from unisent.builders.amr_records import amr_records, build_amr_linearize

    out = tmp_path / "authors.jsonl"
    build_amr_linearize(input=[str(GRAPHS)], output=str(out), style="authors")
    refs = {ref["id"]: ref["reference"] for ref in _references(REFERENCES)}
    records = _references(out)
    assert {r["id"]: r["graph"] for r in records} == refs
    clean = {r["id"]: r["graph"] for r in amr_records([GRAPHS])}
    assert clean != refs and clean.keys() == refs.keys()


def test_amr_objective_linearization_selects_the_authors_vocabulary():
    from unisent.objectives import AMRSimCSE

    authors = AMRSimCSE(linearization="authors")
    symbols = authors.read_symbols()
    assert symbols == sorted(symbols)
    assert {"-of", "-01", ":ARG1", "cause-01"} <= set(symbols)
    assert not any(s.startswith("<") for s in symbols)
    assert AMRSimCSE().read_symbols() == []  # clean: no vocabulary unless configured
    with_lists = AMRSimCSE(linearization="authors", symbol_lists=str(FIXTURES / "additions.txt"))
    assert "cause-01" not in with_lists.read_symbols()  # configured files win
    assert authors.config()["init_args"]["linearization"] == "authors"
    with pytest.raises(ValueError, match="linearization"):
        AMRSimCSE(linearization="author")


def test_amr_nli_builder_passes_the_style():
    from unisent.amr import PreParsedAMR
    from unisent.builders.amr_nli import amr_nli_records

    parser = PreParsedAMR({"I said it to me .": "(s / say-01 :ARG0 (i / i) :ARG2 i)"})
    records = [{"anchor": "I said it to me ."}]
    (clean,) = amr_nli_records(records, parser, slots=("anchor",))
    (authors,) = amr_nli_records(records, parser, slots=("anchor",), style="authors")
    assert clean["anchor_graph"] == "( say-01 :ARG0 ( i ) :ARG2 i )"
    assert authors["anchor_graph"] == "( say-01 :ARG0 ( i :ARG2 -of say-01 ) )"
    with pytest.raises(ValueError, match="style"):
        next(amr_nli_records(records, parser, slots=("anchor",), style="author"))
