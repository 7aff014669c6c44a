#!/usr/bin/env bash
# The main job on a fresh machine: install (scripts/setup.sh), then train GaussCSE's Gaussian head on the
# packaged all-MiniLM-L6-v2 (recipes/gausscse/quickstart.yaml: the bundled SNLI-dev triples, encoder
# frozen) and measure, before and after training, what the method is for on data it never saw: which
# sentence of an SNLI *test* entailment pair entails the other (1,000 bundled pairs, task
# snli-direction-sample), and STS-B test, which must not change. Exports the model for
# sentence-transformers and ends with a before/after table. A few minutes on a 2-core CPU
# (docs/results/quickstart.md). Extra arguments go to `unisent fit`.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
. .venv/bin/activate
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TOKENIZERS_PARALLELISM=false
# Readable output: no weight-loading bars or transformers notices, no libraries' deprecation notices
# (errors, and every other warning, stay visible).
export HF_HUB_DISABLE_PROGRESS_BARS=1 TRANSFORMERS_VERBOSITY=error TRANSFORMERS_NO_ADVISORY_WARNINGS=1
export PYTHONWARNINGS="${PYTHONWARNINGS:-ignore::DeprecationWarning,ignore::FutureWarning}"
RECIPE=recipes/gausscse/quickstart.yaml
RUN=${RUN:-$(date +%Y%m%d-%H%M%S)}
RUNS=runs/gausscse-quickstart
OUT=$RUNS/$RUN
STEP0=$RUNS/$RUN-step0
# `unisent fit` makes $OUT: a file written there first would make Lightning warn that it deletes the
# previous log files of that directory. The evaluations before training wait beside it, then move in.
BEFORE=$RUNS/.$RUN-before
mkdir -p "$BEFORE"

echo "== 1/5 before: the packaged all-MiniLM-L6-v2 on STS-B test (bundled; published: 82.03)"
unisent evaluate --model minilm-l6 --tasks stsb-test --output "$BEFORE/sts.json" --quiet

echo "== 2/5 before: the recipe's model at step 0 (MiniLM + the freshly initialised Gaussian head)"
# One optimiser step at learning rate 0 changes no weight: it saves the model that training starts from
# (same seed, same initialisation) to $STEP0/encoder, for `unisent evaluate` to measure.
unisent fit -c "$RECIPE" --trainer.logger.init_args.version "$RUN-step0" --trainer.max_steps 1 \
  --model.optimizer.init_args.lr 0 --trainer.enable_checkpointing false \
  --trainer.enable_progress_bar false --trainer.enable_model_summary false
unisent evaluate --model "$STEP0/encoder" --similarity kl --tasks snli-direction-sample \
  --output "$BEFORE/direction.json" --quiet

echo "== 3/5 training: unisent fit -c $RECIPE"
unisent fit -c "$RECIPE" --trainer.logger.init_args.version "$RUN" --trainer.enable_model_summary false "$@"
mv "$BEFORE/sts.json" "$OUT/eval-before.json"
mv "$BEFORE/direction.json" "$OUT/eval-before-direction.json"
rmdir "$BEFORE"

echo "== 4/5 after: the trained model on the same tests"
unisent evaluate --model "$OUT/encoder" --similarity kl --tasks snli-direction-sample \
  --output "$OUT/eval-after-direction.json" --quiet
unisent evaluate --model "$OUT/encoder" --tasks stsb-test --output "$OUT/eval-after.json" --quiet

echo "== 5/5 export the trained model for sentence-transformers (with a model card)"
unisent export "$OUT/encoder" --format sentence-transformers --out "$OUT/sentence-transformers" \
  --results "$OUT/eval-after-direction.json" --overwrite

python - "$OUT" <<'PY'
import json
import sys

out = sys.argv[1]


def metrics(name, task):
    entry = json.load(open(f"{out}/{name}", encoding="utf-8"))["tasks"][task]
    return entry["metrics"]


d0, d1 = metrics("eval-before-direction.json", "snli-direction-sample"), metrics("eval-after-direction.json", "snli-direction-sample")
s0, s1 = metrics("eval-before.json", "stsb-test"), metrics("eval-after.json", "stsb-test")
rows = [
    ("SNLI test entailment direction, by sim(hyp||pre) > sim(pre||hyp), %", d0["direction_sim"], d1["direction_sim"]),
    ("SNLI test entailment direction, by variance (premise larger), %", d0["direction_var"], d1["direction_var"]),
    ("STS-B test, Spearman x100 (cosine of encode())", s0["spearman"], s1["spearman"]),
]
width = max(len(r[0]) for r in rows)
print(f"\nHeld-out tests ({int(d1['n_pairs'])} SNLI test entailment pairs, chance 50; {int(s1['n_pairs'])} STS-B test pairs).")
print("Before: direction = the step-0 model (MiniLM + a fresh Gaussian head), STS = the packaged MiniLM.")
print(f"After: {out}/encoder.\n")
print(f"| {'test':<{width}} | before |  after | change |")
print(f"|{'-' * (width + 2)}|-------:|-------:|-------:|")
for name, before, after in rows:
    print(f"| {name:<{width}} | {before:6.2f} | {after:6.2f} | {after - before:+6.2f} |")
PY

cat <<MSG

Done.
  trained model (MiniLM + Gaussian head; unisent.load("$OUT/encoder"): encode, encode_gaussian, similarity): $OUT/encoder
  checkpoint: $OUT/checkpoints/last.ckpt     training curves: $OUT/metrics.csv     full config: $OUT/config.yaml
  evaluations: $OUT/eval-before*.json, $OUT/eval-after*.json   (the step-0 model: $STEP0/encoder)
  sentence-transformers export (MiniLM's vectors): $OUT/sentence-transformers
MSG
