#!/usr/bin/env bash
# The main job on a fresh machine: install (scripts/setup.sh), evaluate the packaged MiniLM on STS-B
# dev, train the quickstart recipe (supervised SimCSE on the bundled SNLI triples), evaluate the
# trained encoder, and say where everything went. A few minutes on a 2-core CPU.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
. .venv/bin/activate
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TOKENIZERS_PARALLELISM=false
RUN=${RUN:-$(date +%Y%m%d-%H%M%S)}
OUT=runs/quickstart/$RUN
mkdir -p "$OUT"

echo "== 1/3 the packaged all-MiniLM-L6-v2 before training (STS-B test, bundled; published: 82.03)"
unisent evaluate --model minilm-l6 --tasks stsb-test --output "$OUT/eval-before.json" --quiet

echo "== 2/3 training: unisent fit -c recipes/quickstart.yaml"
unisent fit -c recipes/quickstart.yaml --trainer.logger.init_args.version "$RUN" "$@"

echo "== 3/3 the trained encoder (STS-B test, bundled)"
unisent evaluate --model "$OUT/encoder" --tasks stsb-test --output "$OUT/eval-after.json" --quiet

cat <<MSG

Done.
  trained encoder (Hugging Face layout + pooler; unisent.load("$OUT/encoder")): $OUT/encoder
  best checkpoint by STS-B dev: $OUT/checkpoints/best.ckpt   (last: $OUT/checkpoints/last.ckpt)
  training curves: $OUT/metrics.csv     full config: $OUT/config.yaml
  evaluation before/after: $OUT/eval-before.json, $OUT/eval-after.json
MSG
