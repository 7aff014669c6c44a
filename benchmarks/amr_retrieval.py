"""Text <-> AMR graph retrieval: can one encoder match a sentence with its own (linearised) AMR graph?

Reads (sentence, gold graph) pairs from a PENMAN file (``# ::snt`` + graph; or the jsonl of
``unisent data amr-linearize``), linearises the graphs with :mod:`unisent.amr` (the training
linearisation: depth-first, no variables, ``:wiki`` dropped), embeds the sentences and the graphs
with the SAME encoder and reports top-1 retrieval accuracy by cosine in both directions, as JSON
(the computation is :mod:`unisent.evaluation.panel`'s, the ``amr-*`` columns of the unified panel):

* ``text_to_graph_top1``: for each sentence, is the most similar graph (among all graphs of the file)
  its own graph?
* ``graph_to_text_top1``: for each graph, is the most similar sentence its own sentence?

A pair counts as correct when the retrieved item is identical (as a string) to the gold one, so two
pairs with the same sentence (``I said .`` twice) or the same linearised graph are not marked wrong
for picking each other: identical strings have identical embeddings and no order between them.

    # MiniLM as it is
    python benchmarks/amr_retrieval.py --model minilm-l6 --penman amr-bank-struct-v1.6-test.txt
    # MiniLM with the AMR vocabulary extension (the quickstart's lists, min count 5), untrained
    python benchmarks/amr_retrieval.py --model minilm-l6 --amr-vocabulary --penman amr-bank-struct-v1.6-test.txt
    # a trained AMR encoder (it carries its extended tokenizer)
    python benchmarks/amr_retrieval.py --model runs/amr-lpp16/version_0/encoder --penman amr-bank-struct-v1.6-test.txt

``--exclude-sentences-of FILE...`` drops the pairs whose sentence also occurs in those files (e.g.
the training split), compared after collapsing whitespace.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

SAMPLE = Path(__file__).resolve().parents[1] / "unisent" / "resources"
DEFAULT_COUNTS = SAMPLE / "amr_predicates.tsv"
DEFAULT_LISTS = SAMPLE / "amr_additions.txt"


def _key(sentence: str) -> str:
    return " ".join(sentence.split())


def read_pairs(path: str | Path, *, parentheses: bool = True, drop_wiki: bool = True) -> tuple[list[dict], list[str]]:
    """``[{id, text, graph}]`` and the problems: a PENMAN file by ``unisent.evaluation.panel.read_amr_pairs``,
    or the jsonl of ``unisent data amr-linearize`` (``text`` + ``graph`` kept as written), read here."""
    path = Path(path)
    if path.suffix != ".jsonl":
        from unisent.evaluation.panel import read_amr_pairs

        return read_amr_pairs(path, parentheses=parentheses, drop_wiki=drop_wiki)
    pairs: list[dict] = []
    problems: list[str] = []
    with path.open(encoding="utf-8") as handle:
        for number, line in enumerate(handle, 1):
            if not line.strip():
                continue
            record = json.loads(line)
            if record.get("text") is None or record.get("graph") is None:
                problems.append(f"{path}:{number}: no text or graph")
                continue
            pairs.append({"id": record.get("id", f"#{number}"), "text": record["text"], "graph": record["graph"]})
    return pairs, problems


def top1(similarity, queries: list[str], candidates: list[str]) -> tuple[int, list[int]]:
    """``unisent.evaluation.panel.top1_correct`` (``queries`` is not needed: row ``i`` is query ``i``)."""
    from unisent.evaluation.panel import top1_correct

    return top1_correct(similarity, candidates)


def load_encoder(
    model: str, *, amr_vocabulary: bool, counts: list[str], lists: list[str], min_count: int, max_length: int | None
):
    from unisent.evaluation.panel import load_panel_model

    encoder = load_panel_model(model, None)
    added: list[str] = []
    if amr_vocabulary:
        from unisent.amr import extend_vocabulary
        from unisent.objectives.amr import read_amr_symbols

        if not (hasattr(encoder, "backbone") and hasattr(encoder, "tokenizer")):
            raise SystemExit(f"--amr-vocabulary needs an unisent Encoder, {model!r} loads as {type(encoder).__name__}")
        symbols = read_amr_symbols(counts, lists, min_count)
        added = extend_vocabulary(encoder, symbols)
        encoder.eval()
    if max_length is not None:
        encoder.config.max_length = max_length
    return encoder, added


def run(args: argparse.Namespace) -> dict:
    import torch

    from unisent.evaluation.panel import amr_retrieval

    torch.set_num_threads(args.threads)
    pairs, problems = read_pairs(args.penman, parentheses=not args.no_parentheses, drop_wiki=not args.keep_wiki)
    n_read = len(pairs)
    excluded = 0
    if args.exclude_sentences_of:
        seen: set[str] = set()
        for path in args.exclude_sentences_of:
            seen |= {_key(p["text"]) for p in read_pairs(path)[0]}
        kept = [p for p in pairs if _key(p["text"]) not in seen]
        excluded, pairs = len(pairs) - len(kept), kept
    if not pairs:
        raise SystemExit("no (sentence, graph) pairs to evaluate")

    encoder, added = load_encoder(
        args.model,
        amr_vocabulary=args.amr_vocabulary,
        counts=args.symbol_counts,
        lists=args.symbol_lists,
        min_count=args.min_count,
        max_length=args.max_length,
    )
    found = amr_retrieval(encoder, pairs, batch_size=args.batch_size)
    errors = {key: found.pop(key) for key in ("text_to_graph_errors", "graph_to_text_errors")}
    max_length = found.pop("max_length")
    result = {
        "model": args.model,
        "amr_vocabulary": bool(args.amr_vocabulary),
        "added_tokens": len(added),
        "max_length": max_length,
        "input": str(args.penman),
        "linearisation": {"parentheses": not args.no_parentheses, "drop_wiki": not args.keep_wiki},
        "pairs_read": n_read,
        "excluded": excluded,
        **{key: found.pop(key) for key in ("pairs", "distinct_texts", "distinct_graphs", "graphs_truncated")},
        "problems": problems,
        **found,
    }
    if args.show_errors:
        result |= errors
    return result


def build_parser() -> argparse.ArgumentParser:
    """The command line (also used by benchmarks/unified_panel.py)."""
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--model",
        required=True,
        help="a preset (minilm-l6), a saved encoder directory or a .ckpt (anything unisent.load reads)",
    )
    parser.add_argument("--penman", required=True, help="PENMAN file with # ::snt (or an amr-linearize jsonl)")
    parser.add_argument(
        "--amr-vocabulary",
        action="store_true",
        help="extend the encoder's vocabulary with the AMR names first (untrained rows: mean of subwords)",
    )
    parser.add_argument(
        "--symbol-counts",
        nargs="*",
        default=[str(DEFAULT_COUNTS)],
        help="count files NAME<TAB>COUNT (default: the quickstart's amr_predicates.tsv)",
    )
    parser.add_argument(
        "--symbol-lists",
        nargs="*",
        default=[str(DEFAULT_LISTS)],
        help="plain lists, always added (default: the quickstart's amr_additions.txt)",
    )
    parser.add_argument("--min-count", type=int, default=5)
    parser.add_argument(
        "--exclude-sentences-of",
        nargs="*",
        default=[],
        metavar="FILE",
        help="drop pairs whose sentence occurs in these PENMAN/jsonl files",
    )
    parser.add_argument("--no-parentheses", action="store_true")
    parser.add_argument("--keep-wiki", action="store_true")
    parser.add_argument("--max-length", type=int, default=None, help="override the encoder's max tokens")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--show-errors", action="store_true", help="list the ids of the wrong retrievals")
    parser.add_argument("--out", help="also write the JSON here")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    result = run(args)
    text = json.dumps(result, indent=2, ensure_ascii=False)
    print(text)
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(text + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
