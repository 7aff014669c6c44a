"""Checks that need the project's data checkout (``../shared/data``), kept out of the test suite so that
the suite runs on a clone of the project alone.

1. ``samples/ease_fewrel_heldout.jsonl`` is rebuilt byte for byte by its recorded command
   (``unisent data ease-fewrel`` on FewRel's ``val_wiki.json``, then
   ``benchmarks/ease_entity_retrieval.py --make-heldout``).
2. ``unisent.amr.linearize(style="authors")`` equals MSE-AMR's own strings
   (``amr/reference-linearized.jsonl``) on all 2,979 graphs of the three Little Prince files; the test
   suite checks the 32-graph fixture in ``tests/fixtures/amr`` that covers every difference.

    python benchmarks/check_shared_data.py --data-dir ../shared/data

Exit status 0 when every check holds, 1 when one fails, 2 when the data directory lacks a file.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FEWREL = Path("entities") / "fewrel" / "val_wiki.json"
AMR = Path("amr")
LITTLE_PRINCE_GRAPHS = 2979


def _retrieval_script():
    spec = importlib.util.spec_from_file_location(
        "ease_entity_retrieval", ROOT / "benchmarks" / "ease_entity_retrieval.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def check_fewrel_heldout(data_dir: Path) -> list[str]:
    """The bundled held-out FewRel file, rebuilt from FewRel's validation split."""
    from unisent.builders.ease.fewrel import ease_fewrel

    with tempfile.TemporaryDirectory() as tmp:
        ease_fewrel(data_dir / FEWREL, Path(tmp) / "all", seed=0, log=lambda *a: None)
        out = Path(tmp) / "heldout.jsonl"
        status = _retrieval_script().main(
            ["--make-heldout", str(Path(tmp) / "all" / "records.jsonl"), "--output", str(out)]
        )
        if status != 0:
            return [f"ease_entity_retrieval.py --make-heldout exited with {status}"]
        if out.read_bytes() != (ROOT / "samples" / "ease_fewrel_heldout.jsonl").read_bytes():
            return ["samples/ease_fewrel_heldout.jsonl differs from the file its recorded command makes"]
    return []


def check_amr_authors_style(data_dir: Path) -> list[str]:
    """Authors-style linearisation against the authors' strings, every Little Prince graph."""
    from unisent.amr.linearize import linearize_file

    lines = (data_dir / AMR / "reference-linearized.jsonl").read_text(encoding="utf-8").splitlines()
    refs = {(r["file"], r["id"]): r["reference"] for r in map(json.loads, filter(str.strip, lines))}
    problems, seen = [], 0
    for path in sorted((data_dir / AMR / "little-prince").glob("*.txt")):
        errors: list = []
        for graph_id, _, graph in linearize_file(path, style="authors", errors=errors):
            seen += 1
            if graph != refs.get((path.name, graph_id)):
                problems.append(f"{path.name} {graph_id}: the authors-style string differs from the reference")
        problems += [f"{path.name}: {e}" for e in errors]
    if len(refs) != LITTLE_PRINCE_GRAPHS or seen != LITTLE_PRINCE_GRAPHS:
        problems.append(f"expected {LITTLE_PRINCE_GRAPHS} graphs: {len(refs)} references, {seen} linearised")
    return problems


CHECKS = {
    "fewrel-heldout": (check_fewrel_heldout, [FEWREL]),
    "amr-authors-style": (check_amr_authors_style, [AMR / "reference-linearized.jsonl", AMR / "little-prince"]),
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data-dir", default=str(ROOT.parent / "shared" / "data"), help="the data checkout")
    parser.add_argument("--only", choices=sorted(CHECKS), nargs="+", help="run these checks only")
    args = parser.parse_args(argv)
    data_dir = Path(args.data_dir)
    failed = False
    for name in args.only or CHECKS:
        check, needs = CHECKS[name]
        missing = [str(data_dir / n) for n in needs if not (data_dir / n).exists()]
        if missing:
            print(f"check_shared_data: {name}: missing {', '.join(missing)} (give --data-dir)", file=sys.stderr)
            return 2
        problems = check(data_dir)
        for problem in problems[:20]:
            print(f"check_shared_data: {name}: {problem}", file=sys.stderr)
        print(f"{name}: {'FAILED' if problems else 'ok'}")
        failed |= bool(problems)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
