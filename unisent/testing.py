"""Testing helpers: ``run_distributed`` (several CPU processes joined by gloo, to check that a loss
gathering across processes matches one process on the global batch) and ``fault_point``."""

from __future__ import annotations

import importlib
import inspect
import io
import os
import queue
import signal
import socket
import sys
import traceback
from collections.abc import Callable
from typing import Any

__all__ = ["FAULT_ENV", "fault_point", "run_distributed"]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _to_bytes(value: Any) -> bytes:
    import torch

    buf = io.BytesIO()
    torch.save(value, buf)
    return buf.getvalue()


def _from_bytes(data: bytes) -> Any:
    """A worker's result, read as data (``weights_only=True``): tensors, plain containers and NumPy values."""
    import torch

    from .io.checkpoints import numpy_safe_globals

    with torch.serialization.safe_globals(numpy_safe_globals()):
        return torch.load(io.BytesIO(data), weights_only=True)


def _reference(fn: Callable) -> tuple[str, str, str | None]:
    """``fn`` as (module, qualified name, file): what a spawned process needs to find it again."""
    try:
        path = inspect.getsourcefile(fn)
    except TypeError:
        path = None
    return fn.__module__, fn.__qualname__, path


def _resolve(reference: tuple[str, str, str | None]) -> Callable:
    """The function of ``_reference``, by module name or else by file (a test module collected with
    pytest's ``--import-mode=importlib`` is not on the spawned process's ``sys.path``)."""
    name, qualname, path = reference
    try:
        module = importlib.import_module(name)
    except ImportError:
        if path is None:
            raise
        directory, file_name = os.path.split(path)
        sys.path.insert(0, directory)
        module = importlib.import_module(os.path.splitext(file_name)[0])
    obj: Any = module
    for part in qualname.split("."):
        obj = getattr(obj, part)
    return obj


def _entry(reference: tuple, rank: int, world_size: int, port: int, out, args: tuple) -> None:
    import torch.distributed as dist

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world_size)
    try:
        result = _resolve(reference)(rank, world_size, *args)
    except BaseException:
        out.put((rank, False, traceback.format_exc()))
        raise
    # by value: torch's queue would pass shared-memory descriptors of a process about to exit
    out.put((rank, True, _to_bytes(result) if rank == 0 else None))
    dist.barrier()  # no process tears down gloo while another still uses it
    dist.destroy_process_group()
    # skip finalisation, where gloo's threads rarely abort the process (SIGABRT); flush the result first
    out.close()
    out.join_thread()
    os._exit(0)


def run_distributed(fn: Callable, *args: Any, world_size: int = 2, timeout: float = 120.0) -> Any:
    """Run ``fn(rank, world_size, *args)`` in ``world_size`` spawned processes sharing a gloo group; return
    rank 0's result. ``fn`` must be module-level and return picklable values; a process's failure is raised
    here with its traceback."""
    import torch.multiprocessing as mp

    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    port = _free_port()
    reference = _reference(fn)
    procs = [
        ctx.Process(target=_entry, args=(reference, rank, world_size, port, out, args)) for rank in range(world_size)
    ]
    for p in procs:
        p.start()
    result = None
    try:
        for _ in range(world_size):
            try:
                rank, ok, value = out.get(timeout=timeout)
            except queue.Empty:
                raise TimeoutError(f"no result from the {world_size} processes within {timeout:.0f} s") from None
            if not ok:
                raise RuntimeError(f"process {rank} failed:\n{value}")
            if rank == 0:
                result = _from_bytes(value)
        for p in procs:
            p.join(timeout=60)
            if p.exitcode != 0:
                raise RuntimeError(f"a process exited with code {p.exitcode}")
    finally:
        for p in procs:
            if p.is_alive():
                p.terminate()
    return result


#: ``<point>@<n>=<SIGNAL>[/rank=R][/restart=K][,...]``: the n-th time (1-based) this process passes that point,
#: it sends itself SIGNAL; ``/rank=R`` only in the process of global rank R (``RANK``, else ``SLURM_PROCID``),
#: ``/restart=K`` only in torchrun's K-th start of the group (``TORCHELASTIC_RESTART_COUNT``, 0 at first)
FAULT_ENV = "UNISENT_FAULT"

#: the points unisent passes: mid training step (loss not yet applied), a checkpoint written but not
#: renamed, the tokenisation cache being written, a validation evaluated but not logged
FAULT_POINTS = ("train_step", "checkpoint_write", "cache_write", "evaluation")

_fault_counts: dict[str, int] = {}


def _this_process() -> dict[str, str]:
    rank = os.environ.get("RANK", os.environ.get("SLURM_PROCID", "0"))
    return {"rank": rank, "restart": os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")}


def fault_point(name: str) -> None:
    """A place where ``benchmarks/soak.py`` (and tests) can kill this process deterministically: nothing
    unless ``UNISENT_FAULT`` names ``name`` (``checkpoint_write@3=SIGKILL``: the third checkpoint write;
    ``train_step@6=SIGKILL/rank=1/restart=0``: rank 1's sixth step, in the group's first start only)."""
    spec = os.environ.get(FAULT_ENV)
    if not spec:
        return
    _fault_counts[name] = count = _fault_counts.get(name, 0) + 1
    for item in spec.split(","):
        head, *conditions = item.strip().split("/")
        point, _, rest = head.partition("@")
        when, _, signal_name = rest.partition("=")
        if point != name or not when.strip().isdigit() or int(when) != count:
            continue
        here = _this_process()
        if all(here.get(key.strip()) == value.strip() for key, _, value in (c.partition("=") for c in conditions)):
            os.kill(os.getpid(), getattr(signal, signal_name.strip().upper()))
