"""Does ``torch.compile`` pay for unisent's encoder? Eager against compiled, training step and encode.

The packaged all-MiniLM-L6-v2 (mean pooling, the unpadded forward), batches of 64 random bundled
STS-B sentences at max length 32. Training: the encoder's forward and backward over two stacked
views plus a fused AdamW step. Encode: ``Encoder.encode(workers=1)`` of the bundled sentences,
twice over.
Reports the first two steps (compilation included) and the mean of the next ones.

    python benchmarks/compile_check.py             # CPU
    python benchmarks/compile_check.py --device cuda

``torch.compile`` needs a C++ compiler on CPU (inductor) and Triton on CUDA.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import time
from pathlib import Path

#: the repository's training, benchmark and test samples (not in the wheel)
SAMPLE_DIR = Path(__file__).resolve().parents[1] / "samples"

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--steps", type=int, default=10)
    args = parser.parse_args()
    import torch

    from unisent.data.schema import pad_batch
    from unisent.encoders import Encoder, EncoderConfig

    sentences = (SAMPLE_DIR / "sentences.txt").read_text(encoding="utf-8").splitlines()
    results = {}
    for mode in ("eager", "compiled"):
        torch.manual_seed(0)
        random.seed(0)
        encoder = Encoder(EncoderConfig(model="minilm-l6", pooler="mean", max_length=32)).to(args.device)
        ids = encoder.tokenize_ids(sentences)
        batches = []
        for _ in range(args.steps + 2):
            rows = [ids[i] for i in random.sample(range(len(ids)), 64)]
            batches.append([t.to(args.device) for t in pad_batch(rows + rows, encoder.pad_token_id)])
        optimizer = torch.optim.AdamW(encoder.parameters(), lr=3e-5, fused=True)
        forward = torch.compile(encoder, dynamic=True) if mode == "compiled" else encoder

        def step(batch, forward=forward, optimizer=optimizer):
            forward(*batch).pow(2).mean().backward()
            optimizer.step()
            optimizer.zero_grad()

        def sync():
            if args.device == "cuda":
                torch.cuda.synchronize()

        start = time.perf_counter()
        for batch in batches[:2]:
            step(batch)
        sync()
        first = time.perf_counter() - start
        start = time.perf_counter()
        for batch in batches[2:]:
            step(batch)
        sync()
        train = (time.perf_counter() - start) / args.steps

        if mode == "compiled":
            encoder.forward = torch.compile(encoder.forward, dynamic=True)
        start = time.perf_counter()
        encoder.encode(sentences[:256], workers=1)  # one thread pool: compiled code is not shared across threads
        encode_first = time.perf_counter() - start
        start = time.perf_counter()
        encoder.encode(sentences + sentences, batch_size=64, workers=1)
        sync()
        encode = 2 * len(sentences) / (time.perf_counter() - start)
        results[mode] = {
            "train_first_two_steps_s": first,
            "train_s_per_step": train,
            "encode_first_call_s": encode_first,
            "encode_sentences_per_s": encode,
        }
        print(mode, json.dumps(results[mode]), flush=True)
    eager, compiled = results["eager"], results["compiled"]
    print(
        f"training speed-up {eager['train_s_per_step'] / compiled['train_s_per_step']:.2f}x, "
        f"encode speed-up {compiled['encode_sentences_per_s'] / eager['encode_sentences_per_s']:.2f}x"
    )


if __name__ == "__main__":
    main()
