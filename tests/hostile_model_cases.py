"""The hostile-model corpus (issue 46): each case is a benign tiny model (``hostile_models.Bases``) with one
file made hostile: a name that would be imported or called (the payload writes the marker ``PWNED``: a
shell ``touch`` for ``subprocess.Popen``/``os.system``, the import of ``evil_mod.py`` in the current
directory), a path or link leaving the model's folder (to ``secret.txt``, a 0600 file beside it), a FIFO or
device, a size that would allocate gigabytes, or a malformed file. ``hostile_models.run_case`` feeds a
case to an entry point and judges the outcome; tests/test_hostile_models.py runs every case through every
entry point that reads its kind, benchmarks/hostile_models.py prints the table of docs/operations.md.
"""

from __future__ import annotations

import json
import os
import shutil
import struct
from pathlib import Path
from typing import Any

from hostile_models import Case, Context

DEEP = 100_000  # nesting of the deeply nested records
POOLER_ENTRY = {"type": "sentence_transformers.models.Pooling", "path": "1_Pooling"}


# ------------------------------------------------------------------------------------------- helpers
def _edit_json(path: Path, edit) -> None:
    data = json.loads(path.read_text(encoding="utf-8"))
    data = edit(data) or data
    path.write_text(json.dumps(data, indent=1), encoding="utf-8")


def _set(path: Path, dotted: str, value: Any) -> None:
    """``path``'s JSON with ``dotted`` (``a.b.0.c``) set to ``value``."""

    def edit(data):
        *heads, last = dotted.split(".")
        node = data
        for key in heads:
            node = node[int(key)] if isinstance(node, list) else node[key]
        if isinstance(node, list) and int(last) == len(node):
            node.append(value)
        else:
            node[int(last) if isinstance(node, list) else last] = value

    _edit_json(path, edit)


def _replace(path: Path, content: bytes | str | None = None) -> Path:
    """Remove ``path`` (a file, link or folder) and write ``content`` there (if given)."""
    if path.is_symlink() or path.is_file():
        path.unlink()
    elif path.is_dir():
        shutil.rmtree(path)
    if content is not None:
        path.write_bytes(content.encode() if isinstance(content, str) else content)
    return path


def _fifo(path: Path) -> None:
    os.mkfifo(_replace(path))


def _link(path: Path, target: str | Path) -> None:
    _replace(path).symlink_to(target)


def _deep(levels: int = DEEP) -> str:
    return '{"pooler": ' + "[" * levels + "]" * levels + "}"


def _popen(ctx: Context) -> dict[str, Any]:
    """The payload of a ``{class_path, init_args}`` spec: a shell command creating the marker."""
    return {"class_path": "subprocess.Popen", "init_args": {"args": ctx.touch, "shell": True}}


def _st_modules(ctx: Context, entry: dict[str, Any]) -> None:
    """``unisent_encoder.json``'s recorded Sentence Transformers modules: ``entry`` alone."""
    _set(ctx.model / "unisent_encoder.json", "sentence_transformers.modules", [entry])


def _safetensors_header(ctx: Context, header: bytes, length: int | None = None) -> None:
    size = len(header) if length is None else length
    _replace(ctx.model / "model.safetensors", struct.pack("<Q", size) + header)


def _truncate(path: Path) -> None:
    data = path.read_bytes()
    _replace(path, data[: len(data) // 2])


def _outside_copy(ctx: Context, source: Path, name: str) -> Path:
    """A benign copy of ``source`` beside the model (outside its folder)."""
    target = ctx.directory / name
    shutil.copytree(source, target) if source.is_dir() else shutil.copy2(source, target)
    return target


def _yaml_objectives(ctx: Context, objectives: list) -> None:
    path = ctx.model.parent / "config.yaml"
    import yaml

    config = yaml.safe_load(path.read_text(encoding="utf-8"))
    config["model"]["objectives"] = objectives
    path.write_text(yaml.safe_dump(config, sort_keys=False), encoding="utf-8")


def _alias_bomb(ctx: Context) -> None:
    """The run's config.yaml with a billion-laughs alias bomb (9**9 values) as a training file's columns."""
    path = ctx.model.parent / "config.yaml"
    lines = ['a0: &a0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    lines += [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 9)}]" for i in range(1, 9)]
    text = path.read_text(encoding="utf-8").replace("data:\n", "data:\n  bomb: *a8\n", 1)
    path.write_text("\n".join(lines) + "\n" + text, encoding="utf-8")


def _checkpoint(ctx: Context, edit) -> None:
    """The run's checkpoint rewritten (plain data, ``torch.save``) after ``edit(checkpoint)``."""
    import torch

    checkpoint = torch.load(ctx.model, map_location="cpu", weights_only=True)
    edit(checkpoint)
    torch.save(checkpoint, ctx.model)


def _objectives(checkpoint: dict, objectives: list) -> None:
    checkpoint["unisent"]["objectives"] = objectives


def _pooler(checkpoint: dict, name: str) -> None:
    for record in (checkpoint["unisent"]["encoder"], checkpoint["hyper_parameters"]["encoder"]):
        record["pooler"] = name


def _misfit(checkpoint: dict) -> None:
    import torch

    key = next(k for k in checkpoint["state_dict"] if k.endswith("word_embeddings.weight"))
    checkpoint["state_dict"][key] = torch.zeros(7, 5)


def _sts(ctx: Context) -> Path:
    return ctx.model / "sts" / "stsbenchmark" / "sts-dev.csv"


ST_TYPE = "sentence_transformers.models."
DENSE = {"in_features": 32, "out_features": 32, "bias": True}
ENCODER_SKIPS_SETTINGS = ("fit-start",)  # a run starts from the backbone and tokenizer, not unisent_encoder.json
RUN_ENCODER_ONLY = ("load", "encode", "evaluate")  # they read <run>/encoder, never the run's config.yaml

CASES: list[Case] = [
    # ------------------------------------------------------------------ saved unisent encoders
    Case(
        "issue-1-encoder-st-module-popen",
        "st-encoder",
        "unisent_encoder.json: a recorded module of type subprocess.Popen, config {args: touch PWNED, shell: true}",
        lambda c: _st_modules(c, {"type": "subprocess.Popen", "path": "", "config": _popen(c)["init_args"]}),
        ("unisent_encoder.json", "type"),
        may_pass=ENCODER_SKIPS_SETTINGS,
    ),
    Case(
        "encoder-st-module-evil-mod",
        "st-encoder",
        "unisent_encoder.json: a recorded module of type evil_mod.Evil (evil_mod.py in the current directory)",
        lambda c: _st_modules(c, {"type": "evil_mod.Evil", "path": "", "config": {}}),
        ("unisent_encoder.json", "type"),
        may_pass=ENCODER_SKIPS_SETTINGS,
    ),
    Case(
        "encoder-st-activation-not-an-activation",
        "st-encoder",
        "unisent_encoder.json: a Dense module whose activation_function is torch.multiprocessing.spawn",
        lambda c: _st_modules(
            c,
            {
                "type": ST_TYPE + "Dense",
                "path": "2_Dense",
                "config": {**DENSE, "activation_function": "torch.multiprocessing.spawn"},
            },
        ),
        ("unisent_encoder.json", "activation_function"),
        may_pass=ENCODER_SKIPS_SETTINGS,
    ),
    Case(
        "encoder-pooler-os-system",
        "encoder",
        "unisent_encoder.json: pooler os.system",
        lambda c: _set(c.model / "unisent_encoder.json", "pooler", "os.system"),
        ("unisent_encoder.json", "pooler"),
        may_pass=ENCODER_SKIPS_SETTINGS,
    ),
    Case(
        "encoder-pooler-evil-mod",
        "encoder",
        "unisent_encoder.json: pooler evil_mod.Evil (evil_mod.py in the current directory)",
        lambda c: _set(c.model / "unisent_encoder.json", "pooler", "evil_mod.Evil"),
        ("unisent_encoder.json", "pooler"),
        may_pass=ENCODER_SKIPS_SETTINGS,
    ),
    Case(
        "encoder-record-class-path-evil-mod",
        "encoder",
        "unisent_model.json: type evil, class_path evil_mod.Evil (evil_mod.py in the current directory)",
        lambda c: _replace(c.model / "unisent_model.json", '{"type": "evil", "class_path": "evil_mod.Evil"}'),
        ("unisent_model.json", "class_path"),
        may_pass=ENCODER_SKIPS_SETTINGS,
    ),
    Case(
        "encoder-record-class-path-os-system",
        "encoder",
        "unisent_model.json: type shell, class_path os.system",
        lambda c: _replace(c.model / "unisent_model.json", '{"type": "shell", "class_path": "os.system"}'),
        ("unisent_model.json", "class_path"),
        may_pass=ENCODER_SKIPS_SETTINGS,
    ),
    Case(
        "encoder-settings-deep-json",
        "encoder",
        f"unisent_encoder.json nested {DEEP:,} levels deep",
        lambda c: _replace(c.model / "unisent_encoder.json", _deep()),
        ("unisent_encoder.json",),
        may_pass=ENCODER_SKIPS_SETTINGS,
    ),
    Case(
        "encoder-config-vocab-size-1e9",
        "encoder",
        'config.json: "vocab_size": 1000000000 (the weights have 600 rows)',
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
        lambda c: _fifo(c.model / "chat_template.jinja"),
        ("chat_template.jinja",),
    ),
    Case(
        "encoder-fifo-weights",
        "encoder",
        "model.safetensors is a FIFO (named pipe)",
        lambda c: _fifo(c.model / "model.safetensors"),
        ("model.safetensors",),
    ),
    Case(
        "encoder-safetensors-bad-header",
        "encoder",
        "model.safetensors: a header that is not JSON",
        lambda c: _safetensors_header(c, b'{"embeddings": [not json'),
        ("model.safetensors",),
    ),
    Case(
        "encoder-safetensors-header-length-2e40",
        "encoder",
        "model.safetensors: a header length of 2**40 bytes in a 30-byte file",
        lambda c: _safetensors_header(c, b'{"__metadata__": {}}', 2**40),
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
        lambda c: _link(c.model / "tokenizer.json", "/dev/zero"),
        ("tokenizer.json",),
    ),
    Case(
        "issue-3-encoder-chat-template-symlink-secret",
        "encoder",
        "chat_template.jinja is a link to ../secret.txt (a 0600 file outside the model's folder)",
        lambda c: _link(c.model / "chat_template.jinja", c.secret),
        ("chat_template.jinja",),
    ),
    # ------------------------------------------------------------------ Sentence Transformers directories
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
        lambda c: _set(c.model / "modules.json", "1.path", str(_outside_copy(c, c.model / "1_Pooling", "pooling"))),
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
        "st-modules-type-popen",
        "st",
        "modules.json: a module of type subprocess.Popen",
        lambda c: _set(c.model / "modules.json", "1.type", "subprocess.Popen"),
        ("modules.json", "type"),
    ),
    Case(
        "st-dense-activation-evil-mod",
        "st",
        "2_Dense/config.json: activation_function evil_mod.Evil (evil_mod.py in the current directory)",
        lambda c: (
            _set(c.model / "modules.json", "2", {"idx": 2, "name": "2", "path": "2_Dense", "type": ST_TYPE + "Dense"}),
            (c.model / "2_Dense").mkdir(),
            _replace(
                c.model / "2_Dense" / "config.json", json.dumps({**DENSE, "activation_function": "evil_mod.Evil"})
            ),
        ),
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
        lambda c: _link(c.model / "1_Pooling" / "config.json", c.secret),
        ("1_Pooling",),
    ),
    Case(
        "st-sentence-bert-config-deep-json",
        "st",
        f"sentence_bert_config.json nested {DEEP:,} levels deep",
        lambda c: _replace(c.model / "sentence_bert_config.json", _deep()),
        ("sentence_bert_config.json",),
    ),
]
CASES += [
    # ------------------------------------------------------------------ retrofitted models
    Case(
        "retrofit-text-encoder-path-dotdot",
        "retrofit",
        "retrofit.json: text_encoder.path ../outside (a benign encoder outside the model's folder)",
        lambda c: _set(
            c.model / "retrofit.json", "text_encoder.path", f"../{_outside_copy(c, c.model / 'text', 'outside').name}"
        ),
        ("retrofit.json", "text_encoder"),
    ),
    Case(
        "retrofit-amr-encoder-path-absolute",
        "retrofit",
        "retrofit.json: amr_encoder.path, the absolute folder of an encoder outside the model's folder",
        lambda c: _set(
            c.model / "retrofit.json", "amr_encoder.path", str(_outside_copy(c, c.model / "amr", "outside"))
        ),
        ("retrofit.json", "amr_encoder"),
    ),
    Case(
        "retrofit-parser-popen",
        "retrofit",
        "retrofit.json: parser {class_path: subprocess.Popen, init_args: {args: touch PWNED, shell: true}}",
        lambda c: _set(c.model / "retrofit.json", "parser", _popen(c)),
        ("retrofit.json", "class_path"),
    ),
    Case(
        "retrofit-parser-evil-mod",
        "retrofit",
        "retrofit.json: parser class_path evil_mod.Evil (evil_mod.py in the current directory)",
        lambda c: _set(c.model / "retrofit.json", "parser", {"class_path": "evil_mod.Evil", "init_args": {}}),
        ("retrofit.json", "class_path"),
    ),
    Case(
        "retrofit-parser-file-secret",
        "retrofit",
        "retrofit.json: the pre-parsed parser's source is ../secret.txt (outside the model's folder)",
        lambda c: _set(
            c.model / "retrofit.json",
            "parser",
            {"class_path": "unisent.amr.parsing.PreParsedAMR", "init_args": {"sources": ["../secret.txt"]}},
        ),
        ("retrofit.json",),
    ),
    # ------------------------------------------------------------------ ONNX exports
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
        "onnx/unisent_onnx.json: truncated JSON",
        lambda c: _replace(c.model / "onnx" / "unisent_onnx.json", '{"format_version": 1, "outputs": '),
        ("unisent_onnx.json",),
    ),
    Case(
        "onnx-record-fields-missing",
        "onnx",
        "onnx/unisent_onnx.json: {} (no outputs, no max_length)",
        lambda c: _replace(c.model / "onnx" / "unisent_onnx.json", "{}"),
        ("unisent_onnx.json",),
    ),
    Case(
        "onnx-record-file-outside",
        "onnx",
        "onnx/unisent_onnx.json: files.fp32 ../../outside.onnx (a copy outside the model's folder)",
        lambda c: (
            _outside_copy(c, c.model / "onnx" / "model.onnx", "outside.onnx"),
            _set(c.model / "onnx" / "unisent_onnx.json", "files.fp32", "../../outside.onnx"),
        ),
        ("unisent_onnx.json", "fp32"),
    ),
    # ------------------------------------------------------------------ run folders (read by export)
    Case(
        "issue-2-run-config-objective-popen",
        "run",
        "runs/q/version_0/config.yaml: model.objectives[0] class_path subprocess.Popen (touch PWNED, shell)",
        lambda c: _yaml_objectives(c, [_popen(c)]),
        ("config.yaml", "class_path"),
        may_pass=RUN_ENCODER_ONLY,
    ),
    Case(
        "run-config-objective-evil-mod",
        "run",
        "config.yaml: model.objectives[0] class_path evil_mod.Evil (evil_mod.py in the current directory)",
        lambda c: _yaml_objectives(c, [{"class_path": "evil_mod.Evil", "init_args": {}}]),
        ("config.yaml", "class_path"),
        may_pass=RUN_ENCODER_ONLY,
    ),
    Case(
        "run-config-matryoshka-nested-popen",
        "run",
        "config.yaml: a Matryoshka objective whose nested objective is subprocess.Popen",
        lambda c: _yaml_objectives(
            c, [{"class_path": "unisent.objectives.Matryoshka", "init_args": {"objective": _popen(c), "dims": [16]}}]
        ),
        ("config.yaml", "objective"),
        may_pass=RUN_ENCODER_ONLY,
    ),
    Case(
        "run-config-alias-bomb",
        "run",
        "config.yaml: a billion-laughs alias bomb (9**9 values) under data",
        _alias_bomb,
        ("config.yaml",),
        may_pass=RUN_ENCODER_ONLY,
    ),
    # ------------------------------------------------------------------ checkpoints
    Case(
        "ckpt-record-os-system",
        "ckpt",
        "last.ckpt (plain data): the unisent record's objective class_path os.system",
        lambda c: _checkpoint(
            c, lambda k: _objectives(k, [{"class_path": "os.system", "init_args": {"command": c.touch}}])
        ),
        ("last.ckpt", "class_path"),
    ),
    Case(
        "ckpt-record-matryoshka-evil-mod",
        "ckpt",
        "last.ckpt: a Matryoshka objective whose nested objective is evil_mod.Evil",
        lambda c: _checkpoint(
            c,
            lambda k: _objectives(
                k,
                [
                    {
                        "class_path": "unisent.objectives.Matryoshka",
                        "init_args": {"objective": {"class_path": "evil_mod.Evil", "init_args": {}}, "dims": [16]},
                    }
                ],
            ),
        ),
        ("last.ckpt", "objective"),
    ),
    Case(
        "ckpt-encoder-pooler-evil-mod",
        "ckpt",
        "last.ckpt: the encoder's pooler evil_mod.Evil (record and hyperparameters)",
        lambda c: _checkpoint(c, lambda k: _pooler(k, "evil_mod.Evil")),
        ("last.ckpt", "pooler"),
    ),
    Case(
        "ckpt-tensors-do-not-fit",
        "ckpt",
        "last.ckpt: the word embeddings' tensor is 7 x 5 (the model's is 600 x 32)",
        lambda c: _checkpoint(c, _misfit),
        ("last.ckpt",),
    ),
    # ------------------------------------------------------------------ evaluation data directories
    Case(
        "data-dir-fifo",
        "data",
        "evaluation data: sts/stsbenchmark/sts-dev.csv is a FIFO",
        lambda c: _fifo(_sts(c)),
        ("sts-dev.csv",),
    ),
    Case(
        "data-dir-symlink-secret",
        "data",
        "evaluation data: sts-dev.csv is a link to secret.txt (outside the data folder)",
        lambda c: _link(_sts(c), c.secret),
        ("sts-dev.csv",),
    ),
    Case(
        "data-dir-dev-zero",
        "data",
        "evaluation data: sts-dev.csv is a link to /dev/zero (a device: endless)",
        lambda c: _link(_sts(c), "/dev/zero"),
        ("sts-dev.csv",),
    ),
]
