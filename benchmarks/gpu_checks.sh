#!/usr/bin/env bash
# unisent's checks on one GPU, in one go (docs/benchmarks.md, "On a GPU"): bf16 on CUDA by the user's path, throughput
# and memory against sentence-transformers, and one run of the unified study. Needs an installed unisent with the
# `bench` extra (sentence-transformers, accelerate) and, for the study run, the evaluation data (DATA_DIR).
#   bash benchmarks/gpu_checks.sh OUT_DIR [DATA_DIR]
# 1. the quickstart recipe as it is (precision auto: bf16-mixed on a GPU with bf16), its evaluation and export;
# 2. benchmarks/throughput.py --device cuda --precision bf16-mixed (one run per system, and the scaling table);
# 3. the unified study's [CLS] route, seed 42, in fp32 as the 2-core CPU ran it (needs DATA_DIR).
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:?usage: bash benchmarks/gpu_checks.sh OUT_DIR [DATA_DIR]}
DATA=${2:-}
mkdir -p "$OUT"
export HF_HUB_OFFLINE=${HF_HUB_OFFLINE:-1} TOKENIZERS_PARALLELISM=false PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader > "$OUT/gpu.txt"
R=runs/gausscse-quickstart/gpu
start=$(date +%s)
unisent fit -c recipes/gausscse/quickstart.yaml --trainer.logger.init_args.version gpu \
  --trainer.enable_model_summary false 2>&1 | tee "$OUT/quickstart.log"
echo "quickstart fit: $(($(date +%s) - start)) s" >> "$OUT/gpu.txt"
unisent evaluate --model "$R/encoder" --similarity kl --tasks snli-direction-sample --output "$OUT/direction.json" --quiet
unisent evaluate --model "$R/encoder" --tasks stsb-test --output "$OUT/sts.json" --quiet
unisent export "$R/encoder" --format sentence-transformers --out "$R/st" --overwrite | tee -a "$OUT/quickstart.log"
python benchmarks/throughput.py --device cuda --precision bf16-mixed --repeats 1 --scaling \
  --json "$OUT/throughput-cuda.json" --output "$OUT/throughput-cuda.md" | tee "$OUT/throughput.log"
if [ -n "$DATA" ]; then
  unisent ablate recipes/unified/minilm-cpu-balanced-distill-cls.yaml --out="$OUT/study" --steps=124 \
    --conflict_every=10 --group=cmlm=cmlm,bitext --leave_out=distill --balancers=anchored --data_dir="$DATA" \
    --runs unified --run unified-anchored --seed 42 --precision fp32 2>&1 | tee "$OUT/unified.log"
fi
