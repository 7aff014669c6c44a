"""``unisent evaluate``: the papers' evaluation protocols on a checkpoint, a saved model or a preset."""

from __future__ import annotations

from functools import partial
from typing import Literal

from .function_commands import CommandFailed, UsageError, quiet_transformers, require_positive, run_command

__all__ = ["evaluate", "main"]

#: what ``--mteb`` keeps as MTEB's protocol runs it: the option that would change it, and how MTEB tasks run
MTEB_FIXED = (
    ("--precision", "in fp32 (leave --precision out)"),
    ("--max-length", "at the model's own length"),
    ("--truncate-dim", "on the full embeddings"),
)


def evaluate(
    *,
    model: str | None = None,
    tasks: str = "stsb-dev",
    data_dir: str | None = None,
    output: str | None = None,
    batch_size: int = 128,
    similarity: Literal["auto", "cosine", "kl", "kl_mean", "kl_symmetric", "kl_symmetric_mean", "kl_avg_sim"] = "auto",
    device: str | None = None,
    precision: Literal["fp32", "auto", "bf16"] = "fp32",
    list: bool = False,
    quiet: bool = False,
    mteb: str | None = None,
    mteb_data: str | None = None,
    max_length: int | None = None,
    truncate_dim: int | None = None,
    cost: bool = False,
) -> None:
    """The papers' evaluation protocols on a checkpoint, a saved model or a preset.

    Prints a markdown table of the scores (x100) and optionally writes them as JSON. Every file of
    every selected task is read and checked before anything is encoded; a task that fails (a
    malformed file, an error while scoring) is listed under "failed" with its error, the other tasks
    are still run and reported, and the command then exits with status 1.

    Args:
        model: a preset (minilm-l6), a saved encoder directory, a model directory or a .ckpt, local or a URL
            (s3://bucket/run/version_0/encoder; pip install 'unisent[s3]')
        tasks: comma-separated task and group names
        data_dir: root of the evaluation data (default: the bundled sample, which has STS-B dev and test);
            a task whose files it lacks uses the bundled copy where one is bundled (STS-B), and says so
        output: write the results as JSON to this file
        batch_size: sentences per forward pass
        similarity: pairwise similarity for every STS/NLI task; kl* need a Gaussian model (GaussCSE). auto:
            cosine, and kl for the entailment-direction tasks of a Gaussian model (cosine would score them 0)
        device: cpu, cuda, cuda:1 ... (default: cpu)
        precision: fp32 (the papers' protocols), bf16 (bfloat16 autocast while encoding), or auto (bf16
            where the device computes fast in bf16: GPUs with bf16, CPUs with AVX512-BF16 or AMX)
        list: list the tasks and groups (marked ok/missing for --data-dir)
        quiet: no progress bars
        mteb: comma-separated MTEB task names (e.g. STSBenchmark), run with MTEB's own evaluators instead
            of --tasks; the model's own similarity (or --similarity, kl for GaussCSE)
        mteb_data: folder with one sub-folder per MTEB task holding its data (else the Hugging Face cache)
        max_length: longest input in tokens (default: the model's own: for a run's encoder or .ckpt the
            backbone's limit or the recipe's model.encoder.inference_max_length, not its training max_length)
        truncate_dim: score the first D coordinates of each embedding (a Matryoshka-trained model; cosine
            on the truncated vectors)
        cost: also measure the model's cost against its start: parameters per part (shared encoder, a head's
            own layers, heads), file sizes, and fp32 encode time per output (vectors, Gaussians) of 512 STS-B
            dev sentences (the results' "cost")
    """
    import sys

    from ..evaluation import format_markdown, list_tasks
    from ..resources import EVALUATION_DATA_DIR

    require_positive(max_length, "--max-length", "tokens")
    require_positive(truncate_dim, "--truncate-dim", "dimensions")
    if list:
        sys.stdout.write(list_tasks(str(EVALUATION_DATA_DIR) if data_dir is None else data_dir))
        return
    if not model:
        raise UsageError("--model is required (or --list)")
    if mteb:  # MTEB's own protocol: fp32, the model's own length, the full embeddings
        given = (precision != "fp32", max_length is not None, truncate_dim is not None)
        for (option, how), refused in zip(MTEB_FIXED, given):
            if refused:
                raise UsageError(f"{option} applies to --tasks; MTEB tasks run {how}")
    else:
        _check_tasks(tasks)  # a mistyped task name or model path fails before torch and the model load
    _check_model(model)
    if mteb:
        results = _evaluate_mteb(model, mteb, mteb_data, batch_size, similarity, device, quiet)
    else:  # --tasks at precision (auto resolved, said here), at --max-length, cut at --truncate-dim
        if quiet:
            quiet_transformers()
        from ..evaluation import evaluate as run_evaluation
        from ..evaluation.similarities import get_similarity
        from ..hardware import inference_precision

        bf16, said = inference_precision(precision, device)
        if precision == "auto":
            print(f"unisent evaluate: {said}", file=sys.stderr)
        results = run_evaluation(
            _load_cut(model, device, max_length, truncate_dim),
            tasks,
            data_dir,
            batch_size=batch_size,
            progress=not quiet,
            similarity=None if similarity == "auto" else get_similarity(similarity),
            precision="bf16" if bf16 else "fp32",
        )
        if truncate_dim is not None:
            results["config"]["truncate_dim"] = truncate_dim
    results["config"]["model"] = model
    sys.stdout.write(format_markdown(results))
    if cost:
        from ..inference.cost import cost_table

        results["cost"] = _measure_cost(model, batch_size=min(batch_size, 64))
        sys.stdout.write("\n".join(["", "Cost:", "", *cost_table(results["cost"]), ""]))
    if output:
        from ..io import write_json

        write_json(output, results)
        print(f"results written to {output}")
    if results["failed"]:
        names = ", ".join(results["failed"])
        first, why = next(iter(results["failed"].items()))  # its file and line, in the one line
        raise CommandFailed(
            f"{len(results['failed'])} of {len(results['failed']) + len(results['tasks'])} "
            f"tasks failed: {names} ({first}: {why}; the others are reported above)"
        )


def _load_cut(model: str, device: str | None, max_length: int | None, truncate_dim: int | None):
    """``unisent.load(model)`` at ``--max-length``, cut at ``--truncate-dim``; a value refused is a usage error."""
    import unisent

    from ..inference.base import set_inference_length
    from ..inference.truncation import TruncatedModel

    loaded = unisent.load(model, device=device)
    try:
        if max_length is not None:
            set_inference_length(loaded, max_length)
    except ValueError as err:
        raise UsageError(f"--max-length: {err}") from None
    try:
        return loaded if truncate_dim is None else TruncatedModel(loaded, truncate_dim)
    except ValueError as err:
        raise UsageError(str(err)) from None


def _evaluate_mteb(
    model: str,
    tasks: str,
    data_dir: str | None,
    batch_size: int,
    similarity: str,
    device: str | None,
    quiet: bool,
) -> dict:
    """``--mteb``: MTEB tasks through ``unisent.integrations.mteb``, reported like ``--tasks``."""
    names = [name.strip() for name in tasks.split(",") if name.strip()]
    if not names:
        raise ValueError("--mteb is empty; name MTEB tasks, e.g. --mteb STSBenchmark")
    if quiet:
        quiet_transformers()
    from ..integrations.mteb import MTEBDataError, run_tasks

    try:
        results = run_tasks(
            model,
            names,
            data_dir=data_dir,
            similarity=None if similarity in ("auto", "cosine") else similarity,
            batch_size=batch_size,
            device=device,
        )
    except MTEBDataError as err:
        raise CommandFailed(str(err)) from None
    except KeyError as err:
        raise ValueError(f"--mteb: {err.args[0] if err.args else err}") from None
    results.pop("mteb")
    return results


def _check_tasks(tasks: str) -> None:
    """Every name of ``--tasks`` is a task or a group (the registry imports no torch)."""
    from ..evaluation.tasks.builtin_tasks import GROUPS, TASKS
    from ..io import closest_hint

    names = [name.strip() for name in tasks.split(",") if name.strip()]
    if not names:
        raise ValueError("--tasks is empty; name tasks or groups, e.g. --tasks stsb-test,transfer (see --list)")
    for name in names:
        if name not in TASKS and name not in GROUPS:
            hint = closest_hint(name, [*GROUPS, *TASKS], n=3)
            raise ValueError(f"unknown task or group {name!r} in --tasks{hint}; unisent evaluate --list shows them all")


def _check_model(model: str) -> None:
    """A ``--model`` that looks like a local path (``unisent.io.model_files.looks_like_path``, which imports
    no torch) must exist: a typo fails at once instead of after a model-hub round trip."""
    import os

    from ..io.model_files import looks_like_path

    if os.path.exists(os.path.expanduser(model)) or "://" in model:  # a URL (s3://...): checked by unisent.load
        return
    if looks_like_path(model):
        raise FileNotFoundError(
            f"--model {model!r} does not exist; give a .ckpt file, a saved model directory, "
            "a preset (minilm-l6) or a Hugging Face hub id"
        )


main = partial(run_command, evaluate, prog="unisent evaluate")


def _measure_cost(model: str, batch_size: int = 64, precision: str = "fp32", sentences: int = 512) -> dict:
    """``model_cost`` of the model ``unisent.load`` reads from ``model`` against its start (the backbone its run's
    ``config.yaml`` or its merge's ``merge.json`` names; none for a preset or a bare model folder), on the first
    ``sentences`` sentences of the bundled STS-B dev set."""
    import json
    from pathlib import Path

    from .._loader import load
    from ..export.source import load_export_source
    from ..inference.cost import model_cost
    from ..resources import EVALUATION_DATA_DIR

    rows = (EVALUATION_DATA_DIR / "sts" / "stsbenchmark" / "sts-dev.csv").read_text(encoding="utf-8").splitlines()
    texts = [cell for row in rows for cell in row.split("\t")[5:7]][:sentences]
    source = load_export_source(model)
    start_name = source.record.base_model
    merged = Path(model).parent / "merge.json"
    if start_name is None and Path(model).is_dir() and merged.is_file():
        start_name = json.loads(merged.read_text(encoding="utf-8")).get("start")
    start = load(start_name) if start_name and start_name != str(model) else None
    folder = model if Path(model).is_dir() else None
    return model_cost(source.model, folder, texts, start, batch_size, precision)
