"""A model directory read as data: its paths stay inside it, only regular files are opened, the sizes its
configs declare are checked against the weights before anything is allocated, and a malformed file is
one line naming it.

- [`check_model_directory`][unisent.io.check_model_directory]: the bounded walk every loader runs where a directory
  enters it (``load_saved``, ``resolve_model_location``, the ONNX runner).
- ``inside``: a path read from a model's file names something inside the directory.
- ``check_fits``: a config built on the ``meta`` device against the weights' shapes, so that
  ``"vocab_size": 900000000`` is one line, not gigabytes allocated.

Why hand-written: transformers, Sentence Transformers, tokenizers and onnxruntime follow links, open
FIFOs, trust a config's sizes and report a malformed file as a traceback of their internals. The
safetensors header is read here (bounded) because ``safetensors.safe_open`` maps the whole file and
names neither the file nor the tensor when it fails."""

from __future__ import annotations

import json
import math
import os
import stat
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path, PurePosixPath
from typing import Any

__all__ = [
    "MODEL_JSON_BYTES",
    "MODEL_JSON_DEPTH",
    "ModelFileError",
    "check_fits",
    "check_model_directory",
    "check_nesting",
    "directory_weight_shapes",
    "file_kind",
    "read_front_matter",
    "inside",
    "load_state",
    "looks_like_path",
    "read_model_bytes",
    "read_model_json",
    "read_state",
    "safetensors_shapes",
    "state_error_line",
    "weight_shapes",
]

#: the largest JSON file of a model that is read (a large vocabulary's ``tokenizer.json`` is ~30 MB)
MODEL_JSON_BYTES = 128 * 2**20
#: the deepest nesting of a model's JSON (``tokenizer.json`` nests about 8 levels)
MODEL_JSON_DEPTH = 64
#: the safetensors format's own limit on its JSON header
SAFETENSORS_HEADER_BYTES = 100_000_000
#: how many entries and folder levels ``check_model_directory`` walks before it refuses the directory
MAX_ENTRIES, MAX_LEVELS = 100_000, 32
#: layers a config may declare beyond those its weights hold (ALBERT shares one layer's weights among 12)
MAX_LAYERS = 128
#: elements a config may describe beyond twice the weights present (buffers, a pooler a checkpoint lacks)
SLACK_ELEMENTS = 2**22
_DTYPE_BYTES = {"BOOL": 1, "U8": 1, "I8": 1, "F8_E5M2": 1, "F8_E4M3": 1, "F8_E8M0": 1, "I16": 2, "U16": 2}
_DTYPE_BYTES |= {"F16": 2, "BF16": 2, "I32": 4, "U32": 4, "F32": 4, "I64": 8, "U64": 8, "F64": 8, "C64": 8}


#: file endings that name a local file, never a hub id
PATH_SUFFIXES = (".ckpt", ".pt", ".pth", ".bin", ".safetensors", ".json", ".yaml", ".yml")


def looks_like_path(model: str) -> bool:
    """Whether ``model`` names a local path rather than a hub id (``org/name``): it starts with ``/``,
    ``.`` or ``~``, has more than one ``/`` or a backslash, ends with a file suffix, or its first
    component is an existing directory (``runs/encodr``). ``unisent evaluate`` checks its ``--model`` by it."""
    if model.startswith(("/", ".", "~")) or model.count("/") > 1 or "\\" in model:
        return True
    if model.lower().endswith(PATH_SUFFIXES):
        return True
    head = model.split("/", 1)[0]
    return "/" in model and os.path.isdir(head)


class ModelFileError(ValueError):
    """A model's file is malformed, of the wrong kind, leads outside its directory or declares sizes its
    weights lack (one line: file, field, what is wrong). Nothing of it was run."""


def file_kind(mode: int) -> str:
    """What a ``st_mode`` is, for a message: ``a FIFO (named pipe)``, ``a socket``, ``a device``, ..."""
    kinds = [(stat.S_ISREG, "a regular file"), (stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO (named pipe)")]
    kinds += [(stat.S_ISSOCK, "a socket"), (stat.S_ISCHR, "a device"), (stat.S_ISBLK, "a device")]
    return next((kind for test, kind in kinds if test(mode)), "not a regular file")


def _within(path: str, roots: Iterable[str]) -> bool:
    return any(path == root or path.startswith(root.rstrip(os.sep) + os.sep) for root in roots)


def _roots(directory: str | os.PathLike) -> list[str]:
    """Where a received folder's links may lead: itself, and a Hugging Face cache snapshot's ``blobs``."""
    real = os.path.realpath(directory)
    parent = os.path.dirname(real)
    cached = os.path.basename(os.path.dirname(parent)).startswith(("models--", "datasets--"))
    if os.path.basename(parent) == "snapshots" and cached:
        return [real, os.path.join(os.path.dirname(parent), "blobs")]
    return [real]


def inside(directory: str | os.PathLike, relative: Any, *, source: str | os.PathLike, field: str) -> Path:
    """``directory / relative`` for a path read from ``source`` at ``field``; a
    [`ModelFileError`][unisent.io.ModelFileError] when it is no relative path (a URL included), climbs out with ``..``,
    or is (or passes) a link leading out."""
    where = f"{source}: {field}"
    if not isinstance(relative, (str, os.PathLike)):
        raise ModelFileError(f"{where} must be a path inside the model's directory, got {relative!r:.80}")
    text = os.fspath(relative)
    pure = PurePosixPath(text.replace("\\", "/"))
    why = None
    if "\x00" in text:
        why = "holds a NUL character"
    elif pure.is_absolute() or text.startswith("~") or (len(text) > 1 and text[1] == ":"):
        why = "is an absolute path"
    elif pure.parts and ":" in pure.parts[0]:  # s3://..., hf://..., https://...: datasets would download it
        why = "is a URL"
    elif ".." in pure.parts:
        why = "climbs out of the directory (..)"
    path = Path(directory, *pure.parts)
    if why is None and not _within(os.path.realpath(path), _roots(directory)):
        why = "is a symbolic link (or passes one) that leads outside the directory"
    if why:
        raise ModelFileError(
            f"{where} {text!r:.200} {why}; a path in a received folder's files must name something inside it: "
            f"{str(directory)!r}"
        )
    return path


def _open_regular(path: Path, what: str) -> tuple[int, os.stat_result]:
    """``path`` opened without blocking, and its ``fstat``; anything but a regular file is refused unread."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    except OSError as err:
        raise ModelFileError(f"{path}: {what} cannot be opened ({err.strerror or err})") from None
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode):
        os.close(fd)
        raise ModelFileError(f"{path}: {what} is {file_kind(info.st_mode)}, not a regular file; refused unread")
    return fd, info


def read_model_bytes(path: str | os.PathLike, max_bytes: int, what: str = "a model's file") -> bytes:
    """The bytes of a model's file: a regular file of at most ``max_bytes``, else a
    [`ModelFileError`][unisent.io.ModelFileError]."""
    fd, info = _open_regular(Path(path), what)
    with os.fdopen(fd, "rb") as fh:
        if info.st_size > max_bytes:
            raise ModelFileError(
                f"{path}: {what} is {info.st_size} bytes, more than the {max_bytes} a model file may have"
            )
        data = fh.read(max_bytes + 1)
    if len(data) > max_bytes:
        raise ModelFileError(f"{path}: {what} is more than the {max_bytes} bytes a model file may have")
    return data


def read_front_matter(path: str | os.PathLike, max_bytes: int, what: str) -> Any:
    """The YAML header (between ``---`` lines) of a card (a model's or a dataset's ``README.md``), read as data:
    at most ``max_bytes``, regular file, at most 100,000 values nested ``MODEL_JSON_DEPTH`` deep; ``None``
    without one.

    Raises:
        ModelFileError: too large, not a regular file, or a header that is malformed or nested too deep.
    """
    import yaml

    text = read_model_bytes(path, max_bytes, what).decode("utf-8", "replace")
    if not text.startswith("---"):
        return None
    try:
        meta = yaml.safe_load(text.split("\n---", 1)[0].removeprefix("---"))
    except (yaml.YAMLError, RecursionError) as err:
        reason = str(err).splitlines()[0] if str(err) else type(err).__name__
        raise ModelFileError(f"{path}: its YAML header is malformed ({reason:.200})") from None
    check_nesting(meta, str(path), max_values=100_000)
    return meta


def check_nesting(value: Any, where: str, *, max_depth: int = MODEL_JSON_DEPTH, max_values: int | None = None) -> None:
    """Raise [`ModelFileError`][unisent.io.ModelFileError] for a parsed document nested deeper than ``max_depth`` or
    expanding to more than ``max_values`` values (each use of a shared value counts: a YAML alias bomb stops here)."""
    stack, seen = [(value, 1)], 0
    while stack:
        node, depth = stack.pop()
        if not isinstance(node, (dict, list)):
            continue
        if depth > max_depth:
            raise ModelFileError(f"{where}: nested deeper than {max_depth} levels; not a model's file")
        children = [v for pair in node.items() for v in pair] if isinstance(node, dict) else node
        seen += len(children)
        if max_values is not None and seen > max_values:
            raise ModelFileError(f"{where}: expands to more than {max_values:,} values (aliases repeating others?)")
        stack.extend((child, depth + 1) for child in children if isinstance(child, (dict, list)))


def _parse_json(data: bytes, where: str, max_depth: int) -> Any:
    try:
        value = json.loads(data)
    except RecursionError:
        raise ModelFileError(f"{where}: not valid JSON here: nested too deeply (thousands of [ or {{)") from None
    except ValueError as err:  # JSONDecodeError, UnicodeDecodeError
        raise ModelFileError(f"{where}: not valid JSON ({str(err).splitlines()[0]:.200})") from None
    if isinstance(value, (dict, list)):
        check_nesting(value, where, max_depth=max_depth)
    return value


def read_model_json(
    path: str | os.PathLike[str], expect: type | tuple[type, ...] | None = None, *, max_bytes: int = MODEL_JSON_BYTES
) -> Any:
    """A model's JSON file, from a regular file only, with a size and depth (``MODEL_JSON_DEPTH``) limit; ``expect``:
    the type the top level must have. A [`ModelFileError`][unisent.io.ModelFileError] for anything else."""
    path = Path(path)
    value = _parse_json(read_model_bytes(path, max_bytes, "a model's JSON file"), str(path), MODEL_JSON_DEPTH)
    if expect is not None and not isinstance(value, expect):
        want = " or ".join(t.__name__ for t in (expect if isinstance(expect, tuple) else (expect,)))
        kind = {"dict": "a JSON object", "list": "a JSON list"}.get(want, want)
        raise ModelFileError(f"{path}: expected {kind}, got {type(value).__name__} {json.dumps(value)[:60]}")
    return value


def safetensors_shapes(path: str | os.PathLike) -> dict[str, tuple[int, ...]]:
    """``{tensor name: shape}`` from a ``.safetensors`` header, each entry checked against the file (offsets
    inside the data, bytes = elements x dtype size); no tensor data is read."""
    path = Path(path)
    fd, info = _open_regular(path, "a safetensors file")
    with os.fdopen(fd, "rb") as fh:
        size = info.st_size
        if size < 8:
            raise ModelFileError(f"{path}: truncated safetensors file ({size} bytes; the header length alone is 8)")
        length = int.from_bytes(fh.read(8), "little")
        if length > min(SAFETENSORS_HEADER_BYTES, size - 8):
            raise ModelFileError(
                f"{path}: safetensors header length {length} is beyond the file ({size} bytes) or the format's "
                f"limit; truncated or not a safetensors file"
            )
        header = fh.read(length)
    entries = _parse_json(header, f"{path}: safetensors header", 4)
    if not isinstance(entries, dict):
        raise ModelFileError(f"{path}: safetensors header is not a JSON object")
    data = size - 8 - length
    shapes: dict[str, tuple[int, ...]] = {}
    for name, entry in entries.items():
        if name == "__metadata__":
            continue
        where = f"{path}: tensor {name!r:.80}"
        if not isinstance(entry, dict):
            raise ModelFileError(f"{where}: expected a JSON object with dtype, shape and data_offsets")
        dtype, shape, offsets = entry.get("dtype"), entry.get("shape"), entry.get("data_offsets")
        if not isinstance(shape, list) or not all(type(d) is int and d >= 0 for d in shape):
            raise ModelFileError(f"{where}: shape {shape!r:.80} is not a list of non-negative integers")
        if not (
            isinstance(offsets, list)
            and len(offsets) == 2
            and all(type(o) is int for o in offsets)
            and 0 <= offsets[0] <= offsets[1] <= data
        ):
            raise ModelFileError(f"{where}: data_offsets {offsets!r:.80} lie outside the file's {data} data bytes")
        if not isinstance(dtype, str):
            raise ModelFileError(f"{where}: dtype {dtype!r:.40} is not a string")
        itemsize = _DTYPE_BYTES.get(dtype)
        if itemsize is not None and offsets[1] - offsets[0] != math.prod(shape) * itemsize:
            raise ModelFileError(
                f"{where}: shape {shape} of {dtype} needs {math.prod(shape) * itemsize} bytes, its data_offsets "
                f"hold {offsets[1] - offsets[0]}"
            )
        shapes[name] = tuple(shape)
    return shapes


def read_state(path: str | os.PathLike, *, mmap: bool = False) -> Mapping[str, Any]:
    """A torch state dict file (``.pt``, ``.bin``) read as data (``weights_only``); ``mmap``: memory-mapped. A
    [`ModelFileError`][unisent.io.ModelFileError] when it is missing, not a regular file, malformed or not a state
    dict."""
    import torch

    path = Path(path)
    if not path.is_file():
        read_model_bytes(path, 0, "a weights file")  # missing, a directory, a FIFO (refused unread): one line
    try:
        try:
            state = torch.load(path, map_location="cpu", weights_only=True, mmap=mmap)
        except RuntimeError as err:
            if not mmap or "mmap" not in str(err):
                raise
            state = torch.load(path, map_location="cpu", weights_only=True)  # the legacy (non-zip) format
    except Exception as err:  # noqa: BLE001 - torch's unpickler raises many kinds: one line naming the file
        first = (str(err).strip().splitlines() or [type(err).__name__])[0]
        raise ModelFileError(f"{path}: not a readable weights file ({first:.200})") from None
    if not isinstance(state, Mapping):
        raise ModelFileError(f"{path}: expected a state dict (names -> tensors), got {type(state).__name__}")
    return state


def weight_shapes(path: str | os.PathLike) -> dict[str, tuple[int, ...]]:
    """``{name: shape}`` of a ``.safetensors`` or torch weights file; no tensor is read into memory."""
    path = Path(path)
    if path.suffix == ".safetensors":
        return safetensors_shapes(path)
    return {str(k): tuple(v.shape) for k, v in read_state(path, mmap=True).items() if hasattr(v, "shape")}


def directory_weight_shapes(directory: str | os.PathLike) -> tuple[Path, dict[str, tuple[int, ...]]] | None:
    """``(weights file, {name: shape})`` of a Hugging Face model directory (single, sharded or
    ``pytorch_model.bin`` weights); None when it has none."""
    directory = Path(directory)
    single, index = directory / "model.safetensors", directory / "model.safetensors.index.json"
    if single.exists():
        return single, safetensors_shapes(single)
    if index.exists():
        weight_map = read_model_json(index, dict).get("weight_map")
        if not isinstance(weight_map, dict) or not all(isinstance(f, str) for f in weight_map.values()):
            raise ModelFileError(f"{index}: weight_map must map tensor names to shard file names")
        shapes: dict[str, tuple[int, ...]] = {}
        for shard in sorted(set(weight_map.values())):
            shapes.update(safetensors_shapes(inside(directory, shard, source=index, field="weight_map")))
        return index, shapes
    if (directory / "pytorch_model.bin").exists():
        return directory / "pytorch_model.bin", weight_shapes(directory / "pytorch_model.bin")
    return None


def _size_fields(settings: Mapping[str, Any], dims: Iterable[int], absent: Iterable[int]) -> list[str]:
    """``name=value`` of the integer settings whose value is among ``dims`` and not among ``absent``."""
    dims, absent = set(dims), set(absent)
    return [f"{k}={v}" for k, v in settings.items() if type(v) is int and v > 1 and v in dims and v not in absent]


def check_fits(
    build: Callable[[], Any],
    weights: Mapping[str, tuple[int, ...]],
    *,
    config_file: str | os.PathLike,
    settings: Mapping[str, Any],
    weights_file: str | os.PathLike,
) -> None:
    """Check that what ``config_file`` describes fits the weights before the module is built for real.

    ``build()`` runs on the ``meta`` device: each tensor must have the shape of the weights' tensor of that
    name (or whose name ends with it: a checkpoint with a head), and all of it at most twice the weights'
    elements plus ``SLACK_ELEMENTS``; a layer count beyond the weights' and ``MAX_LAYERS`` is
    refused before building. A [`ModelFileError`][unisent.io.ModelFileError] names ``config_file``, the fields
    (``vocab_size=900000000``) and the weights; a ``build`` that fails on ``meta`` is left to the real one."""
    import torch

    layers = len({p for name in weights for p in name.split(".") if p.isdigit()}) or 1  # ``layer.0.`` ... ``layer.11.``
    for key, value in settings.items():  # before the build: building a million layers, even on meta, takes hours
        if "layer" in key and type(value) is int and value > max(layers, MAX_LAYERS):
            raise ModelFileError(f"{config_file}: {key}={value}, but {weights_file} holds {layers} layers")
    try:
        with torch.device("meta"):
            module = build()
        expected = {name: tuple(t.shape) for name, t in module.state_dict().items()}
        implied = sum(p.numel() for p in module.parameters()) + sum(b.numel() for b in module.buffers())
    except Exception:  # noqa: BLE001 - a module that cannot be built on meta is built for real, and reports there
        return
    by_suffix: dict[str, tuple[int, ...]] = {}
    for name, shape in weights.items():
        parts = name.split(".")
        for i in range(len(parts)):
            by_suffix.setdefault(".".join(parts[i:]), shape)
    for name, shape in expected.items():
        found = weights.get(name, by_suffix.get(name))
        if found is not None and tuple(found) != shape:
            said = " / ".join(_size_fields(settings, shape, found)) or "its sizes"
            raise ModelFileError(
                f"{config_file}: {said} {'do' if said == 'its sizes' else 'does'} not fit the weights: "
                f"{weights_file} holds {name} as {list(found)}, the config makes it {list(shape)}"
            )
    present = sum(math.prod(s) for s in weights.values())
    if implied > 2 * present + SLACK_ELEMENTS:
        held = {d for s in weights.values() for d in s}
        fields = _size_fields(settings, {d for s in expected.values() for d in s}, held)
        fields += [f"{k}={v}" for k, v in settings.items() if "layer" in k and type(v) is int and v > layers]
        raise ModelFileError(
            f"{config_file}: the model it describes ({' / '.join(fields) or 'its sizes'}) has {implied:,} "
            f"elements, but {weights_file} holds {present:,}; refused before allocating (an edited or "
            "mismatched config)"
        )


def load_state(
    module: Any, state: Mapping, strict: bool = True, assign: bool = False, *, source: str | os.PathLike | None
) -> Any:
    """``module.load_state_dict(state)`` (``module`` may be a ``super()``), a mismatch reported as one
    [`ModelFileError`][unisent.io.ModelFileError] line naming ``source`` and the first tensor (``source`` None:
    PyTorch's error)."""
    try:
        return module.load_state_dict(state, strict=strict, assign=assign)
    except RuntimeError as err:
        if source is None:
            raise
        raise ModelFileError(f"{source}: its tensors do not fit the model: {state_error_line(err)}") from None


def state_error_line(err: BaseException) -> str:
    """The first problem of PyTorch's ``Error(s) in loading state_dict`` report, on one line."""
    lines = [line.strip() for line in str(err).splitlines() if line.strip()]
    detail = lines[1] if len(lines) > 1 else (lines[0] if lines else type(err).__name__)
    return (detail.replace("torch.Size(", "(") + (f" (and {len(lines) - 2} more)" if len(lines) > 2 else ""))[:400]


#: files checked once per (path, size, mtime): every entry point checks the directory it reads
_CHECKED: dict[tuple[str, int, int], None] = {}


def _check_file(path: Path, info: os.stat_result) -> None:
    key = (str(path), info.st_size, info.st_mtime_ns)
    if key in _CHECKED:
        return
    if path.suffix == ".json":
        value = read_model_json(path)
        if isinstance(value, dict) and "auto_map" in value:  # transformers would import the folder's Python
            raise ModelFileError(
                f"{path}: auto_map names code in the model's folder ({json.dumps(value['auto_map'])[:120]}); "
                "unisent never runs a model's own code (trust_remote_code): refused"
            )
    elif path.suffix == ".safetensors":
        safetensors_shapes(path)
    if len(_CHECKED) > 4096:
        _CHECKED.clear()
    _CHECKED[key] = None


def check_model_directory(
    directory: str | os.PathLike[str], *, what: str = "model directory", read: bool = True
) -> Path:
    """Check a folder a user hands over (a model directory; ``what``: a run or data folder) before anything
    reads it; returns it as a ``Path``.

    Every entry (at most ``MAX_ENTRIES``, ``MAX_LEVELS`` folders deep; none skipped by name, ``.git``
    included) must be a regular file, a folder or a link to one inside the directory (or a cache snapshot's
    ``blobs``); with ``read``, every ``*.json`` is read with ``read_model_json``'s limits (one with an
    ``auto_map`` is refused) and every ``*.safetensors`` header checked. Nothing else is opened. Raises
    [`ModelFileError`][unisent.io.ModelFileError] naming the first entry refused."""
    directory = Path(directory).expanduser()
    roots = _roots(directory)
    stack, seen = [(directory, 0)], 0
    while stack:
        folder, level = stack.pop()
        try:
            entries = sorted(os.scandir(folder), key=lambda e: e.name)
        except OSError as err:
            raise ModelFileError(f"{folder}: the {what}'s folder cannot be listed ({err.strerror or err})") from None
        for entry in entries:
            seen += 1
            if seen > MAX_ENTRIES:
                raise ModelFileError(f"{directory}: more than {MAX_ENTRIES} entries; not a {what}")
            path = Path(entry.path)
            if entry.is_symlink():
                target = os.path.realpath(path)
                if not _within(target, roots):
                    raise ModelFileError(
                        f"{path}: a symbolic link to {target!r}, outside the {what}; refused (a {what}'s files must "
                        "lie inside it: copy the file in, if it belongs there)"
                    )
            try:
                info = path.stat()
            except OSError:
                raise ModelFileError(f"{path}: a broken symbolic link or a link loop; refused") from None
            if stat.S_ISDIR(info.st_mode):
                if entry.is_symlink():
                    continue  # a link's target inside the directory is walked as itself
                if level + 1 > MAX_LEVELS:
                    raise ModelFileError(f"{path}: folders nested more than {MAX_LEVELS} deep; not a {what}")
                stack.append((path, level + 1))
            elif stat.S_ISREG(info.st_mode):
                if read:
                    _check_file(path, info)
            else:
                raise ModelFileError(
                    f"{path}: {file_kind(info.st_mode)}, not a regular file; a {what} holds regular files only "
                    "(reading it could wait forever): refused unread"
                )
    return directory
