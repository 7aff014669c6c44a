"""NLI triples (or pairs, or sentences) -> records with every AMR form: ``unisent data amr-nli``.

Algorithm 1 of Cai et al. (2022) replaces each training sentence, at every step, by its text, its AMR
graph or the graph of its translation; parsing and translating are far too slow for a training step, so
every form is computed once here and [`unisent.objectives.AMRSimCSE`][unisent.objectives.AMRSimCSE] draws among them::

    {"anchor": "A man plays.", ...} -> {"anchor": ..., "anchor_graph": "( play-01 :ARG0 ( man ) )",
                                        "anchor_graph_de": ..., "positive": ..., "positive_graph": ..., ...}

A failed parse or translation gives a null graph (the objective falls back to another form); graphs a
lookup holds linearised already are kept as they are, and so are the records' other fields."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any, Literal

from ..data.records import iter_records
from .nli_records import write_jsonl

__all__ = ["COMMANDS", "SLOTS", "amr_nli_records", "build_amr_nli", "read_slot_records"]

#: The sentence fields a record may have, in this order (``nli-triples`` writes all three).
SLOTS = ("anchor", "positive", "negative")


def read_slot_records(path: str | Path) -> tuple[list[dict[str, Any]], tuple[str, ...]]:
    """Read a jsonl of NLI triples, pairs or sentences: ``(records, slots)``, the slots being the fields of
    ``SLOTS`` in the first record, which every record must have as non-empty strings."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"input file {str(path)!r} does not exist")
    records: list[dict[str, Any]] = []
    slots: tuple[str, ...] = ()
    for rec in iter_records(path, "jsonl", blank_lines="skip"):
        lineno, record = rec.line, rec.data
        if not isinstance(record, dict):
            raise ValueError(f"{path}:{lineno}: expected a JSON object")
        if not records:
            slots = tuple(s for s in SLOTS if s in record)
            if not slots:
                raise ValueError(f"{path}:{lineno}: no sentence field ({', '.join(SLOTS)}) in {sorted(record)}")
        for slot in slots:
            value = record.get(slot)
            if not isinstance(value, str) or not value.strip():
                raise ValueError(f"{path}:{lineno}: field {slot!r} must be a non-empty string, got {value!r}")
        records.append(record)
    if not records:
        raise ValueError(f"{path}: no records")
    return records, slots


def _graphs(
    parser, sentences: list[str], lang: str, on_missing: str, linearize_kwargs: dict, failures: Counter
) -> list[str | None]:
    """Parse and linearise; a batch that fails is retried sentence by sentence to isolate failures."""
    from ..amr.linearize import linearize
    from ..models.retrofit_inputs import is_penman

    def one(graph: str) -> str:  # a lookup may hold linearised graphs already: kept as they are
        return linearize(graph, **linearize_kwargs) if is_penman(graph) else " ".join(graph.split())

    return _batch_or_each(
        lambda batch: [one(g) for g in parser.parse(batch, lang)],
        sentences,
        on_missing,
        failures,
        f"graph ({lang})",
        lambda sentence: f"parser: could not parse/linearise {sentence!r} ({lang})",
    )


def _translations(translator, sentences: list[str], lang: str, on_missing: str, failures: Counter) -> list[str | None]:
    return _batch_or_each(
        lambda batch: list(translator.translate(batch, lang)),
        sentences,
        on_missing,
        failures,
        f"translation ({lang})",
        lambda sentence: f"could not translate {sentence!r} into {lang}",
    )


def _batch_or_each(
    run, sentences: list[str], on_missing: str, failures: Counter, kind: str, describe
) -> list[str | None]:
    """``run(sentences)``, else one by one: a failure is ``None``, counted under ``kind`` (or raised)."""
    if not sentences:
        return []
    try:
        return run(sentences)
    except Exception:  # noqa: BLE001 - parsers and translators raise many kinds; retried one by one
        pass
    out: list[str | None] = []
    for sentence in sentences:
        try:
            out.append(run([sentence])[0])
        except Exception as err:  # noqa: BLE001
            if on_missing == "error":
                raise ValueError(f"{describe(sentence)}: {err}") from err
            failures[kind] += 1
            out.append(None)
    return out


def amr_nli_records(
    records: Iterable[dict[str, Any]],
    parser,
    *,
    slots: Sequence[str] = SLOTS,
    languages: Sequence[str] = (),
    translator=None,
    source_language: str = "en",
    on_missing: Literal["null", "error"] = "null",
    style: Literal["clean", "authors"] = "clean",
    parentheses: bool = True,
    drop_wiki: bool = True,
    chunk_size: int = 4096,
    failures: Counter | None = None,
) -> Iterator[dict[str, Any]]:
    """Add every AMR form to each record (see the module docstring).

    Yields copies of the records with ``slot_graph`` and, per ``languages`` entry (with a ``translator``),
    ``slot_graph_xx`` = ``linearize(parse(translate(s, xx), xx))``. ``on_missing``: ``null`` (a failed parse
    or translation: a null graph, counted in ``failures``) or ``error``. ``chunk_size``: records per parsing
    round (each distinct sentence parsed once). ``style``, ``parentheses``, ``drop_wiki``: see ``linearize``.
    """
    languages = [lang for lang in languages if lang != source_language]
    if languages and translator is None:
        raise ValueError(f"graphs of translations into {', '.join(languages)} need a translator")
    if on_missing not in ("null", "error"):
        raise ValueError(f"on_missing must be 'null' or 'error', got {on_missing!r}")
    if style not in ("clean", "authors"):
        raise ValueError(f"style must be 'clean' or 'authors', got {style!r}")
    failures = failures if failures is not None else Counter()
    kwargs = {"style": style, "parentheses": parentheses, "drop_wiki": drop_wiki}
    chunk: list[dict[str, Any]] = []

    def flush(chunk: list[dict[str, Any]]) -> Iterator[dict[str, Any]]:
        sentences = list(dict.fromkeys(r[s] for r in chunk for s in slots))
        forms = {
            "graph": dict(zip(sentences, _graphs(parser, sentences, source_language, on_missing, kwargs, failures)))
        }
        for lang in languages:
            translated = _translations(translator, sentences, lang, on_missing, failures)
            present = [t for t in dict.fromkeys(translated) if t is not None]
            parsed = dict(zip(present, _graphs(parser, present, lang, on_missing, kwargs, failures)))
            forms[f"graph_{lang}"] = {s: (parsed[t] if t is not None else None) for s, t in zip(sentences, translated)}
        for record in chunk:
            out = dict(record)
            for slot in slots:
                for form, table in forms.items():
                    out[f"{slot}_{form}"] = table[record[slot]]
            yield out

    for record in records:
        chunk.append(record)
        if len(chunk) >= chunk_size:
            yield from flush(chunk)
            chunk = []
    if chunk:
        yield from flush(chunk)


def _make_parser(
    parser_lookup: Sequence[str] | None,
    amrlib: bool,
    amrlib_model: str | None,
    languages: Sequence[str],
    source_language: str,
):
    from ..amr.parsing import AmrlibParser, PreParsedAMR

    if parser_lookup and amrlib:
        raise ValueError("give either --parser-lookup or --amrlib, not both")
    if parser_lookup:
        return PreParsedAMR(list(parser_lookup))
    if amrlib:
        return AmrlibParser(amrlib_model, languages=[source_language, *languages])
    raise ValueError("no parser: give --parser-lookup FILE... (pre-parsed PENMAN/jsonl) or --amrlib")


def _make_translator(
    languages: Sequence[str], translations: Sequence[str] | None, marian: Sequence[str] | None, source_language: str
):
    from ..amr.parsing import MarianTranslator, PreTranslated

    if not languages:
        return None
    if translations and marian:
        raise ValueError("give either --translations or --marian, not both")
    if translations:
        return PreTranslated(list(translations), source_lang=source_language)
    if marian:
        models = {}
        for item in marian:
            lang, sep, directory = item.partition("=")
            if not sep or not lang or not directory:
                raise ValueError(f"--marian takes LANG=DIR, got {item!r}")
            models[lang] = directory
        return MarianTranslator(models, source_lang=source_language)
    raise ValueError(f"--languages {' '.join(languages)} need --translations FILE... or --marian LANG=DIR...")


def build_amr_nli(
    *,
    input: str,
    output: str,
    parser_lookup: list[str] | None = None,
    amrlib: bool = False,
    amrlib_model: str | None = None,
    languages: list[str] | None = None,
    translations: list[str] | None = None,
    marian: list[str] | None = None,
    source_language: str = "en",
    style: Literal["clean", "authors"] = "clean",
    parentheses: bool = True,
    keep_wiki: bool = False,
    strict: bool = False,
) -> None:
    """NLI triples/pairs/sentences -> records with their AMR graphs (and graphs of translations).

    Adds slot_graph (each sentence's linearised AMR graph) and slot_graph_xx (its translation's, per
    --languages entry), for AMRSimCSE to draw among (Algorithm 1 of Cai et al. 2022). A sentence the parser
    fails on gets a null graph unless --strict.

    Args:
        input: jsonl with anchor[, positive[, negative]] fields
        output: jsonl to write
        parser_lookup: pre-parsed graphs: PENMAN files with # ::snt, or jsonl with text + penman fields
        amrlib: parse with amrlib (pip install 'unisent[amr]')
        amrlib_model: amrlib parse model directory (default: amrlib's model_stog)
        languages: also the graphs of translations into these languages (e.g. de es it zh fr ar)
        translations: pre-computed translations: jsonl of {text, lang, translation}
        marian: OPUS-MT (MarianMT) model directories per language, as LANG=DIR
        source_language: language of the input sentences
        style: linearisation: clean (default) or authors (MSE-AMR's amr/IO.py strings; train with the AMR
            objective's linearization: authors)
        parentheses: linearise with the ( ) depth markers (--no-parentheses: without)
        keep_wiki: keep :wiki branches (dropped by default)
        strict: stop at the first sentence that cannot be parsed or translated
    """
    languages = list(languages or [])
    records, slots = read_slot_records(input)
    parser = _make_parser(parser_lookup, amrlib, amrlib_model, languages, source_language)
    translator = _make_translator(languages, translations, marian, source_language)
    failures: Counter = Counter()
    out = amr_nli_records(
        records,
        parser,
        slots=slots,
        languages=languages,
        translator=translator,
        source_language=source_language,
        on_missing="error" if strict else "null",
        style=style,
        parentheses=parentheses,
        drop_wiki=not keep_wiki,
        failures=failures,
    )
    n = write_jsonl(out, output)
    forms = ", ".join(f"{s}_graph" + "".join(f", {s}_graph_{lang}" for lang in languages) for s in slots)
    print(f"{n} records ({', '.join(slots)}) with {forms} -> {output}")
    for what, count in sorted(failures.items()):
        print(f"  {count} null {what}: the objective falls back to another form for them")


#: ``unisent data <name>`` commands of this module (see ``unisent.commands.data``)
COMMANDS = {"amr-nli": build_amr_nli}
