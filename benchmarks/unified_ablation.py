"""Recipes for the rows of the unified panel (docs/results/unified.md): one objective of the unified
recipe alone, or the unified recipe without one, with the same data, batch sizes, settings, learning
rate schedule and number of optimiser steps as inside the unified run.

    python benchmarks/unified_ablation.py --keep gausscse --output runs/panel/recipes/only-gausscse.yaml
    python benchmarks/unified_ablation.py --drop ease --output runs/panel/recipes/without-ease.yaml
    unisent fit -c runs/panel/recipes/only-gausscse.yaml

CMLM keeps its bitext term (``cmlm`` means both, as in the CMLM paper's S3); ``--keep``/``--drop``
name objectives of ``data.train``. The run length is fixed in optimiser steps (``--steps``, default:
the unified run's 186 = 3 epochs of its longest loader), because a single objective's epoch is
shorter; validation every 62 steps as in the unified run.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
UNIFIED = ROOT / "recipes" / "unified" / "minilm-cpu.yaml"
GROUPS = {"cmlm": ("cmlm", "bitext")}


def ablation(
    keep: list[str] | None = None,
    drop: list[str] | None = None,
    steps: int = 186,
    recipe: Path = UNIFIED,
    name: str | None = None,
) -> dict:
    config = yaml.safe_load(recipe.read_text(encoding="utf-8"))
    train = config["data"]["train"]

    def expand(names: list[str]) -> set[str]:
        out = set()
        for n in names:
            if n not in train and n not in GROUPS:
                raise SystemExit(f"unknown objective {n!r}; the recipe has {', '.join(train)}")
            out |= set(GROUPS.get(n, (n,)))
        return out

    kept = expand(keep) if keep else set(train) - expand(drop or [])
    if not kept:
        raise SystemExit("no objective left")
    model = config["model"]
    model["objectives"] = [
        o
        for o in model["objectives"]
        if ((o.get("init_args") or {}).get("name") or _default_name(o["class_path"])) in kept
    ]
    config["data"]["train"] = {k: v for k, v in train.items() if k in kept}
    for key in ("batch_size", "length_grouped"):  # per-objective settings follow the objectives
        if isinstance(config["data"].get(key), dict):
            config["data"][key] = {k: v for k, v in config["data"][key].items() if k in kept}
    model["weight_schedule"] = {k: v for k, v in (model.get("weight_schedule") or {}).items() if k in kept}
    trainer = config["trainer"]
    trainer.update(max_steps=steps, max_epochs=-1, check_val_every_n_epoch=None)
    label = name or ("only-" + "+".join(sorted(keep)) if keep else "without-" + "+".join(sorted(drop or [])))
    trainer["logger"]["init_args"]["name"] = f"unified-panel/{label}"
    return config


def _default_name(class_path: str) -> str:
    from unisent.io import import_object

    return import_object(class_path).name


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    group = parser.add_mutually_exclusive_group(required=True)
    group.add_argument("--keep", nargs="+", help="train only these objectives")
    group.add_argument("--drop", nargs="+", help="train all but these objectives")
    parser.add_argument("--steps", type=int, default=186)
    parser.add_argument("--output", required=True)
    args = parser.parse_args(argv)
    config = ablation(args.keep, args.drop, args.steps)
    out = Path(args.output)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(
        f"# made by benchmarks/unified_ablation.py from {UNIFIED.relative_to(ROOT)}\n"
        + yaml.safe_dump(config, sort_keys=False),
        encoding="utf-8",
    )
    print(out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
