"""The DataModule's tokenised Arrow cache: its key, the processes that fill it, the cleanup after killed
writers. A reader sees no cache file or a whole one."""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import socket
import uuid
from pathlib import Path

from ..io import atomic_write, remove_stale_temporaries
from ..testing import fault_point
from .schema import BatchSchema
from .sources import ResolvedSource, source_fingerprint
from .tokenizing import RowTokenizer

__all__ = ["build_cache", "cache_key", "default_cache_dir"]


def default_cache_dir() -> Path:
    return Path(os.environ.get("UNISENT_CACHE", Path.home() / ".cache" / "unisent")) / "tokenized"


#: records per tokenising process: smaller sets are tokenised in one process (starting more costs more)
RECORDS_PER_PROCESS = 25_000


def cache_key(resolved: ResolvedSource, schema: BatchSchema, tokenizer, max_length: int, dataset=None) -> str:
    """The cache key: the source (``source_fingerprint``), the fields, the
    tokenizer with its added tokens, and the length."""
    parts = {
        "source": source_fingerprint(resolved, dataset),
        "keys": list(schema.batch_keys),
        "text_keys": list(schema.text_keys),
        "optional_keys": list(schema.optional_keys),
        "tokenizer": [getattr(tokenizer, "name_or_path", ""), len(tokenizer), type(tokenizer).__name__],
        # tokens added to a tokenizer (e.g. AMR's extended vocabulary) change the ids at equal length
        "added_tokens": hashlib.sha256(
            "\n".join(sorted(getattr(tokenizer, "get_added_vocab", dict)())).encode()
        ).hexdigest(),
        "max_length": max_length,
    }
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()[:20]


def default_num_proc() -> int:
    """The CPUs this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def remove_stale_parts(directory: Path) -> None:
    """Delete what tokenising writers of this host that no longer run left in the cache directory:
    part directories (``build_cache``) and ``atomic_write`` temporaries."""
    for tmp in directory.glob(".*.tmp"):
        match = re.match(r"^\..+\.(\d+)@(.+)\.tmp$", tmp.name)
        if tmp.is_dir() and match and match.group(2) == socket.gethostname():
            try:
                os.kill(int(match.group(1)), 0)
            except ProcessLookupError:
                shutil.rmtree(tmp, ignore_errors=True)
            except PermissionError:
                pass
    remove_stale_temporaries(directory)  # (after the directories: it removes files only)


def write_arrow_cache(parts: list[str], target: Path) -> None:
    """Concatenate ``datasets``' Arrow stream files ``parts`` into ``target``, atomically (a reader sees
    no file or the whole file, whatever kills the writer)."""
    import pyarrow as pa

    with atomic_write(target, "wb") as fh:
        writer = None
        for part in parts:
            with pa.memory_map(part) as source:
                reader = pa.ipc.open_stream(source)
                if writer is None:
                    writer = pa.ipc.new_stream(fh, reader.schema)
                for batch in reader:
                    writer.write_batch(batch)
        if writer is not None:
            writer.close()


def build_cache(
    dataset, schema: BatchSchema, tokenize: RowTokenizer, cache: Path, name: str, num_proc: int | None = None
) -> None:
    """Tokenise ``dataset`` in ``num_proc`` processes (None or 0: ``default_num_proc``, fewer for a small set)
    into part files of a private directory, then write them as one Arrow file ``cache`` (atomically)."""
    features = None
    if set(schema.text_keys) & set(schema.optional_keys):  # a batch of nulls must not fix a column's type
        from datasets import List, Value

        features = dataset.features.copy()
        features.update({k: List(Value("int64")) for k in schema.text_keys} | {"length": Value("int64")})
    num_proc = min(num_proc or default_num_proc(), max(1, len(dataset) // RECORDS_PER_PROCESS))
    cache.parent.mkdir(parents=True, exist_ok=True)
    remove_stale_parts(cache.parent)
    # named like io.atomic_write's temporaries (pid@host): the next writer removes a killed one's leftovers
    parts = cache.parent / f".{cache.stem}.{uuid.uuid4().hex[:8]}.{os.getpid()}@{socket.gethostname()}.tmp"
    parts.mkdir()
    try:
        mapped = dataset.map(
            tokenize,
            batched=True,
            batch_size=1000,
            num_proc=num_proc if num_proc > 1 else None,
            cache_file_name=str(parts / "part.arrow"),
            new_fingerprint=cache.stem,
            features=features,
            desc=f"Tokenising {name} ({len(dataset):,} records, {num_proc} process{'es' if num_proc > 1 else ''})",
        )
        fault_point("cache_write")  # (benchmarks/soak.py: a kill while the Arrow cache is written)
        write_arrow_cache([f["filename"] for f in mapped.cache_files], cache)
        del mapped
    finally:
        shutil.rmtree(parts, ignore_errors=True)
