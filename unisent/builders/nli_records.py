"""NLI pairs -> (premise, entailment, contradiction) triples, from SNLI, XNLI or SICK layouts."""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterable
from pathlib import Path
from typing import Literal

__all__ = ["COMMANDS", "NLI_FORMATS", "build_nli_triples", "nli_triples", "read_nli_pairs", "write_jsonl"]

NLI_FORMATS = ("snli", "xnli", "sick")


def read_nli_pairs(fmt: Literal["snli", "xnli", "sick"], path: str, split: str = "dev"):
    """``(premises, hypotheses, lower-cased labels)`` read by the evaluation readers from ``snli`` (a
    directory of ``s1``/``s2``/``labels.<split>``), ``xnli`` (``premise<TAB>hypothesis<TAB>label`` tsv) or
    ``sick`` (the SICK txt with ``entailment_judgment``)."""
    from ..data.benchmark_readers import read_pair_tsv, read_sick_entailment, read_snli

    if fmt == "snli":
        pairs = read_snli(path, split)
    elif fmt == "xnli":
        pairs = read_pair_tsv(path)
    elif fmt == "sick":
        pairs = read_sick_entailment(path)
    else:
        raise ValueError(f"unknown NLI format {fmt!r}; valid: {', '.join(NLI_FORMATS)}")
    return pairs.sentences1, pairs.sentences2, [label.lower() for label in pairs.labels]


def nli_triples(premises: Iterable[str], hypotheses: Iterable[str], labels: Iterable[str]) -> list[dict[str, str]]:
    """``{"anchor": premise, "positive": entailment, "negative": contradiction}`` per premise with both
    (the first of each, in file order), as SimCSE built its NLI training set."""
    by_premise: dict[str, dict[str, str]] = {}
    for premise, hypothesis, label in zip(premises, hypotheses, labels):
        if label in ("entailment", "contradiction") and premise.strip() and hypothesis.strip():
            by_premise.setdefault(premise, {}).setdefault(label, hypothesis)
    return [
        {"anchor": p, "positive": h["entailment"], "negative": h["contradiction"]}
        for p, h in by_premise.items()
        if len(h) == 2
    ]


def write_jsonl(records: Iterable[dict], path: str | Path) -> int:
    """Write records atomically as JSON lines, or parquet for ``.parquet`` (row groups of 10,000), with a
    progress bar on a terminal; returns how many were written."""
    from tqdm.auto import tqdm

    from ..io import atomic_write

    path = Path(path)
    records = tqdm(records, desc=f"writing {path.name}", unit=" records", mininterval=1.0, disable=None)
    if path.suffix.lower() == ".parquet":
        return _write_parquet(records, path)
    n = 0
    with atomic_write(path) as fh:
        for record in records:
            fh.write(json.dumps(record, ensure_ascii=False) + "\n")
            n += 1
    return n


def _write_parquet(records: Iterable[dict], path: Path, rows_per_group: int = 10_000) -> int:
    import pyarrow as pa
    import pyarrow.parquet as pq

    from ..io import atomic_write

    records = iter(records)
    n = 0
    with atomic_write(path, "wb") as fh:
        writer: pq.ParquetWriter | None = None
        # row groups of rows_per_group records; no record at all: one empty table
        while (batch := list(itertools.islice(records, rows_per_group))) or writer is None:
            n += len(batch)
            try:
                table = pa.Table.from_pylist(batch, schema=writer.schema if writer is not None else None)
            except (pa.ArrowInvalid, pa.ArrowTypeError) as err:
                raise ValueError(
                    f"{path}: records {n - len(batch) + 1}-{n} do not fit the columns of the first ones ({err})"
                ) from None
            writer = writer or pq.ParquetWriter(fh, table.schema)
            writer.write_table(table)
        writer.close()
    return n


def build_nli_triples(*, format: Literal["snli", "xnli", "sick"], input: str, split: str = "dev", output: str) -> None:
    """NLI pairs -> (anchor, positive, negative) jsonl.

    Args:
        format: layout of the input (snli, xnli or sick)
        input: snli: the directory with s1/s2/labels.<split>; else the file
        split: snli only: dev, test or train
        output: jsonl (or .parquet) to write
    """
    premises, hypotheses, labels = read_nli_pairs(format, input, split)
    triples = nli_triples(premises, hypotheses, labels)
    n = write_jsonl(triples, output)
    print(f"{n} triples (premise, entailment, contradiction) from {len(labels)} pairs -> {output}")


#: ``unisent data <name>`` commands of this module (see ``unisent.commands.data``)
COMMANDS = {"nli-triples": build_nli_triples}
