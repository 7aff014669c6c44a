"""Exporter of GaussCSE models: the means as a Sentence Transformers model, the full model for unisent.

A :class:`~unisent.objectives.GaussianEncoder` maps a sentence to a Gaussian (mean, diagonal
variance). The exported directory serves both worlds:

- ``SentenceTransformer(DIR)`` gives the **means** (Transformer -> Pooling -> [the pooler's Dense] ->
  a ``Dense`` holding the mean layer of the Gaussian head), the point embeddings GaussCSE's STS scores
  use;
- ``unisent.load(DIR)`` gives the whole :class:`GaussianEncoder` (``encode_gaussian``,
  ``similarity``: the asymmetric KL similarity that captures entailment direction), from the
  ``gaussian_head.pt`` / ``gaussian_head.json`` files beside the Sentence Transformers files.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import torch
from torch import nn

from ..objectives.gausscse import GaussianEncoder
from .encoder import (
    EncoderSentenceTransformersExporter,
    _common_facts,
    _max_abs_diff,
    _st_modules,
    _write_json,
)
from .registry import register_exporter

__all__ = ["GaussianSentenceTransformersExporter"]

_ACTIVATION = {"none": "torch.nn.modules.linear.Identity", "tanh": "torch.nn.modules.activation.Tanh"}


@register_exporter(GaussianEncoder)
class GaussianSentenceTransformersExporter(EncoderSentenceTransformersExporter):
    """A :class:`GaussianEncoder`: its means as a Sentence Transformers model, plus the variance head."""

    tags = EncoderSentenceTransformersExporter.tags + ("gaussian-embeddings", "gausscse")

    def write(self, model: nn.Module, out: Path) -> None:
        from safetensors.torch import save_file

        assert isinstance(model, GaussianEncoder)
        super().write(model.encoder, out)  # backbone, tokenizer, pooling modules
        model.save_pretrained(out)  # adds gaussian_head.pt/.json (the encoder files are the same)
        entries = _read_modules(out)
        idx = len(entries)
        folder = out / f"{idx}_Dense"
        folder.mkdir()
        head = model.head
        hidden = head.mean.in_features
        _write_json(folder / "config.json", {
            "in_features": hidden, "out_features": head.mean.out_features, "bias": True,
            "activation_function": _ACTIVATION[head.settings["mean_activation"]],
        })
        save_file({"linear.weight": head.mean.weight.detach().cpu().contiguous(),
                   "linear.bias": head.mean.bias.detach().cpu().contiguous()}, str(folder / "model.safetensors"))
        entries.append({"idx": idx, "name": str(idx), "path": folder.name, "type": "sentence_transformers.models.Dense"})
        _write_json(out / "modules.json", entries)

    def facts(self, model: nn.Module) -> list[tuple[str, str]]:
        assert isinstance(model, GaussianEncoder)
        modules = " -> ".join(["Transformer"] + [folder for folder, *_ in _st_modules(model.encoder)] + ["Dense (mean)"])
        s = model.head.settings
        return _common_facts(model.encoder) + [
            ("Sentence Transformers modules", modules),
            ("Gaussian head", f"mean: Linear{' + Tanh' if s['mean_activation'] == 'tanh' else ''}; "
                              f"variance: Linear + {s['variance']} (+ {s['var_floor']:g})"),
        ]

    def usage(self, model: nn.Module) -> str:
        return """This is a Gaussian sentence embedding model (GaussCSE): each sentence is a Gaussian with a mean
and a diagonal variance. The directory holds both.

The **means** with [Sentence Transformers](https://www.sbert.net) (point embeddings for cosine
similarity, retrieval, clustering):

```python
from sentence_transformers import SentenceTransformer

model = SentenceTransformer("path/to/this/directory")
means = model.encode(["A man is playing a guitar.", "Someone plays music."])
```

The **full model** with unisent: means and variances, and the asymmetric similarity
`sim(a || b) = 1 / (1 + KL(a || b))`; `a` entails `b` when `sim(a || b) > sim(b || a)`:

```python
import unisent

model = unisent.load("path/to/this/directory")
mu, var = model.encode_gaussian(["A man is playing a guitar.", "Someone plays music."])
sim = model.similarity(["A man is playing a guitar."], ["Someone plays music."])
```
"""

    def verify(self, model: nn.Module, out: Path, sentences: Sequence[str]) -> tuple[float | None, str]:
        assert isinstance(model, GaussianEncoder)
        from ..objectives.gausscse import GaussianEncoder as Loaded

        mu, var = model.encode_gaussian(list(sentences))
        reloaded = Loaded.from_pretrained(out).eval()
        mu2, var2 = reloaded.encode_gaussian(list(sentences))
        diff = max(_max_abs_diff(mu2, mu), _max_abs_diff(var2, var))
        how = f"`unisent.load(DIR).encode_gaussian` (means and variances) on {len(sentences)} sentences"
        try:
            from sentence_transformers import SentenceTransformer
        except ImportError:
            return diff, how
        st = SentenceTransformer(str(out), device="cpu")
        got = torch.as_tensor(st.encode(list(sentences), convert_to_numpy=True))
        return max(diff, _max_abs_diff(got, mu)), how + " and `SentenceTransformer(DIR).encode` (means)"


def _read_modules(out: Path) -> list[dict]:
    import json

    return json.loads((out / "modules.json").read_text())
