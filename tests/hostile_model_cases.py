"""The hostile-model corpus (issue 46): each case is a benign tiny model (``hostile_models.Bases``) with one
file made hostile: a name that would be imported or called (the payload writes the marker ``PWNED``: a
shell ``touch`` for ``subprocess.Popen``/``os.system``, the import of ``evil_mod.py`` in the current
directory), a path or link leaving the model's folder (to ``secret.txt``, a 0600 file beside it), a FIFO or
device, a size that would allocate gigabytes, or a malformed file. ``hostile_models.run_case`` feeds a
case to an entry point and judges the outcome; tests/test_hostile_models.py runs every case through every
entry point that reads its kind, benchmarks/hostile_models.py prints the table of docs/operations.md.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import shutil
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hostile_models import SAMPLES, STS, Case, Context, cli, fork_run, recipe, write

DEEP = 100_000  # nesting of the deeply nested records
ST = "sentence_transformers.models."
DENSE = {"in_features": 32, "out_features": 32, "bias": True}
#: a dataset card: datasets reads the files of its configs' data_files
CARD = "---\nconfigs:\n- config_name: default\n  data_files:\n  - split: train\n    path: {files}\n---\n# sentences\n"
#: a run starts from the backbone and tokenizer: the recorded pooler and model type are not read (the cases
#: of those fields that name evil_mod keep fit-start, to show that nothing is imported there either)
SETTINGS_UNREAD = ("fit-start",)
#: the entry points that read unisent_encoder.json's modules and pooler
SETTINGS_READERS = ("load", "encode", "evaluate", "export", "export-run", "fit-teacher")


# --------------------------------------------------------------------------------------------- bases
@dataclass
class Bases:
    """The benign models every case starts from (built once): see :func:`build_bases`."""

    root: Path
    tiny: Path  # a Hugging Face BERT directory (conftest.build_tiny_bert)
    encoder: Path  # a saved unisent encoder (mean pooling)
    st: Path  # a Sentence Transformers directory (modules.json; no unisent files)
    st_encoder: Path  # a saved unisent encoder that records Sentence Transformers modules
    retrofit: Path  # a retrofitted model (retrofit.json, text/, amr/)
    onnx: Path  # unisent export --format onnx
    run: Path  # runs/q/version_0 of unisent fit: config.yaml, checkpoints/last.ckpt, encoder/
    data: Path  # an evaluation data directory (20 STS-B pairs)
    sentences: Path
    card: Path = Path()  # a training data folder: README.md (a dataset card naming train.txt) and train.txt
    saved: Path = Path()  # a training data folder written by datasets' save_to_disk (the 16 sentences)


def build_bases(root: Path, tiny: Path) -> Bases:
    """Every kind of model, tiny (about 15 s on 2 cores): built in this process, the run in a fork."""
    import datasets

    import unisent
    from unisent.encoders import Encoder, EncoderConfig
    from unisent.export import export_model
    from unisent.models import RetrofittedEncoder

    root.mkdir(parents=True, exist_ok=True)
    encoder = Encoder(EncoderConfig(model=str(tiny), pooler="mean")).save_pretrained(root / "encoder")
    st = root / "st"
    export_model(str(encoder), st, "sentence-transformers", verify=False)
    for name in ("unisent_encoder.json", "unisent_model.json", "README.md"):
        (st / name).unlink(missing_ok=True)
    st_encoder = unisent.load(str(st)).save_pretrained(root / "st-encoder")
    retrofit = root / "retrofit"
    RetrofittedEncoder(unisent.load(str(encoder)), unisent.load(str(encoder)), "concat").save_pretrained(retrofit)
    onnx = root / "onnx"
    export_model(str(encoder), onnx, "onnx", verify=False)
    data = root / "data" / "sts" / "stsbenchmark"
    for name in ("sts-dev.csv", "sts-test.csv"):
        write(data / name, "".join((STS / name).read_text(encoding="utf-8").splitlines(keepends=True)[:20]))
    sentences = write(
        root / "sentences.txt",
        "".join((SAMPLES / "sentences.txt").read_text(encoding="utf-8").splitlines(keepends=True)[:16]),
    )
    bases = Bases(
        root, tiny, encoder, st, st_encoder, retrofit, onnx, root / "runs/q/version_0", root / "data", sentences
    )
    bases.card = root / "card"
    write(bases.card / "train.txt", sentences.read_text(encoding="utf-8"))
    write(bases.card / "README.md", CARD.format(files="train.txt"))
    bases.saved = root / "saved"
    datasets.Dataset.from_dict({"text": sentences.read_text(encoding="utf-8").splitlines()}).save_to_disk(bases.saved)
    fit = recipe(root / "fit.yaml", str(encoder), data_dir=bases.data, sentences=sentences)
    code, _, err, *_ = fork_run(root, lambda: cli(["fit", "-c", str(fit)]), timeout=300)
    if code != 0 or not (bases.run / "checkpoints" / "last.ckpt").is_file():
        raise RuntimeError(f"the base run failed ({code}): {err[-3000:]}")
    import unisent.commands.train  # noqa: F401 - what the commands import, imported once before the forks

    unisent.load(str(bases.onnx), backend="onnx").encode(["warm"])
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        cli(["fit", "-c", str(fit), "--print_config"])
    return bases


# ------------------------------------------------------------------------------------------- helpers
def _set(path: Path, dotted: str, value: Any) -> None:
    """``path``'s JSON with ``dotted`` (``a.b.0.c``) set to ``value`` (an index one past the end appends)."""
    data = json.loads(path.read_text(encoding="utf-8"))
    *heads, last = dotted.split(".")
    node = data
    for key in heads:
        node = node[int(key)] if isinstance(node, list) else node[key]
    if isinstance(node, list) and int(last) == len(node):
        node.append(value)
    else:
        node[int(last) if isinstance(node, list) else last] = value
    path.write_text(json.dumps(data, indent=1), encoding="utf-8")


def _replace(path: Path, content: bytes | str | None = None) -> Path:
    """Remove ``path`` (a file, link or folder) and write ``content`` there (if given)."""
    if path.is_symlink() or path.is_file():
        path.unlink()
    elif path.is_dir():
        shutil.rmtree(path)
    if content is not None:
        path.write_bytes(content.encode() if isinstance(content, str) else content)
    return path


def fifo(path: Path) -> None:
    os.mkfifo(_replace(path))


def link(path: Path, target: str | Path) -> None:
    _replace(path).symlink_to(target)


def _deep(levels: int = DEEP) -> str:
    return '{"pooler": ' + "[" * levels + "]" * levels + "}"


def popen_spec(ctx: Context) -> dict[str, Any]:
    """The payload of a ``{class_path, init_args}`` spec: a shell command creating the marker."""
    return {"class_path": "subprocess.Popen", "init_args": {"args": ctx.touch, "shell": True}}


def evil_spec() -> dict[str, Any]:
    return {"class_path": "evil_mod.Evil", "init_args": {}}


def _st_module(ctx: Context, entry: dict[str, Any]) -> None:
    """``unisent_encoder.json``'s recorded Sentence Transformers modules: ``entry`` alone."""
    _set(ctx.model / "unisent_encoder.json", "sentence_transformers.modules", [entry])


def _safetensors(ctx: Context, header: bytes, length: int | None = None) -> None:
    size = len(header) if length is None else length
    _replace(ctx.model / "model.safetensors", struct.pack("<Q", size) + header)


def _truncate(path: Path) -> None:
    data = path.read_bytes()
    _replace(path, data[: len(data) // 2])


def _outside(ctx: Context, source: Path, name: str) -> Path:
    """A benign copy of ``source`` beside the model (outside its folder)."""
    target = ctx.directory / name
    shutil.copytree(source, target) if source.is_dir() else shutil.copy2(source, target)
    return target


def _dense(ctx: Context, activation: str) -> None:
    """A ``Dense`` module (with its weights) appended to the Sentence Transformers directory's modules."""
    from safetensors.torch import save_file
    from torch import zeros

    folder = ctx.model / "2_Dense"
    folder.mkdir()
    save_file({"linear.weight": zeros(32, 32), "linear.bias": zeros(32)}, str(folder / "model.safetensors"))
    (folder / "config.json").write_text(json.dumps({**DENSE, "activation_function": activation}), encoding="utf-8")
    _set(ctx.model / "modules.json", "2", {"idx": 2, "name": "2", "path": "2_Dense", "type": ST + "Dense"})


# --------------------------------------------------------------------------------------------- cases
ENCODER = "unisent_encoder.json"
RECORD = "unisent_model.json"
CASES: list[Case] = [  # and those of hostile_run_cases.py
    # saved unisent encoders (unisent_encoder.json, unisent_model.json and the Hugging Face files)
    Case(
        "issue-1-encoder-st-module-popen",
        "st-encoder",
        f"{ENCODER}: a recorded module of type subprocess.Popen, config {{args: touch PWNED, shell: true}}",
        lambda c: _st_module(c, {"type": "subprocess.Popen", "path": "", "config": popen_spec(c)["init_args"]}),
        (ENCODER, "type"),
        entries=SETTINGS_READERS,
    ),
    Case(
        "encoder-st-module-evil-mod",
        "st-encoder",
        f"{ENCODER}: a recorded module of type evil_mod.Evil (evil_mod.py in the current directory)",
        lambda c: _st_module(c, {"type": "evil_mod.Evil", "path": "", "config": {}}),
        (ENCODER, "type"),
        entries=SETTINGS_READERS,
    ),
    Case(
        "encoder-st-activation-not-an-activation",
        "st-encoder",
        f"{ENCODER}: a Dense module whose activation_function is torch.multiprocessing.spawn",
        lambda c: _st_module(
            c,
            {
                "type": ST + "Dense",
                "path": "",
                "config": {**DENSE, "activation_function": "torch.multiprocessing.spawn"},
            },
        ),
        (ENCODER, "activation_function"),
        entries=SETTINGS_READERS,
    ),
    Case(
        "encoder-pooler-os-system",
        "encoder",
        f"{ENCODER}: pooler os.system",
        lambda c: _set(c.model / ENCODER, "pooler", "os.system"),
        (ENCODER, "pooler"),
        entries=SETTINGS_READERS,
    ),
    Case(
        "encoder-pooler-evil-mod",
        "encoder",
        f"{ENCODER}: pooler evil_mod.Evil (evil_mod.py in the current directory)",
        lambda c: _set(c.model / ENCODER, "pooler", "evil_mod.Evil"),
        (ENCODER, "pooler"),
        may_pass=SETTINGS_UNREAD,
    ),
    Case(
        "encoder-record-class-path-evil-mod",
        "encoder",
        f"{RECORD}: type evil, class_path evil_mod.Evil (evil_mod.py in the current directory: not imported)",
        lambda c: _replace(c.model / RECORD, '{"type": "evil", "class_path": "evil_mod.Evil"}'),
        (RECORD, "class_path"),
        may_pass=SETTINGS_UNREAD,
    ),
    Case(
        "encoder-settings-deep-json",
        "encoder",
        f"{ENCODER} nested {DEEP:,} levels deep",
        lambda c: _replace(c.model / ENCODER, _deep()),
        (ENCODER,),
        may_pass=SETTINGS_UNREAD,
    ),
    Case(
        "encoder-config-vocab-size-1e9",
        "encoder",
        'config.json: "vocab_size": 1000000000, 23 bytes (the weights have 600 rows; 128 GB as float32)',
        lambda c: _set(c.model / "config.json", "vocab_size", 10**9),
        ("config.json", "vocab_size"),
    ),
    Case(
        "encoder-config-positions-5gb",
        "encoder",
        'config.json: "max_position_embeddings": 40000000 (5 GB of float32 at hidden size 32)',
        lambda c: _set(c.model / "config.json", "max_position_embeddings", 40_000_000),
        ("config.json", "max_position_embeddings"),
    ),
    Case(
        "encoder-fifo-chat-template",
        "encoder",
        "chat_template.jinja is a FIFO (named pipe)",
        lambda c: fifo(c.model / "chat_template.jinja"),
        ("chat_template.jinja",),
    ),
    Case(
        "encoder-fifo-weights",
        "encoder",
        "model.safetensors is a FIFO",
        lambda c: fifo(c.model / "model.safetensors"),
        ("model.safetensors",),
    ),
    Case(
        "encoder-safetensors-bad-header",
        "encoder",
        "model.safetensors: a header that is not JSON",
        lambda c: _safetensors(c, b'{"embeddings": [not json'),
        ("model.safetensors",),
    ),
    Case(
        "encoder-safetensors-header-length-2e40",
        "encoder",
        "model.safetensors: a header length of 2**40 bytes in a 28-byte file",
        lambda c: _safetensors(c, b'{"__metadata__": {}}', 2**40),
        ("model.safetensors",),
    ),
    Case(
        "encoder-safetensors-truncated",
        "encoder",
        "model.safetensors cut in half",
        lambda c: _truncate(c.model / "model.safetensors"),
        ("model.safetensors",),
    ),
    Case(
        "encoder-tokenizer-json-malformed",
        "encoder",
        "tokenizer.json: truncated JSON",
        lambda c: _replace(c.model / "tokenizer.json", '{"version": "1.0", "model": {"type": "WordPiece", '),
        ("tokenizer.json",),
    ),
    Case(
        "encoder-tokenizer-json-dev-zero",
        "encoder",
        "tokenizer.json is a link to /dev/zero (a device: endless)",
        lambda c: link(c.model / "tokenizer.json", "/dev/zero"),
        ("tokenizer.json",),
    ),
    Case(
        "issue-3-encoder-chat-template-symlink-secret",
        "encoder",
        "chat_template.jinja is a link to ../secret.txt (a 0600 file outside the model's folder)",
        lambda c: link(c.model / "chat_template.jinja", c.secret),
        ("chat_template.jinja",),
    ),
    # Sentence Transformers directories (modules.json and the modules' folders)
    Case(
        "st-modules-path-dotdot",
        "st",
        "modules.json: the Pooling module's path is ../..",
        lambda c: _set(c.model / "modules.json", "1.path", "../.."),
        ("modules.json", "path"),
    ),
    Case(
        "st-modules-path-absolute",
        "st",
        "modules.json: the Pooling module's path is the absolute folder of a copy outside the model",
        lambda c: _set(c.model / "modules.json", "1.path", str(_outside(c, c.model / "1_Pooling", "pooling"))),
        ("modules.json", "path"),
    ),
    Case(
        "st-modules-malformed",
        "st",
        "modules.json: truncated JSON",
        lambda c: _replace(c.model / "modules.json", '[{"idx": 0, "name": "0", "path": "", "type": '),
        ("modules.json",),
    ),
    Case(
        "st-dense-activation-evil-mod",
        "st",
        "2_Dense/config.json: activation_function evil_mod.Evil (evil_mod.py in the current directory)",
        lambda c: _dense(c, "evil_mod.Evil"),
        ("2_Dense", "activation_function"),
    ),
    Case(
        "st-pooling-config-malformed",
        "st",
        "1_Pooling/config.json: not JSON",
        lambda c: _replace(c.model / "1_Pooling" / "config.json", '{"word_embedding_dimension": '),
        ("1_Pooling",),
    ),
    Case(
        "st-pooling-config-symlink-secret",
        "st",
        "1_Pooling/config.json is a link to ../../secret.txt",
        lambda c: link(c.model / "1_Pooling" / "config.json", c.secret),
        ("1_Pooling",),
    ),
]
RETRO = "retrofit.json"
ONNX = "unisent_onnx.json"
CKPT = "last.ckpt"
CASES += [
    # retrofitted models (retrofit.json, text/, amr/)
    Case(
        "retrofit-text-encoder-path-dotdot",
        "retrofit",
        f"{RETRO}: text_encoder.path ../outside (a benign encoder outside the model's folder)",
        lambda c: _set(c.model / RETRO, "text_encoder.path", f"../{_outside(c, c.model / 'text', 'outside').name}"),
        (RETRO, "text_encoder"),
    ),
    Case(
        "retrofit-amr-encoder-path-absolute",
        "retrofit",
        f"{RETRO}: amr_encoder.path, the absolute folder of an encoder outside the model's folder",
        lambda c: _set(c.model / RETRO, "amr_encoder.path", str(_outside(c, c.model / "amr", "outside"))),
        (RETRO, "amr_encoder"),
    ),
    Case(
        "retrofit-parser-popen",
        "retrofit",
        f"{RETRO}: parser {{class_path: subprocess.Popen, init_args: {{args: touch PWNED, shell: true}}}}",
        lambda c: _set(c.model / RETRO, "parser", popen_spec(c)),
        (RETRO, "class_path"),
    ),
    Case(
        "retrofit-parser-evil-mod",
        "retrofit",
        f"{RETRO}: parser class_path evil_mod.Evil (evil_mod.py in the current directory)",
        lambda c: _set(c.model / RETRO, "parser", evil_spec()),
        (RETRO, "class_path"),
    ),
    Case(
        "retrofit-parser-file-secret",
        "retrofit",
        f"{RETRO}: the pre-parsed parser's source is ../secret.txt (outside the model's folder)",
        lambda c: _set(
            c.model / RETRO,
            "parser",
            {"class_path": "unisent.amr.parsing.PreParsedAMR", "init_args": {"sources": ["../secret.txt"]}},
        ),
        (RETRO, "sources"),
    ),
    # ONNX exports (onnx/model.onnx, onnx/unisent_onnx.json)
    Case(
        "onnx-model-broken",
        "onnx",
        "onnx/model.onnx: not an ONNX file",
        lambda c: _replace(c.model / "onnx" / "model.onnx", b"\x08\x07not an onnx protobuf"),
        ("model.onnx",),
    ),
    Case(
        "onnx-record-malformed",
        "onnx",
        f"onnx/{ONNX}: truncated JSON",
        lambda c: _replace(c.model / "onnx" / ONNX, '{"format_version": 1, "outputs": '),
        (ONNX,),
    ),
    Case(
        "onnx-record-fields-missing",
        "onnx",
        f"onnx/{ONNX}: {{}} (no outputs, no max_length)",
        lambda c: _replace(c.model / "onnx" / ONNX, "{}"),
        (ONNX,),
    ),
    Case(
        "onnx-record-file-outside",
        "onnx",
        f"onnx/{ONNX}: files.fp32 ../../outside.onnx (a copy outside the model's folder)",
        lambda c: (
            _outside(c, c.model / "onnx" / "model.onnx", "outside.onnx"),
            _set(c.model / "onnx" / ONNX, "files.fp32", "../../outside.onnx"),
        ),
        (ONNX, "fp32"),
    ),
]
