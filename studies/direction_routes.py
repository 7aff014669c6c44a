"""Two routes to GaussCSE's direction that leave the unified model's encoder (almost) where it is, on dev data only.

The unified recipe that keeps its start (``unified (anchored)`` at 124 steps, docs/results/unified.md) misses
one line: direction on the SNLI test pairs whose hypothesis is not shorter than the premise. Two cheap routes
would keep the encoder, and with it the general columns:

- ``refit``: a Gaussian head trained longer on the frozen encoder's pooled vectors, or with ``--pooler cls`` on
  its [CLS] state (the unified run trains its head for about 2.7 passes over the triples). A fresh linear
  head (:class:`unisent.models.gaussian.GaussianHead`, the recipe's own) and one whose variance map has a
  hidden layer (``--hidden``), each trained ``--epochs`` passes at ``--lr`` with GaussCSE's loss (``ent`` and
  ``rev`` sets, tau 0.05) on four fifths of the recipe's triples (``samples/snli_dev_triples.jsonl``, shuffled
  with seed 0). Scored against the run's own head (when it reads the same vectors).
- ``merge``: the Anchored run plus a share ``lambda`` of GaussCSE alone's task vector (``unisent merge
  --method task_arithmetic --weights 1 lambda``, called as :func:`unisent.merging.merge_runs`; the Gaussian head
  is the two runs' weighted mean), scored on the general dev columns (STS-B dev, SICK trial) and SICK trial's
  direction columns.

Direction is measured on held-out pairs only: XNLI's English dev entailment pairs (830, from MultiNLI's
genres; no unisent recipe trains on their direction) and, for the refit heads, the held-out fifth of the
triples. A pair counts when ``KL(hyp || pre) < KL(pre || hyp)``, as the panel's direction columns count it;
``hns`` is the share on pairs whose hypothesis has at least as many tokens as the premise. No test column is
read.

    python -m studies.direction_routes refit runs/study48-long/runs/unified-anchored/seed42/encoder \\
        runs/study48-keep/runs/only-gausscse/seed42/encoder --data-dir ../shared/data \\
        --output docs/results/unified/direction-routes.json
    python -m studies.direction_routes refit minilm-l6 runs/study48-long/runs/unified-anchored/seed42/encoder \\
        runs/study48-keep/runs/only-gausscse/seed42/encoder --pooler cls --data-dir ../shared/data \\
        --output docs/results/unified/direction-routes.json
    python -m studies.direction_routes merge --anchored runs/study48-long/runs/unified-anchored \\
        --gausscse runs/study48-keep/runs/only-gausscse --seeds 42 43 44 --lambdas 0 0.25 0.5 1 \\
        --data-dir ../shared/data --output docs/results/unified/direction-routes.json
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import random
import sys
import tempfile
from pathlib import Path

import torch
from torch import nn

os.environ.setdefault("HF_HUB_OFFLINE", "1")

TRIPLES = Path(__file__).resolve().parents[1] / "samples" / "snli_dev_triples.jsonl"
DEV_COLUMNS = ["stsb-dev", "sick-r-dev", "sick-direction-dev", "sick-direction-hyp-not-shorter-dev"]


def xnli_pairs(data_dir: str) -> list[tuple[str, str]]:
    """(premise, hypothesis) of XNLI's English dev entailment pairs."""
    path = Path(data_dir, "nli", "xnli", "dev-en.tsv")
    with path.open(encoding="utf-8", newline="") as handle:
        rows = csv.reader(handle, delimiter="\t", quoting=csv.QUOTE_NONE)
        return [(r[0], r[1]) for r in rows if len(r) >= 3 and r[2] == "entailment"]


def direction(gauss_pre, gauss_hyp, not_shorter: torch.Tensor) -> dict[str, float]:
    """Accuracy x100 of ``KL(hyp || pre) < KL(pre || hyp)``, on all pairs and where the hypothesis is not shorter."""
    from unisent.losses.gaussian_kl import kl_diagonal

    (mp, vp), (mh, vh) = gauss_pre, gauss_hyp
    ok = (kl_diagonal(mh, vh, mp, vp).sum(-1) < kl_diagonal(mp, vp, mh, vh).sum(-1)).float()
    return {"all": round(100 * ok.mean().item(), 2), "hns": round(100 * ok[not_shorter].mean().item(), 2)}


class MLPVarianceHead(nn.Module):
    """GaussianHead's mean map, and a variance map with one hidden layer (GELU)."""

    def __init__(self, size: int, hidden: int) -> None:
        super().__init__()
        self.mean = nn.Linear(size, size)
        self.var = nn.Sequential(nn.Linear(size, hidden), nn.GELU(), nn.Linear(hidden, size))

    def forward(self, pooled: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return self.mean(pooled), torch.exp(self.var(pooled).clamp(max=60.0)) + 1e-6


def _train_head(head: nn.Module, pre: torch.Tensor, hyp: torch.Tensor, epochs: int, lr: float) -> nn.Module:
    """``epochs`` passes of GaussCSE's loss over (premise, hypothesis) pooled vectors in batches of 64."""
    from unisent.losses.gaussian_kl import gauss_cse_loss

    optimizer = torch.optim.Adam(head.parameters(), lr=lr)
    for _ in range(epochs):
        order = torch.randperm(len(pre))
        for start in range(0, len(order) - 63, 64):
            rows = order[start : start + 64]
            loss = gauss_cse_loss(head(pre[rows]), head(hyp[rows]), None, sets=("ent", "rev"), temperature=0.05)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
    return head


def refit_one(source: str, train: list[dict], held: list[dict], xnli: list[tuple[str, str]], args) -> dict:
    """One encoder: its own head (if any) and the two refit heads, on the held-out fifth and XNLI dev."""
    import unisent
    from unisent.models.gaussian import GaussianHead

    model = unisent.load(source)
    encoder = model.encoder if hasattr(model, "encode_gaussian") else model

    def vectors(texts: list[str]) -> torch.Tensor:
        return encoder.encode_pooled(texts, 64, precision="fp32", pooler=args.pooler).float().clone()

    sets = {}
    for name, pre, hyp in (
        ("held-fifth", [t["anchor"] for t in held], [t["positive"] for t in held]),
        ("xnli-dev", [p for p, _ in xnli], [h for _, h in xnli]),
    ):
        lengths = zip(encoder.tokenize_ids(pre), encoder.tokenize_ids(hyp))
        not_shorter = torch.tensor([len(h) >= len(p) for p, h in lengths])
        sets[name] = (vectors(pre), vectors(hyp), not_shorter)
    train_pre, train_hyp = vectors([t["anchor"] for t in train]), vectors([t["positive"] for t in train])

    def score(head) -> dict[str, dict[str, float]]:
        with torch.no_grad():
            return {name: direction(head(p), head(h), ns) for name, (p, h, ns) in sets.items()}

    row = {"encoder": str(source), "pooler": args.pooler or "the encoder's"}
    row["pairs_hns"] = {name: int(s[2].sum()) for name, s in sets.items()}
    if hasattr(model, "encode_gaussian") and model.head.config.pooler == args.pooler:  # the vectors it was trained on
        row["own head"] = score(model.head)
    size = train_pre.shape[1]
    torch.manual_seed(0)
    row["refit linear"] = score(_train_head(GaussianHead(size), train_pre, train_hyp, args.epochs, args.lr))
    torch.manual_seed(0)
    mlp = MLPVarianceHead(size, args.hidden)
    row["refit mlp"] = score(_train_head(mlp, train_pre, train_hyp, args.epochs, args.lr))
    return row


def refit(args: argparse.Namespace) -> list[dict]:
    triples = [json.loads(line) for line in TRIPLES.read_text(encoding="utf-8").splitlines() if line.strip()]
    random.Random(0).shuffle(triples)
    cut = len(triples) * 4 // 5
    xnli = xnli_pairs(args.data_dir)
    rows = []
    for source in args.encoders:
        rows.append(refit_one(source, triples[:cut], triples[cut:], xnli, args))
        print(json.dumps(rows[-1]), file=sys.stderr, flush=True)
    return rows


def merge(args: argparse.Namespace) -> list[dict]:
    import unisent
    from unisent.evaluation.panel import evaluate_panel
    from unisent.merging import merge_runs

    xnli = xnli_pairs(args.data_dir)
    rows = []
    for seed in args.seeds:
        for share in args.lambdas:
            with tempfile.TemporaryDirectory() as tmp:
                out = Path(tmp, "merged")
                runs = [Path(args.anchored, f"seed{seed}"), Path(args.gausscse, f"seed{seed}")]
                merge_runs(runs, out, method="task_arithmetic", weights=[1.0, share])
                model = unisent.load(out / "encoder")
                scores = evaluate_panel(model, DEV_COLUMNS, args.data_dir)
                pre, hyp = [p for p, _ in xnli], [h for _, h in xnli]
                lengths = zip(model.encoder.tokenize_ids(pre), model.encoder.tokenize_ids(hyp))
                not_shorter = torch.tensor([len(h) >= len(p) for p, h in lengths])
                xnli_dev = direction(model.encode_gaussian(pre), model.encode_gaussian(hyp), not_shorter)
            row = {"seed": seed, "lambda": share} | {c: round(scores[c]["score"], 2) for c in DEV_COLUMNS}
            row |= {"xnli-direction-dev": xnli_dev["all"], "xnli-direction-hyp-not-shorter-dev": xnli_dev["hns"]}
            print(json.dumps(row), file=sys.stderr, flush=True)
            rows.append(row)
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="route", required=True)
    one = sub.add_parser("refit", help="heads trained longer on frozen encoders")
    one.add_argument("encoders", nargs="+", help="saved encoder folders (<run>/encoder)")
    one.add_argument("--epochs", type=int, default=10)
    one.add_argument("--lr", type=float, default=1e-3)
    one.add_argument("--hidden", type=int, default=768)
    one.add_argument("--pooler", help="read this built-in pooler's vectors (cls) instead of the encoder's")
    two = sub.add_parser("merge", help="the Anchored run plus a share of GaussCSE alone's task vector")
    two.add_argument("--anchored", required=True, help="the Anchored runs' folder (seed<N>/ under it)")
    two.add_argument("--gausscse", required=True, help="GaussCSE alone's runs' folder (seed<N>/ under it)")
    two.add_argument("--seeds", type=int, nargs="+", default=[42])
    two.add_argument("--lambdas", type=float, nargs="+", default=[0.0, 0.25, 0.5, 1.0])
    for p in (one, two):
        p.add_argument("--data-dir", required=True, help="the data root (nli/xnli/dev-en.tsv, sts/, sick/)")
        p.add_argument("--output", help="append the rows to this JSON file ({route: [rows]})")
    args = parser.parse_args(argv)
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    rows = refit(args) if args.route == "refit" else merge(args)
    if args.output:
        path = Path(args.output)
        kept = json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}
        kept[args.route] = kept.get(args.route, []) + rows
        path.write_text(json.dumps(kept, indent=1) + "\n", encoding="utf-8")
    print(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
