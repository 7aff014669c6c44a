"""``unisent.load(DIR, backend="onnx")``: an ONNX export run by onnxruntime, with ``encode``'s API.

[`OnnxEncoder`][unisent.export.OnnxEncoder] reads a directory written by ``unisent export --format onnx`` (a Sentence
Transformers directory with ``onnx/model.onnx``, ``onnx/model_qint8_<arch>.onnx`` when quantised, and
``onnx/unisent_onnx.json``), tokenises as the torch model does (the directory's tokenizer, its maximum
length, its lower-casing), batches as ``Encoder.encode`` does (sentences sorted by token length, longest
first, padded per batch, put back in input order; on a CPU, batches run in several threads at once) and
runs the file with onnxruntime. The pooling, the normalisation and a GaussCSE head are inside the graph
(its ``sentence_embedding`` and ``variance`` outputs), so the runner adds nothing to them.

onnxruntime is an optional dependency: ``pip install 'unisent[onnx]'``.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Literal

import numpy as np
import torch

from ..encoders.batching import TokenIds, length_batches, ordered_map, report_truncation
from ..io.model_files import ModelFileError, check_model_directory, inside, read_model_json

__all__ = ["ONNX_DIR", "ONNX_FP32", "ONNX_RECORD", "OnnxEncoder", "OnnxMissingError", "int8_file_name", "require_onnx"]

#: where the ONNX files are, inside the export directory (as Sentence Transformers' ONNX backend reads them)
ONNX_DIR = "onnx"
ONNX_FP32 = "model.onnx"
#: what unisent's runner needs beside the files: outputs, maximum length, the files and their checks
ONNX_RECORD = "unisent_onnx.json"
INSTALL = "pip install 'unisent[onnx]'"


class OnnxMissingError(ImportError):
    """onnx or onnxruntime is not installed."""


def require_onnx(*modules: str) -> None:
    """Import ``modules`` (default: onnxruntime) or raise [`OnnxMissingError`][unisent.export.OnnxMissingError] naming
    the install command."""
    import importlib

    for name in modules or ("onnxruntime",):
        try:
            importlib.import_module(name)
        except ImportError:
            raise OnnxMissingError(f"the ONNX backend needs {name}, which is not installed: {INSTALL}") from None


def int8_file_name(arch: str) -> str:
    """``model_qint8_<arch>.onnx``: Sentence Transformers' name of a dynamically quantised file."""
    return f"model_qint8_{arch}.onnx"


def _read_record(directory: Path) -> dict[str, Any]:
    path = directory / ONNX_DIR / ONNX_RECORD
    if not path.is_file():
        found = sorted(p.name for p in (directory / ONNX_DIR).glob("*.onnx")) if (directory / ONNX_DIR).is_dir() else []
        hint = f" (it has {', '.join(found)}, but not unisent's record)" if found else ""
        raise FileNotFoundError(
            f"{directory} holds no ONNX export of unisent: no {ONNX_DIR}/{ONNX_RECORD}{hint}; "
            f"write one with `unisent export SOURCE --format onnx --out DIR`"
        )
    record = read_model_json(path, dict)  # size and depth bounded; malformed: one line naming the file
    outputs, files, max_length = record.get("outputs"), record.get("files", {}), record.get("max_length")
    if not isinstance(outputs, list) or not outputs or not all(isinstance(o, str) for o in outputs):
        raise ModelFileError(f"{path}: outputs must be a non-empty list of output names, got {outputs!r:.80}")
    if not isinstance(files, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in files.items()):
        raise ModelFileError(f"{path}: files must map a precision (fp32, int8) to a file name, got {files!r:.80}")
    if type(max_length) is not int or max_length < 1:
        raise ModelFileError(f"{path}: max_length must be a positive number of tokens, got {max_length!r:.40}")
    for key, name in files.items():
        inside(directory, f"{ONNX_DIR}/{name}", source=path, field=f"files.{key}")
    return record


class OnnxEncoder(TokenIds):
    """An ONNX export run by onnxruntime; ``encode`` (and ``encode_gaussian`` for GaussCSE) as the torch model's.

    Args:
        directory: a directory written by ``unisent export --format onnx``.
        file: which file to run: ``None`` (the int8 file if the export has one, else fp32), ``"int8"``,
            ``"fp32"``, or a file name in ``onnx/`` (``model_qint8_avx512_vnni.onnx``).
        threads: onnxruntime threads in all (default: ``torch.get_num_threads()``).
        providers: onnxruntime execution providers (default: the CPU's).
    """

    backend = "onnx"

    def __init__(
        self,
        directory: str | os.PathLike,
        file: str | None = None,
        *,
        threads: int | None = None,
        providers: Sequence[str] | None = None,
    ) -> None:
        require_onnx()
        self.directory = Path(directory).expanduser()
        if self.directory.is_dir():
            check_model_directory(self.directory)  # regular files only, no link out of it, JSON well-formed
        self.record = _read_record(self.directory)
        files: dict[str, str] = self.record.get("files", {})
        if file is None:
            file = "int8" if "int8" in files else "fp32"
        name = files.get(file, file)
        path = inside(self.directory, f"{ONNX_DIR}/{name}", source=self.directory, field="the ONNX file asked for")
        if not path.is_file():
            raise FileNotFoundError(
                f"{path} does not exist; this export has {', '.join(f'{k}: {v}' for k, v in files.items())}"
            )
        #: ``fp32``, ``int8`` or the file's name: what ``encode`` computes in
        self.precision = next((k for k, v in files.items() if v == name), name)
        self.path = path
        self.outputs: list[str] = list(self.record["outputs"])
        self.token_type_ids = bool(self.record.get("token_type_ids"))
        self.max_length = int(self.record["max_length"])
        self.gaussian = "mean" in self.outputs and "variance" in self.outputs
        self.similarity_fn_name = self.record.get("similarity_fn_name", "cosine")
        self.tokenizer = self._tokenizer()
        pad = self.tokenizer.pad_token_id
        self.pad_token_id = 0 if pad is None else int(pad)
        self.threads = max(1, threads or torch.get_num_threads())
        self.providers = list(providers or ["CPUExecutionProvider"])
        self._sessions: dict[int, Any] = {}

    # ---------------------------------------------------------------------------------- set-up
    def _tokenizer(self):
        from ..encoders.loading import load_tokenizer
        from ..encoders.st_files import set_lowercase

        tokenizer = load_tokenizer(str(self.directory))  # its files unreadable: one line naming them
        if self.record.get("do_lower_case"):
            set_lowercase(tokenizer)
        return tokenizer

    def session(self, threads: int = 0):
        """An onnxruntime session of the file with ``threads`` intra-op threads (0: onnxruntime's choice),
        made once per thread count."""
        if threads not in self._sessions:
            import onnxruntime as ort

            options = ort.SessionOptions()
            options.intra_op_num_threads = threads
            options.inter_op_num_threads = 1
            options.log_severity_level = 3
            try:
                session = ort.InferenceSession(str(self.path), options, providers=self.providers)
            except Exception as err:  # noqa: BLE001 - onnxruntime's own kinds (InvalidProtobuf, Fail): one line
                first = (str(err).strip().splitlines() or [type(err).__name__])[0]
                raise ModelFileError(f"{self.path}: not an ONNX model onnxruntime can run ({first:.300})") from None
            self._sessions[threads] = session
        return self._sessions[threads]

    @property
    def config(self) -> Any:
        """What callers read of a torch encoder's config: ``max_length``, ``normalize``."""
        from types import SimpleNamespace

        return SimpleNamespace(max_length=self.max_length, normalize=bool(self.record.get("normalize")))

    def eval(self) -> OnnxEncoder:
        return self

    def to(self, device: Any) -> OnnxEncoder:
        if device is not None and str(device) != "cpu":
            raise ValueError(f"the onnx backend runs on the CPU (onnxruntime), not on {device}")
        return self

    @contextmanager
    def export_max_length(self, max_length: int | None = None, base_model: str | None = None) -> Iterator:
        """While encoding (``encode_file(max_length=...)``): truncate at ``max_length`` tokens."""
        before = self.max_length
        if max_length is not None:
            if max_length < 1:
                raise ValueError(f"max_length must be a positive number of tokens, got {max_length}")
            self.max_length = max_length
        try:
            yield before, self.max_length
        finally:
            self.max_length = before

    # ---------------------------------------------------------------------------------- encoding
    def _run(self, outputs: Sequence[str], sentences: Sequence[str], batch_size: int, workers: int | None, progress):
        if isinstance(sentences, str):
            raise TypeError("encode takes a list of sentences, not a single string")
        if batch_size < 1:
            raise ValueError(f"batch_size must be positive, got {batch_size}")
        ids, truncated = self._tokenize_counting(sentences)
        report_truncation(self, truncated, len(ids), self.max_length)
        n_batches = -(-len(ids) // batch_size)
        workers = max(1, min(workers or min(self.threads, 4), n_batches, self.threads))
        per_thread = max(1, self.threads // workers)
        session = self.session(per_thread if workers > 1 else self.threads)

        def run(batch):
            idx, input_ids, mask = batch
            feed = {"input_ids": input_ids.numpy(), "attention_mask": mask.numpy()}
            if self.token_type_ids:
                feed["token_type_ids"] = np.zeros_like(feed["input_ids"])
            return idx, session.run(list(outputs), feed)

        items = length_batches(ids, batch_size, self.pad_token_id, progress=progress)
        results: dict[int, np.ndarray] = {}
        for idx, arrays in ordered_map(run, items, workers, per_thread=per_thread):
            for k, array in enumerate(arrays):
                if k not in results:
                    results[k] = np.empty((len(ids), array.shape[1]), dtype=np.float32)
                results[k][idx] = array
        return [torch.from_numpy(results[k]) for k in range(len(outputs))]

    def encode(
        self,
        sentences: Sequence[str],
        batch_size: int = 64,
        *,
        normalize: bool = False,
        precision: str = "auto",
        show_progress_bar: bool = False,
        workers: int | None = None,
    ) -> torch.Tensor:
        """Embed ``sentences``: a float32 tensor (n, dim) on the CPU, rows in input order, as the torch
        model's ``encode`` (its normalisation is in the graph; ``normalize=True`` normalises in any case).

        ``precision``: the file's own (fp32 or int8, chosen when loading: ``file``) is what runs; ``auto`` and
        ``fp32`` run it, ``bf16`` (the torch backend's) is refused.
        """
        self._check_precision(precision)
        if not sentences:
            return torch.empty((0, 0), dtype=torch.float32)
        (out,) = self._run(["sentence_embedding"], sentences, batch_size, workers, show_progress_bar)
        return torch.nn.functional.normalize(out, dim=-1) if normalize else out

    def encode_gaussian(
        self,
        sentences: Sequence[str],
        batch_size: int = 64,
        *,
        precision: str = "auto",
        show_progress_bar: bool = False,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Means and variances of a GaussCSE export (its ``mean`` and ``variance`` outputs)."""
        if not self.gaussian:
            raise TypeError(f"{self.path.name} has no mean and variance outputs: not a Gaussian (GaussCSE) model")
        self._check_precision(precision)
        mu, var = self._run(["mean", "variance"], sentences, batch_size, None, show_progress_bar)
        return mu, var

    def similarity(self, a: Sequence[str], b: Sequence[str], reduction: Literal["sum", "mean"] = "sum") -> torch.Tensor:
        """GaussCSE's asymmetric similarity ``sim(a_i || b_j)``, as ``GaussianEncoder.similarity``."""
        from ..losses.gaussian_kl import gaussian_similarity_matrix

        (mu_a, var_a), (mu_b, var_b) = self.encode_gaussian(a), self.encode_gaussian(b)
        return gaussian_similarity_matrix(mu_a, var_a, mu_b, var_b, reduction)

    def _check_precision(self, precision: str) -> None:
        if precision not in ("auto", "fp32"):
            raise ValueError(
                f"the onnx backend runs {self.path.name} ({self.precision}), not precision={precision!r}; bf16 is the "
                "torch backend's (choose the ONNX file instead: fp32 or int8)"
            )

    def __repr__(self) -> str:
        return f"OnnxEncoder({str(self.directory)!r}, file={self.path.name!r})"
