#!/usr/bin/env bash
# The main job on a fresh machine: install (scripts/setup.sh), evaluate the packaged MiniLM on STS-B
# dev, train the quickstart recipe (supervised SimCSE on the bundled SNLI triples), evaluate the
# trained encoder, export it for sentence-transformers, and say where everything went. A few minutes on a 2-core CPU.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
. .venv/bin/activate
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TOKENIZERS_PARALLELISM=false
RUN=${RUN:-$(date +%Y%m%d-%H%M%S)}
OUT=runs/quickstart/$RUN
# `unisent fit` makes $OUT: a file written there first would make Lightning warn that it deletes the
# previous log files of that directory. The evaluation before training waits beside it, then moves in.
BEFORE=runs/quickstart/.$RUN-eval-before.json
mkdir -p runs/quickstart

echo "== 1/4 the packaged all-MiniLM-L6-v2 before training (STS-B test, bundled; published: 82.03)"
unisent evaluate --model minilm-l6 --tasks stsb-test --output "$BEFORE" --quiet

echo "== 2/4 training: unisent fit -c recipes/quickstart.yaml"
unisent fit -c recipes/quickstart.yaml --trainer.logger.init_args.version "$RUN" "$@"
mv "$BEFORE" "$OUT/eval-before.json"

echo "== 3/4 the trained encoder (STS-B test, bundled)"
unisent evaluate --model "$OUT/encoder" --tasks stsb-test --output "$OUT/eval-after.json" --quiet

echo "== 4/4 export the best checkpoint for sentence-transformers (with a model card)"
unisent export "$OUT/checkpoints/best.ckpt" --format sentence-transformers --out "$OUT/sentence-transformers" \
  --results "$OUT/eval-after.json" --overwrite

cat <<MSG

Done.
  trained encoder (Hugging Face layout + pooler; unisent.load("$OUT/encoder")): $OUT/encoder
  best checkpoint by STS-B dev: $OUT/checkpoints/best.ckpt   (last: $OUT/checkpoints/last.ckpt)
  training curves: $OUT/metrics.csv     full config: $OUT/config.yaml
  evaluation before/after: $OUT/eval-before.json, $OUT/eval-after.json
  sentence-transformers export: $OUT/sentence-transformers   (SentenceTransformer("$OUT/sentence-transformers"))
MSG
