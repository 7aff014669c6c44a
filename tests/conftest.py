"""Shared fixtures: tiny BERT-like models built offline, seeds and environment reset per test."""

from __future__ import annotations

import os
import random
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from unisent.resources import EVALUATION_DATA_DIR  # noqa: E402

#: the repository's training, benchmark and test samples (not in the wheel)
SAMPLE_DIR = Path(__file__).resolve().parents[1] / "samples"

os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["TRANSFORMERS_OFFLINE"] = "1"
os.environ.setdefault("WANDB_MODE", "offline")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


#: the test modules that take longest in a 2-core run of both tiers (``--durations``), longest first. pytest-xdist's
#: ``--dist loadfile`` hands whole files to the workers in collection order, so these start first and the run does
#: not end with one worker alone on a long file (the rest keep their order)
LONGEST_FIRST = (
    "test_hostile_models",
    "test_cluster",
    "test_balancers",
    "test_cli",
    "test_legacy_artifacts",
    "test_distributed",
    "test_resume",
    "test_object_storage",
    "test_ablate",
    "test_parts",
    "test_parts_jobs",
    "test_plugins",
    "test_recipes",
)


def pytest_collection_modifyitems(config, items):
    rank = {name: i for i, name in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.stem, len(rank)))  # stable: the rest keep their order


def recipe_files(parts: bool = False) -> list[Path]:
    """The repository's recipes (not its logger, trainer, override and sweep fragments): those of one run, or with
    ``parts`` those that declare ``parts:`` (trained and merged by ``unisent.commands.parts``)."""
    import yaml

    root = Path(__file__).resolve().parents[1] / "recipes"
    found = [p for p in root.rglob("*.yaml") if not {"loggers", "overrides", "sweeps", "trainers"} & set(p.parts)]
    return sorted(p for p in found if ("parts" in (yaml.safe_load(p.read_text(encoding="utf-8")) or {})) == parts)


def sample_sentences() -> list[str]:
    return (SAMPLE_DIR / "sentences.txt").read_text(encoding="utf-8").splitlines()


def build_tiny_bert(directory: Path, hidden: int = 32, layers: int = 2, cased: bool = False) -> Path:
    """A 2-layer BERT with a WordPiece tokenizer trained on the bundled sentences; ``cased``: the tokenizer
    keeps case (trained on the sentences and their upper-case copies, so that cased words have ids)."""
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, processors
    from transformers import BertConfig, BertModel, BertTokenizerFast

    special = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    normalizer = normalizers.BertNormalizer(lowercase=not cased)
    pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    texts = sample_sentences() + ([t.upper() for t in sample_sentences()] if cased else [])
    # The vocabulary is built here, not by tokenizers' WordPieceTrainer: the trainer breaks ties between equally
    # frequent pieces in hash order, so two processes trained different tokenizers and a tiny model's inputs
    # changed from run to run. Every character (alone and as ##piece), then the most frequent words, ties by
    # spelling: the same files, byte for byte, in every process (tests/test_pinned_behaviour.py checks).
    counts: dict[str, int] = {}
    for text in texts:
        for word, _ in pre_tokenizer.pre_tokenize_str(normalizer.normalize_str(text)):
            counts[word] = counts.get(word, 0) + 1
    chars = sorted({c for word in counts for c in word})
    pieces = special + chars + [f"##{c}" for c in chars]
    size = 800 if cased else 600
    words = sorted((w for w in counts if len(w) > 1), key=lambda w: (-counts[w], w))[: max(0, size - len(pieces))]
    tok = Tokenizer(models.WordPiece({p: i for i, p in enumerate(pieces + words)}, unk_token="[UNK]"))
    tok.normalizer = normalizer
    tok.pre_tokenizer = pre_tokenizer
    cls_id, sep_id = tok.token_to_id("[CLS]"), tok.token_to_id("[SEP]")
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B [SEP]", special_tokens=[("[CLS]", cls_id), ("[SEP]", sep_id)]
    )
    fast = BertTokenizerFast(
        tokenizer_object=tok,
        **({"do_lower_case": False} if cased else {}),
        unk_token="[UNK]",
        pad_token="[PAD]",
        cls_token="[CLS]",
        sep_token="[SEP]",
        mask_token="[MASK]",
    )
    config = BertConfig(
        vocab_size=tok.get_vocab_size(),
        hidden_size=hidden,
        num_hidden_layers=layers,
        num_attention_heads=2,
        intermediate_size=2 * hidden,
        max_position_embeddings=128,
    )
    torch.manual_seed(0)
    BertModel(config).save_pretrained(directory)
    fast.save_pretrained(directory)
    return directory


def st_encode(directory: Path, sentences: list[str], batch_size: int = 2, **kw) -> torch.Tensor:
    """``sentences`` encoded by Sentence Transformers' own ``SentenceTransformer(directory)`` on the CPU (``kw``:
    more arguments of its ``encode``), as a tensor: the reference that unisent's encodings are compared with."""
    from sentence_transformers import SentenceTransformer

    model = SentenceTransformer(str(directory), device="cpu")
    return torch.as_tensor(model.encode(sentences, batch_size=batch_size, **kw))


@pytest.fixture(scope="module")
def one_thread():
    """Tiny models gain nothing from intra-op threads, and on a busy shared CPU OpenMP's spinning threads
    make them many times slower; restored after the module (use with ``pytest.mark.usefixtures``)."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def _built_once(tmp_path_factory, name: str, **kw) -> Path:
    """``build_tiny_bert(<folder>/name, **kw)`` once per test session: under pytest-xdist the folder is the one
    that holds the workers' own (``popen-gw0``, ...), so that the first worker builds the model (under a file
    lock, then a marker file beside it) and the others wait and reuse it. Tests must not write into it."""
    from filelock import FileLock

    base = tmp_path_factory.getbasetemp()
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    if worker and base.name == f"popen-{worker}":  # not a pytest started by a test, which inherits the variable
        base = base.parent
    directory, built = base / name, base / f"{name}.built"
    with FileLock(str(base / f"{name}.lock")):
        if not built.exists():
            shutil.rmtree(directory, ignore_errors=True)  # a build cut short
            build_tiny_bert(directory, **kw)
            built.touch()
    return directory


@pytest.fixture(scope="session")
def tiny_bert_dir(tmp_path_factory) -> Path:
    """The tiny BERT, built once per test session (:func:`_built_once`): read only, ``tiny_model_dir`` is a copy."""
    return _built_once(tmp_path_factory, "tiny-bert")


@pytest.fixture(scope="session")
def tiny_cased_bert_dir(tmp_path_factory) -> Path:
    """The tiny BERT with a tokenizer that keeps case, built once per test session (:func:`_built_once`)."""
    return _built_once(tmp_path_factory, "tiny-cased-bert", cased=True)


@pytest.fixture
def tiny_model_dir(tiny_bert_dir, tmp_path) -> Path:
    """A private copy of the tiny model (tests may write into it)."""
    return Path(shutil.copytree(tiny_bert_dir, tmp_path / "tiny-bert"))


#: the flags every test's CPU reports (tests/test_precision.py fakes others): ``precision: auto``, the default of
#: ``encode``, ``unisent encode`` and training, is fp32 on it, so that results do not depend on the machine
CPU_WITHOUT_BF16 = frozenset("fpu sse sse2 ssse3 fma avx avx2 f16c bmi2".split())


@pytest.fixture(scope="session", autouse=True)
def _cpu_without_bf16():
    """Session-wide, so that module-scoped fixtures see it too; a test's own ``monkeypatch`` wins for that test."""
    from unisent import hardware

    patch = pytest.MonkeyPatch()
    patch.setattr(hardware, "cpu_flags", lambda: CPU_WITHOUT_BF16)
    yield
    patch.undo()


@pytest.fixture(autouse=True)
def _reset(monkeypatch, tmp_path):
    random.seed(0)
    np.random.seed(0)
    torch.manual_seed(0)
    monkeypatch.setenv("UNISENT_CACHE", str(tmp_path / "cache"))
    # a command run in this process with --import writes both for its child processes (unisent.plugins)
    for name in ("UNISENT_IMPORT", "PYTHONPATH"):
        monkeypatch.setenv(name, os.environ.get(name, ""))  # records the value to restore (or its absence)
        if not os.environ[name]:
            monkeypatch.delenv(name)
    monkeypatch.setattr(sys, "path", list(sys.path))
    yield
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        torch.distributed.destroy_process_group()


# ------------------------------------------------------------------- recipes on the tiny model
#: bundled sample (or derived fixture) and column renames per objective class, for recipes whose own
#: training file does not exist on a clean checkout (the paper recipes point at data the user builds)
RECIPE_SAMPLES = {
    "GaussCSE": ("nli_triples.jsonl", {}),
    "EASE": ("ease_fewrel.jsonl", {}),
    "CMLM": ("cmlm_pairs.jsonl", {}),
    "BitextRetrieval": ("cmlm_pairs.jsonl", {"s1": "source", "s2": "target"}),
    "Distill": ("sentences.txt", {}),
}


def _write_jsonl(path: Path, rows) -> Path:
    import json

    path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    return path


def _nli_labelled(directory: Path) -> Path:
    """(premise, hypothesis, label) records from the bundled NLI triples: entailment and contradiction."""
    import json

    rows = []
    for line in (SAMPLE_DIR / "nli_triples.jsonl").read_text(encoding="utf-8").splitlines():
        triple = json.loads(line)
        rows.append({"premise": triple["anchor"], "hypothesis": triple["positive"], "label": "entailment"})
        rows.append({"premise": triple["anchor"], "hypothesis": triple["negative"], "label": "contradiction"})
    return _write_jsonl(directory / "nli_labelled.jsonl", rows)


def _amr_slots(directory: Path, slots: tuple[str, ...]) -> Path:
    """Records with every slot of ``slots`` (text + English graph) from the bundled Little Prince AMR sample:
    slot k of record i is sentence i + k (the translated graphs are absent: the draw falls back to them)."""
    import json

    rows = [
        json.loads(line) for line in (SAMPLE_DIR / "amr_little_prince.jsonl").read_text(encoding="utf-8").splitlines()
    ]
    out = []
    for i in range(len(rows) - len(slots) + 1):
        record = {}
        for k, slot in enumerate(slots):
            record[slot], record[f"{slot}_graph"] = rows[i + k]["anchor"], rows[i + k]["anchor_graph"]
        out.append(record)
    return _write_jsonl(directory / f"amr_{len(slots)}.jsonl", out)


def recipe_training_file(objective: dict, directory: Path) -> tuple[Path, dict[str, str]]:
    """The bundled sample (or a file derived from one, written to ``directory``) that an objective of a
    recipe trains on, with its column renames."""
    cls = objective["class_path"].rsplit(".", 1)[-1]
    init = objective.get("init_args") or {}
    if cls == "Matryoshka":  # a wrapper trains on its wrapped objective's data
        return recipe_training_file(init["objective"], directory)
    if cls == "SimCSE":
        return SAMPLE_DIR / ("nli_triples.jsonl" if init.get("supervised") else "sentences.txt"), {}
    if cls == "NLIClassifier":
        return _nli_labelled(directory), {}
    if cls == "AMRSimCSE":
        mode = init.get("mode", "triples")
        if mode == "self":
            return SAMPLE_DIR / "amr_little_prince.jsonl", {}
        return _amr_slots(
            directory, ("anchor", "positive", "negative") if mode == "triples" else ("anchor", "positive")
        ), {}
    if cls not in RECIPE_SAMPLES:
        raise KeyError(f"no sample for objective {cls}: add it to RECIPE_SAMPLES in tests/conftest.py")
    sample, columns = RECIPE_SAMPLES[cls]
    return SAMPLE_DIR / sample, dict(columns)


def _users_file(path: str, root: Path) -> bool:
    """A file that the recipe expects the user to build or download: it does not exist and lies outside the
    package (a file under ``unisent/`` is bundled: a recipe that names a missing one is broken)."""
    return not (root / path).exists() and not Path(path).parts[0] == "unisent"


def _resolve_files(value, root: Path):
    """A path-like setting of an objective (``x/y.tsv`` or a list of them) made absolute against the
    repository root; ``None`` for a file the user downloads (:func:`_users_file`)."""

    def is_path(v) -> bool:
        return isinstance(v, str) and "/" in v and bool(Path(v).suffix)

    if isinstance(value, list) and value and all(is_path(v) for v in value):
        kept = [str(root / v) for v in value if not _users_file(v, root)]
        return kept or None
    if is_path(value):
        return None if _users_file(value, root) else str(root / value)
    return value


def tiny_recipe_config(
    recipe: Path, model_dir: Path, directory: Path, swap_all: bool = False, max_length: int = 64, max_records: int = 0
) -> dict:
    """``recipe``'s config with the backbone swapped for ``model_dir``, every training file the user builds
    (every one, with ``swap_all``) swapped for a bundled sample, other files made absolute (recipes name
    them relative to the repository root; a missing bundled file stays missing and fails), objective files
    the user downloads (EASE's Wikipedia2Vec vectors and entity titles) set to null, and evaluation on the
    bundled STS-B sample; ``max_records``
    (when > 0) reads only the first records of each training file."""
    import yaml

    root = Path(__file__).resolve().parents[1]
    config = yaml.safe_load(recipe.read_text(encoding="utf-8"))
    model = config["model"]
    model["encoder"]["model"] = str(model_dir)
    model["encoder"]["max_length"] = min(int(model["encoder"].get("max_length") or max_length), max_length)
    data = config.setdefault("data", {})
    train = data.setdefault("train", {})
    for objective in model["objectives"]:
        init = objective.setdefault("init_args", {})
        for key, value in list(init.items()):
            init[key] = _resolve_files(value, root)
        if objective["class_path"].endswith(".Matryoshka"):  # prefix sizes of the tiny model's 32 dimensions
            init["dims"] = [32, 16]
        if init.get("own_layers"):  # GaussCSE's own top layers: one, of the tiny model's two
            init["own_layers"] = 1
        name = _objective_name(objective["class_path"], init)
        source = train.get(name)
        source = {"path": source} if isinstance(source, str) else dict(source or {})
        if swap_all or not source.get("path") or _users_file(source["path"], root):
            path, columns = recipe_training_file(objective, directory)
            source.update(path=str(path), columns=columns)
        else:
            source["path"] = str(root / source["path"])
        if max_records:
            source["max_records"] = max_records
        train[name] = source
    model["evaluation"] = {
        **(model.get("evaluation") or {}),
        "val_tasks": ["stsb-dev"],
        "test_tasks": ["stsb-test"],
        "data_dir": str(EVALUATION_DATA_DIR),
    }
    return config


def _objective_name(class_path: str, init_args: dict | None = None) -> str:
    from unisent.io import import_object

    return import_object(class_path).name_in_recipe(init_args)


@pytest.fixture
def tiny_recipe(tiny_bert_dir, tmp_path):
    """``tiny_recipe(recipe, **kw) -> Path``: a copy of ``recipe`` on the tiny BERT and the bundled samples
    (see :func:`tiny_recipe_config`), written to the test's ``tmp_path``."""
    import yaml

    def write(recipe: Path, **kw) -> Path:
        config = tiny_recipe_config(recipe, tiny_bert_dir, tmp_path, **kw)
        out = tmp_path / f"tiny-{recipe.parent.name}-{recipe.name}"
        out.write_text(yaml.safe_dump(config, sort_keys=False), encoding="utf-8")
        return out

    return write


@pytest.fixture
def tiny_unified(tiny_recipe, tmp_path):
    """The unified recipe (recipes/unified/minilm-cpu.yaml) on the tiny model and 48 records per objective, 4
    steps, no validation; ``reverse``: CMLM (sized by the vocabulary) before AMR (which extends it); ``keep``:
    only these objective classes (``("EASE", "AMRSimCSE")``); keyword arguments set ``trainer`` keys.
    Returns the recipe's path."""
    import yaml

    recipe = Path(__file__).resolve().parents[1] / "recipes" / "unified" / "minilm-cpu.yaml"

    def write(reverse: bool = False, keep: tuple[str, ...] = (), **overrides) -> Path:
        path = tiny_recipe(recipe, max_records=48)
        config = yaml.safe_load(path.read_text(encoding="utf-8"))
        if reverse:
            config["model"]["objectives"].reverse()
        if keep:  # only these objectives (by class name), with their data
            model = config["model"]
            model["objectives"] = [o for o in model["objectives"] if o["class_path"].rsplit(".", 1)[1] in keep]
            names = {"EASE": "ease", "AMRSimCSE": "amr", "GaussCSE": "gausscse", "CMLM": "cmlm"}
            config["data"]["train"] = {
                k: v for k, v in config["data"]["train"].items() if k in {names[c] for c in keep}
            }
        sizes = {"gausscse": 8, "ease": 8, "amr": 4, "cmlm": 4, "bitext": 4}
        config["data"]["batch_size"] = {k: v for k, v in sizes.items() if k in config["data"]["train"]}
        config["data"]["cache_dir"] = str(tmp_path / "cache")
        config["model"]["train"]["weight_schedule"] = {} if keep else {"bitext": [[0, 0.0], [2, 0.2]]}
        config["model"]["evaluation"]["val_tasks"] = []
        config["trainer"].update(max_steps=4, val_check_interval=None, log_every_n_steps=1, enable_progress_bar=False)
        config["trainer"]["logger"]["init_args"].update(save_dir=str(tmp_path / "runs"), name="unified")
        config["trainer"].update(overrides)
        path.write_text(yaml.safe_dump(config, sort_keys=False), encoding="utf-8")
        return path

    return write


@pytest.fixture
def unisent_cli():
    """Run the ``unisent`` command in this process; it must succeed."""

    def run(*args: str) -> None:
        from unisent.cli import main

        try:
            main(list(args))
        except SystemExit as done:
            assert done.code in (0, None), f"unisent {' '.join(args)} exited with {done.code}"

    return run


def fit_recipe(recipe: Path, runs: Path, *args: str, version: str | None = None) -> Path:
    """``unisent fit -c recipe`` in this process, logged under ``runs`` (as ``version``: the logger's version, when
    given), with ``args`` appended (they win over the recipe's settings); a failing run raises, as
    ``unisent.cli.main`` does. The run folder: ``runs/<the recipe's logger name>/<version>`` (without ``version``,
    the highest ``version_N`` there)."""
    import re

    import yaml

    from unisent.cli import main

    named = [f"--trainer.logger.init_args.version={version}"] if version is not None else []
    main(["fit", "-c", str(recipe), f"--trainer.logger.init_args.save_dir={runs}", *named, *args])
    logs = runs / yaml.safe_load(recipe.read_text(encoding="utf-8"))["trainer"]["logger"]["init_args"]["name"]
    if version is not None:
        return logs / version
    return max((p for p in logs.iterdir() if re.fullmatch(r"version_\d+", p.name)), key=lambda p: int(p.name[8:]))


def run_cli(
    args, *, env: dict[str, str] | None = None, cwd: str | Path | None = None, timeout: float = 600
) -> subprocess.CompletedProcess:
    """``python -m unisent.cli ARGS`` as a forked child of this test process, which has imported torch, Lightning
    and transformers already (a fresh interpreter spends 8-10 s of a 2-core CPU on that before the command starts):
    ``subprocess.run(..., capture_output=True, text=True)``'s result, with ``-N`` when signal N ended it (a fault
    point's SIGKILL). ``env`` is the whole environment, as for ``subprocess`` (its ``PYTHONPATH`` goes on
    ``sys.path``); ``cwd`` is first on ``sys.path``, as ``python -m`` puts it. The child gets default signal
    handlers and loads the installed plugins again. For tests whose subject is not a fresh interpreter: those
    (the first import, what a new process loads, a DDP launch, which starts ``sys.argv`` again) use ``subprocess``.
    ``args`` may start with ``sys.executable, "-m", "unisent.cli"``, which are dropped."""
    import signal
    import tempfile
    import time

    args = [str(a) for a in args]
    if args[:3] == [sys.executable, "-m", "unisent.cli"]:
        args = args[3:]
    folder = Path(tempfile.mkdtemp(prefix="run-cli-"))
    for stream in (sys.stdout, sys.stderr):
        stream.flush()
    pid = os.fork()
    if pid == 0:
        _cli_child(folder, args, env, cwd)  # never returns
    start = time.monotonic()
    while not (ended := os.waitpid(pid, os.WNOHANG))[0]:
        if time.monotonic() - start > timeout:
            os.killpg(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            raise subprocess.TimeoutExpired(["unisent", *args], timeout)
        time.sleep(0.05)
    status = ended[1]
    code = -os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)
    out, err = ((folder / name).read_text(encoding="utf-8", errors="replace") for name in ("stdout", "stderr"))
    shutil.rmtree(folder, ignore_errors=True)
    return subprocess.CompletedProcess(["unisent", *args], code, out, err)


def _cli_child(folder: Path, args: list[str], env: dict[str, str] | None, cwd: str | Path | None) -> None:
    """:func:`run_cli`'s child: its output into ``folder``, then ``unisent.cli.main(args)``; ends the process."""
    import logging
    import signal

    code = 1
    try:
        os.setpgid(0, 0)
        old = {id(sys.stdout): "stdout", id(sys.stderr): "stderr"}
        for fd, name in ((1, "stdout"), (2, "stderr")):
            os.dup2(os.open(folder / name, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), fd)
        sys.stdout = open(1, "w", buffering=1, encoding="utf-8", errors="replace", closefd=False)  # noqa: SIM115
        sys.stderr = open(2, "w", buffering=1, encoding="utf-8", errors="replace", closefd=False)  # noqa: SIM115
        for logger in [logging.getLogger(), *logging.Logger.manager.loggerDict.values()]:
            for handler in getattr(logger, "handlers", []):  # handlers made on pytest's captured streams
                if isinstance(handler, logging.StreamHandler) and id(handler.stream) in old:
                    handler.setStream(getattr(sys, old[id(handler.stream)]))
        signal.signal(signal.SIGINT, signal.default_int_handler)
        for number in (signal.SIGTERM, signal.SIGUSR1, signal.SIGUSR2):
            signal.signal(number, signal.SIG_DFL)
        if env is not None:
            os.environ.clear()
            os.environ.update(env)
        if cwd is not None:
            os.chdir(cwd)
        sys.path[:0] = [os.getcwd(), *(p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p)]
        import unisent.plugins
        from unisent.cli import main

        unisent.plugins.reset()
        try:
            main(args)
            code = 0
        except SystemExit as done:
            code = done.code if isinstance(done.code, int) else 0 if done.code is None else 1
            if not isinstance(done.code, (int, type(None))):
                print(done.code, file=sys.stderr)
    except BaseException:  # noqa: BLE001 - as an uncaught exception ends a process: its traceback, status 1
        import traceback

        traceback.print_exc()
    finally:
        for stream in (sys.stdout, sys.stderr):
            stream.flush()
        os._exit(code)


@pytest.fixture
def tiny_quickstart(tiny_bert_dir, tmp_path):
    """``tiny_quickstart(*args, **env) -> (command, environment)``: ``unisent fit`` of the quickstart recipe on the
    tiny BERT (2 steps, batch 8, logs under ``tmp_path / "runs"``) with ``args`` appended, to run in a subprocess
    whose environment is offline, one thread, plus ``env``."""

    def make(*args: str, **env: str) -> tuple[list[str], dict[str, str]]:
        command = [
            sys.executable,
            "-m",
            "unisent.cli",
            "fit",
            "-c",
            str(Path(__file__).resolve().parents[1] / "recipes/quickstart.yaml"),
        ]
        command += ["--trainer.max_steps=2", f"--model.encoder.model={tiny_bert_dir}", "--data.batch_size=8"]
        command += [f"--trainer.logger.init_args.save_dir={tmp_path / 'runs'}", *args]
        offline = {"OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "WANDB_MODE": "offline"}
        return command, {**os.environ, **offline, "TOKENIZERS_PARALLELISM": "false", **env}

    return make


# ------------------------------------------------------------------- object storage (s3://)
@pytest.fixture(scope="session")
def _moto_server():
    """A local S3-compatible server (moto's, on 127.0.0.1, a free port) for the session; its endpoint URL."""
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    yield f"http://{host}:{port}"
    server.stop()


@pytest.fixture
def s3_bucket(_moto_server, monkeypatch, request):
    """``s3://<a fresh bucket>`` on the local server, with ``AWS_ENDPOINT_URL`` and test credentials set in
    ``os.environ`` (subprocesses started with ``os.environ`` reach it too)."""
    import re
    import uuid

    import fsspec
    from s3fs import S3FileSystem

    env = {
        "AWS_ENDPOINT_URL": _moto_server,
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": "us-east-1",
    }
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    for key in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "FSSPEC_S3_ENDPOINT_URL"):
        monkeypatch.delenv(key, raising=False)
    S3FileSystem.clear_instance_cache()  # no client made for another endpoint
    name = re.sub(r"[^a-z0-9-]", "-", request.node.name.lower())[:40].strip("-") + "-" + uuid.uuid4().hex[:8]
    fsspec.filesystem("s3", skip_instance_cache=True).mkdir(name)
    yield f"s3://{name}"
    S3FileSystem.clear_instance_cache()
