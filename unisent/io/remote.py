"""Object storage (``s3://``, ``gs://``, ...): one way in for models, checkpoints and run folders.

``localize`` downloads a remote model folder or checkpoint file into a local cache and returns the local path, so that
the local loaders and their checks ([`unisent.io.model_files.check_model_directory`][unisent.io.check_model_directory],
``unisent.io.checkpoints``) run on it unchanged: a model is data, and the bytes checked are the bytes loaded.
Hand-written on fsspec's own API (``url_to_fs``, ``find``, ``info``, ``get_file``) rather than fsspec's
``simplecache::`` chaining or ``fs.get(recursive=True)``: those map every key of a listing to a local path without
asking whether it stays inside the cache folder, skip nothing loudly, and have no size cap. Here every key is checked
(no ``..``, no absolute part, no backslash), the total size is capped (``UNISENT_REMOTE_MAX_BYTES``), and anything odd
is refused in one line naming the URL.

The cache is ``$UNISENT_CACHE/remote/<sha256 of the URL>`` (``~/.cache/unisent/remote/...``), refreshed
when a remote object's ETag, size or modification time changed. Credentials and the endpoint are the
backend's own (for S3: ``AWS_ACCESS_KEY_ID``/``AWS_SECRET_ACCESS_KEY`` or ``AWS_PROFILE``, and
``AWS_ENDPOINT_URL`` for MinIO, moto or another S3-compatible server).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import posixpath
import re
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

__all__ = [
    "RemoteError",
    "filesystem",
    "glob",
    "is_remote",
    "join",
    "localize",
    "remote_cache_dir",
    "staged_folder",
]

#: the default cap on what one ``localize`` downloads (``UNISENT_REMOTE_MAX_BYTES`` changes it)
MAX_BYTES = 50 * 2**30
#: at most this many files in a remote model folder
MAX_FILES = 10_000
#: the fsspec backend to install for each scheme
_EXTRAS = {"s3": "s3", "s3a": "s3"}
_MANIFEST = ".unisent-remote.json"
_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*)://")


class RemoteError(OSError):
    """A remote URL that cannot be read or is refused: one line naming the URL and what to do."""


def is_remote(path: Any) -> bool:
    """Whether ``path`` is a URL with a scheme other than ``file`` (``s3://bucket/key``, ``gs://...``)."""
    return isinstance(path, str) and _scheme(path) not in ("file", "local")


def join(base: str, *parts: str) -> str:
    """``base/part/...`` for a URL (``pathlib`` would fold its ``//``)."""
    return posixpath.join(base.rstrip("/"), *parts)


def _scheme(url: str) -> str:
    match = _SCHEME.match(url)
    return match.group(1).lower() if match else "file"


def _missing_backend(url: str, err: BaseException) -> RemoteError:
    scheme = _scheme(url)
    extra = _EXTRAS.get(scheme)
    how = f"pip install 'unisent[{extra}]'" if extra else f"install the fsspec backend of {scheme}:// ({err})"
    return RemoteError(f"{url}: reading {scheme}:// needs its fsspec backend: {how}")


def describe(url: str, err: BaseException) -> RemoteError:
    """``err`` (a backend's exception) as one line naming ``url`` and what to set."""
    if isinstance(err, RemoteError):
        return err
    name = type(err).__name__
    text = str(err).strip().splitlines()[0] if str(err).strip() else name
    endpoint = os.environ.get("AWS_ENDPOINT_URL") or os.environ.get("FSSPEC_S3_ENDPOINT_URL")
    where = f" (endpoint {endpoint})" if endpoint else ""
    if isinstance(err, ImportError):
        return _missing_backend(url, err)
    if name == "NoCredentialsError" or "credentials" in text.lower():
        return RemoteError(
            f"{url}: no credentials{where}: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (or AWS_PROFILE)"
        )
    if name in ("EndpointConnectionError", "ConnectTimeoutError", "ClientConnectorError") or "connect" in text.lower():
        return RemoteError(
            f"{url}: cannot reach the storage endpoint{where}: {text}; set AWS_ENDPOINT_URL for MinIO or another "
            "S3-compatible server, and check the network"
        )
    if isinstance(err, FileNotFoundError):
        return RemoteError(f"{url}: no such bucket or key{where} ({text})")
    if isinstance(err, PermissionError):
        return RemoteError(f"{url}: access denied{where} ({text}); check the credentials and the bucket's policy")
    return RemoteError(f"{url}: {name}: {text}{where}")


def filesystem(url: str) -> tuple[Any, str]:
    """``(fsspec file system, path in it)`` of ``url``; a missing backend is one line saying what to install."""
    import fsspec

    try:
        return fsspec.core.url_to_fs(url)
    except ImportError as err:
        raise _missing_backend(url, err) from None
    except ValueError as err:  # an unknown protocol
        raise RemoteError(f"{url}: {err}") from None


@contextlib.contextmanager
def _reading(url: str) -> Iterator[None]:
    """Backend errors inside as ``RemoteError`` (one line naming ``url``)."""
    try:
        yield
    except RemoteError:
        raise
    except Exception as err:  # noqa: BLE001 - botocore's, aiohttp's ...: said in one line
        raise describe(url, err) from None


def remote_cache_dir() -> Path:
    """``$UNISENT_CACHE/remote`` (``~/.cache/unisent/remote``)."""
    return Path(os.environ.get("UNISENT_CACHE", Path.home() / ".cache" / "unisent")) / "remote"


def _max_bytes() -> int:
    value = os.environ.get("UNISENT_REMOTE_MAX_BYTES")
    return int(value) if value and value.isdigit() else MAX_BYTES


def _stamp(info: dict[str, Any]) -> list[Any]:
    """What changes when an object changes: ETag, size, modification time."""
    modified = info.get("LastModified") or info.get("mtime") or info.get("updated") or info.get("created")
    return [str(info.get("ETag") or info.get("etag") or info.get("md5Hash") or ""), info.get("size"), str(modified)]


def _safe_key(url: str, rel: str) -> str:
    """``rel`` (a key below the URL) when it maps inside the cache folder; refused otherwise."""
    parts = rel.split("/")
    if (
        not rel
        or "\\" in rel
        or rel.startswith("/")
        or any(part in ("", ".", "..") for part in parts)
        or re.match(r"^[A-Za-z]:", rel)
        or "\x00" in rel
    ):
        raise RemoteError(f"{url}: refused: key {rel!r} does not map to a path inside the download folder")
    return rel


def _listing(fs: Any, path: str, url: str) -> tuple[str, dict[str, dict[str, Any]]]:
    """``(kind, {relative key: info})``: ``file`` (key ``""``) or ``folder`` (every key below it, checked)."""
    with _reading(url):
        info = fs.info(path)
    if info.get("type") == "file":
        return "file", {"": info}
    if info.get("type") != "directory":
        raise RemoteError(f"{url}: refused: neither a file nor a folder (type {info.get('type')!r})")
    with _reading(url):
        found = fs.find(path, detail=True, withdirs=False)
    prefix = path.rstrip("/") + "/"
    files: dict[str, dict[str, Any]] = {}
    for key, entry in sorted(found.items()):
        if not key.startswith(prefix):
            raise RemoteError(f"{url}: refused: the listing holds {key!r}, which is not below it")
        rel = key[len(prefix) :]
        if entry.get("type") != "file":
            raise RemoteError(f"{url}: refused: {rel!r} is a {entry.get('type')!r}, not a file")
        files[_safe_key(url, rel)] = entry
    if not files:
        raise RemoteError(f"{url}: no such bucket or key (an empty folder)")
    if len(files) > MAX_FILES:
        raise RemoteError(f"{url}: refused: {len(files)} files (at most {MAX_FILES} in a model folder)")
    return "folder", files


def localize(url: str | os.PathLike[str], kind: str | None = None) -> str:
    """The local path of ``url``: unchanged when it is local, else a copy in ``remote_cache_dir``.

    ``kind``: ``model`` (a folder), ``checkpoint`` or ``file`` (one object), ``None`` (what the URL names).
    A checkpoint's run config (``config.yaml`` of its folder or the one above, read by ``unisent export``)
    comes along in the same layout; so does the ``config.yaml`` beside a remote model folder. The copy is
    downloaded again when an object's ETag, size or modification time changed.

    Raises:
        RemoteError: the URL is missing, unreachable, refused (a key outside the folder, too large), or its
            backend is not installed (``pip install 'unisent[s3]'``).
    """
    url = str(url)
    if not is_remote(url):
        return url
    fs, path = filesystem(url)
    found, files = _listing(fs, path, url)
    if kind in ("checkpoint", "file") and found != "file":
        raise RemoteError(f"{url}: expected a {kind} file, found a folder")
    if kind == "model" and found != "folder" and not url.endswith(".ckpt"):
        raise RemoteError(f"{url}: expected a model folder, found a file")
    name = _safe_key(url, posixpath.basename(path.rstrip("/")) or "model")
    parent = posixpath.dirname(path.rstrip("/"))
    if found == "file":  # <sha>/<folder>/<file>, the run's config.yaml at <sha>/<folder>/ or <sha>/
        prefix = _safe_key(url, posixpath.basename(parent) or "files") + "/"
        plan = {prefix + name: (path, files[""])}
        configs = {prefix + "config.yaml": parent, "config.yaml": posixpath.dirname(parent)}
    else:  # <sha>/<folder>/..., the config.yaml beside the folder at <sha>/
        prefix = ""
        plan = {f"{name}/{rel}": (join(path, rel), info) for rel, info in files.items()}
        configs = {"config.yaml": parent}
    for key, folder in configs.items() if kind != "file" else ():
        plan.update(_run_config(fs, folder, key))
    total = sum(int(info.get("size") or 0) for _, info in plan.values())
    if total > _max_bytes():
        raise RemoteError(
            f"{url}: refused: {total / 2**20:.0f} MiB to download, over the cap of {_max_bytes() / 2**20:.0f} MiB "
            "(UNISENT_REMOTE_MAX_BYTES raises it)"
        )
    target = remote_cache_dir() / hashlib.sha256(url.encode()).hexdigest()
    stamps = {key: _stamp(info) for key, (_, info) in plan.items()}
    if not _fresh(target, stamps, plan):
        _download(fs, url, target, plan, stamps)
    return str(target / (prefix + name))


def _run_config(fs: Any, folder: str, key: str) -> dict[str, tuple[str, dict]]:
    """``{key: (folder/config.yaml, info)}`` when that small file exists (a run's config, for the exporter)."""
    if not folder or folder.endswith(":"):
        return {}
    source = join(folder, "config.yaml")
    try:
        info = fs.info(source)
    except Exception:  # noqa: BLE001 - none there (or not readable): the model loads without it
        return {}
    if info.get("type") != "file" or int(info.get("size") or 0) > 2**20:
        return {}
    return {key: (source, info)}


def _fresh(target: Path, stamps: dict[str, list[Any]], plan: dict[str, tuple[str, dict]]) -> bool:
    """Whether ``target`` holds every object of ``stamps`` as it is now."""
    try:
        recorded = json.loads((target / _MANIFEST).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return recorded == stamps and all(
        (target / key).is_file() and (target / key).stat().st_size == int(info.get("size") or 0)
        for key, (_, info) in plan.items()
    )


def _download(fs: Any, url: str, target: Path, plan: dict[str, tuple[str, dict]], stamps: dict) -> None:
    """Every object of ``plan`` into a temporary folder beside ``target``, checked, then moved in place."""
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent))
    try:
        root = staging.resolve()
        for key, (source, info) in plan.items():
            local = (staging / key).resolve()
            if root not in local.parents:  # (the keys were checked: a second line of defence)
                raise RemoteError(f"{url}: refused: key {key!r} does not map inside the download folder")
            local.parent.mkdir(parents=True, exist_ok=True)
            with _reading(url):
                fs.get_file(source, str(local))
            size = local.stat().st_size
            if info.get("size") is not None and size != int(info["size"]):
                raise RemoteError(f"{url}: {key} changed while it was downloaded ({size} of {info['size']} bytes)")
        (staging / _MANIFEST).write_text(json.dumps(stamps), encoding="utf-8")
        if target.exists():
            old = target.with_name(f".{target.name}.{os.getpid()}.old")
            os.replace(target, old)
            shutil.rmtree(old, ignore_errors=True)
        os.replace(staging, target)
    finally:
        if staging.exists():
            shutil.rmtree(staging, ignore_errors=True)


def glob(pattern: str) -> list[tuple[str, dict[str, Any]]]:
    """``[(URL, info)]`` of the files matching the URL ``pattern`` (``s3://b/data/part-*.jsonl``), sorted."""
    fs, path = filesystem(pattern)
    protocol = _scheme(pattern)
    with _reading(pattern):
        magic = any(c in path for c in "*?[")
        found = fs.glob(path, detail=True) if magic else {path: fs.info(path)} if fs.exists(path) else {}
    return [
        (f"{protocol}://{key.lstrip('/')}", info) for key, info in sorted(found.items()) if info.get("type") == "file"
    ]


@contextlib.contextmanager
def staged_folder(target: str | os.PathLike) -> Iterator[Path]:
    """A local folder to write ``target`` into: ``target`` itself when local, else a temporary folder that
    is uploaded to the URL (every file, its relative layout kept) when the block ends without an error."""
    if not is_remote(str(target)):
        yield Path(target)
        return
    with tempfile.TemporaryDirectory(prefix="unisent-upload-") as tmp:
        folder = Path(tmp) / (posixpath.basename(str(target).rstrip("/")) or "folder")
        folder.mkdir()
        yield folder
        fs, path = filesystem(str(target))
        with _reading(str(target)):
            for file in sorted(p for p in folder.rglob("*") if p.is_file()):
                fs.put_file(str(file), join(path, file.relative_to(folder).as_posix()))
