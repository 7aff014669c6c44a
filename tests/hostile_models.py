"""The harness of the hostile-model corpus (issue 46; the benign models and the cases: hostile_model_cases.py and
hostile_run_cases.py): the entry points that read each kind of model (``ENTRIES``), and ``run_cases``, which
makes fresh copies of models hostile and feeds each to an entry point in a forked child (several at a time).

A run's folder holds the model (``model/``, ``runs/q/version_0/...``, ``data/``), a 0600 ``secret.txt`` beside
it, ``evil_mod.py`` (importing it writes the marker ``PWNED``) and the command's outputs. The child is a fork of
this process (everything already imported: a run costs what its command costs), with ``""`` first on
``sys.path`` (as ``python -c`` and notebooks: ``evil_mod`` is importable), an import hook recording every
module looked up, and its address space capped (``RLIMIT_AS``: mapped + :data:`ADDRESS_SPACE`), so an
allocation sized by a file fails instead of taking the machine's memory; its peak RSS comes from ``wait4``.

``judge`` expects of every run: it ends within :data:`TIMEOUT`; no marker, ``evil_mod`` neither imported nor
looked up; the secret in no output file, not on stdout/stderr, no link out of ``out/``; peak RSS under
:data:`RSS_BOUND` above the child's start; and one error line (``unisent CMD: error: ...``, no traceback; for
``unisent.load`` a one-line exception message) naming the case's file and field (``Case.says``). An entry
point that does not read the hostile file (``Case.may_pass``) may succeed instead.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import resource
import shlex
import shutil
import signal
import stat
import sys
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

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
def write(path: Path, text: str) -> Path:
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
    logger = {"class_path": "lightning.pytorch.loggers.CSVLogger", "init_args": {"save_dir": "runs", "name": "q"}}
    config = {
        "seed_everything": 1,
        "model": {
            "encoder": {"model": encoder, "max_length": 16},
            "objectives": [objective],
            "evaluation": {"val_tasks": [], "test_tasks": ["stsb-dev"], "data_dir": str(data_dir)},
        },
        "data": {"train": {"distill" if teacher else "simcse": {"path": str(sentences)}}, "batch_size": 2},
        "trainer": {"max_steps": 1, "precision": "32-true", "enable_progress_bar": False, "logger": logger}
        | {"enable_model_summary": False},
    }
    return write(path, json.dumps(config, indent=1))  # JSON is YAML


# ------------------------------------------------------------------------------------------ contexts
@dataclass
class Context:
    """One run's folder (``directory``): the hostile model (``model``), the marker a payload would write, the
    secret outside the model's folder, and the payload's shell command (``touch``)."""

    directory: Path
    bases: Any  # hostile_model_cases.Bases
    model: Path = Path()
    command: str = ""

    def __post_init__(self) -> None:
        self.marker, self.secret = self.directory / "PWNED", self.directory / "secret.txt"
        self.touch = f"touch {self.marker}"


def _copy(source: Path, target: Path) -> Path:
    target.parent.mkdir(parents=True, exist_ok=True)
    return shutil.copytree(source, target, symlinks=True) if source.is_dir() else shutil.copy2(source, target)


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
    "card": ("card", "train"),  # a training data folder: a dataset card (README.md) and its text file
    "saved": ("saved", "train"),  # a training data folder of datasets' save_to_disk
    "run-folder": ("run", "runs/q/version_0"),  # a whole run folder of unisent fit (merge reads it)
}


def prepare(kind: str, entry: str, bases: Any, directory: Path) -> Context:
    """A fresh run folder with a benign copy of ``kind``'s base at ``Context.model``."""
    if directory.exists():
        shutil.rmtree(directory)
    directory.mkdir(parents=True)
    ctx = Context(directory, bases)
    ctx.secret.write_text(f"{SECRET}\n", encoding="utf-8")
    ctx.secret.chmod(0o600)
    write(directory / "evil_mod.py", EVIL_MOD)
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
LOAD = "<unisent.load>"  # argv[0] of the Python entry point: [LOAD, model, backend]


def cli(argv: list[str]) -> tuple[int, str]:
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


def _load(model: str, backend: str) -> tuple[int, str]:
    """``unisent.load(model)`` and one ``encode``, as a user's program: (0, "") or (1, the exception's message)."""
    import unisent

    try:
        loaded = unisent.load(model, backend=backend)
        graphs = {"graphs": ["(c / cat)"]} if type(loaded).__name__ == "RetrofittedEncoder" else {}
        loaded.encode(["A cat sits."], **graphs)
    except Exception as err:  # noqa: BLE001 - what a user's program sees is the point
        return 1, f"{type(err).__name__}: {err}"
    return 0, ""


def job(argv: list[str]) -> Callable[[], tuple[int, str]]:
    """What runs in the child for ``argv`` (of :func:`entry_argv`)."""
    return (lambda: _load(argv[1], argv[2])) if argv[0] == LOAD else (lambda: cli(argv))


def _fit(ctx: Context, *extra: str, teacher: bool = False, command: str = "fit", start: str = "") -> list[str]:
    b, teacher_dir = ctx.bases, str(ctx.model) if teacher else None
    path = recipe(
        ctx.directory / "recipe.yaml",
        start or str(b.encoder),
        teacher=teacher_dir,
        data_dir=b.data,
        sentences=b.sentences,
    )
    return [command, "-c", str(path), *extra]


def _evaluate(model: Path, data: Path) -> list[str]:
    return ["evaluate", "--model", str(model), "--tasks", "stsb-dev", "--data_dir", str(data), "--quiet"]


def _encode(ctx: Context, *extra: str) -> list[str]:
    files = ["--input", str(ctx.bases.sentences), "--output", str(ctx.directory / "vectors.npy")]
    return ["encode", "--model", str(ctx.model), *files, "--quiet", *extra]


def _export(ctx: Context) -> list[str]:
    return ["export", str(ctx.model), "--format", "sentence-transformers", "--out", str(ctx.directory / "out")]


VALIDATE = ("--trainer.val_check_interval=1",)

#: entry point -> the command line it runs for a context (``[LOAD, model, backend]`` for ``unisent.load``)
ENTRIES: dict[str, Callable[[Context], list[str]]] = {
    "load": lambda ctx: [LOAD, str(ctx.model), "torch"],
    "load-onnx": lambda ctx: [LOAD, str(ctx.model), "onnx"],
    "encode": _encode,
    "encode-onnx": lambda ctx: _encode(ctx, "--backend", "onnx"),
    "evaluate": lambda ctx: _evaluate(ctx.model, ctx.bases.data),
    "export": _export,
    "export-run": _export,
    "fit-teacher": lambda ctx: _fit(ctx, teacher=True),
    "fit-start": lambda ctx: _fit(ctx, start=str(ctx.model)),
    "fit-ckpt": lambda ctx: _fit(ctx, "--ckpt_path", str(ctx.model), "--trainer.max_steps=2"),
    "test-ckpt": lambda ctx: _fit(ctx, "--ckpt_path", str(ctx.model), command="test"),
    "evaluate-data": lambda ctx: _evaluate(ctx.bases.encoder, ctx.model),
    "fit-data": lambda ctx: _fit(
        ctx, f"--model.evaluation.data_dir={ctx.model}", "--model.evaluation.val_tasks=[stsb-dev]", *VALIDATE
    ),
    "fit-train": lambda ctx: _fit(ctx, f"--data.train.simcse.path={ctx.model}"),
    "merge": lambda ctx: ["merge", str(ctx.model), str(ctx.bases.run), "--out", str(ctx.directory / "out")],
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
    "card": ("fit-train",),
    "saved": ("fit-train",),
    "run-folder": ("merge",),
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


def corpus() -> list[Case]:
    """Every case: hostile_model_cases.py (model directories), hostile_run_cases.py (runs, checkpoints, data),
    hostile_received_cases.py (training data folders, auto_map, .git, a run folder for merge),
    hostile_record_cases.py (sizes in records and module configs, malformed checkpoints' fields)."""
    import hostile_received_cases
    import hostile_record_cases
    import hostile_run_cases  # imports hostile_model_cases (tests/ on sys.path, or both in sys.modules)

    received = hostile_received_cases.CASES + hostile_record_cases.CASES
    return sys.modules["hostile_model_cases"].CASES + hostile_run_cases.CASES + received


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
    imported: list[str] = field(default_factory=list)
    command: str = ""  # the command line, for a table
    problems: list[str] = field(default_factory=list)

    @property
    def line(self) -> str:
        """The one line: the API's message, else the error line, else stderr's (stdout's) last line."""
        if self.message:
            return self.message
        errors = [line for line in self.stderr.splitlines() if ERROR_LINE.match(line)]
        rest = errors or [x for x in self.stderr.splitlines() if x.strip()] or self.stdout.splitlines()
        return rest[-1] if rest else ""

    ok = property(lambda self: not self.problems)


# --------------------------------------------------------------------------------------------- running
def _statm(field: int) -> int:
    """Bytes of this process: 0, mapped (its address space); 1, resident."""
    return int(Path("/proc/self/statm").read_text().split()[field]) * os.sysconf("SC_PAGE_SIZE")


class _Attempts:
    """A finder first on ``sys.meta_path`` that finds nothing and records every top-level module looked up."""

    seen: set[str] = set()

    def find_spec(self, fullname, path=None, target=None):
        self.seen.add(fullname.partition(".")[0])


def spawn(directory: Path, job: Callable[[], tuple[int, str]]) -> tuple[int, Path]:
    """Start ``job()`` in a forked child, in ``directory``: (its pid, the folder of its logs and result)."""
    logs = directory.parent / f".{directory.name}"
    logs.mkdir(exist_ok=True)
    for stale in ("result.json", "rss"):
        (logs / stale).unlink(missing_ok=True)
    for stream in (sys.stdout, sys.stderr):
        stream.flush()
    pid = os.fork()
    if pid:
        return pid, logs
    try:  # the child: never returns
        os.setpgid(0, 0)
        (logs / "rss").write_text(str(_statm(1)))
        for fd, name in ((1, "stdout"), (2, "stderr")):
            os.dup2(os.open(logs / name, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), fd)
        sys.stdout = open(1, "w", buffering=1, encoding="utf-8", errors="replace", closefd=False)  # noqa: SIM115
        sys.stderr = open(2, "w", buffering=1, encoding="utf-8", errors="replace", closefd=False)  # noqa: SIM115
        resource.setrlimit(resource.RLIMIT_AS, (_statm(0) + ADDRESS_SPACE, resource.RLIM_INFINITY))
        os.chdir(directory)
        os.environ.update(ENV)
        sys.path.insert(0, "")  # as python -c and notebooks: modules in the current directory import
        before = {name.partition(".")[0] for name in sys.modules}
        sys.meta_path.insert(0, _Attempts())
        try:
            code, message = job()
        except BaseException:  # noqa: BLE001 - a traceback is what the run reports
            traceback.print_exc()
            code, message = 1, ""
        new = sorted({name.partition(".")[0] for name in sys.modules} - before | _Attempts.seen)
        (logs / "result.json").write_text(json.dumps({"code": code, "message": message, "new": new}))
    finally:
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):
                stream.flush()
        os._exit(0)


def reap(pid: int, logs: Path, status: int | None, usage, seconds: float):
    """What a child left: (exit status, ``None`` for a hang or ``-signal``; stdout; stderr; the API's message;
    peak RSS above the child's at the fork; top-level modules imported or looked up; seconds)."""
    out, err = ((logs / name).read_text(encoding="utf-8", errors="replace") for name in ("stdout", "stderr"))
    rss = logs / "rss"
    peak = max(0, usage.ru_maxrss * 1024 - (int(rss.read_text() or 0) if rss.is_file() else 0))
    if status is None or os.WIFSIGNALED(status):
        return (None if status is None else -os.WTERMSIG(status)), out, err, "", peak, [], seconds
    result = logs / "result.json"
    data = json.loads(result.read_text()) if result.is_file() else {"code": 1, "message": "", "new": []}
    return data["code"], out, err, data["message"], peak, data["new"], seconds


def wait_all(children: dict, timeout: float = TIMEOUT, parallel: int = 1) -> dict:
    """Run ``{key: (directory, job)}`` in forked children, ``parallel`` at a time, each killed after
    ``timeout`` seconds: ``{key: reap(...)}``."""
    waiting, running, done = list(children), {}, {}
    while waiting or running:
        while waiting and len(running) < parallel:
            key = waiting.pop(0)
            running[key] = (*spawn(*children[key]), time.monotonic())
        time.sleep(0.02)
        for key, (pid, logs, start) in list(running.items()):
            ended, status, usage = os.wait4(pid, os.WNOHANG)
            if not ended and time.monotonic() - start > timeout:
                with contextlib.suppress(OSError):
                    os.killpg(pid, signal.SIGKILL)
                _, _, usage = os.wait4(pid, 0)
                ended, status = pid, None
            if ended:
                del running[key]
                done[key] = reap(pid, logs, status, usage, time.monotonic() - start)
    return done


def fork_run(directory: Path, job: Callable[[], tuple[int, str]], timeout: float = TIMEOUT):
    """``job()`` in a forked child, in ``directory`` (:func:`reap`'s tuple)."""
    return wait_all({0: (directory, job)}, timeout)[0]


def _leaks(directory: Path) -> list[str]:
    """Output files (regular files, links not followed) that hold the secret, and links in ``out/`` leaving it."""
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
            elif stat.S_ISREG(info.st_mode) and not name.startswith("secret") and info.st_size < 64 << 20:
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
        problems.append("evil_mod (in the current directory) was imported or looked up")
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


def run_cases(runs: list[tuple[Case, str]], bases: Any, root: Path, parallel: int = 1) -> dict:
    """``{(case name, entry): Outcome}`` of each ``(case, entry)``, built in ``root/<case>--<entry>`` and run in
    forks, ``parallel`` at a time."""
    contexts, children = {}, {}
    for case, entry in runs:
        ctx = contexts[case.name, entry] = prepare(case.kind, entry, bases, root / f"{case.name}--{entry}")
        case.make(ctx)
        argv = ENTRIES[entry](ctx)
        children[case.name, entry] = (ctx.directory, job(argv))
        ctx.command = shlex.join(["unisent", *argv] if argv[0] != LOAD else ["python", "-c", "unisent.load(MODEL)"])
    results = wait_all(children, TIMEOUT, parallel)
    outcomes = {}
    for case, entry in runs:
        code, out, err, message, peak, new, seconds = results[case.name, entry]
        outcome = Outcome(
            case.name, entry, code, seconds, out, err, message, peak, new, contexts[case.name, entry].command
        )
        outcomes[case.name, entry] = judge(case, entry, contexts[case.name, entry], outcome)
    return outcomes


def run_case(case: Case, entry: str, bases: Any, root: Path, prepared: Context | None = None) -> Outcome:
    """One case through one entry point (in ``prepared``, a context already made hostile, if given)."""
    if prepared is None:
        return run_cases([(case, entry)], bases, root)[case.name, entry]
    code, out, err, message, peak, new, seconds = fork_run(prepared.directory, job(ENTRIES[entry](prepared)))
    return judge(case, entry, prepared, Outcome(case.name, entry, code, seconds, out, err, message, peak, imported=new))
