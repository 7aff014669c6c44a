"""Exporter of PCR-wrapped encoders (CMLM's principal component removal) as Sentence Transformers models.

Removing a language's top principal components is affine: ``y = P (x - m)`` with
``P = I - C^T C`` (``C``: the language's components, ``m``: its mean, zero unless ``center``). So one
language's post-processor is a ``Dense`` module (weight ``P``, bias ``-P m``, identity activation)
after the encoder's modules. Sentence Transformers has no language argument: the export is for one
language (the model's ``default_language``, or its only fitted language). ``pcr.json`` is written
beside the Sentence Transformers files, so ``unisent.load(DIR)`` returns the full ``PCREncoder`` with
every fitted language.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import torch
from torch import nn

from ..encoders import Encoder
from ..postprocess.pcr import PCR_FILE, PCREncoder
from .encoder import (
    EncoderSentenceTransformersExporter,
    _common_facts,
    _max_abs_diff,
    _st_modules,
    _write_json,
)
from .registry import register_exporter

__all__ = ["PCRSentenceTransformersExporter"]


def _language(model: PCREncoder) -> str:
    if model.default_language is not None:
        return model.default_language
    if len(model.pcr.languages) == 1:
        return model.pcr.languages[0]
    raise ValueError(f"a Sentence Transformers model takes no language: set the PCREncoder's default_language "
                     f"to the one to export (fitted: {', '.join(model.pcr.languages)})")


@register_exporter(PCREncoder)
class PCRSentenceTransformersExporter(EncoderSentenceTransformersExporter):
    """A :class:`PCREncoder` over an :class:`Encoder`: the encoder's modules plus one language's PCR as a Dense."""

    tags = EncoderSentenceTransformersExporter.tags + ("principal-component-removal",)

    def write(self, model: nn.Module, out: Path) -> None:
        from safetensors.torch import save_file

        assert isinstance(model, PCREncoder)
        if not isinstance(model.encoder, Encoder):
            raise TypeError(f"PCR export needs a plain unisent Encoder inside, got {type(model.encoder).__name__}")
        language = _language(model)
        super().write(model.encoder, out)
        comps, mean = model.pcr._fitted(language)
        projection = torch.eye(comps.shape[1]) - comps.T @ comps  # (dim, dim), symmetric
        entries = json.loads((out / "modules.json").read_text())
        idx = len(entries)
        folder = out / f"{idx}_Dense"
        folder.mkdir()
        dim = comps.shape[1]
        _write_json(folder / "config.json", {"in_features": dim, "out_features": dim, "bias": True,
                                             "activation_function": "torch.nn.modules.linear.Identity"})
        save_file({"linear.weight": projection.contiguous(), "linear.bias": (-(projection @ mean)).contiguous()},
                  str(folder / "model.safetensors"))
        entries.append({"idx": idx, "name": str(idx), "path": folder.name, "type": "sentence_transformers.models.Dense"})
        _write_json(out / "modules.json", entries)
        state = model.pcr.state() | {"default_language": language, "inner": "."}
        (out / PCR_FILE).write_text(json.dumps(state) + "\n", encoding="utf-8")

    def facts(self, model: nn.Module) -> list[tuple[str, str]]:
        assert isinstance(model, PCREncoder)
        modules = " -> ".join(["Transformer"] + [f for f, *_ in _st_modules(model.encoder)] + ["Dense (PCR)"])
        return _common_facts(model.encoder) + [
            ("Sentence Transformers modules", modules),
            ("principal component removal", f"k = {model.pcr.k}, centre: {model.pcr.center}; exported language "
                                            f"`{_language(model)}` (fitted: {', '.join(model.pcr.languages)})"),
        ]

    def usage(self, model: nn.Module) -> str:
        assert isinstance(model, PCREncoder)
        return f"""The embeddings have the top principal component(s) of language `{_language(model)}` removed
(CMLM's post-processing), as a `Dense` module after the pooling:

```python
from sentence_transformers import SentenceTransformer

model = SentenceTransformer("path/to/this/directory")
embeddings = model.encode(["A man is playing a guitar."])
```

Every fitted language ({', '.join(model.pcr.languages)}) is available through unisent:

```python
import unisent

model = unisent.load("path/to/this/directory")          # PCREncoder
embeddings = model.encode(["Ein Mann spielt Gitarre."], language="{model.pcr.languages[0]}")
```
"""

    def verify(self, model: nn.Module, out: Path, sentences: Sequence[str]) -> tuple[float | None, str]:
        assert isinstance(model, PCREncoder)
        language = _language(model)
        expected = model.encode(list(sentences), language=language)
        diff = _max_abs_diff(PCREncoder.from_pretrained(out).eval().encode(list(sentences), language=language), expected)
        how = f"`unisent.load(DIR).encode(..., language={language!r})` on {len(sentences)} sentences"
        try:
            from sentence_transformers import SentenceTransformer
        except ImportError:
            return diff, how
        got = torch.as_tensor(SentenceTransformer(str(out), device="cpu").encode(list(sentences), convert_to_numpy=True))
        return max(diff, _max_abs_diff(got, expected)), how + " and `SentenceTransformer(DIR).encode`"
