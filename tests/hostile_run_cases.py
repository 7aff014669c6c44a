"""The hostile-model corpus, part 2 (part 1: hostile_model_cases.py): run folders (``runs/q/version_0`` with the
``config.yaml`` that ``unisent export`` reads beside ``encoder/``), checkpoints (``last.ckpt`` of ``unisent fit``
rewritten with ``torch.save`` as plain data) and evaluation data directories."""

from __future__ import annotations

from pathlib import Path

from hostile_model_cases import evil_spec, fifo, link, popen_spec
from hostile_models import Case, Context

CKPT = "last.ckpt"
#: a checkpoint's objectives serve training; inference skips one that is not registered (naming it), and
#: fit/test --ckpt_path build the recipe's own
RECORD_UNUSED = ("load", "encode", "evaluate", "export", "fit-ckpt", "test-ckpt")
#: --ckpt_path takes a checkpoint's tensors and states; the recipe (not its hyper_parameters) says what is built
RECIPE_BUILDS = ("fit-ckpt", "test-ckpt")
#: they read <run>/encoder, never the run's config.yaml
ENCODER_ONLY = ("load", "encode", "evaluate")


def _run_config(ctx: Context, objectives: list | None = None, bomb: bool = False) -> None:
    """The run's config.yaml with ``objectives``, or with a billion-laughs alias bomb (9**9 values) in ``data``."""
    import yaml

    path = ctx.model.parent / "config.yaml"
    config = yaml.safe_load(path.read_text(encoding="utf-8"))
    if objectives is not None:
        config["model"]["objectives"] = objectives
    if bomb:  # where the export's card reads: the columns of a training file
        config["data"]["train"]["simcse"]["columns"] = "BOMB"
    text = yaml.safe_dump(config, sort_keys=False)
    if bomb:
        lines = ['a0: &a0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
        lines += [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 9)}]" for i in range(1, 9)]
        text = "\n".join(lines) + "\n" + text.replace("columns: BOMB", "columns: *a8", 1)
    path.write_text(text, encoding="utf-8")


def _checkpoint(ctx: Context, edit) -> None:
    """The run's checkpoint rewritten (plain data, ``torch.save``) after ``edit(checkpoint)``."""
    import torch

    checkpoint = torch.load(ctx.model, map_location="cpu", weights_only=True)
    edit(checkpoint)
    torch.save(checkpoint, ctx.model)


def _pooler(checkpoint: dict, name: str) -> None:
    for record in (checkpoint["unisent"]["encoder"], checkpoint["hyper_parameters"]["encoder"]):
        record["pooler"] = name


def _misfit(checkpoint: dict) -> None:
    import torch

    key = next(k for k in checkpoint["state_dict"] if k.endswith("word_embeddings.weight"))
    checkpoint["state_dict"][key] = torch.zeros(7, 5)


def _sts(ctx: Context) -> Path:
    return ctx.model / "sts" / "stsbenchmark" / "sts-dev.csv"


def _matryoshka(inner: dict) -> dict:
    return {"class_path": "unisent.objectives.Matryoshka", "init_args": {"objective": inner, "dims": [16]}}


CASES: list[Case] = [
    # run folders: runs/q/version_0/config.yaml beside encoder/, read by export
    Case(
        "issue-2-run-config-objective-popen",
        "run",
        "config.yaml of the run: model.objectives[0] class_path subprocess.Popen (touch PWNED, shell)",
        lambda c: _run_config(c, [popen_spec(c)]),
        ("config.yaml", "class_path"),
        may_pass=ENCODER_ONLY,
    ),
    Case(
        "run-config-objective-evil-mod",
        "run",
        "config.yaml: model.objectives[0] class_path evil_mod.Evil (evil_mod.py in the current directory)",
        lambda c: _run_config(c, [evil_spec()]),
        ("config.yaml", "class_path"),
        may_pass=ENCODER_ONLY,
    ),
    Case(
        "run-config-matryoshka-nested-popen",
        "run",
        "config.yaml: a Matryoshka objective whose nested objective is subprocess.Popen",
        lambda c: _run_config(c, [_matryoshka(popen_spec(c))]),
        ("config.yaml", "objective"),
        may_pass=ENCODER_ONLY,
    ),
    Case(
        "run-config-alias-bomb",
        "run",
        "config.yaml: a billion-laughs alias bomb (9**9 values) as a training file's columns (the card lists them)",
        lambda c: _run_config(c, bomb=True),
        ("config.yaml",),
        may_pass=(*ENCODER_ONLY, "export"),  # the card may leave out a run config it refuses to expand
    ),
    # checkpoints (written by unisent fit, rewritten with torch.save as plain data)
    Case(
        "ckpt-record-os-system",
        "ckpt",
        f"{CKPT}: the unisent record's objective class_path os.system, init_args {{command: touch PWNED}}",
        lambda c: _checkpoint(
            c,
            lambda k: k["unisent"].update(objectives=[{"class_path": "os.system", "init_args": {"command": c.touch}}]),
        ),
        (CKPT, "os.system"),
        may_pass=RECORD_UNUSED,
    ),
    Case(
        "ckpt-record-matryoshka-evil-mod",
        "ckpt",
        f"{CKPT}: a Matryoshka objective whose nested objective is evil_mod.Evil",
        lambda c: _checkpoint(c, lambda k: k["unisent"].update(objectives=[_matryoshka(evil_spec())])),
        (CKPT, "evil_mod.Evil"),
        may_pass=RECORD_UNUSED,
    ),
    Case(
        "ckpt-hparams-objective-evil-mod",
        "ckpt",
        f"{CKPT}: hyper_parameters.objectives [evil_mod.Evil] (Lightning's CLI would merge and import them)",
        lambda c: _checkpoint(c, lambda k: k["hyper_parameters"].update(objectives=[evil_spec()])),
        (CKPT, "objectives"),
        may_pass=RECORD_UNUSED,
    ),
    Case(
        "ckpt-hparams-instantiator-evil-mod",
        "ckpt",
        f"{CKPT}: hyper_parameters._instantiator evil_mod.Evil (load_from_checkpoint would call it)",
        lambda c: _checkpoint(c, lambda k: k["hyper_parameters"].update(_instantiator="evil_mod.Evil")),
        (CKPT, "_instantiator"),
        may_pass=RECORD_UNUSED,
    ),
    Case(
        "ckpt-encoder-pooler-evil-mod",
        "ckpt",
        f"{CKPT}: the encoder's pooler evil_mod.Evil (record and hyper_parameters)",
        lambda c: _checkpoint(c, lambda k: _pooler(k, "evil_mod.Evil")),
        (CKPT, "pooler"),
        may_pass=RECIPE_BUILDS,
    ),
    Case(
        "ckpt-tensors-do-not-fit",
        "ckpt",
        f"{CKPT}: the word embeddings' tensor is 7 x 5 (the model's is 600 x 32)",
        lambda c: _checkpoint(c, _misfit),
        (CKPT,),
    ),
    # evaluation data directories (unisent evaluate --data_dir, model.evaluation.data_dir)
    Case("data-dir-fifo", "data", "sts/stsbenchmark/sts-dev.csv is a FIFO", lambda c: fifo(_sts(c)), ("sts-dev.csv",)),
    Case(
        "data-dir-symlink-secret",
        "data",
        "sts-dev.csv is a link to secret.txt (outside the data folder)",
        lambda c: link(_sts(c), c.secret),
        ("sts-dev.csv",),
    ),
    Case(
        "data-dir-dev-zero",
        "data",
        "sts-dev.csv is a link to /dev/zero (a device: endless)",
        lambda c: link(_sts(c), "/dev/zero"),
        ("sts-dev.csv",),
    ),
]
