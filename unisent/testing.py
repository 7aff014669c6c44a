"""Testing helpers for objectives: run a function in several CPU processes joined by gloo.

A loss that gathers candidates across processes should give, on N processes with a shard each, the
loss and (averaged) gradients of one process on the global batch. :func:`run_distributed` runs the
distributed side of such a check::

    def worker(rank, world_size, data):          # module level: spawned processes import it
        loss = my_loss(data[rank::world_size])
        loss.backward()
        ...
        return loss.item()                      # rank 0's return value comes back

    from unisent.testing import run_distributed
    value = run_distributed(worker, data, world_size=2)
"""

from __future__ import annotations

import os
import queue
import socket
import traceback
from collections.abc import Callable
from typing import Any

__all__ = ["FAULT_ENV", "fault_point", "run_distributed"]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _to_bytes(value: Any) -> bytes:
    import io

    import torch

    buf = io.BytesIO()
    torch.save(value, buf)
    return buf.getvalue()


def _from_bytes(data: bytes) -> Any:
    """A worker's result, read as data (``weights_only=True``): tensors, plain containers and NumPy values."""
    import io

    import torch

    from .io.checkpoints import numpy_safe_globals

    with torch.serialization.safe_globals(numpy_safe_globals()):
        return torch.load(io.BytesIO(data), weights_only=True)


def _reference(fn: Callable) -> tuple[str, str, str | None]:
    """``fn`` as (module, qualified name, file): what a spawned process needs to find it again."""
    import inspect

    try:
        path = inspect.getsourcefile(fn)
    except TypeError:
        path = None
    return fn.__module__, fn.__qualname__, path


def _resolve(reference: tuple[str, str, str | None]) -> Callable:
    """The function of :func:`_reference`, imported by module name or, when that name is not importable
    here (a test module collected by pytest's ``--import-mode=importlib``, run as plain ``pytest``, is
    not on the spawned process's ``sys.path``), imported by its file name from its own directory."""
    import importlib
    import sys

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
    # By value: torch's queue pickler would pass tensors as shared-memory file descriptors that the
    # parent fetches from this process later, and this process leaves (os._exit) right after the put.
    out.put((rank, True, _to_bytes(result) if rank == 0 else None))
    dist.barrier()  # no process tears down gloo while another still uses it
    dist.destroy_process_group()
    # Leave without the interpreter's finalisation: gloo's threads are torn down there and, rarely,
    # abort the process (SIGABRT) after it has done its work. The result is flushed first.
    out.close()
    out.join_thread()
    os._exit(0)


def run_distributed(fn: Callable, *args: Any, world_size: int = 2, timeout: float = 120.0) -> Any:
    """Run ``fn(rank, world_size, *args)`` in ``world_size`` spawned processes that share a gloo
    process group; return what rank 0 returned. ``fn`` must be defined at module level (the spawned
    processes import it) and return picklable values. A failure in any process is raised here with
    that process's traceback."""
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


# ---------------------------------------------------------------------------------------- fault injection
#: ``<point>@<n>=<SIGNAL>``: the n-th time (1-based) this process passes ``fault_point(<point>)``, it sends
#: itself ``SIGNAL`` (``SIGKILL``, ``SIGINT``, ``SIGTERM``); several specs are separated by commas
FAULT_ENV = "UNISENT_FAULT"

#: the points unisent passes: the middle of a training step (loss computed, not yet applied), a checkpoint
#: written to its temporary file but not yet renamed, the tokenisation cache being written (inside the
#: ``datasets.map`` that writes the Arrow file), a validation's evaluation done but not yet logged
FAULT_POINTS = ("train_step", "checkpoint_write", "cache_write", "evaluation")

_fault_counts: dict[str, int] = {}


def fault_point(name: str) -> None:
    """A place where ``benchmarks/soak.py`` (and tests) can kill this process deterministically.

    Does nothing unless the environment variable ``UNISENT_FAULT`` names ``name``, e.g.
    ``UNISENT_FAULT=checkpoint_write@3=SIGKILL``: the third checkpoint write of the process is killed
    between writing its temporary file and renaming it. The cost when unset is one dictionary lookup."""
    spec = os.environ.get(FAULT_ENV)
    if not spec:
        return
    _fault_counts[name] = count = _fault_counts.get(name, 0) + 1
    for item in spec.split(","):
        point, _, rest = item.strip().partition("@")
        when, _, signal_name = rest.partition("=")
        if point == name and when.strip().isdigit() and int(when) == count:
            import signal

            os.kill(os.getpid(), getattr(signal, signal_name.strip().upper()))
