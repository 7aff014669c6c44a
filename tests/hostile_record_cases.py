"""The hostile-model corpus, part 4 (issue 67, kinds 3 and 5): numbers in records and module configs that sized an
allocation before any check (a checkpoint's objective ``hidden_size: 16000``, a Sentence Transformers ``Dense`` of
30 million outputs without weights), and received files whose malformed fields ended in a traceback (a state key
naming no objective, ``global_step`` and ``loops`` under ``--ckpt_path``, a module config's unknown or missing key,
``max_seq_length`` beyond the backbone's positions)."""

from __future__ import annotations

import json

from hostile_model_cases import ST, _set
from hostile_models import Case, Context
from hostile_run_cases import CKPT, ENCODER_ONLY, _checkpoint, _run_config

CMLM = "unisent.objectives.cmlm.CMLM"
#: 4.1 billion parameters (16 GB as float32): CMLM's projection at hidden size 16000
BIG_HEAD = {"class_path": CMLM, "init_args": {"hidden_size": 16000}}
#: they read a checkpoint's tensors and training state; the recipe builds the objectives
RECIPE_BUILDS = ("fit-ckpt", "test-ckpt")
#: they read the checkpoint's record and tensors, not its training state
INFERENCE = ("load", "encode", "evaluate", "export")


def _record_objective(ctx: Context) -> None:
    """The run's checkpoint (``ctx.model``, or ``checkpoints/last.ckpt`` of a run folder) with :data:`BIG_HEAD`."""
    if ctx.model.is_dir():
        ctx.model = ctx.model / "checkpoints" / CKPT
        try:
            _checkpoint(ctx, lambda k: k["unisent"]["objectives"].append(BIG_HEAD))
        finally:
            ctx.model = ctx.model.parents[1]
        return
    _checkpoint(ctx, lambda k: k["unisent"]["objectives"].append(BIG_HEAD))


def _state_key(checkpoint: dict) -> None:
    import torch

    checkpoint["state_dict"]["objectives.7.head.weight"] = torch.zeros(2, 2)


def _dense_without_weights(ctx: Context) -> None:
    folder = ctx.model / "2_Dense"
    folder.mkdir()
    config = {"in_features": 32, "out_features": 30_000_000, "bias": True, "activation_function": "torch.nn.Tanh"}
    (folder / "config.json").write_text(json.dumps(config), encoding="utf-8")
    _set(ctx.model / "modules.json", "2", {"idx": 2, "name": "2", "path": "2_Dense", "type": ST + "Dense"})


def _pooling(ctx: Context, edit) -> None:
    path = ctx.model / "1_Pooling" / "config.json"
    config = json.loads(path.read_text(encoding="utf-8"))
    edit(config)
    path.write_text(json.dumps(config), encoding="utf-8")


CASES: list[Case] = [
    Case(
        "issue-67-ckpt-record-hidden-size-16000",
        "ckpt",
        f"{CKPT}: a CMLM objective in the record with init_args hidden_size 16000 (16 GB; no tensors of it)",
        _record_objective,
        (CKPT, "hidden_size=16000"),
        may_pass=RECIPE_BUILDS,
    ),
    Case(
        "merge-ckpt-record-hidden-size-16000",
        "run-folder",
        f"checkpoints/{CKPT} of a run given to merge: a CMLM objective with init_args hidden_size 16000",
        _record_objective,
        (CKPT, "hidden_size=16000"),
    ),
    Case(
        "run-config-objective-hidden-size-16000",
        "run",
        "config.yaml of the run: a CMLM objective with hidden_size 16000 (the card records it: built on meta)",
        lambda c: _run_config(c, [BIG_HEAD]),
        (),
        may_pass=(*ENCODER_ONLY, "export"),
    ),
    Case(
        "ckpt-state-key-objective-index-7",
        "ckpt",
        f"{CKPT}: a state key objectives.7.head.weight (the record has one objective)",
        lambda c: _checkpoint(c, _state_key),
        (CKPT, "objectives.7"),
    ),
    Case(
        "ckpt-global-step-malformed",
        "ckpt",
        f"{CKPT}: global_step is the string 'many'",
        lambda c: _checkpoint(c, lambda k: k.update(global_step="many")),
        (CKPT, "global_step"),
    ),
    Case(
        "ckpt-loops-malformed",
        "ckpt",
        f"{CKPT}: loops.fit_loop is a list",
        lambda c: _checkpoint(c, lambda k: k["loops"].update(fit_loop=[1, 2])),
        (CKPT, "loops.fit_loop"),
    ),
    Case(
        "issue-67-st-dense-out-features-3e7-no-weights",
        "st",
        "2_Dense/config.json: out_features 30000000 and no weights (3.8 GB as float32 at 32 inputs)",
        _dense_without_weights,
        ("2_Dense", "out_features=30000000"),
    ),
    Case(
        "st-pooling-config-unknown-key",
        "st",
        "1_Pooling/config.json: an unknown key pooling_mode_magic",
        lambda c: _pooling(c, lambda d: d.update(pooling_mode_magic=True)),
        ("1_Pooling", "pooling_mode_magic"),
    ),
    Case(
        "st-pooling-config-missing-key",
        "st",
        "1_Pooling/config.json: without word_embedding_dimension (embedding_dimension)",
        lambda c: _pooling(c, lambda d: d.pop("word_embedding_dimension")),
        ("1_Pooling", "embedding_dimension"),
    ),
    Case(
        "st-max-seq-length-beyond-positions",
        "st",
        "sentence_bert_config.json: max_seq_length 100000 (the backbone has 128 positions)",
        lambda c: _set(c.model / "sentence_bert_config.json", "max_seq_length", 100_000),
        ("sentence_bert_config.json", "max_seq_length"),
    ),
]
