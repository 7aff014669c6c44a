"""MTEB on unisent models: an adapter to MTEB's own encoder protocol, and running tasks offline.

``MTEBEncoder`` gives MTEB any unisent inference model (``unisent.load``'s result, a preset, a checkpoint...) through
``mteb.models.AbsEncoder``: ``encode`` embeds the texts of MTEB's data loaders (with the model's own prompts where a
Sentence Transformers model has them, chosen as MTEB chooses them for Sentence Transformers), and ``similarity`` /
``similarity_pairwise`` are the model's own similarity: its ``similarity_fn_name`` (``cosine``, ``dot``, ``euclidean``,
``manhattan``), or a Gaussian one for GaussCSE (``kl``, ``kl_symmetric``... of ``unisent.evaluation.similarities``),
whose embeddings are then the means and variances side by side. MTEB's evaluators score them; the STS tasks'
``spearman`` is the model's similarity, ``cosine_spearman`` (the main score) the cosine.

``run_tasks`` runs MTEB tasks offline: a task's data comes from a local directory (``data_dir/<task name>``: a
``datasets.save_to_disk`` folder, or data files such as ``test.jsonl`` that ``datasets.load_dataset`` reads) or from the
Hugging Face cache; a task whose data is in neither fails with one line (``MTEBDataError``) that says where to put it.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

try:
    import mteb
    from mteb.models.abs_encoder import AbsEncoder
except ImportError as err:  # pragma: no cover - mteb is a dependency of unisent[dev] / unisent[mteb]
    raise ImportError("MTEB is not installed: pip install 'unisent[mteb]' (or pip install mteb)") from err

__all__ = ["MTEBDataError", "MTEBEncoder", "run_tasks", "write_sts_dataset"]

#: similarities on (n, d) embeddings, as Sentence Transformers defines them (distances negated)
POINT_SIMILARITIES = ("cosine", "dot", "euclidean", "manhattan")


class MTEBDataError(RuntimeError):
    """An MTEB task's data is neither given locally nor in the Hugging Face cache (one line)."""


class MTEBEncoder(AbsEncoder):
    """A unisent model in MTEB's encoder protocol.

    Args:
        model: a loaded unisent model, or anything ``unisent.load`` takes (preset, directory, ``.ckpt``).
        similarity: ``cosine``, ``dot``, ``euclidean``, ``manhattan`` or a Gaussian similarity of
            ``unisent.evaluation.similarities`` (``kl``, ``kl_mean``, ``kl_symmetric``...; needs a
            model with ``encode_gaussian``). Default: the model's ``similarity_fn_name``.
        name: the model's name in MTEB's results (default: ``unisent/<model or its class>``).
        batch_size: sentences per forward pass (MTEB's ``encode_kwargs["batch_size"]`` wins).
        device: where to load ``model`` when it is a name.
    """

    def __init__(
        self,
        model: Any,
        similarity: str | None = None,
        *,
        name: str | None = None,
        batch_size: int = 128,
        device: str | None = None,
    ) -> None:
        from mteb.models import ModelMeta
        from mteb.models.model_meta import ScoringFunction

        label = model if isinstance(model, (str, os.PathLike)) else None
        if label is not None:
            from .._loader import load

            model = load(str(model), device=device)
        self.model = model
        self.batch_size = batch_size
        self.similarity_name = similarity or getattr(model, "similarity_fn_name", "cosine")
        self.gaussian = self.similarity_name not in POINT_SIMILARITIES
        if self.gaussian:
            from ..evaluation.similarities import get_similarity

            self.pairwise_fn = get_similarity(self.similarity_name)
            if not self.pairwise_fn.gaussian:  # pragma: no cover - every non-point similarity is Gaussian
                raise ValueError(f"similarity {self.similarity_name!r} is not a Gaussian similarity")
            if not hasattr(model, "encode_gaussian"):
                raise ValueError(
                    f"similarity {self.similarity_name!r} needs a Gaussian model (GaussCSE, with "
                    f"encode_gaussian); {type(model).__name__} has none"
                )
        config = getattr(model, "config", None)
        spec = getattr(config, "sentence_transformers", None) or {}
        self.model_prompts = {k: v for k, v in (spec.get("prompts") or {}).items() if v} or None
        name = name or f"unisent/{Path(str(label)).name if label else type(model).__name__}"
        scoring = ScoringFunction.CUSTOM if self.gaussian else ScoringFunction.from_str(self.similarity_name)
        self.mteb_model_meta = ModelMeta.create_empty(
            overwrites=dict(
                name=name,
                revision="local",
                loader=None,
                similarity_fn_name=scoring,
                framework=["PyTorch"],
                max_tokens=getattr(config, "max_length", None),
            )
        )

    # ---------------------------------------------------------------------------------- encode
    def encode(self, inputs, *, task_metadata, hf_split: str, hf_subset: str, prompt_type=None, **kwargs) -> np.ndarray:
        from ..encoders import reference_batching

        texts = [text for batch in inputs for text in batch["text"]]
        batch_size = int(kwargs.get("batch_size") or self.batch_size)
        prompt_name = self.get_prompt_name(task_metadata, prompt_type) if self.model_prompts else None
        options = {"prompt_name": prompt_name} if prompt_name is not None else {}
        # Sentence Transformers' batches, in fp32 (not ``auto``): the vectors unisent evaluate scores
        with reference_batching():
            if self.gaussian:
                mu, var = self.model.encode_gaussian(texts, batch_size, precision="fp32")
                return torch.cat([mu, var], dim=-1).float().numpy()
            return torch.as_tensor(self.model.encode(texts, batch_size, precision="fp32", **options)).float().numpy()

    # ---------------------------------------------------------------------------------- similarity
    def _split(self, embeddings) -> tuple[torch.Tensor, torch.Tensor]:
        tensor = torch.as_tensor(np.asarray(embeddings), dtype=torch.float32)
        half = tensor.shape[-1] // 2
        return tensor[..., :half], tensor[..., half:]

    def similarity(self, embeddings1, embeddings2) -> torch.Tensor:
        """``[n1, n2]`` similarities of every pair, with the model's similarity (asymmetric ones:
        ``sim(e1_i || e2_j)``)."""
        if not self.gaussian:
            from sentence_transformers import SimilarityFunction

            fn = SimilarityFunction.to_similarity_fn(self.similarity_name)
            return fn(torch.as_tensor(np.asarray(embeddings1)), torch.as_tensor(np.asarray(embeddings2)))
        a, b = self._split(embeddings1), self._split(embeddings2)
        rows = [self.pairwise_fn((a[0][i].expand_as(b[0]), a[1][i].expand_as(b[1])), b) for i in range(a[0].shape[0])]
        return torch.stack(rows) if rows else torch.empty(0, b[0].shape[0])

    def similarity_pairwise(self, embeddings1, embeddings2) -> torch.Tensor:
        """``[n]`` similarities of corresponding rows, with the model's similarity."""
        if not self.gaussian:
            from sentence_transformers import SimilarityFunction

            fn = SimilarityFunction.to_similarity_pairwise_fn(self.similarity_name)
            return fn(torch.as_tensor(np.asarray(embeddings1)), torch.as_tensor(np.asarray(embeddings2)))
        return self.pairwise_fn(self._split(embeddings1), self._split(embeddings2))


# -------------------------------------------------------------------------------------- data
def _load_local(task, directory: Path) -> None:
    """Give ``task`` the data of ``directory`` (a ``save_to_disk`` folder or data files), as its own
    ``load_data`` would from the hub, then MTEB's own ``dataset_transform``."""
    if task.metadata.is_multilingual:
        subsets = [p for p in sorted(directory.iterdir()) if p.is_dir()]
        if not subsets:
            raise MTEBDataError(
                f"{directory}: MTEB task {task.metadata.name} has subsets ({', '.join(task.hf_subsets)}); "
                "give one folder per subset"
            )
        task.dataset = {p.name: _read_dataset(p) for p in subsets}
    else:
        task.dataset = _read_dataset(directory)
    task.dataset_transform()
    task.data_loaded = True


def _read_dataset(directory: Path):
    import datasets

    from ..data.file_checks import check_data_folder

    check_data_folder(directory)  # regular files only, no link out, no loading script, the card's paths inside it
    if (directory / "dataset_dict.json").is_file():
        return datasets.load_from_disk(str(directory))
    try:
        return datasets.load_dataset(str(directory))
    except Exception as err:  # noqa: BLE001 - any reason: one line naming the folder
        raise MTEBDataError(
            f"{directory}: not a dataset folder that datasets can read ({type(err).__name__}: "
            f"{str(err).splitlines()[0] if str(err) else ''})"
        ) from None


def load_task_data(task, data_dir: str | os.PathLike | None = None) -> str:
    """Load an MTEB task's data offline; returns where it came from.

    ``data_dir/<task name>`` when it exists, else the Hugging Face cache (``datasets`` in offline
    mode when the hub cannot be reached).

    Raises:
        MTEBDataError: neither has the data (one line: the task, its dataset id and revision, what to do).
    """
    name = task.metadata.name
    if data_dir is not None and (Path(data_dir) / name).is_dir():
        _load_local(task, Path(data_dir) / name)
        return str(Path(data_dir) / name)
    dataset = task.metadata.dataset
    from ..encoders.loading import _hub_kwargs, _offline

    offline = _offline() or bool(_hub_kwargs(str(dataset["path"])).get("local_files_only"))
    previous = os.environ.get("HF_DATASETS_OFFLINE")
    if offline:
        os.environ["HF_DATASETS_OFFLINE"] = "1"
        from datasets import config

        config.HF_HUB_OFFLINE = True
    try:
        task.load_data()
    except Exception as err:  # noqa: BLE001 - not cached / no network: one line
        where = f" or under {Path(data_dir) / name}" if data_dir is not None else ""
        raise MTEBDataError(
            f"MTEB task {name}: its data ({dataset['path']}, revision {dataset.get('revision')}) is not in the "
            f"Hugging Face cache{where} and the hub {'cannot be reached' if offline else 'did not give it'} "
            f"({type(err).__name__}); download it where you have internet (mteb.get_task({name!r}).load_data()) "
            f"or save it with datasets' save_to_disk to DIR/{name} and pass --mteb-data DIR"
        ) from None
    finally:
        if offline:
            if previous is None:
                os.environ.pop("HF_DATASETS_OFFLINE", None)
            else:
                os.environ["HF_DATASETS_OFFLINE"] = previous
    return "the Hugging Face cache"


def run_tasks(
    model: Any,
    tasks: Sequence[str],
    *,
    data_dir: str | os.PathLike | None = None,
    similarity: str | None = None,
    batch_size: int = 128,
    name: str | None = None,
    device: str | None = None,
) -> dict[str, Any]:
    """Run MTEB tasks (by MTEB's names, e.g. ``STSBenchmark``) on a unisent model with MTEB's own
    evaluators, offline (``load_task_data``).

    Returns the layout of ``unisent evaluate``'s results (``format_markdown`` prints it, ``unisent
    export --results`` reads it): ``{"tasks": {task: {"group": "mteb", "task_type", "main_metric",
    "score", "metrics", "seconds", "split", "subset", "data"}}, "groups", "skipped", "failed",
    "config"}``, MTEB's scores of the first evaluated split and subset x100; MTEB's own ``ModelResult``
    is under ``"mteb"``.

    Raises:
        MTEBDataError: a task's data is not available offline.
        KeyError: an unknown task name (MTEB's message).
    """
    encoder = (
        model
        if isinstance(model, MTEBEncoder)
        else MTEBEncoder(model, similarity, name=name, batch_size=batch_size, device=device)
    )
    loaded = [mteb.get_task(task_name) for task_name in tasks]  # an unknown name: MTEB's KeyError before any loading
    sources = {task.metadata.name: load_task_data(task, data_dir) for task in loaded}
    result = mteb.evaluate(
        encoder,  # pyright: ignore[reportArgumentType]  # MTEB's EncoderProtocol includes AbsEncoder's __init__
        loaded,
        cache=None,
        encode_kwargs={"batch_size": batch_size},  # pyright: ignore[reportArgumentType]  # NotRequired read as required
        show_progress_bar=False,
    )
    out: dict[str, Any] = {
        "tasks": {},
        "groups": {},
        "skipped": {},
        "failed": {},
        "config": {
            "data_dir": str(data_dir) if data_dir is not None else "Hugging Face cache",
            "batch_size": batch_size,
            "similarity": encoder.similarity_name,
            "model": getattr(encoder.mteb_model_meta, "name", None),  # set by MTEBEncoder (its base allows None)
            "source": "mteb",
        },
    }
    for task_result in result.task_results:
        split, per_subset = next(iter(task_result.scores.items()))
        scores = per_subset[0]
        metadata = mteb.get_task(task_result.task_name).metadata
        main = metadata.main_score
        out["tasks"][task_result.task_name] = {
            "group": "mteb",
            "task_type": metadata.type,
            "main_metric": main,
            "score": 100 * float(scores["main_score"]),
            "metrics": {
                k: 100 * float(v)
                for k, v in scores.items()
                if isinstance(v, (int, float)) and not isinstance(v, bool) and k != "main_score"
            },
            "seconds": float(task_result.evaluation_time or 0.0),
            "split": split,
            "subset": scores.get("hf_subset"),
            "data": sources.get(task_result.task_name),
        }
    out["mteb"] = result
    return out


def write_sts_dataset(
    task: str, out: str | os.PathLike, data_dir: str | os.PathLike | None = None, split: str = "test"
) -> Path:
    """Write the pairs of a unisent STS task (``stsb-test`` from the bundled file by default) as an MTEB
    STS split: ``out/<split>.jsonl`` with ``sentence1``, ``sentence2`` and ``score`` (0-5), the layout
    of MTEB's STS datasets, read by unisent's own reader for the task."""
    from ..evaluation.tasks.builtin_tasks import get_task
    from ..evaluation.tasks.sts_tasks import STSTask
    from ..resources import EVALUATION_DATA_DIR

    found = get_task(task)
    if not isinstance(found, STSTask):
        raise ValueError(f"task {task!r} is a {type(found).__name__}, not an STS task of one file (STSTask)")
    pairs = found.source.read(Path(data_dir or EVALUATION_DATA_DIR))
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"{split}.jsonl"
    with path.open("w", encoding="utf-8") as handle:
        for s1, s2, score in zip(pairs.sentences1, pairs.sentences2, pairs.scores):
            handle.write(json.dumps({"sentence1": s1, "sentence2": s2, "score": float(score)}) + "\n")
    return path
