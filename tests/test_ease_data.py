"""EASE data builders on real data: the 3-page Wikipedia dump sample and a FewRel slice
(tests/fixtures/ease, see its LICENSE.md). Expected values were checked by hand against the wikitext."""

import json
import shutil
import sys
from collections import Counter
from pathlib import Path

import pytest

from unisent.builders.ease import sentences, steps
from unisent.builders.ease.fewrel import detokenize
from unisent.builders.ease.tables import read_types
from unisent.commands.data import main

#: the repository's training, benchmark and test samples (not in the wheel)
SAMPLE_DIR = Path(__file__).resolve().parents[1] / "samples"

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "ease"
DUMP = FIXTURES / "enwiki-pages-articles-sample.xml.bz2"
FEWREL = FIXTURES / "fewrel_val_wiki_slice.json"


def wiki(out, *extra):
    main(["ease-wikipedia", "--input", str(DUMP), "--output", str(out), *map(str, extra)])


def jsonl(path):
    return [json.loads(line) for line in Path(path).read_text(encoding="utf-8").splitlines()]


def entities_tsv(path):
    lines = Path(path).read_text(encoding="utf-8").splitlines()
    assert lines[0] == "id\ttitle\tcount"
    return {i: (t, int(c)) for i, t, c in (line.split("\t") for line in lines[1:])}


def by_text(records):
    out = {}
    for r in records:
        out.setdefault(r["text"], []).append(r["entity"])
    return out


@pytest.fixture(scope="module")
def full(tmp_path_factory):
    """A fresh full run with --min-link-count 0 (every linked entity kept)."""
    out = tmp_path_factory.mktemp("ease_full")
    wiki(out, "--min-link-count", 0)
    return out


# --------------------------------------------------------------------------- Wikipedia dump


def test_sentences_and_their_entities(full):
    records = jsonl(full / "records.jsonl")
    texts = by_text(records)
    # templates ({{multiple issues}}, {{dubious}}), bold/italic and a double space removed; link text kept
    assert texts[
        "In human–computer interaction, computer accessibility (also known as Accessible computing) refers "
        "to the accessibility of a computer system to all people, regardless of disability or severity of "
        "impairment."
    ] == ["Human–computer interaction", "Accessibility", "Computer system", "Disability"]
    # link trails ([[Typeface|font]]s, [[icon]]s) belong to the link
    assert texts[
        "For individuals with mild to medium vision impairment, it is helpful to use large fonts, high DPI "
        "displays, high-contrast themes and icons supplemented with auditory feedback and screen magnifying "
        "software."
    ] == ["Typeface", "Icon"]
    # [[Screen reader#Accessibility APIs|accessibility API]]: the anchor is dropped
    assert texts[
        "The definition may include accessibility features such as tabbing navigation, theming, and an "
        "accessibility API."
    ] == ["Tabbing navigation", "Theme (computing)", "Screen reader"]
    # <ref>s removed from the middle of a paragraph
    assert texts[
        "This development of this standard has been supported in Europe by SNAPI and has been successfully "
        "incorporated into the LASSeO specifications."
    ] == ["SNAPI"]
    canada = (
        "In Canada, relevant federal legislation includes the Canadian Human Rights Act, the Employment Equity "
        "Act, and the Canadian Labour Code."
    )
    assert texts[canada] == ["Canadian Human Rights Act", "Employment equity (Canada)", "Canadian Labour Code"]
    record = next(r for r in records if r["text"] == canada)
    assert record == {
        "text": canada,
        "entity": "Canadian Human Rights Act",
        "hard_negative": None,
        "language": "en",
        "page": "Accessibility",
    }
    # the redirect page gives no sentences but a redirect
    assert {r["page"] for r in records} == {"Computer accessibility", "Accessibility"}
    assert (full / "redirects.tsv").read_text() == "AccessibleComputing\tComputer accessibility\n"
    for r in records:
        assert not any(s in r["text"] for s in ("[[", "]]", "{{", "}}", "<ref", "''", "  ")), r["text"]


def test_sentence_file_has_link_offsets(full):
    pages = jsonl(full / "sentences.jsonl")
    assert [p["page"] for p in pages] == ["Computer accessibility", "Accessibility"]
    first = pages[0]["sentences"][0]
    assert [(first["text"][s:e], t) for s, e, t in first["links"]] == [
        ("human–computer interaction", "Human–computer interaction"),
        ("accessibility", "Accessibility"),
        ("computer system", "Computer system"),
        ("disability", "Disability"),
    ]
    for page in pages:
        for sent in page["sentences"]:
            assert len(sent["text"]) >= 20  # --min-sentence-chars default
            for s, e, _ in sent["links"]:
                assert 0 <= s < e <= len(sent["text"])


def test_link_counts_and_min_link_count(full, tmp_path):
    counts = dict(line.split("\t") for line in (full / "counts.tsv").read_text().splitlines()[1:])
    # 5 x [[Microsoft Windows]] in running text
    assert counts["Microsoft Windows"] == "5"
    # [[Assistive technology]] x2, [[assistive technology]] x3, [[Assistive technology|...]] x2; the
    # differently cased [[Assistive Technology]] is another title
    assert counts["Assistive technology"] == "7" and counts["Assistive Technology"] == "1"
    # 5 links to Screen reader ([[screen reader]]s, [[Screen reader#...|...]]); the one in a table is dropped
    assert counts["Screen reader"] == "4"
    # [[Universal design]] x3: the "See also" item (16 characters) is shorter than --min-sentence-chars
    assert counts["Universal design"] == "2"
    # [[Web accessibility]] x3, twice as a "See also" item
    assert counts["Web accessibility"] == "1"

    stats0 = json.loads((full / "stats.json").read_text())
    ents0 = entities_tsv(full / "entities.tsv")
    records0 = jsonl(full / "records.jsonl")
    assert stats0["pages"] == 3 and stats0["articles"] == 2 and stats0["redirects"] == 1
    assert len(records0) == stats0["records"] == stats0["links_kept"] == stats0["links_in_sentences"]
    assert len(ents0) == len(counts) == stats0["entities"]
    assert ents0["Web accessibility"] == ("Web accessibility", 1)

    out = tmp_path / "min1"
    wiki(out, "--min-link-count", 1)
    ents1 = entities_tsv(out / "entities.tsv")
    records1 = jsonl(out / "records.jsonl")
    assert set(ents1) == {t for t, n in counts.items() if int(n) > 1}
    assert "Web accessibility" not in ents1 and ents1["Microsoft Windows"] == ("Microsoft Windows", 5)
    assert Counter(r["entity"] for r in records1)["Microsoft Windows"] == 5
    assert len(records1) == sum(int(n) for n in counts.values() if int(n) > 1)
    stats1 = json.loads((out / "stats.json").read_text())
    assert stats1["links_dropped"]["below_min_link_count"] == len(records0) - len(records1)


TYPES = """entity\ttype
Dyslexia\tdisability
Hearing impairment\tdisability
Visual impairment\tdisability
Equality Act 2010\tlegislation
Americans with Disabilities Act of 1990\tlegislation
Section 508 Amendment to the Rehabilitation Act of 1973\tlegislation
Microsoft Windows\toperating system
Linux\toperating system
Windows 10\toperating system
Braille\twriting system
Braille\tassistive device
Joystick\tassistive device
Trackball\tassistive device
Hearing aid\tassistive device
"""


def test_hard_negatives_from_a_type_table(full, tmp_path):
    types = tmp_path / "types.tsv"
    types.write_text(TYPES)
    out = tmp_path / "neg"
    shutil.copytree(full, out)  # the extraction and counts are reused; only the records step runs
    wiki(out, "--min-link-count", 0, "--types", types)
    records = jsonl(out / "records.jsonl")
    pages = {p["page"]: set(p["page_links"]) | {p["page"]} for p in jsonl(out / "sentences.jsonl")}
    table = read_types(types)
    negs = {}
    for r in records:
        negs.setdefault((r["page"], r["entity"]), set()).add(r["hard_negative"])
        if r["hard_negative"] is not None:
            assert set(table[r["hard_negative"]]) & set(table[r["entity"]])  # same type
            assert r["hard_negative"] not in pages[r["page"]]  # not linked from the same page
            assert r["hard_negative"] != r["entity"]
    # Dyslexia is linked only from "Computer accessibility", Hearing impairment only from "Accessibility",
    # Visual impairment from both (on "Accessibility" in the list item "visual impairments;", too short to
    # be a sentence but still a link of the page): each has exactly one candidate
    assert negs[("Computer accessibility", "Dyslexia")] == {"Hearing impairment"}
    assert negs[("Accessibility", "Hearing impairment")] == {"Dyslexia"}
    assert negs[("Computer accessibility", "Visual impairment")] == {"Hearing impairment"}
    assert "Visual impairment" in pages["Accessibility"] and ("Accessibility", "Visual impairment") not in negs
    # the laws are all linked from "Accessibility"; Windows and Linux share a page and Windows 10 is not
    # an entity of the corpus: no candidate
    assert negs[("Accessibility", "Equality Act 2010")] == {None}
    assert negs[("Computer accessibility", "Microsoft Windows")] == {None}
    # Braille: "writing system" has no other member, so its other type is used
    assert negs[("Accessibility", "Braille")] <= {"Joystick", "Trackball"}
    assert negs[("Computer accessibility", "Joystick")] <= {"Braille", "Hearing aid"}
    assert all(n == {None} for (_, e), n in negs.items() if e not in table)
    stats = json.loads((out / "stats.json").read_text())
    assert stats["records_with_hard_negative"] == sum(r["hard_negative"] is not None for r in records) > 0
    # seeded: a second build gives the same records
    again = tmp_path / "again"
    shutil.copytree(full, again)
    wiki(again, "--min-link-count", 0, "--types", types)
    assert (again / "records.jsonl").read_bytes() == (out / "records.jsonl").read_bytes()


def test_a_types_file_without_rows_builds_records_without_negatives(full, tmp_path):
    types = tmp_path / "types.tsv"
    types.write_text("entity\ttype\n")  # a header only: no sampler (this crashed on the stats before)
    out = tmp_path / "neg"
    shutil.copytree(full, out)
    wiki(out, "--min-link-count", 0, "--types", types)
    assert all(r["hard_negative"] is None for r in jsonl(out / "records.jsonl"))
    assert json.loads((out / "stats.json").read_text())["typed_entities"] == 0


def test_wikidata_map(full, tmp_path):
    qmap = tmp_path / "map.tsv"
    qmap.write_text("title\tqid\nMicrosoft_Windows\tQ1406\nlinux\tQ388\n")  # titles are normalised
    out = tmp_path / "qid"
    shutil.copytree(full, out)
    wiki(out, "--min-link-count", 0, "--wikidata-map", qmap)
    records = jsonl(out / "records.jsonl")
    assert Counter(r["entity"] for r in records) == {"Q1406": 5, "Q388": 2}
    assert entities_tsv(out / "entities.tsv") == {"Q1406": ("Microsoft Windows", 5), "Q388": ("Linux", 2)}
    stats = json.loads((out / "stats.json").read_text())
    assert stats["links_dropped"]["no_wikidata_id"] == stats["links_in_sentences"] - 7


def test_resume_after_max_pages_equals_a_fresh_run(full, tmp_path, capsys):
    out = tmp_path / "resumed"
    wiki(out, "--min-link-count", 0, "--max-pages", 1)
    first = jsonl(out / "sentences.jsonl")
    assert [p["page"] for p in first] == ["Computer accessibility"]
    wiki(out, "--min-link-count", 0)
    assert "resuming after 2 pages" in capsys.readouterr().out
    for name in ("sentences.jsonl", "redirects.tsv", "counts.tsv", "records.jsonl", "entities.tsv", "stats.json"):
        assert (out / name).read_bytes() == (full / name).read_bytes(), name
    wiki(out, "--min-link-count", 0)  # everything exists: every step is skipped
    printed = capsys.readouterr().out
    assert printed.count("skipping") == 3


def test_resume_after_a_killed_run(full, tmp_path, monkeypatch):
    out = tmp_path / "killed"

    articles = []

    def die(text):  # the second article, "Accessibility", dies while it is parsed
        articles.append(text)
        if len(articles) == 2:
            raise KeyboardInterrupt
        return sentences.process_article(text)

    with monkeypatch.context() as m, pytest.raises(KeyboardInterrupt):
        m.setattr(steps, "process_article", die)
        steps.extract_step(DUMP, out, log=lambda *a: None)
    progress = json.loads((out / "extract.json").read_text())
    assert progress["pages_seen"] == 2 and progress["articles"] == 1
    assert not (out / "sentences.jsonl").exists()
    with (out / "sentences.jsonl.part").open("a") as fh:  # half a page written when the process died
        fh.write('{"page": "Accessibility", "sente')
    wiki(out, "--min-link-count", 0)
    for name in ("sentences.jsonl", "counts.tsv", "records.jsonl", "entities.tsv"):
        assert (out / name).read_bytes() == (full / name).read_bytes(), name
    assert not list(out.glob("*.part"))


def test_workers_give_the_same_output(full, tmp_path):
    wiki(tmp_path, "--min-link-count", 0, "--workers", 2)
    for name in ("sentences.jsonl", "records.jsonl", "stats.json"):
        assert (tmp_path / name).read_bytes() == (full / name).read_bytes(), name


def test_changed_extraction_options_need_overwrite(full, tmp_path):
    out = tmp_path / "opts"
    shutil.copytree(full, out)
    with pytest.raises(SystemExit, match="min_sentence_chars.*--overwrite"):
        wiki(out, "--min-sentence-chars", 5)
    wiki(out, "--min-sentence-chars", 5, "--min-link-count", 0, "--overwrite")
    assert (
        json.loads((out / "stats.json").read_text())["sentences"]
        > json.loads((full / "stats.json").read_text())["sentences"]
    )


def test_errors_name_file_and_line(tmp_path):
    with pytest.raises(SystemExit, match="dump not found: .*nope.xml.bz2"):
        main(["ease-wikipedia", "--input", str(tmp_path / "nope.xml.bz2"), "--output", str(tmp_path / "o")])
    bad_types = tmp_path / "types.tsv"
    bad_types.write_text("entity\ttype\nDyslexia\tdisability\nLinux operating system\n")
    with pytest.raises(SystemExit, match=r"types file .*types.tsv, line 3"):
        wiki(tmp_path / "o", "--types", bad_types)
    bad_map = tmp_path / "map.tsv"
    bad_map.write_text("Linux\tQ388\nQ1406\tMicrosoft Windows\n")
    with pytest.raises(SystemExit, match=r"wikidata map .*map.tsv, line 2: field 2 \(QID\)"):
        wiki(tmp_path / "o", "--wikidata-map", bad_map)
    with pytest.raises(SystemExit, match="FewRel file not found: .*missing.json"):
        main(["ease-fewrel", "--input", str(tmp_path / "missing.json"), "--output", str(tmp_path / "f")])
    broken = tmp_path / "broken.json"
    broken.write_text('{"P1": [{"tokens": ["a"], "h": ["a", "Q1", [[0]]]}]}')
    with pytest.raises(SystemExit, match=r"relation P1, instance 0: field 't'"):
        main(["ease-fewrel", "--input", str(broken), "--output", str(tmp_path / "f")])


def test_missing_dependency_message(monkeypatch):
    monkeypatch.setitem(sys.modules, "pysbd", None)
    with pytest.raises(ImportError, match=r"pip install 'unisent\[ease\]'"):
        sentences.SentenceSplitter("en")


# --------------------------------------------------------------------------- FewRel


def fewrel_slots():
    data = json.loads(FEWREL.read_text())
    slots = {}
    for rel, instances in data.items():
        for inst in instances:
            slots.setdefault(f"{rel}:head", set()).add(inst["h"][1])
            slots.setdefault(f"{rel}:tail", set()).add(inst["t"][1])
    return data, slots


def test_fewrel_records(tmp_path):
    out = tmp_path / "fewrel"
    main(["ease-fewrel", "--input", str(FEWREL), "--output", str(out)])
    data, slots = fewrel_slots()
    records = jsonl(out / "records.jsonl")
    assert len(records) == 2 * sum(len(v) for v in data.values()) == 80
    assert records[0] == {
        "text": "Gabriella Gatti (July 5, 1908–October 22, 2003) was an Italian operatic soprano, primarily based in "
        "Italy and associated with the Italian repertory.",
        "entity": "Q3756740",
        "hard_negative": records[0]["hard_negative"],
        "language": "en",
        "page": None,
    }
    assert records[1]["entity"] == "Q30903" and records[1]["text"] == records[0]["text"]
    assert by_text(records)[
        "Wilton Bridge was a major crossing of the River Wye and was protected by Wilton Castle."
    ] == ["Q8023362", "Q19695"]
    for k, r in enumerate(records):
        slot = [s for s, members in slots.items() if r["entity"] in members and s.startswith(("P412", "P177"))]
        other = records[k ^ 1]["entity"]  # head and tail records of a sentence are adjacent
        assert r["hard_negative"] not in (None, r["entity"], other)
        assert any(r["hard_negative"] in slots[s] for s in slot)  # fills the same relation slot
    # the tails of P412 are voice types: a soprano's negative is another voice type
    voice_types = slots["P412:tail"]
    assert all(r["hard_negative"] in voice_types for r in records if r["entity"] == "Q30903")
    ents = entities_tsv(out / "entities.tsv")
    n_soprano = sum(inst["t"][1] == "Q30903" for inst in data["P412"])
    assert ents["Q30903"] == ("Soprano", n_soprano) and n_soprano > 1
    stats = json.loads((out / "stats.json").read_text())
    assert stats["relations"] == {"P177": "crosses", "P412": "voice type"}


def test_fewrel_subset_and_min_count(tmp_path):
    main(["ease-fewrel", "--input", str(FEWREL), "--output", str(tmp_path / "a"), "--max-records", "10", "--seed", "3"])
    main(["ease-fewrel", "--input", str(FEWREL), "--output", str(tmp_path / "b"), "--max-records", "10", "--seed", "3"])
    a = jsonl(tmp_path / "a" / "records.jsonl")
    assert (
        len(a) == 10
        and (tmp_path / "b" / "records.jsonl").read_bytes() == (tmp_path / "a" / "records.jsonl").read_bytes()
    )
    used = {r["entity"] for r in a} | {r["hard_negative"] for r in a}
    assert set(entities_tsv(tmp_path / "a" / "entities.tsv")) == used

    main(["ease-fewrel", "--input", str(FEWREL), "--output", str(tmp_path / "c"), "--min-count", "2"])
    data, _ = fewrel_slots()
    occurrences = Counter(e[1] for v in data.values() for inst in v for e in (inst["h"], inst["t"]))
    c = jsonl(tmp_path / "c" / "records.jsonl")
    assert {r["entity"] for r in c} == {q for q, n in occurrences.items() if n >= 2}
    assert len(c) == sum(n for n in occurrences.values() if n >= 2)


def test_detokenize():
    assert (
        detokenize(["He", "said", '"', "Do", "n't", "go", '"', ",", "and", "(", "left", ")", "."])
        == 'He said "Don\'t go", and (left).'
    )
    assert (
        detokenize(
            ["a", "four", "-", "lane", "bridge", "(", ")", "over", "the", "Players", "'", "river", "\xa0", "5", "%"]
        )
        == "a four-lane bridge over the Players' river 5%"
    )


def test_bundled_fewrel_sample():
    records = jsonl(SAMPLE_DIR / "ease_fewrel.jsonl")
    ents = entities_tsv(SAMPLE_DIR / "ease_fewrel_entities.tsv")
    assert len(records) == 4000
    assert {r["entity"] for r in records} | {r["hard_negative"] for r in records} == set(ents)
    assert all(set(r) == {"text", "entity", "hard_negative", "language", "page"} for r in records)
    size = (SAMPLE_DIR / "ease_fewrel.jsonl").stat().st_size + (SAMPLE_DIR / "ease_fewrel_entities.tsv").stat().st_size
    assert size < 1_100_000


# --------------------------------------------------------------------------- package layout and readers


def test_dump_reader_skips_pages_and_names_malformed_xml(tmp_path):
    from unisent.builders.ease.dump import iter_dump

    events = list(iter_dump(DUMP))
    assert events[0][0] == "namespaces" and events[0][1]["Category"] == 14 and "" not in events[0][1]
    pages = [value for kind, value in events[1:]]
    assert [(p.title, p.ns, p.redirect) for p in pages] == [
        ("AccessibleComputing", 0, "Computer accessibility"),
        ("Computer accessibility", 0, None),
        ("Accessibility", 0, None),
    ]
    assert pages[1].text.startswith("{{") and "[[" in pages[1].text
    # resuming: the pages done are counted but not read
    assert [kind for kind, _ in iter_dump(DUMP, skip=2)] == ["namespaces", "skipped", "skipped", "page"]
    bad = tmp_path / "bad.xml"
    bad.write_text(
        '<mediawiki xmlns="http://www.mediawiki.org/xml/export-0.10/"><siteinfo><namespaces>'
        '<namespace key="0" /></namespaces></siteinfo>\n<page><title>A</title><ns>0</ns>\n'
        "<revision><text>x</revision></page></mediawiki>"
    )
    with pytest.raises(ValueError, match=r"dump .*bad.xml, line 3, column \d+: malformed XML"):
        list(iter_dump(bad))


def test_killed_writes_leave_no_temporary_files(full, tmp_path, monkeypatch):
    out = tmp_path / "k"
    shutil.copytree(full, out)
    (out / "counts.tsv").unlink()

    def boom(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(steps, "read_redirects", boom)  # dies in the count step
    with pytest.raises(KeyboardInterrupt):
        steps.count_step(out, log=lambda *a: None)
    assert not (out / "counts.tsv").exists() and not list(out.glob(".*.tmp"))
    (out / ".records.jsonl.x1.tmp").write_text("half")  # what a kill -9 during a write leaves
    assert ".records.jsonl.x1.tmp" in steps.remove_outputs(out, steps.RECORD_FILES)
    assert not (out / ".records.jsonl.x1.tmp").exists() and not (out / "records.jsonl").exists()


def test_entity_titles_reader(tmp_path):
    from unisent.data import entities

    path = tmp_path / "entities.tsv"
    path.write_text('id\ttitle\tcount\nQ1\tUniverse\t3\nQ2\t"Quoted" title\t1\n', encoding="utf-8")
    assert entities.read_entity_titles(path) == {"Q1": "Universe", "Q2": '"Quoted" title'}
    path.write_text("id\ttitle\nQ1\tUniverse\n\nQ2\tEarth\n", encoding="utf-8")
    with pytest.raises(ValueError, match=r"entities.tsv:3: expected `id<TAB>title`"):
        entities.read_entity_titles(path)


def test_options_from_a_config_file(full, tmp_path):
    config = tmp_path / "ease.yaml"
    config.write_text(f"input: {DUMP}\noutput: {tmp_path / 'cfg'}\nmin_link_count: 0\n")
    main(["ease-wikipedia", "--config", str(config)])
    assert (tmp_path / "cfg" / "records.jsonl").read_bytes() == (full / "records.jsonl").read_bytes()
