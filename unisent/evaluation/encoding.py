"""Encode sentences through any model with ``encode``: each distinct sentence once, long ones first, cached.

The evaluation code only relies on this contract::

    model.encode(sentences: list[str], batch_size: int) -> (n, d) float tensor (or array), rows in order
    model.encode_gaussian(sentences, batch_size) -> ((n, d) mu, (n, d) var)   # Gaussian models only

and passes ``precision=`` to unisent's own models (one ``encode`` signature); any other model is autocast.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Iterable, Sequence
from typing import Any, Protocol, runtime_checkable

import torch
from torch import Tensor
from tqdm.auto import tqdm

from ..hardware import inference_precision
from ..inference.base import to_tensor
from .metrics.similarity import COSINE, Representation, Similarity

__all__ = ["Embedder", "SentenceModel", "to_tensor"]


@runtime_checkable
class SentenceModel(Protocol):
    """Anything that maps sentences to a (n, d) embedding matrix, rows in input order."""

    def encode(self, sentences: list[str], batch_size: int = 64, **kwargs: Any) -> Any: ...


class Embedder:
    """Encodes sentence lists for the evaluation tasks, sharing work between tasks of one run.

    Distinct sentences are encoded once (longest first, which keeps padding low in every batch), and
    their rows are kept in a first-in-first-out cache of ``cache_size`` sentences so that tasks reading
    the same files (SICK-R and SICK-E, XNLI's English training set) do not encode them again. ``memo``
    holds other per-model results, such as a probe trained once and tested in several languages.

    Args:
        model: object with ``encode`` (and ``encode_gaussian`` when ``similarity.gaussian``).
        batch_size: passed to the model's ``encode``.
        similarity: the pairwise similarity used by STS and NLI tasks; cosine by default.
        progress: show a progress bar while encoding large lists.
        cache_size: most sentences kept in the cache (0 disables it).
        precision: ``fp32`` (the protocols' default) or ``bf16`` (bfloat16 autocast on the model's device), passed
            to the model's methods that take it; ``auto`` is resolved for the model's device.
    """

    def __init__(
        self,
        model: SentenceModel,
        batch_size: int = 64,
        similarity: Similarity | None = None,
        progress: bool = False,
        cache_size: int = 100_000,
        precision: str = "fp32",
    ) -> None:
        if batch_size < 1:
            raise ValueError(f"batch_size must be positive, got {batch_size}")
        self.model = model
        self.batch_size = batch_size
        self.similarity = similarity or COSINE
        self.progress = progress
        #: the description of the encoding progress bar (the runner names the task being encoded)
        self.label = "encoding"
        self.cache_size = cache_size
        parameters: Callable[[], Iterable[Tensor]] | None = getattr(model, "parameters", None)
        first = next(iter(parameters()), None) if callable(parameters) else None
        self.device = first.device.type if first is not None else "cpu"
        self.bf16 = inference_precision(precision, self.device)[0]
        #: what the scores are computed in: ``fp32`` or ``bf16`` (``auto`` resolved)
        self.precision = "bf16" if self.bf16 else "fp32"
        self.memo: dict[Any, Any] = {}
        #: sentences the model truncated at its maximum length so far (``Encoder.encode`` counts them)
        self.truncated = 0
        self._caches: dict[str, OrderedDict[str, tuple[Tensor, ...]]] = {}
        if self.similarity.gaussian and not callable(getattr(model, "encode_gaussian", None)):
            raise TypeError(f"similarity {self.similarity.name!r} needs a model with encode_gaussian()")

    def encode(self, sentences: Sequence[str]) -> Tensor:
        """Embeddings of ``sentences`` from ``model.encode``, shape (n, d), rows in input order."""
        return self._encode("encode", sentences)[0]

    def encode_gaussian(self, sentences: Sequence[str]) -> tuple[Tensor, Tensor]:
        """``(mu, var)`` of ``sentences`` from ``model.encode_gaussian``, each (n, d)."""
        mu, var = self._encode("encode_gaussian", sentences)
        return mu, var

    def represent(self, sentences: Sequence[str]) -> Representation:
        """The representation the configured similarity works on: (n, d) or ``(mu, var)``."""
        if self.similarity.gaussian:
            return self.encode_gaussian(sentences)
        return self.encode(sentences)

    def _call_model(self, method: str, chunk: list[str]) -> tuple[Tensor, ...]:
        from ..encoders.batching import collect_truncation, reference_batching

        # the tasks encode in chunks: count truncated sentences here instead of a warning per chunk;
        # Sentence Transformers' batches, so that a unisent model scores as its sentence-transformers export
        # reference batching encodes in this thread, so autocast (a per-thread mode) reaches the forward
        # scores are computed in fp32 unless asked: a model's encode that names no precision would follow
        # ``auto`` (unisent.hardware), which is bf16 on some machines; a model without the keyword is autocast
        call = getattr(self.model, method)
        options = {"precision": self.precision} if _is_unisent(self.model) else {}
        autocast = torch.autocast(self.device, torch.bfloat16, enabled=self.bf16 and not options)
        with torch.no_grad(), collect_truncation() as truncation, reference_batching(), autocast:
            output = call(chunk, batch_size=self.batch_size, **options)
        self.truncated += truncation.worst[0]
        if method == "encode":
            return (to_tensor(output, len(chunk)),)
        if not isinstance(output, (tuple, list)) or len(output) != 2:
            raise ValueError("model.encode_gaussian must return a (mu, var) pair")
        return tuple(to_tensor(part, len(chunk), f"model.{method}") for part in output)

    def _encode(self, method: str, sentences: Sequence[str]) -> tuple[Tensor, ...]:
        if isinstance(sentences, str):
            raise TypeError("pass a list of sentences, not a single string")
        if not sentences:
            raise ValueError("cannot encode an empty list of sentences")
        cache = self._caches.setdefault(method, OrderedDict())
        unique = list(dict.fromkeys(sentences))
        missing = sorted((s for s in unique if s not in cache), key=len, reverse=True)
        fresh: dict[str, tuple[Tensor, ...]] = {}
        chunk_size = max(self.batch_size * 16, 1024)
        bar = tqdm(total=len(missing), desc=self.label, unit="sent", leave=False, disable=not self.progress)
        for start in range(0, len(missing), chunk_size):
            chunk = missing[start : start + chunk_size]
            parts = self._call_model(method, chunk)
            for row, sentence in enumerate(chunk):
                fresh[sentence] = tuple(part[row] for part in parts)
            bar.update(len(chunk))
        bar.close()
        rows = [fresh[s] if s in fresh else cache[s] for s in unique]
        position = {s: i for i, s in enumerate(unique)}
        index = torch.tensor([position[s] for s in sentences], dtype=torch.long)
        result = tuple(torch.stack([r[k] for r in rows])[index] for k in range(len(rows[0])))
        if self.cache_size > 0:
            for sentence, row in fresh.items():
                cache[sentence] = tuple(part.clone() for part in row)
            while len(cache) > self.cache_size:
                cache.popitem(last=False)
        return result


def _is_unisent(model: Any) -> bool:
    """Whether ``model``'s ``encode`` has unisent's signature (an [`InferenceModel`][unisent.inference.InferenceModel],
    or the ONNX runner): it takes the ``precision`` word. Any other model (Sentence Transformers', whose ``precision``
    means output quantisation, or a user's) is autocast instead."""
    from ..inference import InferenceModel
    from ..models.onnx_encoder import OnnxEncoder

    return isinstance(model, (InferenceModel, OnnxEncoder))
