"""The harness of the hostile-model corpus (issue 46): tiny models of every kind unisent reads (``Bases``),
each entry point that reads them (``ENTRIES``), and a runner that feeds one hostile copy of a model to one
entry point in a forked child and judges how it ended (``run_case``).

Every run gets a fresh folder: ``model/`` (or ``runs/q/version_0/...``, ``model.ckpt``, ``data/``) copied
from a base and made hostile by its case, a 0600 ``secret.txt`` beside it (outside the model's folder),
``evil_mod.py`` (importing it writes the marker ``PWNED``) and the command's outputs (``out/``,
``vectors.npy``, ``runs/``). The child is a fork of the test process (unisent, torch, Lightning already
imported: a case costs what the command costs, not an interpreter start); it runs with ``""`` first on
``sys.path`` (as ``python -c`` and notebooks do, so ``evil_mod`` in the current directory is importable) and
with its address space capped (``RLIMIT_AS``: what the process had mapped plus :data:`ADDRESS_SPACE`), so an
allocation sized by a file fails instead of taking the machine's memory; its peak resident set comes back
from ``wait4`` and must stay under :data:`RSS_BOUND` above the parent's.

Expected of every run (``Outcome.problems`` lists what is not): it ends within :data:`TIMEOUT`; the marker
is absent and ``evil_mod`` was not imported; the secret appears in no output file and not on
stdout/stderr; no link in ``out/`` leaves it; memory stays bounded; and it fails in exactly one line
(``unisent CMD: error: ...`` on stderr, no traceback; for ``unisent.load`` an exception whose message is
one line) naming the file and field of the case (``Case.says``). An entry point that does not read the
hostile file (``Case.may_pass``) may instead succeed.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import resource
import shutil
import signal
import stat
import sys
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SAMPLES = ROOT / "samples"
STS = ROOT / "unisent" / "resources" / "sts" / "stsbenchmark"
#: what the file outside every model's folder holds: it must reach no output
SECRET = "UNISENT-SECRET-d41d8cd98f00b204"
#: seconds one run may take before it counts as a hang
TIMEOUT = float(os.environ.get("HOSTILE_TIMEOUT", "30"))
#: address space a run may map beyond what the forked process had (RLIMIT_AS)
ADDRESS_SPACE = 3 << 30
#: peak resident memory a run may add to the parent's
RSS_BOUND = 1536 << 20
ENV = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "WANDB_MODE": "offline", "TOKENIZERS_PARALLELISM": "false"}
ERROR_LINE = re.compile(r"^unisent[\w -]*: error: ")
EVIL_MOD = """import pathlib
pathlib.Path(__file__).with_name("PWNED").write_text("evil_mod was imported")


class Evil:
    def __init__(self, *args, **kwargs):
        pathlib.Path(__file__).with_name("PWNED").write_text("evil_mod.Evil was called")
"""
OUT_OF_MEMORY = ("MemoryError", "can't allocate memory", "Cannot allocate memory", "std::bad_alloc")


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


def _write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def recipe(path: Path, encoder: str, *, teacher: str | None = None, data_dir: Path, sentences: Path) -> Path:
    """A one-step recipe on ``encoder`` (SimCSE, or Distill from ``teacher``), logging to ``runs/q``."""
    objective = (
        {"class_path": "unisent.objectives.Distill", "init_args": {"teacher": teacher}}
        if teacher
        else {"class_path": "unisent.objectives.SimCSE", "init_args": {"supervised": False}}
    )
    config = {
        "seed_everything": 1,
        "model": {
            "encoder": {"model": encoder, "max_length": 16},
            "objectives": [objective],
            "evaluation": {"val_tasks": [], "test_tasks": ["stsb-dev"], "data_dir": str(data_dir)},
        },
        "data": {"train": {"distill" if teacher else "simcse": {"path": str(sentences)}}, "batch_size": 2},
        "trainer": {
            "max_steps": 1,
            "precision": "32-true",
            "enable_progress_bar": False,
            "enable_model_summary": False,
            "logger": {
                "class_path": "lightning.pytorch.loggers.CSVLogger",
                "init_args": {"save_dir": "runs", "name": "q"},
            },
        },
    }
    return _write(path, json.dumps(config, indent=1))  # JSON is YAML


def build_bases(root: Path, tiny: Path) -> Bases:
    """Every kind of model, tiny (about 15 s on 2 cores): built in this process, the run in a fork."""
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
        _write(data / name, "".join((STS / name).read_text(encoding="utf-8").splitlines(keepends=True)[:20]))
    sentences = _write(root / "sentences.txt", "".join(f"{s}\n" for s in _sample_sentences()[:16]))
    bases = Bases(
        root, tiny, encoder, st, st_encoder, retrofit, onnx, root / "runs/q/version_0", root / "data", sentences
    )
    fit = recipe(root / "fit.yaml", str(encoder), data_dir=bases.data, sentences=sentences)
    code, _, err, *_ = fork_run(root, lambda: _cli(["fit", "-c", str(fit)]), timeout=300)
    if code != 0 or not (bases.run / "checkpoints" / "last.ckpt").is_file():
        raise RuntimeError(f"the base run failed ({code}): {err[-3000:]}")
    return bases


def _sample_sentences() -> list[str]:
    return (SAMPLES / "sentences.txt").read_text(encoding="utf-8").splitlines()


# ------------------------------------------------------------------------------------------ contexts
@dataclass
class Context:
    """One run's folder: the hostile model (``model``) and what the case may point at."""

    directory: Path
    bases: Bases
    model: Path = Path()

    @property
    def marker(self) -> Path:
        return self.directory / "PWNED"

    @property
    def secret(self) -> Path:
        return self.directory / "secret.txt"

    @property
    def touch(self) -> str:
        """The payload's shell command: creating the marker."""
        return f"touch {self.marker}"


def _copy(source: Path, target: Path) -> Path:
    if source.is_dir():
        shutil.copytree(source, target, symlinks=True)
    else:
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(source, target)
    return target


#: kind -> (the base it copies, where the model lies in the run's folder)
KINDS: dict[str, tuple[str, str]] = {
    "encoder": ("encoder", "model"),
    "st-encoder": ("st_encoder", "model"),
    "st": ("st", "model"),
    "retrofit": ("retrofit", "model"),
    "onnx": ("onnx", "model"),
    "run": ("run", "runs/q/version_0/encoder"),
    "ckpt": ("run", "runs/q/version_0/checkpoints/last.ckpt"),
    "data": ("data", "data"),
}


def prepare(kind: str, entry: str, bases: Bases, directory: Path) -> Context:
    """A fresh run folder with a benign copy of ``kind``'s base at ``Context.model``."""
    if directory.exists():
        shutil.rmtree(directory)
    directory.mkdir(parents=True)
    ctx = Context(directory, bases)
    ctx.secret.write_text(f"{SECRET}\n", encoding="utf-8")
    ctx.secret.chmod(0o600)
    _write(directory / "evil_mod.py", EVIL_MOD)
    base, where = KINDS[kind]
    if kind in ("run", "ckpt"):
        run = directory / "runs/q/version_0"
        _copy(bases.run / "config.yaml", run / "config.yaml")
        _copy(bases.run / ("encoder" if kind == "run" else "checkpoints/last.ckpt"), directory / where)
    elif entry == "export-run":  # the model as a run's encoder/ folder, beside the base run's config.yaml
        where = "runs/q/version_0/encoder"
        _copy(bases.run / "config.yaml", directory / "runs/q/version_0/config.yaml")
        _copy(getattr(bases, base), directory / where)
    else:
        _copy(getattr(bases, base), directory / where)
    ctx.model = directory / where
    return ctx


# ------------------------------------------------------------------------------------- entry points
def _cli(argv: list[str]) -> tuple[int, str]:
    """``unisent ARGV`` in this process: (exit status, "")."""
    from unisent.cli import main

    try:
        main([str(a) for a in argv])
    except SystemExit as done:
        if isinstance(done.code, str):
            print(done.code, file=sys.stderr)
            return 1, ""
        return done.code or 0, ""
    return 0, ""


def _load(ctx: Context, backend: str = "torch") -> tuple[int, str]:
    """``unisent.load(DIR)`` and one ``encode``, as a user's program: (0, "") or (1, the exception's message)."""
    import unisent

    try:
        model = unisent.load(str(ctx.model), backend=backend)
        graphs = {"graphs": ["(c / cat)"]} if type(model).__name__ == "RetrofittedEncoder" else {}
        model.encode(["A cat sits."], **graphs)
    except Exception as err:  # noqa: BLE001 - what a user's program sees is the point
        return 1, f"{type(err).__name__}: {err}"
    return 0, ""


def _fit(ctx: Context, *extra: str, teacher: bool = False, command: str = "fit", start: str | None = None):
    b = ctx.bases
    path = recipe(
        ctx.directory / "recipe.yaml",
        start or str(b.encoder),
        teacher=str(ctx.model) if teacher else None,
        data_dir=b.data,
        sentences=b.sentences,
    )
    return lambda: _cli([command, "-c", str(path), *extra])


def _encode(ctx: Context, *extra: str):
    out = ctx.directory / "vectors.npy"
    return lambda: _cli(
        ["encode", "--model", ctx.model, "--input", ctx.bases.sentences, "--output", out, "--quiet", *extra]
    )


#: entry point -> what it runs for a context (a function of no arguments returning (exit status, API message))
ENTRIES: dict[str, Callable[[Context], Callable[[], tuple[int, str]]]] = {
    "load": lambda ctx: lambda: _load(ctx),
    "load-onnx": lambda ctx: lambda: _load(ctx, "onnx"),
    "encode": lambda ctx: _encode(ctx),
    "encode-onnx": lambda ctx: _encode(ctx, "--backend", "onnx"),
    "evaluate": lambda ctx: (
        lambda: _cli(["evaluate", "--model", ctx.model, "--tasks", "stsb-dev", "--data_dir", ctx.bases.data, "--quiet"])
    ),
    "export": lambda ctx: (
        lambda: _cli(["export", ctx.model, "--format", "sentence-transformers", "--out", ctx.directory / "out"])
    ),
    "export-run": lambda ctx: (
        lambda: _cli(["export", ctx.model, "--format", "sentence-transformers", "--out", ctx.directory / "out"])
    ),
    "fit-teacher": lambda ctx: _fit(ctx, teacher=True),
    "fit-start": lambda ctx: _fit(ctx, start=str(ctx.model)),
    "fit-ckpt": lambda ctx: _fit(ctx, "--ckpt_path", str(ctx.model), "--trainer.max_steps=2"),
    "test-ckpt": lambda ctx: _fit(ctx, "--ckpt_path", str(ctx.model), command="test"),
    "evaluate-data": lambda ctx: (
        lambda: _cli(
            ["evaluate", "--model", ctx.bases.encoder, "--tasks", "stsb-dev", "--data_dir", ctx.model, "--quiet"]
        )
    ),
    "fit-data": lambda ctx: _fit(
        ctx, f"--model.evaluation.data_dir={ctx.model}", "--model.evaluation.val_tasks=[stsb-dev]"
    ),
}
#: the entry points that read each kind of model
KIND_ENTRIES: dict[str, tuple[str, ...]] = {
    "encoder": ("load", "encode", "evaluate", "export", "export-run", "fit-teacher", "fit-start"),
    "st-encoder": ("load", "encode", "evaluate", "export", "export-run", "fit-teacher", "fit-start"),
    "st": ("load", "encode", "evaluate", "export", "fit-teacher", "fit-start"),
    "retrofit": ("load", "encode", "evaluate", "export"),
    "onnx": ("load-onnx", "encode-onnx"),
    "run": ("load", "encode", "evaluate", "export"),
    "ckpt": ("load", "encode", "evaluate", "export", "fit-ckpt", "test-ckpt"),
    "data": ("evaluate-data", "fit-data"),
}


# ---------------------------------------------------------------------------------------------- cases
@dataclass(frozen=True)
class Case:
    """One hostile model.

    Attributes:
        name: the case's id.
        kind: which model it is a copy of (:data:`KINDS`).
        input: what is hostile about it, for the table.
        make: turns ``ctx.model`` (a benign copy) hostile.
        says: what the one error line must contain: the file, and the field where one applies.
        entries: the entry points it is fed to (default: every one that reads its kind).
        may_pass: entry points that do not read the hostile file: they may also succeed (exit 0).
    """

    name: str
    kind: str
    input: str
    make: Callable[[Context], object]
    says: tuple[str, ...]
    entries: tuple[str, ...] = ()
    may_pass: tuple[str, ...] = ()

    def entry_points(self) -> tuple[str, ...]:
        return self.entries or KIND_ENTRIES[self.kind]


@dataclass
class Outcome:
    """How one run of a case through one entry point ended."""

    case: str
    entry: str
    returncode: int | None
    seconds: float
    stdout: str
    stderr: str
    message: str = ""  # the exception's message (``unisent.load``)
    peak_rss: int = 0  # bytes above the parent's resident set at the fork
    problems: list[str] = field(default_factory=list)
    imported: list[str] = field(default_factory=list)

    @property
    def line(self) -> str:
        """The one line: the API's message, else the error line, else stderr's (stdout's) last line."""
        if self.message:
            return self.message
        errors = [line for line in self.stderr.splitlines() if ERROR_LINE.match(line)]
        rest = errors or [x for x in self.stderr.splitlines() if x.strip()] or self.stdout.splitlines()
        return rest[-1] if rest else ""

    @property
    def ok(self) -> bool:
        return not self.problems


# --------------------------------------------------------------------------------------------- running
def _rss() -> int:
    with open("/proc/self/statm") as fh:
        return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def _mapped() -> int:
    with open("/proc/self/statm") as fh:
        return int(fh.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")


def fork_run(directory: Path, job: Callable[[], tuple[int, str]], timeout: float = TIMEOUT):
    """``job()`` in a forked child, in ``directory``: (exit status or ``None`` for a hang, stdout, stderr,
    the API's message, peak RSS above this process's, new top-level modules imported)."""
    logs = directory.parent / f".{directory.name}"
    logs.mkdir(exist_ok=True)
    result = logs / "result.json"
    result.unlink(missing_ok=True)
    (logs / "rss").unlink(missing_ok=True)
    base_rss = _rss()
    for stream in (sys.stdout, sys.stderr):
        stream.flush()
    pid = os.fork()
    if pid == 0:  # the child: never returns
        try:
            os.setpgid(0, 0)
            (logs / "rss").write_text(str(_rss()))
            for fd, name in ((1, "stdout"), (2, "stderr")):
                os.dup2(os.open(logs / name, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), fd)
            sys.stdout = open(1, "w", buffering=1, encoding="utf-8", errors="replace", closefd=False)  # noqa: SIM115
            sys.stderr = open(2, "w", buffering=1, encoding="utf-8", errors="replace", closefd=False)  # noqa: SIM115
            resource.setrlimit(resource.RLIMIT_AS, (_mapped() + ADDRESS_SPACE, resource.RLIM_INFINITY))
            os.chdir(directory)
            os.environ.update(ENV)
            sys.path.insert(0, "")  # as python -c and notebooks: modules in the current directory import
            before = {name.partition(".")[0] for name in sys.modules}
            try:
                code, message = job()
            except BaseException:  # noqa: BLE001 - a traceback is what the run reports
                traceback.print_exc()
                code, message = 1, ""
            new = sorted({name.partition(".")[0] for name in sys.modules} - before)
            result.write_text(json.dumps({"code": code, "message": message, "new": new}))
        finally:
            for stream in (sys.stdout, sys.stderr):
                with contextlib.suppress(Exception):
                    stream.flush()
            os._exit(0)
    start = time.monotonic()
    status = usage = None
    while time.monotonic() - start < timeout:
        done, status, usage = os.wait4(pid, os.WNOHANG)
        if done:
            break
        time.sleep(0.02)
    else:
        with contextlib.suppress(OSError):
            os.killpg(pid, signal.SIGKILL)
        _, status, usage = os.wait4(pid, 0)
        status = None
    seconds = time.monotonic() - start
    out, err = ((logs / name).read_text(encoding="utf-8", errors="replace") for name in ("stdout", "stderr"))
    start_rss = int((logs / "rss").read_text() or 0) if (logs / "rss").is_file() else base_rss
    peak = max(0, usage.ru_maxrss * 1024 - start_rss)
    if status is None:
        return None, out, err, "", peak, [], seconds
    if os.WIFSIGNALED(status):
        return -os.WTERMSIG(status), out, err, "", peak, [], seconds
    data = json.loads(result.read_text()) if result.is_file() else {"code": 1, "message": "", "new": []}
    return data["code"], out, err, data["message"], peak, data["new"], seconds


def _leaks(directory: Path) -> list[str]:
    """Output files (regular files, links not followed) that hold the secret, and links in ``out/`` that
    leave it."""
    found = []
    for folder, dirs, files in os.walk(directory):
        for name in files + dirs:
            path = Path(folder, name)
            info = path.lstat()
            rel = str(path.relative_to(directory))
            if stat.S_ISLNK(info.st_mode):
                inside = directory / "out"
                if rel.startswith("out" + os.sep) and not Path(os.path.realpath(path)).is_relative_to(inside):
                    found.append(f"{rel} is a link out of the export")
            elif stat.S_ISREG(info.st_mode) and name not in ("secret.txt",) and info.st_size < 64 << 20:
                if SECRET.encode() in path.read_bytes():
                    found.append(f"{rel} holds the secret")
    return found


def judge(case: Case, entry: str, ctx: Context, outcome: Outcome) -> Outcome:
    """Fill ``outcome.problems``."""
    problems = outcome.problems
    code, text = outcome.returncode, outcome.stdout + outcome.stderr + outcome.message
    if code is None:
        problems.append(f"no answer within {TIMEOUT:.0f} s (a hang)")
    elif code < 0:
        problems.append(f"killed by signal {-code}")
    if ctx.marker.exists():
        problems.append(f"the payload ran ({ctx.marker.read_text(errors='replace').strip() or 'PWNED created'})")
    if "evil_mod" in outcome.imported:
        problems.append("evil_mod (in the current directory) was imported")
    if SECRET in text:
        problems.append("the secret is in the output")
    problems += _leaks(ctx.directory)
    if outcome.peak_rss > RSS_BOUND or any(s in text for s in OUT_OF_MEMORY):
        problems.append(f"memory: peak {outcome.peak_rss >> 20} MiB above the parent's (bound {RSS_BOUND >> 20} MiB)")
    if "Traceback (most recent call last)" in outcome.stderr:
        problems.append("a Python traceback")
    if code == 0:
        if entry not in case.may_pass:
            problems.append("exit 0: the hostile file was accepted")
        return outcome
    if code is None or code < 0:
        return outcome
    if outcome.message:
        lines = [outcome.message]
        if "\n" in outcome.message.strip():
            problems.append(f"the exception's message is {len(outcome.message.strip().splitlines())} lines")
    else:
        lines = [line for line in outcome.stderr.splitlines() if ERROR_LINE.match(line)]
        if len(lines) != 1:
            problems.append(f"{len(lines)} error lines on stderr, expected one")
    missing = [s for s in case.says if lines and s not in lines[-1]]
    if missing:
        problems.append(f"the line does not name {', '.join(map(repr, missing))}")
    return outcome


def run_case(case: Case, entry: str, bases: Bases, root: Path, timeout: float = TIMEOUT) -> Outcome:
    """Build ``case`` for ``entry`` in ``root/<case>--<entry>`` and run it there in a fork."""
    ctx = prepare(case.kind, entry, bases, root / f"{case.name}--{entry}")
    case.make(ctx)
    job = ENTRIES[entry](ctx)
    code, out, err, message, peak, new, seconds = fork_run(ctx.directory, job, timeout)
    outcome = Outcome(case.name, entry, code, seconds, out, err, message, peak, imported=new)
    return judge(case, entry, ctx, outcome)
