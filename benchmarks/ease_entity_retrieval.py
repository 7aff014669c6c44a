"""Entity retrieval of a trained EASE model: does a sentence embedding find its own entity?

For each held-out sentence of a records file (``{"text", "entity", ...}`` per line, as ``unisent data
ease-*`` writes it), the checkpoint's encoder embeds the sentence and every entity of the checkpoint's
entity table is ranked by the similarity EASE's entity term trains (``cos(s, W e) / tau_e``; ranking by
cosine, the temperature does not change the order). Reports top-1 / top-10 accuracy over ALL entities,
the chance level (k / entities), the best a sentence-blind fixed ranking can do on the same records,
the median rank and the mean reciprocal rank, as JSON (``EASE.retrieve_entities``, through
:func:`unisent.evaluation.panel.score_entities`, as the ``entity-*`` columns of the unified panel).

The entity table is training-only state: it lives in the Lightning checkpoint (``.ckpt``), not in the
exported encoder, so this needs the checkpoint. A checkpoint with several objectives works: the EASE
objective is found by type (``--objective NAME`` picks one of several).

    # held-out FewRel sentences of the quickstart's entities (bundled)
    python benchmarks/ease_entity_retrieval.py --ckpt runs/ease-authors/version_0/checkpoints/last.ckpt \\
        --output runs/ease-authors/entity-retrieval.json

Default ``--records``: ``samples/ease_fewrel_heldout.jsonl`` (995 FewRel sentences not in the
quickstart's training file, each with a gold entity linked in it; see the sample's LICENSE.md). It was
made with ``--make-heldout`` from all FewRel validation records:

    unisent data ease-fewrel --input ../shared/data/entities/fewrel/val_wiki.json --output /tmp/ease_fewrel_all
    python benchmarks/ease_entity_retrieval.py --make-heldout /tmp/ease_fewrel_all/records.jsonl \
        --output samples/ease_fewrel_heldout.jsonl
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

SAMPLE = Path(__file__).resolve().parents[1] / "samples"
HELDOUT = SAMPLE / "ease_fewrel_heldout.jsonl"
TRAIN = SAMPLE / "ease_fewrel.jsonl"


def make_heldout(records: str | Path, train: str | Path = TRAIN, per_entity: int = 3, seed: int = 0) -> list[dict]:
    """Held-out records for entity retrieval: the records of ``records`` whose sentence is not in
    ``train`` and whose entity is linked (as a positive) in ``train``, shuffled with ``seed``; then
    one record per sentence and at most ``per_entity`` per entity, in shuffled order (so a few frequent
    entities, 180 held-out sentences of "Soprano", do not make up the score)."""
    import random

    from unisent.data.records import iter_records

    seen, linked = set(), set()
    for record in iter_records(train, "jsonl", fields=("text", "entity")):
        seen.add(record.data["text"])
        linked.add(record.data["entity"])
    pool = []
    for record in iter_records(records, "jsonl"):  # whole records: the held-out file keeps every field
        data = record.data
        for field in ("text", "entity"):
            if not isinstance(data, dict) or not isinstance(data.get(field), str):
                raise record.error(f"field {field!r} must be a string", field=field)
        if data["text"] not in seen and data["entity"] in linked:
            pool.append(data)
    random.Random(seed).shuffle(pool)
    kept, per, texts = [], {}, set()
    for r in pool:
        if r["text"] in texts or per.get(r["entity"], 0) >= per_entity:
            continue
        texts.add(r["text"])
        per[r["entity"]] = per.get(r["entity"], 0) + 1
        kept.append(r)
    return kept


def entity_retrieval(
    ckpt: str | Path, records: str | Path = HELDOUT, ks=(1, 10), objective: str | None = None, batch_size: int = 64
) -> dict:
    """Load ``ckpt``, find its EASE objective (by type; ``objective`` names one of several) and score the records
    of ``records`` (see the module doc) at the run's own token limit with
    ``unisent.evaluation.panel.score_entities``, as the panel's ``entity-*`` columns do; adds ``seconds``.

    Raises:
        FileNotFoundError: no checkpoint or records file.
        ValueError: no EASE objective in the checkpoint (or several and no ``objective``), a malformed record, or
            a record whose entity is not in the table.
    """
    from unisent.evaluation.panel import score_entities
    from unisent.lightning_module import UnisentModule
    from unisent.objectives.ease import find_ease

    started = time.perf_counter()
    if not Path(records).is_file():
        raise FileNotFoundError(f"entity records file {str(records)!r} does not exist")
    module = UnisentModule.from_checkpoint(ckpt)
    module.eval()
    ease = find_ease(module.objectives, objective)
    result = score_entities(module, ease, ckpt, records, ks, batch_size, None)
    return result | {"seconds": round(time.perf_counter() - started, 1)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ckpt", help="a unisent Lightning checkpoint with an EASE objective")
    parser.add_argument("--records", default=str(HELDOUT), help="held-out EASE records (jsonl: text, entity)")
    parser.add_argument("--k", type=int, nargs="+", default=[1, 10], help="top-k accuracies to report")
    parser.add_argument("--objective", default=None, help="name of the EASE objective if there are several")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--output", default=None, help="write the JSON here as well as to stdout")
    parser.add_argument(
        "--make-heldout",
        metavar="RECORDS",
        default=None,
        help="instead: write held-out records from RECORDS (all `unisent data ease-fewrel` records) "
        "that are not in --train to --output",
    )
    parser.add_argument("--train", default=str(TRAIN), help="with --make-heldout: the training records")
    args = parser.parse_args(argv)
    if args.make_heldout:
        return _write_heldout(args)
    if not args.ckpt:
        parser.error("--ckpt is required (or --make-heldout)")
    try:
        result = entity_retrieval(args.ckpt, args.records, args.k, args.objective, args.batch_size)
    except (OSError, ValueError, KeyError) as err:  # RecordError is a ValueError
        print(f"ease_entity_retrieval: {err}", file=sys.stderr)
        return 1
    text = json.dumps(result, indent=1)
    print(text)
    if args.output:
        from unisent.io import atomic_write

        with atomic_write(args.output) as handle:
            handle.write(text + "\n")
    return 0


def _write_heldout(args) -> int:
    from unisent.io import atomic_write

    if not args.output:
        print("ease_entity_retrieval: --make-heldout needs --output", file=sys.stderr)
        return 2
    try:
        kept = make_heldout(args.make_heldout, args.train)
    except (OSError, ValueError) as err:
        print(f"ease_entity_retrieval: {err}", file=sys.stderr)
        return 1
    with atomic_write(args.output) as handle:
        handle.writelines(json.dumps(r, ensure_ascii=False) + "\n" for r in kept)
    print(f"{len(kept)} held-out records ({len({r['entity'] for r in kept})} entities) -> {args.output}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
