"""A model is data (issue 46): the hostile-model corpus (tests/hostile_model_cases.py and hostile_run_cases.py)
through every entry point that reads each kind of model (``unisent.load``, ``encode``, ``evaluate``, ``export``
also as a run's ``encoder/``, ``fit`` with the model as a Distill teacher and as the starting encoder,
``fit``/``test --ckpt_path``, ``evaluate``/``fit`` with a data directory). Each run is a fork of this process
with its address space capped (tests/hostile_models.py): no payload runs (no marker, ``evil_mod.py`` in the
current directory neither imported nor looked up), the secret beside the model reaches no output, it ends
within the time bound with bounded memory, and it fails in one line naming the file (and field). A
property-based test generates model records and configs and checks that loading any of them works or fails in
one line and never imports a module outside the registry."""

from __future__ import annotations

import importlib.util
import json
import os
import sys
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parent


def _module(name: str):
    """``tests/<name>.py`` as the module ``name`` (pytest's importlib mode leaves tests/ off ``sys.path``)."""
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, TESTS / f"{name}.py")
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


H = _module("hostile_models")
CORPUS = _module("hostile_model_cases")
_module("hostile_run_cases")
_module("hostile_received_cases")
_module("hostile_record_cases")
CASES = H.corpus()
#: forks run at once: a case's entry points run side by side (most of the time is the CLI's own start-up)
PARALLEL = int(os.environ.get("HOSTILE_PARALLEL", "2"))
RUNS = [(case, entry) for case in CASES for entry in case.entry_points()]

pytestmark = [
    pytest.mark.usefixtures("one_thread"),
    pytest.mark.filterwarnings("ignore:LightningCLI's args parameter"),
    pytest.mark.integration,
]


@pytest.fixture(scope="module")
def bases(tiny_bert_dir, tmp_path_factory, one_thread):
    return CORPUS.build_bases(tmp_path_factory.mktemp("hostile-bases"), tiny_bert_dir)


@pytest.fixture(scope="module")
def outcomes(bases, tmp_path_factory):
    """``outcome(case, entry)``: every entry point of a case is run (side by side) when the first is asked for."""
    done, root = {}, tmp_path_factory.mktemp("hostile-runs")

    def outcome(case, entry):
        if (case.name, entry) not in done:
            done.update(H.run_cases([(case, e) for e in case.entry_points()], bases, root, PARALLEL))
        return done[case.name, entry]

    return outcome


def test_the_corpus_has_30_cases_over_every_kind_with_the_issues_three():
    names = [case.name for case in CASES]
    assert len(names) >= 30 and len(set(names)) == len(names)
    assert {case.kind for case in CASES} >= {"encoder", "st", "retrofit", "onnx", "run", "ckpt", "data"}
    for number in (1, 2, 3):
        assert any(name.startswith(f"issue-{number}-") for name in names), number
    assert all(set(case.entry_points()) <= set(H.ENTRIES) for case in CASES)


@pytest.mark.parametrize(("case", "entry"), RUNS, ids=[f"{case.name}:{entry}" for case, entry in RUNS])
def test_hostile_model(case, entry, outcomes):
    outcome = outcomes(case, entry)
    assert outcome.ok, (outcome.problems, outcome.line, outcome.stderr[-2000:])


#: a benign copy of each kind through one entry point that reads it: the bases and the harness work
CONTROLS = [("encoder", "encode"), ("st", "load"), ("onnx", "encode-onnx"), ("ckpt", "load"), ("run", "export")]


@pytest.mark.parametrize(("kind", "entry"), CONTROLS, ids=[f"{k}:{e}" for k, e in CONTROLS])
def test_the_benign_model_passes(kind, entry, bases, tmp_path):
    benign = H.Case("benign", kind, "the base as built", lambda ctx: None, (), may_pass=(entry,))
    outcome = H.run_case(benign, entry, bases, tmp_path)
    assert outcome.returncode == 0 and outcome.ok, (outcome.problems, outcome.stderr[-2000:])


def test_the_runner_sees_a_payload_a_leak_a_hang_and_an_allocation(bases, tmp_path):
    """The judge is not blind: a job that imports evil_mod, prints the secret, never ends, looks a module up or
    allocates gigabytes is reported."""
    case = H.Case("judge", "encoder", "", lambda ctx: None, ("x",))
    ctx = H.prepare("encoder", "load", bases, tmp_path / "judge")

    def evil():
        import evil_mod  # noqa: F401 - the current directory is on sys.path, as in python -c

        print(ctx.secret.read_text())
        return 0, ""

    code, out, err, message, peak, new, seconds = H.fork_run(ctx.directory, evil)
    outcome = H.judge(
        case, "load", ctx, H.Outcome("judge", "load", code, seconds, out, err, message, peak, imported=new)
    )
    assert {"the secret is in the output", "evil_mod (in the current directory) was imported or looked up"} <= set(
        outcome.problems
    ), outcome.problems
    assert any(p.startswith("the payload ran") for p in outcome.problems)
    code, *_ = H.fork_run(ctx.directory, lambda: (__import__("time").sleep(60), (0, ""))[1], timeout=1)
    assert code is None

    def look_up():
        with pytest.raises(ImportError):
            __import__("zzmissing_module")
        return 0, ""

    assert "zzmissing_module" in H.fork_run(ctx.directory, look_up)[5]  # an import attempt is seen, found or not

    def allocate():
        import torch

        torch.ones(5 << 30, dtype=torch.uint8)  # 5 GB, beyond the address space a run may add: refused at once
        return 0, ""

    code, _, err, *_ = H.fork_run(ctx.directory, allocate)
    assert code == 1 and any(words in err for words in H.OUT_OF_MEMORY), err[-500:]


# --------------------------------------------------------------------------------- property-based
try:
    import hypothesis
    from hypothesis import strategies as st
except ImportError:  # the dev extra installs it; without it, only the property-based test is skipped
    hypothesis = st = None

if st is not None:
    #: names a file may hold: unisent's own, Sentence Transformers', torch's, and names never to be imported or
    #: called (``this`` prints the Zen when imported; no ``zz...`` module exists: only an import attempt sees them)
    NAMES = st.one_of(
        st.sampled_from(
            [
                "evil_mod.Evil",
                "this.Zen",
                "os.system",
                "subprocess.Popen",
                "builtins.eval",
                "mean",
                "cls",
                "sentence-transformers",
                "encoder",
                "unisent.encoders.encoder.Encoder",
                "unisent.models.gaussian.GaussianEncoder",
                "unisent.amr.parsing.PreParsedAMR",
                "sentence_transformers.models.Pooling",
                "sentence_transformers.models.Dense",
                "torch.nn.modules.activation.Tanh",
                "torch.multiprocessing.spawn",
            ]
        ),
        st.from_regex(r"zz[a-z]{1,6}(\.[A-Za-z_][A-Za-z0-9_]{0,6}){1,3}", fullmatch=True),
    )
    PATHS = st.sampled_from(
        ["", ".", "1_Pooling", "text", "amr", "..", "../..", "/etc", "../secret.txt", "missing", "a/../.."]
    )
    NUMBERS = st.one_of(st.integers(-2, 2**40), st.floats(allow_nan=True), st.none(), st.booleans())
    LEAVES = st.one_of(NAMES, PATHS, NUMBERS)
    VALUES = st.recursive(
        LEAVES, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(NAMES, inner, max_size=3), max_leaves=8
    )


def _touch(marker: str):
    return st.fixed_dictionaries({"args": st.just(f"touch {marker}"), "shell": st.just(True)})


def _module_entry(marker: str):
    config = st.fixed_dictionaries(
        {},
        optional={
            "activation_function": NAMES,
            "in_features": NUMBERS,
            "pooling_mode": LEAVES,
            "args": st.just(f"touch {marker}"),
        },
    )
    return st.fixed_dictionaries({"type": NAMES, "path": PATHS, "config": config | _touch(marker)})


def _records(marker: str):
    """(base kind, file, JSON content) of a generated model record or config."""
    spec = st.fixed_dictionaries(
        {"class_path": NAMES, "init_args": _touch(marker) | st.dictionaries(NAMES, LEAVES, max_size=2)}
    )
    model_record = st.fixed_dictionaries({"type": NAMES | NUMBERS, "class_path": NAMES | NUMBERS})
    settings = st.fixed_dictionaries(
        {"model": st.just(".")},
        optional={
            "pooler": NAMES | NUMBERS,
            "max_length": NUMBERS,
            "sentence_transformers": st.fixed_dictionaries({"modules": st.lists(_module_entry(marker), max_size=2)}),
        },
    )
    retrofit = st.fixed_dictionaries(
        {
            "format": st.just("unisent-retrofit"),
            "version": st.just(1),
            "combination": st.sampled_from(["concat", "sum", "x"]),
        },
        optional={
            "text_encoder": st.fixed_dictionaries({"path": PATHS}),
            "amr_encoder": st.fixed_dictionaries({"path": PATHS}),
            "parser": spec | st.none(),
            "dimension": NUMBERS,
        },
    )
    entry = st.fixed_dictionaries({"idx": st.integers(0, 3), "path": PATHS, "type": NAMES})
    modules = st.lists(entry, min_size=1, max_size=3).map(
        lambda m: [{**m[0], "type": "sentence_transformers.models.Transformer", "path": ""}, *m[1:]]
    )
    return st.one_of(
        st.tuples(st.just("encoder"), st.just("unisent_model.json"), model_record | VALUES),
        st.tuples(st.just("st-encoder"), st.just("unisent_encoder.json"), settings | VALUES),
        st.tuples(st.just("retrofit"), st.just("retrofit.json"), retrofit),
        st.tuples(st.just("st"), st.just("modules.json"), modules | VALUES),
    )


@pytest.mark.skipif(hypothesis is None, reason="needs hypothesis (pip install -e '.[dev]')")
def test_generated_records_load_or_fail_in_one_line_and_import_nothing_outside_the_registry(bases, tmp_path):
    """Loading a model whose record or config is generated (class names, paths, nesting, numbers) works or fails
    with a one-line message naming the file, runs no payload and imports no module the file names outside the
    registry (an import hook in the child records every import attempt, found or not)."""
    runs = iter(range(10**6))

    @hypothesis.settings(
        max_examples=30,
        deadline=None,
        derandomize=True,
        suppress_health_check=list(hypothesis.HealthCheck),
        database=None,
    )
    @hypothesis.given(data=st.data())
    def check(data):
        directory = tmp_path / f"run-{next(runs)}"
        kind, name, content = data.draw(_records(str(directory / "PWNED")))
        ctx = H.prepare(kind, "load", bases, directory)
        (ctx.model / name).write_text(json.dumps(content), encoding="utf-8")
        case = H.Case("generated", kind, "", lambda c: None, (), may_pass=("load",))
        outcome = H.run_case(case, "load", bases, tmp_path, prepared=ctx)
        named = {n.partition(".")[0] for n in _names(content)} - {"unisent", "sentence_transformers", "torch"}
        assert not named & set(outcome.imported), (named & set(outcome.imported), content)
        assert outcome.ok, (outcome.problems, outcome.line, content)
        if outcome.returncode:
            assert name in outcome.message or str(ctx.model) in outcome.message, (outcome.message, content)

    check()


def _names(value) -> set[str]:
    """Every dotted string in a JSON value (keys included)."""
    if isinstance(value, str):
        return {value} if "." in value.strip(".") and "/" not in value else set()
    if isinstance(value, dict):
        return set().union(*(_names(k) | _names(v) for k, v in value.items())) if value else set()
    if isinstance(value, list):
        return set().union(*(_names(v) for v in value)) if value else set()
    return set()
