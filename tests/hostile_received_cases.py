"""The hostile-model corpus, part 3 (issue 67, kinds 1, 2, 4 and 6): what a user receives beyond a model's
own files. Training data folders given as ``--data.train.<name>.path DIR`` (a dataset card whose
``data_files`` leave the folder, a ``save_to_disk`` state naming a file outside, a FIFO ``.arrow``, a
loading script), a model whose ``config.json`` or ``tokenizer_config.json`` has an ``auto_map`` (transformers
would ask "run custom code? [y/N]" on stdin), ``.git`` inside a model (no entry is skipped by name) and a run
folder whose ``checkpoints/last.ckpt`` links out of it (``unisent merge``). The files outside a folder are
named ``secret*``: the judge looks for the secret everywhere else."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from hostile_model_cases import CARD, _outside, _set, fifo, link
from hostile_models import SECRET, Case, Context

ARROW = "data-00000-of-00001.arrow"
#: the entry points a model's files reach most directly (the others read the same folder through the same check)
MODEL_ENTRIES = ("load", "encode", "export")
#: Python the payload files hold: creates the marker when imported
PAYLOAD = "import pathlib\npathlib.Path({marker!r}).write_text('PWNED by {name}')\n"


def _card(ctx: Context, files: str) -> None:
    (ctx.model / "README.md").write_text(CARD.format(files=files), encoding="utf-8")


def _secret_arrow(ctx: Context) -> Path:
    """A save_to_disk ``.arrow`` file beside the data folder whose sentences are the secret."""
    import datasets

    folder = ctx.directory / "secret-saved"
    datasets.Dataset.from_dict({"text": [SECRET] * 16}).save_to_disk(folder)
    arrow = shutil.copy2(folder / ARROW, ctx.directory / "secret.arrow")
    shutil.rmtree(folder)
    return arrow


def _state_names(ctx: Context, name: str) -> None:
    _set(ctx.model / "state.json", "_data_files.0.filename", name)


def _auto_map(ctx: Context, file: str, auto_map: dict) -> None:
    """``file`` (a JSON of the model) with ``auto_map`` naming ``evil_code.py``, written into the model."""
    (ctx.model / "evil_code.py").write_text(PAYLOAD.format(marker=str(ctx.marker), name=file), encoding="utf-8")
    data = json.loads((ctx.model / file).read_text(encoding="utf-8"))
    data |= {"auto_map": auto_map} | ({"model_type": "evilbert"} if file == "config.json" else {})
    (ctx.model / file).write_text(json.dumps(data), encoding="utf-8")


def _git_module(ctx: Context, *, linked: bool = False, as_fifo: bool = False) -> None:
    """The Pooling module moved into ``.git`` (modules.json names ``.git``, or 1_Pooling links into it) with
    its config.json a link to a pooling config outside the model (or a FIFO)."""
    pooling = ctx.model / "1_Pooling"
    git = ctx.model / ".git" / ("pool" if linked else "")
    git.parent.mkdir(exist_ok=True)
    shutil.copytree(pooling, git, dirs_exist_ok=True)
    outside = _outside(ctx, pooling / "config.json", "secret-pooling.json")
    fifo(git / "config.json") if as_fifo else link(git / "config.json", outside)
    if linked:
        link(pooling, git)
    else:
        shutil.rmtree(pooling)
        _set(ctx.model / "modules.json", "1.path", ".git")


def _last_ckpt_out(ctx: Context) -> None:
    """The run's checkpoints/last.ckpt a link to a checkpoint outside the run folder."""
    last = ctx.model / "checkpoints" / "last.ckpt"
    link(last, shutil.copy2(last, ctx.directory / "secret-other-run.ckpt"))


CASES: list[Case] = [
    # kind 1: training data folders (fit --data.train.<name>.path DIR)
    Case(
        "issue-67-1-card-data-files-dotdot",
        "card",
        "README.md (a dataset card): configs[0].data_files names ../secret.txt",
        lambda c: _card(c, "../secret.txt"),
        ("README.md", "data_files"),
    ),
    Case(
        "card-data-files-absolute",
        "card",
        "README.md: configs[0].data_files names the absolute path of secret.txt",
        lambda c: _card(c, str(c.secret)),
        ("README.md", "data_files"),
    ),
    Case(
        "card-data-files-url",
        "card",
        "README.md: configs[0].data_files names https://example.invalid/train.txt (datasets would download it)",
        lambda c: _card(c, "https://example.invalid/train.txt"),
        ("README.md", "data_files"),
    ),
    Case(
        "card-loading-script",
        "card",
        "train.py beside the card: a dataset loading script (creates PWNED when run)",
        lambda c: (c.model / "train.py").write_text(PAYLOAD.format(marker=str(c.marker), name="script")),
        ("train.py",),
    ),
    Case(
        "card-data-file-link-out",
        "card",
        "train.txt is a link to secret.txt (outside the data folder)",
        lambda c: link(c.model / "train.txt", c.secret),
        ("train.txt",),
    ),
    Case(
        "issue-67-1-saved-state-outside",
        "saved",
        "state.json (save_to_disk): _data_files[0].filename ../secret.arrow (the secret's sentences)",
        lambda c: (_secret_arrow(c), _state_names(c, "../secret.arrow")),
        ("state.json", "_data_files"),
    ),
    Case(
        "issue-67-1-saved-arrow-fifo",
        "saved",
        f"{ARROW} is a FIFO (fit hung, and SIGTERM did not end it)",
        lambda c: fifo(c.model / ARROW),
        (ARROW, "FIFO"),
    ),
    Case(
        "saved-arrow-link-out",
        "saved",
        f"{ARROW} is a link to secret.arrow (outside the data folder)",
        lambda c: link(c.model / ARROW, _secret_arrow(c)),
        (ARROW,),
    ),
    # kind 2: code a model names (transformers' trust_remote_code)
    Case(
        "issue-67-2-config-auto-map",
        "encoder",
        "config.json: model_type evilbert, auto_map AutoConfig/AutoModel evil_code.* (evil_code.py in the model)",
        lambda c: _auto_map(c, "config.json", {"AutoConfig": "evil_code.C", "AutoModel": "evil_code.M"}),
        ("config.json", "auto_map"),
    ),
    Case(
        "st-tokenizer-config-auto-map",
        "st",
        "tokenizer_config.json: auto_map AutoTokenizer evil_code.T (evil_code.py in the model)",
        lambda c: _auto_map(c, "tokenizer_config.json", {"AutoTokenizer": ["evil_code.T", None]}),
        ("tokenizer_config.json", "auto_map"),
        entries=MODEL_ENTRIES,
    ),
    # kind 4: .git is a folder like any other
    Case(
        "issue-67-4-st-module-path-git",
        "st",
        "modules.json: the Pooling module's path is .git, whose config.json links to a pooling config outside",
        lambda c: _git_module(c),
        (".git", "config.json"),
        entries=MODEL_ENTRIES,
    ),
    Case(
        "st-module-linked-into-git",
        "st",
        "1_Pooling is a link to .git/pool, whose config.json links to a pooling config outside the model",
        lambda c: _git_module(c, linked=True),
        (".git", "config.json"),
        entries=MODEL_ENTRIES,
    ),
    Case(
        "st-module-git-fifo",
        "st",
        "modules.json: the Pooling module's path is .git, whose config.json is a FIFO",
        lambda c: _git_module(c, as_fifo=True),
        (".git", "config.json"),
        entries=MODEL_ENTRIES,
    ),
    # kind 6: a run folder given to merge
    Case(
        "issue-67-6-merge-last-ckpt-link-out",
        "run-folder",
        "checkpoints/last.ckpt is a link to another run's checkpoint outside the run folder",
        _last_ckpt_out,
        ("last.ckpt", "outside the run folder"),
    ),
]
