"""``unisent data ease-fewrel``: FewRel sentences with Wikidata head/tail entities -> EASE records; the
type proxy for hard negatives is the relation slot an entity fills (``P17:tail``: countries)."""

from __future__ import annotations

import json
import random
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

from ...io import atomic_write
from .tables import pick_candidate

__all__ = ["build_ease_fewrel", "detokenize", "ease_fewrel", "read_fewrel"]

_CLOSERS = set(", . ; : ! ? ) ] } % ” » ... .. 's 'S n't 're 've 'll 'd 'm".split())
_OPENERS = {"(", "[", "{", "$", "£", "€", "“", "«", "#"}
_JOINERS = {"-", "–", "—", "/"}


def detokenize(tokens: list[str]) -> str:
    """Join FewRel tokens: whitespace tokens dropped; no space before ``, . ; : ! ? ) ] %`` and clitics
    (``'s``, ``n't``); none after ``( [ $``; ``- – — /`` joined on both sides; straight double quotes
    alternate opening/closing; ``'`` after a word ending in s is a possessive, else a quote; an empty
    ``( )`` is dropped."""
    toks = [t.strip() for t in tokens if t.strip()]
    toks = [
        t
        for i, t in enumerate(toks)  # drop "( )" left behind by FewRel's removed markup
        if not (t == "(" and i + 1 < len(toks) and toks[i + 1] == ")")
        and not (t == ")" and i > 0 and toks[i - 1] == "(")
    ]
    out: list[str] = []
    no_space_next = True
    quotes: Counter = Counter()
    for tok in toks:
        space = not no_space_next
        no_space_next = False
        if tok in _CLOSERS:
            space = False
        elif tok in _OPENERS or (tok.startswith("(") and not any(c.isalnum() for c in tok)):
            no_space_next = True
        elif tok in _JOINERS:
            space = False
            no_space_next = True
        elif tok == "'" and quotes[tok] % 2 == 0 and out and out[-1][-1:] in ("s", "S"):
            space = False  # a possessive
        elif tok in ('"', "'"):  # a quote: opening and closing alternate
            if quotes[tok] % 2 == 0:
                no_space_next = True
            else:
                space = False
            quotes[tok] += 1
        if space and out:
            out.append(" ")
        out.append(tok)
    return "".join(out)


def _read_json(path: Path, what: str):
    if not path.is_file():
        raise FileNotFoundError(f"{what} not found: {path}")
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as err:
        raise ValueError(f"{what} {path}, line {err.lineno}: malformed JSON ({err.msg})") from None


def read_fewrel(path: str | Path) -> Iterator[tuple[str, int, str, list[tuple[str, str, str]]]]:
    """FewRel ``{relation: [instance, ...]}`` -> ``(relation, index, sentence, [(slot, QID, surface),
    (slot, QID, surface)])`` with slots ``"<relation>:head"`` and ``"<relation>:tail"``."""
    path = Path(path)
    data = _read_json(path, "FewRel file")
    if not isinstance(data, dict):
        raise ValueError(f"FewRel file {path}: expected a JSON object {{relation id: [instances]}}")
    for rel, instances in data.items():
        if not isinstance(instances, list):
            raise ValueError(f"FewRel file {path}, relation {rel}: expected a list of instances")
        for i, inst in enumerate(instances):
            where = f"FewRel file {path}, relation {rel}, instance {i}"
            tokens = inst.get("tokens") if isinstance(inst, dict) else None
            if not isinstance(tokens, list) or not all(isinstance(t, str) for t in tokens):
                raise ValueError(f"{where}: field 'tokens' must be a list of strings")
            ents = []
            for role in ("head", "tail"):
                ent = inst.get(role[0])
                if not (
                    isinstance(ent, list)
                    and len(ent) >= 3
                    and isinstance(ent[1], str)
                    and ent[1]
                    and isinstance(ent[2], list)
                    and ent[2]
                    and isinstance(ent[2][0], list)
                ):
                    raise ValueError(f"{where}: field {role[0]!r} must be [name, QID, [[token positions]]]")
                positions = ent[2][0]
                if not all(isinstance(p, int) and 0 <= p < len(tokens) for p in positions):
                    raise ValueError(f"{where}: field {role[0]!r} has token positions outside the sentence")
                surface = detokenize([tokens[p] for p in positions]) or str(ent[0])
                ents.append((f"{rel}:{role}", ent[1], surface))
            yield rel, i, detokenize(tokens), ents


def _entity_slots(instances: list, min_count: int):
    """Each entity's count and surface forms, those kept (``min_count``), and each slot's kept entities."""
    occurrences: Counter = Counter()
    surfaces: dict[str, Counter] = {}
    slot_members: dict[str, list[str]] = {}
    for _, _, _, ents in instances:
        for _, qid, surface in ents:
            occurrences[qid] += 1
            surfaces.setdefault(qid, Counter())[surface] += 1
    kept = {q for q, n in occurrences.items() if n >= min_count}
    for _, _, _, ents in instances:
        for slot, qid, _ in ents:
            if qid in kept:
                slot_members.setdefault(slot, []).append(qid)
    slot_members = {slot: list(dict.fromkeys(members)) for slot, members in slot_members.items()}
    return occurrences, surfaces, kept, slot_members


def _fewrel_records(instances: list, kept: set, slot_members: dict, seed: int, language: str):
    """``(records, links dropped)``; hard negatives from the slot, not the sentence's other entity."""
    rng = random.Random(seed)
    records = []
    dropped = 0
    for _, _, text, ents in instances:
        for k, (slot, qid, _) in enumerate(ents):
            if qid not in kept:
                dropped += 1
                continue
            negative = pick_candidate(rng, slot_members[slot], qid, {ents[1 - k][1]})
            records.append({"text": text, "entity": qid, "hard_negative": negative, "language": language, "page": None})
    return records, dropped


def ease_fewrel(
    input: str | Path,
    out: str | Path,
    seed: int = 0,
    max_records: int | None = None,
    min_count: int = 1,
    language: str = "en",
    log=print,
) -> dict:
    """FewRel -> ``records.jsonl``, ``entities.tsv``, ``stats.json`` under ``out``: one record per sentence
    and head/tail entity occurring ``min_count`` times or more; hard negative as in the module docstring,
    drawn with ``seed``. ``max_records``: a seeded random subset, in shuffled order (else file order)."""
    input = Path(input)
    out = Path(out)
    instances = list(read_fewrel(input))
    occurrences, surfaces, kept, slot_members = _entity_slots(instances, min_count)
    records, dropped = _fewrel_records(instances, kept, slot_members, seed, language)
    total = len(records)
    if max_records is not None and max_records < len(records):
        order = list(range(len(records)))
        random.Random(seed).shuffle(order)
        records = [records[i] for i in order[:max_records]]
    out.mkdir(parents=True, exist_ok=True)
    used = {r["entity"] for r in records} | {r["hard_negative"] for r in records if r["hard_negative"] is not None}
    summary = {
        "params": {
            "input_name": input.name,
            "seed": seed,
            "max_records": max_records,
            "min_count": min_count,
            "language": language,
        },
        "sentences": len(instances),
        "records_before_subset": total,
        "records": len(records),
        "records_with_hard_negative": sum(r["hard_negative"] is not None for r in records),
        "entities": len(used),
        "links_dropped_below_min_count": dropped,
        "slots": {slot: len(m) for slot, m in sorted(slot_members.items())},
    }
    pid2name = input.with_name("pid2name.json")
    if pid2name.is_file():
        names = _read_json(pid2name, "pid2name file")
        summary["relations"] = {
            rel: names[rel][0] for rel in sorted({s.split(":")[0] for s in slot_members}) if rel in names and names[rel]
        }
    with atomic_write(out / "entities.tsv") as ents_writer:
        ents_writer.write("id\ttitle\tcount\n")
        for qid in sorted(used, key=lambda q: (-occurrences[q], q)):
            surface = surfaces[qid].most_common(1)[0][0]  # ties: the first seen
            title = surface[:1].upper() + surface[1:]  # as a Wikipedia title: first letter upper-cased
            ents_writer.write(f"{qid}\t{title}\t{occurrences[qid]}\n")
    with atomic_write(out / "stats.json") as fh:
        fh.write(json.dumps(summary, indent=1, ensure_ascii=False) + "\n")
    with atomic_write(out / "records.jsonl") as writer:  # last: its presence means the build finished
        for r in records:
            writer.write(json.dumps(r, ensure_ascii=False) + "\n")
    log(
        f"{len(records)} records ({summary['records_with_hard_negative']} with a hard negative) from "
        f"{len(instances)} sentences, {len(used)} entities -> {out / 'records.jsonl'}"
    )
    return summary


def build_ease_fewrel(
    *, input: str, output: str, seed: int = 0, max_records: int | None = None, min_count: int = 1
) -> None:
    """FewRel JSON -> EASE (sentence, entity, hard negative) jsonl.

    Hard negatives fill the same relation slot as the entity (e.g. P17:tail).

    Args:
        input: FewRel json, e.g. val_wiki.json
        output: directory for records.jsonl, entities.tsv, stats.json
        seed: seed of the hard-negative draws and of the subset
        max_records: a seeded random subset of this size
        min_count: keep entities occurring at least this often
    """
    ease_fewrel(input, output, seed=seed, max_records=max_records, min_count=min_count)
