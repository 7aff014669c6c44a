"""Where does ``encode`` spend its time? Padding of length-sorted batches, the unpadded against the
padded forward in one process, and a ``torch.profiler`` table of one encode.

    python benchmarks/profile_encode.py            # 2,048 STS-B train sentences, batch 64, max length 32
"""

from __future__ import annotations

import os
import statistics
import sys
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
sys.path.insert(0, str(Path(__file__).resolve().parent))


def main() -> None:
    from throughput import _flops_per_token, _sentence_source, _sentences, matmul_peak
    from torch.profiler import ProfilerActivity, profile

    from unisent.encoders import Encoder, EncoderConfig
    from unisent.encoders.batching import length_batches

    sentences = _sentences(2048)
    encoder = Encoder(EncoderConfig(model="minilm-l6", pooler="mean", max_length=32)).eval()
    ids = encoder.tokenize_ids(sentences)
    ratios = [m.numel() / int(m.sum()) for _, _, m in length_batches(ids, 64, encoder.pad_token_id)]
    print(
        f"data: {_sentence_source()}; {len(ratios)} length-sorted batches of 64: padded/real tokens "
        f"mean {statistics.mean(ratios):.3f}, max {max(ratios):.3f}; {sum(r == 1 for r in ratios)} without padding"
    )

    encoder.encode(sentences[:256])
    rates: dict[str, list[float]] = {"unpadded": [], "padded": []}
    for _ in range(4):  # alternate the two forwards in one process
        for name, packs in (("unpadded", True), ("padded", False)):
            encoder.packs = packs
            start = time.perf_counter()
            encoder.encode(sentences, batch_size=64)
            rates[name].append(len(sentences) / (time.perf_counter() - start))
    encoder.packs = True
    for name, values in rates.items():
        print(
            f"encode, {name} forward: median {statistics.median(values):.1f} sentences/s "
            f"(runs {', '.join(f'{v:.1f}' for v in values)})"
        )

    with profile(activities=[ProfilerActivity.CPU]) as prof:
        encoder.encode(sentences, batch_size=64, workers=1)
    events = {e.key: e for e in prof.key_averages()}
    total = sum(e.self_cpu_time_total for e in events.values())
    addmm = events["aten::addmm"].self_cpu_time_total
    tokens = sum(len(i) for i in ids)
    linear_flops = (_flops_per_token(encoder.backbone, 0.0)) * tokens  # the 2 P T term: the linear layers
    peak = matmul_peak("cpu", "32-true")
    rate = linear_flops / (addmm / 1e6)
    print(
        f"profile (workers=1): aten::addmm is {100 * addmm / total:.1f}% of self CPU time, running at "
        f"{rate / 1e9:.1f} GFLOP/s = {100 * rate / peak:.0f}% of the measured matmul peak ({peak / 1e9:.1f})"
    )
    print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=8))


if __name__ == "__main__":
    main()
