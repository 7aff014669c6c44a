"""The unified panel (docs/results/unified.md): the same held-out evaluations for any model, by column.

[`evaluate_panel`][unisent.evaluation.evaluate_panel] loads a model once, cuts every text at one token limit (256 by
default, the packaged MiniLM's own) whatever the model was trained with, and scores the columns asked for (see
``PANEL_COLUMNS``), each as ``{"score": x100 or None, ...details}``:

- ``stsb-test``, ``sick-r``, ``tatoeba-deu``, ``stsb-multi-en-{de,es}`` (and their ``-dev``): the registered
  tasks of those names ([`evaluate`][unisent.evaluation.evaluate], cosine of ``encode``);
- ``stsb-dev``, ``sick-r-dev``: the same on STS-B dev and SICK's trial split (the tasks ``stsb-dev`` and
  ``sick-r-dev``), for choosing settings so that the test columns stay held out;
- ``snli-direction``, ``snli-direction-hyp-not-shorter``: the ``snli-direction`` task with the KL
  similarity, all pairs and the pairs whose hypothesis is at least as long as the premise (where the rule
  "the longer sentence is the premise" scores 0); a model without a Gaussian head has no direction;
  ``sick-direction-dev``, ``sick-direction-hyp-not-shorter-dev``: the same on the entailment pairs of SICK's
  trial split (the task ``sick-direction-dev``), for choosing settings by direction with the test pairs held
  out (not SNLI dev, on whose triples the unified recipes train GaussCSE); ``sick-direction-train``,
  ``sick-direction-hyp-not-shorter-train``: the same on SICK's train split (1,299 entailment pairs, nine times
  the trial split's), which no recipe trains on: the held-out set of ``unisent.evaluation.BestOnDev``;
- ``amr-text-to-graph``, ``amr-graph-to-text``: top-1 retrieval between the sentences and their own
  linearised AMR graphs (``amr_retrieval``) on the Little Prince v1.6 test split;
- ``entity-top1``, ``entity-top10``: EASE entity retrieval (``score_entities``) over the whole entity table of a
  Lightning checkpoint, on the held-out FewRel sentences bundled in the repository's ``samples/``.

``studies/unified_panel.py``, ``benchmarks/amr_retrieval.py`` and ``benchmarks/ease_entity_retrieval.py``
are command lines over this module; ``unisent ablate`` evaluates trained runs with it.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

if TYPE_CHECKING:
    import torch

    from ..objectives import Objective

__all__ = [
    "AMR_TEST",
    "PANEL_COLUMNS",
    "PANEL_MAX_LENGTH",
    "amr_retrieval",
    "evaluate_panel",
    "load_panel_model",
    "read_amr_pairs",
    "score_entities",
    "top1_correct",
]

#: column name -> one-line description (``--help`` and docs)
PANEL_COLUMNS: dict[str, str] = {
    "stsb-test": "STS Benchmark test, Spearman x100 (cosine of encode)",
    "sick-r": "SICK relatedness test, Spearman x100 (cosine of encode)",
    "stsb-dev": "STS Benchmark dev, Spearman x100 (cosine of encode); for choosing settings",
    "sick-r-dev": "SICK relatedness trial split (500 pairs), Spearman x100; for choosing settings",
    "snli-direction": "SNLI test entailment pairs: sim(hyp||pre) > sim(pre||hyp), KL, accuracy x100 (Gaussian head)",
    "snli-direction-hyp-not-shorter": "the same on the pairs whose hypothesis is not shorter than the premise",
    "sick-direction-dev": "the same on SICK trial's 144 entailment pairs; for choosing settings",
    "sick-direction-hyp-not-shorter-dev": "the same on SICK trial's pairs whose hypothesis is not shorter",
    "sick-direction-train": "the same on SICK train's 1,299 entailment pairs (held out: no recipe trains on SICK)",
    "sick-direction-hyp-not-shorter-train": "the same on SICK train's 669 pairs whose hypothesis is not shorter",
    "amr-text-to-graph": "Little Prince v1.6 test: sentence -> its own linearised AMR graph, top-1 x100",
    "amr-graph-to-text": "Little Prince v1.6 test: linearised AMR graph -> its own sentence, top-1 x100",
    "entity-top10": "EASE entity retrieval over the whole entity table, top-10 x100 (needs the run's .ckpt)",
    "entity-top1": "EASE entity retrieval over the whole entity table, top-1 x100 (needs the run's .ckpt)",
    "tatoeba-deu": "Tatoeba deu<->eng nearest-neighbour accuracy x100 (mean of both directions)",
    "stsb-multi-en-de": "stsb-multi-mt test, English sentence 1 vs German sentence 2, Spearman x100",
    "stsb-multi-en-es": "stsb-multi-mt test, English sentence 1 vs Spanish sentence 2, Spearman x100",
    "stsb-multi-en-de-dev": "the same on stsb-multi-mt dev (en-de); for choosing settings",
    "stsb-multi-en-es-dev": "the same on stsb-multi-mt dev (en-es); for choosing settings",
}

#: the panel's token limit: the packaged MiniLM's own (256), which its exports keep. A run's saved encoder
#: carries its *training* limit (32 in the unified recipe); evaluating at that would cut most test graphs.
PANEL_MAX_LENGTH = 256
#: the AMR columns' file, relative to the data directory
AMR_TEST = "amr/little-prince/amr-bank-struct-v1.6-test.txt"
#: the entity columns' default records: 995 held-out FewRel sentences, in the repository (not the wheel)
DEFAULT_ENTITY_RECORDS = Path(__file__).resolve().parents[2] / "samples" / "ease_fewrel_heldout.jsonl"

#: the columns that are a registered task of the same name
_TASK_COLUMNS = ("stsb-test", "sick-r", "stsb-dev", "sick-r-dev", "tatoeba-deu") + tuple(
    f"stsb-multi-en-{lang}{dev}" for lang in ("de", "es") for dev in ("", "-dev")
)
#: direction column -> (its task, the task's metric); each task is evaluated once for its columns
_DIRECTION = {
    "snli-direction": ("snli-direction", "direction_sim"),
    "snli-direction-hyp-not-shorter": ("snli-direction", "direction_sim_hypothesis_not_shorter"),
    "sick-direction-dev": ("sick-direction-dev", "direction_sim"),
    "sick-direction-hyp-not-shorter-dev": ("sick-direction-dev", "direction_sim_hypothesis_not_shorter"),
    "sick-direction-train": ("sick-direction-train", "direction_sim"),
    "sick-direction-hyp-not-shorter-train": ("sick-direction-train", "direction_sim_hypothesis_not_shorter"),
}
#: direction task -> the pairs it reads (a column's reason when it has no pair of its relation)
_DIRECTION_PAIRS = {
    "snli-direction": "SNLI test",
    "sick-direction-dev": "SICK trial",
    "sick-direction-train": "SICK train",
}
_AMR = {"amr-text-to-graph": "text_to_graph", "amr-graph-to-text": "graph_to_text"}
_ENTITY = {"entity-top10": "top10", "entity-top1": "top1"}


# ------------------------------------------------------------------------------------------ AMR retrieval
def read_amr_pairs(
    path: str | Path, *, parentheses: bool = True, drop_wiki: bool = True
) -> tuple[list[dict[str, str]], list[str]]:
    """``[{id, text, graph}]`` from a PENMAN file (``# ::snt`` + graph; the graphs linearised with
    [`unisent.amr.linearize_file`][unisent.amr.linearize_file], the training linearisation: depth-first, no variables,
    ``:wiki`` dropped); graphs without a sentence are skipped. Returns the pairs and the problems (malformed graphs,
    graphs without ``# ::snt``), one line each."""
    from ..amr import linearize_file

    path = Path(path)
    pairs: list[dict[str, str]] = []
    problems: list[str] = []
    errors: list = []
    for graph_id, metadata, graph in linearize_file(path, errors=errors, parentheses=parentheses, drop_wiki=drop_wiki):
        text = metadata.get("snt") or metadata.get("tok")
        if text is None:
            problems.append(f"{path}: graph {graph_id}: no # ::snt or # ::tok")
            continue
        pairs.append({"id": graph_id, "text": text, "graph": graph})
    problems += [str(error) for error in errors]
    return pairs, problems


def top1_correct(similarity: torch.Tensor, candidates: Sequence[str]) -> tuple[int, list[int]]:
    """Correct top-1 retrievals of a (queries, candidates) similarity matrix whose row ``i`` has the gold
    candidate ``candidates[i]``: right when the best candidate has the gold candidate's string (so two
    pairs with the same string are not wrong for picking each other: identical strings have identical
    embeddings and no order between them). Returns the number right and the indices of the wrong rows."""
    best = similarity.argmax(dim=1).tolist()
    wrong = [i for i, j in enumerate(best) if candidates[j] != candidates[i]]
    return len(best) - len(wrong), wrong


def amr_retrieval(model: Any, pairs: Sequence[dict[str, str]], batch_size: int = 64) -> dict[str, Any]:
    """Text <-> graph top-1 retrieval by cosine of ``model.encode`` (the SAME model embeds the sentences
    and the linearised graphs) over ``pairs`` (``{id, text, graph}``, ``read_amr_pairs``).

    Returns ``text_to_graph_top1`` / ``graph_to_text_top1`` (x100, rounded to 2 digits), the counts
    ``*_correct``, the ids of the wrong rows ``*_errors``, ``pairs``, ``distinct_texts``,
    ``distinct_graphs``, ``max_length`` (the model's token limit) and ``graphs_truncated`` (graphs longer
    than it, ``None`` for a model without a tokenizer), ``mean_gold_cosine`` and ``encode_seconds``."""
    import torch
    import torch.nn.functional as F

    if not pairs:
        raise ValueError("no (sentence, graph) pairs to evaluate")
    texts = [p["text"] for p in pairs]
    graphs = [p["graph"] for p in pairs]
    max_length = getattr(getattr(model, "config", None), "max_length", None)
    truncated = None
    tokenizer: Callable[..., Any] | None = getattr(model, "tokenizer", None)
    if callable(tokenizer) and max_length:
        truncated = sum(len(ids) > max_length for ids in tokenizer(graphs, add_special_tokens=True)["input_ids"])
    start = time.perf_counter()
    with torch.inference_mode():  # a score: fp32, not ``auto`` (unisent.hardware)
        text_emb = F.normalize(torch.as_tensor(model.encode(texts, batch_size, precision="fp32")).float(), dim=-1)
        graph_emb = F.normalize(torch.as_tensor(model.encode(graphs, batch_size, precision="fp32")).float(), dim=-1)
    seconds = time.perf_counter() - start
    similarity = text_emb @ graph_emb.T  # (texts, graphs)
    t2g, t2g_wrong = top1_correct(similarity, graphs)
    g2t, g2t_wrong = top1_correct(similarity.T, texts)
    n = len(pairs)
    return {
        "max_length": max_length,
        "pairs": n,
        "distinct_texts": len(set(texts)),
        "distinct_graphs": len(set(graphs)),
        "graphs_truncated": truncated,
        "text_to_graph_top1": round(100.0 * t2g / n, 2),
        "graph_to_text_top1": round(100.0 * g2t / n, 2),
        "text_to_graph_correct": t2g,
        "graph_to_text_correct": g2t,
        "mean_gold_cosine": round(float(similarity.diagonal().mean()), 4),
        "encode_seconds": round(seconds, 2),
        "text_to_graph_errors": [pairs[i]["id"] for i in t2g_wrong],
        "graph_to_text_errors": [pairs[i]["id"] for i in g2t_wrong],
    }


# --------------------------------------------------------------------------------------- entity retrieval
def score_entities(
    module: Any,
    ease: Any,
    ckpt: str | Path,
    records: str | Path,
    ks: Sequence[int],
    batch_size: int,
    max_length: int | None,
) -> dict[str, Any]:
    """Entity retrieval of a trained EASE model: ``module`` (loaded from the Lightning checkpoint ``ckpt``, in eval
    mode) ranks every entity of ``ease``'s table for each sentence of ``records`` (``{"text", "entity"}`` per line)
    with ``EASE.retrieve_entities``. The entity table is training-only state: it is in the ``.ckpt``, not in an
    exported encoder. ``max_length``: the encoder's token limit for the sentences (``None``: the run's own).

    Returns ``checkpoint``, ``global_step``, ``records_file``, ``objective``, ``entity_temperature``,
    ``max_length`` and what ``retrieve_entities`` reports (``records``, ``entities``, ``top{k}`` and
    ``chance_top{k}`` as fractions, ``best_fixed_ranking_top{k}``, ``median_rank``, ``mean_reciprocal_rank``).

    Raises:
        ValueError: a malformed record, or a record whose entity is not in the table.
    """
    from ..data.entities import read_entity_records
    from ..io import load_checkpoint

    if max_length is not None:
        module.encoder.config.max_length = _capped(module.encoder, max_length)
    texts, entities = read_entity_records(records, ease.entities[1:])
    result = ease.retrieve_entities(module.encoder, texts, entities, ks=ks, batch_size=batch_size)
    step = load_checkpoint(ckpt, mmap=True).get("global_step")
    return {
        "checkpoint": str(ckpt),
        "global_step": step,
        "records_file": str(records),
        "objective": ease.name,
        "entity_temperature": ease.entity_temperature,
        "max_length": module.encoder.config.max_length,
        **result,
    }


# ------------------------------------------------------------------------------------------------ panel
def load_panel_model(model: Any, max_length: int | None = PANEL_MAX_LENGTH) -> Any:
    """``model`` loaded as ``unisent.load`` does (a saved encoder directory, a preset name, a ``.ckpt``),
    or an already loaded model as it is, with its token limit set to ``max_length`` (``None``: its own), at most
    the backbone's positions."""
    if isinstance(model, (str, os.PathLike)):
        from .._loader import load

        model = load(model)
    if max_length is not None:
        config = getattr(model, "config", None)
        if config is None or not hasattr(config, "max_length"):
            raise TypeError(f"max_length={max_length}: a {type(model).__name__} has no config.max_length to set")
        config.max_length = _capped(model, max_length)
    return model


def _capped(model: Any, max_length: int) -> int:
    """``max_length``, at most the backbone's positions (a tiny or custom backbone may have fewer than 256)."""
    limit = model.position_limit() if callable(getattr(model, "position_limit", None)) else None
    return min(max_length, limit) if limit else max_length


def _check_columns(columns: Sequence[str]) -> list[str]:
    if isinstance(columns, str):
        columns = [columns]
    unknown = [c for c in columns if c not in PANEL_COLUMNS]
    if unknown:
        from ..io import closest_hint

        hints = [f"{name!r}{closest_hint(name, PANEL_COLUMNS)}" for name in unknown]
        listing = "\n".join(f"  {name}: {text}" for name, text in PANEL_COLUMNS.items())
        raise ValueError(f"unknown panel column {', '.join(hints)}; the columns are:\n{listing}")
    return list(dict.fromkeys(columns))


def _data_root(column: str, data_dir: str | Path | None) -> Path:
    """The data directory of a column; without ``data_dir`` only a task column whose files are bundled
    (``stsb-test``, ``stsb-dev``: ``unisent.resources.EVALUATION_DATA_DIR``) has one."""
    if data_dir is None:
        from ..resources import EVALUATION_DATA_DIR
        from .tasks import get_task

        bundled = Path(EVALUATION_DATA_DIR)
        if column in _TASK_COLUMNS and not get_task(column).missing_files(bundled):
            return bundled
        raise FileNotFoundError(f"panel column {column!r} needs data_dir (the evaluation data root); got None")
    root = Path(data_dir).expanduser()
    if not root.is_dir():
        raise FileNotFoundError(f"panel column {column!r}: data directory {str(root)!r} does not exist")
    return root


def _check_files(
    columns: list[str], data_dir: str | Path | None, ckpt: str | Path | None, records: str | Path | None
) -> None:
    """Raise ``FileNotFoundError`` naming the column and the path for the first missing file, before
    anything is loaded or encoded."""
    from .tasks import get_task

    for column in columns:
        if column in _TASK_COLUMNS or column in _DIRECTION:
            root = _data_root(column, data_dir)
            task_name = column if column in _TASK_COLUMNS else _DIRECTION[column][0]
            missing = get_task(task_name).missing_files(root)
            if missing:
                raise FileNotFoundError(f"panel column {column!r}: missing data file {missing[0]}")
        elif column in _AMR:
            path = _data_root(column, data_dir) / AMR_TEST
            if not path.is_file():
                raise FileNotFoundError(f"panel column {column!r}: missing data file {path}")
        elif column in _ENTITY:
            if ckpt is not None and not Path(ckpt).is_file():
                raise FileNotFoundError(f"panel column {column!r}: checkpoint {ckpt} does not exist")
            if records is not None and not Path(records).is_file():
                raise FileNotFoundError(f"panel column {column!r}: missing entity records file {records}")


def _task_details(entry: dict[str, Any], metric: str, similarity: str) -> dict[str, Any]:
    return {
        "score": entry["metrics"].get(metric),
        "metric": metric,
        "similarity": similarity,
        "metrics": entry["metrics"],
        "seconds": entry["seconds"],
    }


def evaluate_panel(
    model: Any,
    columns: Sequence[str],
    data_dir: str | Path | None = None,
    ckpt: str | Path | None = None,
    max_length: int | None = PANEL_MAX_LENGTH,
    batch_size: int = 128,
    entity_records: str | Path | None = None,
) -> dict[str, dict[str, Any]]:
    """Score one model on columns of the panel (``PANEL_COLUMNS``).

    Args:
        model: anything ``unisent.load`` accepts (a saved encoder directory such as
            ``runs/x/version_0/encoder``, a preset name, a ``.ckpt``), loaded once; or a loaded model (its
            ``config.max_length`` is then set in place).
        columns: column names, in any order; each is computed once (the two direction columns share one
            evaluation, the two AMR columns one retrieval, the two entity columns one ranking).
        data_dir: the evaluation data root (docs/evaluation.md, "Data layout"; the AMR file is
            ``<data_dir>/amr/little-prince/amr-bank-struct-v1.6-test.txt``). ``None``: ``stsb-test`` and
            ``stsb-dev`` read the bundled STS-B files; every other column but the entity ones needs it.
        ckpt: the run's Lightning checkpoint, for the entity columns (its EASE entity table).
        max_length: every text of every column (the entity columns' sentences included) is cut at this
            many tokens; ``None``: the model's own limit.
        batch_size: encoding batch size.
        entity_records: held-out ``{"text", "entity"}`` records for the entity columns; default
            ``DEFAULT_ENTITY_RECORDS`` (in the repository's ``samples/``, not in the wheel).

    Returns:
        ``{column: {"score": float | None, ...details}}`` for every requested column, scores x100 (higher
        is better). A column that does not apply to this model (a direction column without a Gaussian
        head; an entity column without ``ckpt``, without an EASE objective in it, or without the default
        records file) has score ``None`` and a ``"reason"``. Details: ``seconds`` (the wall time of the
        computation behind the column, shared by columns computed together) and

        - task columns: ``metric``, ``similarity``, ``metrics`` (everything the task reports); the
            direction columns also the by-length keys ``direction_sim_<relation>`` and
            ``share_<relation>`` and ``n_pairs`` at the top level;
        - AMR columns: what ``amr_retrieval`` returns, ``input`` and ``problems``;
        - entity columns: what ``score_entities`` returns, and ``seconds``.

    Raises:
        ValueError: an unknown column (the message lists ``PANEL_COLUMNS``, with a close match).
        FileNotFoundError: a data file, the data directory, the checkpoint or explicit ``entity_records``
            is missing (the message names the column and the path), checked before the model is loaded.
    """
    wanted = _check_columns(columns)
    _check_files(wanted, data_dir, ckpt, entity_records)
    results: dict[str, dict[str, Any]] = {}
    if any(c not in _ENTITY for c in wanted):
        loaded = load_panel_model(model, max_length)
        name = str(model) if isinstance(model, (str, os.PathLike)) else type(model).__name__
        results |= _encoder_columns(loaded, name, [c for c in wanted if c not in _ENTITY], data_dir, batch_size)
    entity = [c for c in wanted if c in _ENTITY]
    if entity:
        results |= _entity_columns(entity, ckpt, entity_records, max_length, batch_size)
    return {column: results[column] for column in wanted}


def _encoder_columns(
    model: Any, name: str, columns: list[str], data_dir: str | Path | None, batch_size: int
) -> dict[str, dict[str, Any]]:
    from .runner import evaluate

    results: dict[str, dict[str, Any]] = {}
    tasks = [c for c in columns if c in _TASK_COLUMNS]
    by_root: dict[Path, list[str]] = {}
    for column in tasks:
        by_root.setdefault(_data_root(column, data_dir), []).append(column)
    for root, names in by_root.items():
        out = evaluate(model, names, root, batch_size, progress=False, on_error="raise")
        for column in names:
            task = out["tasks"][column]
            results[column] = _task_details(task, task["main_metric"], "cosine") | {"data_dir": str(root)}

    direction = [c for c in columns if c in _DIRECTION]
    if direction and not callable(getattr(model, "encode_gaussian", None)):
        reason = f"{name} has no Gaussian head (encode_gaussian): a symmetric similarity has no direction"
        results |= {c: {"score": None, "reason": reason} for c in direction}
    elif direction:
        root = _data_root(direction[0], data_dir)
        splits = list(dict.fromkeys(_DIRECTION[c][0] for c in direction))  # test and/or dev, each once
        out = evaluate(model, splits, root, batch_size, progress=False, similarity="kl", on_error="raise")
        for column in direction:
            task_name, metric = _DIRECTION[column]
            task = out["tasks"][task_name]
            by_length = {k: v for k, v in task["metrics"].items() if k.startswith(("direction_sim_", "share_"))}
            entry = _task_details(task, metric, "kl")
            entry |= by_length | {"n_pairs": task["metrics"].get("n_pairs"), "data_dir": str(root)}
            if entry["score"] is None:
                entry["reason"] = f"no {_DIRECTION_PAIRS[task_name]} entailment pair of this relation ({metric})"
            results[column] = entry

    amr = [c for c in columns if c in _AMR]
    if amr:
        path = _data_root(amr[0], data_dir) / AMR_TEST
        start = time.perf_counter()
        pairs, problems = read_amr_pairs(path)
        found = amr_retrieval(model, pairs, batch_size)
        seconds = round(time.perf_counter() - start, 1)
        n = found["pairs"]
        for column in amr:
            results[column] = {
                "score": 100.0 * found[f"{_AMR[column]}_correct"] / n,
                "model": name,
                "input": str(path),
                "problems": problems,
                **found,
                "seconds": seconds,
            }
    return results


def _entity_columns(
    columns: list[str],
    ckpt: str | Path | None,
    records: str | Path | None,
    max_length: int | None,
    batch_size: int,
) -> dict[str, dict[str, Any]]:
    if ckpt is None:
        reason = "no checkpoint (ckpt): the EASE entity table is training state, in the run's Lightning .ckpt"
        return {c: {"score": None, "reason": reason} for c in columns}
    if records is None:
        if not DEFAULT_ENTITY_RECORDS.is_file():
            reason = f"no entity_records given and the default {DEFAULT_ENTITY_RECORDS} does not exist"
            return {c: {"score": None, "reason": reason} for c in columns}
        records = DEFAULT_ENTITY_RECORDS
    from ..lightning_module import UnisentModule
    from ..objectives.ease import EASE, find_ease

    started = time.perf_counter()
    module = UnisentModule.from_checkpoint(ckpt)
    module.eval()
    if not any(isinstance(o, EASE) for o in module.objectives):
        present = ", ".join(f"{o.name} ({type(o).__name__})" for o in module.objectives) or "none"
        reason = f"checkpoint {ckpt} has no EASE objective, so no entity table; its objectives: {present}"
        return {c: {"score": None, "reason": reason} for c in columns}
    # several EASE objectives: a ValueError (score one with score_entities)
    ease = find_ease(cast("Sequence[Objective]", module.objectives))
    found = score_entities(module, ease, ckpt, records, (1, 10), batch_size, max_length)
    found["seconds"] = round(time.perf_counter() - started, 1)
    return {c: {"score": 100.0 * found[_ENTITY[c]], **found} for c in columns}
