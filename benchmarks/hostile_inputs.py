"""Hostile inputs: each case feeds one deliberately bad (or huge) input to the ``unisent`` command that
reads it, and checks how the command ends.

Expected of every case: it ends within the time bound; a refused input exits non-zero with ONE line on
stderr (``unisent COMMAND: error: ...``) that names the file, line, field or limit, no Python
traceback, and no partial output (no ``--output`` file, no ``--out`` directory, no run folder); an
input that is legitimately fine (a 1 MB sentence is truncated to the model's length) exits 0.

    python benchmarks/hostile_inputs.py                # every case, through the real CLI (subprocesses)
    python benchmarks/hostile_inputs.py --case fifo-encode --keep /tmp/hostile

prints a markdown table (case | input | command | outcome: exit code, seconds, the one line), as
docs/operations.md#hostile-inputs shows it. ``tests/test_hostile_inputs.py`` runs the same cases
in-process (``unisent.cli.main``).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import re
import shlex
import signal
import subprocess
import sys
import tempfile
import time
import zipfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RECIPE = ROOT / "recipes" / "quickstart.yaml"
SAMPLES = ROOT / "samples"
STSB_DEV = ROOT / "unisent" / "resources" / "sts" / "stsbenchmark" / "sts-dev.csv"
#: the bundled default model (loads offline)
MODEL = "minilm-l6"
#: seconds a case may take before it counts as a hang
TIMEOUT = 120
ENV = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "WANDB_MODE": "offline", "TOKENIZERS_PARALLELISM": "false"}
_ERROR_LINE = re.compile(r"^unisent[\w -]*: error: ")
#: options every case of a command passes, left out of the table's command column: option -> takes a value
SHARED_OPTIONS = {
    "--trainer.max_steps=1": False,
    "--data.batch_size=2": False,
    "--trainer.enable_progress_bar=false": False,
    "--trainer.logger.init_args.save_dir": True,
    "--trainer.default_root_dir": True,
    "--quiet": False,
}


@dataclass
class Case:
    """One hostile input.

    Attributes:
        name: the case's id.
        input: what the input is, for the table.
        build: writes the input into a fresh directory and returns the command's arguments (after ``unisent``).
        expect: ``error`` (non-zero exit, one error line containing ``says``) or ``ok`` (exit 0).
        says: text the error line (or, for ``ok``, stderr/stdout) must contain: the file, field or limit.
        absent: paths (relative to the case's directory) that must not exist afterwards.
        slow: left out of the default test run (``-m slow``).
    """

    name: str
    input: str
    build: Callable[[Path], list[str]]
    expect: str = "error"
    says: str = ""
    absent: tuple[str, ...] = ()
    slow: bool = False

    @staticmethod
    def command(words: list[str], directory: Path) -> str:
        """The command line, shortened for the table: paths relative to the case's directory or the
        repository, without the options every case of its command shares (:data:`SHARED_OPTIONS`)."""
        shown = []
        words = list(words)
        for i, word in enumerate(words):
            if word in SHARED_OPTIONS or (i and words[i - 1] in SHARED_OPTIONS and SHARED_OPTIONS[words[i - 1]]):
                continue
            text = str(word).replace(str(directory) + os.sep, "").replace(str(ROOT) + os.sep, "")
            shown.append(text if len(text) <= 40 else text[:37] + "...")
        return shlex.join(["unisent", *shown])


@dataclass
class Outcome:
    """How a case ended."""

    case: str
    returncode: int | None
    seconds: float
    stdout: str
    stderr: str
    problems: list[str] = field(default_factory=list)
    command: str = ""
    directory: str = ""

    @property
    def line(self) -> str:
        """The one line: the error line, else the last line of stderr, else of stdout."""
        errors = [line for line in self.stderr.splitlines() if _ERROR_LINE.match(line)]
        if errors:
            return errors[-1]
        rest = [line for line in self.stderr.splitlines() if line.strip()] or [
            line for line in self.stdout.splitlines() if line.strip()
        ]
        return rest[-1] if rest else ""

    @property
    def ok(self) -> bool:
        return not self.problems


# --------------------------------------------------------------------------------------------- inputs
def _fit(directory: Path, data: Path | str | None = None, *extra: str) -> list[str]:
    """``unisent fit`` of the quickstart recipe, one step, its run folder under ``directory/runs``."""
    return [
        "fit",
        "-c",
        str(RECIPE),
        "--data.train.simcse.path",
        str(data if data is not None else SAMPLES / "nli_triples.jsonl"),
        "--trainer.max_steps=1",
        "--data.batch_size=2",
        "--trainer.logger.init_args.save_dir",
        str(directory / "runs"),
        "--trainer.default_root_dir",
        str(directory),
        "--trainer.enable_progress_bar=false",
        *extra,
    ]


def _encode(directory: Path, source: Path, *extra: str, model: str | Path = MODEL) -> list[str]:
    """``unisent encode`` of ``source`` into ``directory/out.npy``."""
    return [
        "encode",
        "--model",
        str(model),
        "--input",
        str(source),
        "--output",
        str(directory / "out.npy"),
        "--quiet",
        *extra,
    ]


def _write(path: Path, data: bytes | str) -> Path:
    path.write_bytes(data.encode("utf-8") if isinstance(data, str) else data)
    return path


def _huge_line(path: Path, megabytes: int = 200) -> Path:
    """A one-line JSONL of ``megabytes`` MiB: one valid record whose anchor is one long word."""
    with path.open("wb") as fh:
        fh.write(b'{"anchor": "')
        block = b"a" * 2**20
        for _ in range(megabytes):
            fh.write(block)
        fh.write(b'", "positive": "b", "negative": "c"}\n')
    return path


def _triple(anchor: bytes) -> bytes:
    return b'{"anchor": "' + anchor + b'", "positive": "a cat sits", "negative": "a dog runs"}\n'


def _fifo(path: Path) -> Path:
    os.mkfifo(path)
    return path


def _loop(directory: Path, suffix: str) -> Path:
    first, second = directory / f"loop-a{suffix}", directory / f"loop-b{suffix}"
    first.symlink_to(second.name)
    second.symlink_to(first.name)
    return first


def _alias_bomb(path: Path) -> Path:
    """The billion laughs: nine aliases of nine aliases ... (9**10 values from 11 lines)."""
    lines = ['a0: &a0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    lines += [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 9)}]" for i in range(1, 10)]
    lines.append("trainer:\n  max_steps: *a9")
    return _write(path, "\n".join(lines) + "\n")


def _deep_amr(path: Path, levels: int = 100_000) -> Path:
    graph = "".join(f"(n{i} / thing :mod " for i in range(levels)) + "it" + ")" * levels
    return _write(path, f"# ::id deep\n# ::snt A very deep graph.\n{graph}\n")


def _sentence(megabytes: float = 1.0) -> str:
    words = ("the", "cat", "sat", "on", "a", "mat", "while", "zebras", "ran", "quickly")
    text, size, i = [], 0, 0
    while size < megabytes * 2**20:
        text.append(words[i % len(words)])
        size += len(text[-1]) + 1
        i += 1
    return " ".join(text)


def _eval_dir(directory: Path) -> Path:
    """Evaluation data whose STS-B dev file has a line with a column missing (6 of 7 fields)."""
    sts = directory / "evaluation" / "sts" / "stsbenchmark"
    sts.mkdir(parents=True)
    lines = STSB_DEV.read_text(encoding="utf-8").splitlines(keepends=True)[:20]
    lines.append("main-captions\tMSRvid\t2012test\t0099\t5.000\tonly one sentence of the pair\n")
    _write(sts / "sts-dev.csv", "".join(lines))
    return directory / "evaluation"


def _fake_ckpt(path: Path) -> Path:
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("notes.txt", "a zip archive, not a checkpoint")
    return path


def _bad_model_dir(directory: Path) -> Path:
    model = directory / "model"
    model.mkdir()
    _write(model / "config.json", '{"model_type": "bert", "hidden_size": ')
    return model


def _deep_json(path: Path, levels: int = 100_000) -> Path:
    return _write(path, "[" * levels + "]" * levels + "\n")


CASES: list[Case] = [
    Case(
        "amr-deep",
        "AMR graph nested 100,000 levels deep (PENMAN)",
        lambda d: [
            "data",
            "amr-linearize",
            "--input",
            str(_deep_amr(d / "deep.amr")),
            "--output",
            str(d / "out.jsonl"),
        ],
        says="nests deeper than 200 levels",
        absent=("out.jsonl",),
    ),
    Case(
        "jsonl-200mb-fit",
        "one-line 200 MB JSONL (training data)",
        lambda d: _fit(d, _huge_line(d / "huge.jsonl")),
        says="huge.jsonl:line 1: is longer than 16 MiB",
        absent=("runs",),
    ),
    Case(
        "jsonl-200mb-encode",
        "one-line 200 MB JSONL (encode input)",
        lambda d: _encode(d, _huge_line(d / "huge.jsonl"), "--column", "anchor"),
        says="huge.jsonl:line 1: is longer than 16 MiB",
        absent=("out.npy",),
    ),
    Case(
        "sentence-1mb-encode",
        "a 1 MB sentence (one txt line) and a short one",
        lambda d: _encode(d, _write(d / "long.txt", _sentence() + "\na short sentence\n")),
        expect="ok",
        says="1 of 2 inputs were longer than 256 tokens and were truncated",
    ),
    Case(
        "cell-1mb-encode",
        "a 1 MB csv cell (above csv's 128 KiB field limit)",
        lambda d: _encode(d, _write(d / "long.csv", f'text\n"{_sentence()}"\nshort\n')),
        expect="ok",
        says="were truncated",
    ),
    Case(
        "nul-jsonl-fit",
        "NUL bytes inside a JSONL record",
        lambda d: _fit(d, _write(d / "nul.jsonl", _triple(b"a cat\x00\x00sits") * 4)),
        says="nul.jsonl:line 1: holds a NUL byte",
        absent=("runs",),
    ),
    Case(
        "nul-txt-encode",
        "NUL bytes in a text file (UTF-16 read as UTF-8)",
        lambda d: _encode(d, _write(d / "utf16.txt", "a cat sits\nthe dog runs\n".encode("utf-16-le"))),
        says="utf16.txt:line 1: holds a NUL byte",
        absent=("out.npy",),
    ),
    Case(
        "utf8-fit",
        "invalid UTF-8 inside a JSONL record",
        lambda d: _fit(d, _write(d / "latin1.jsonl", _triple("café".encode()) * 3 + _triple(b"caf\xe9") * 3)),
        says="latin1.jsonl:line 4: cannot be decoded as utf-8",
        absent=("runs",),
    ),
    Case(
        "utf8-encode",
        "invalid UTF-8 in a text file",
        lambda d: _encode(d, _write(d / "latin1.txt", b"fine\ncaf\xe9 au lait\n")),
        says="latin1.txt:line 2: cannot be decoded as utf-8",
        absent=("out.npy",),
    ),
    Case(
        "push-to-dotdot",
        "--push-to ../evil",
        lambda d: [
            "export",
            MODEL,
            "--format",
            "sentence-transformers",
            "--out",
            str(d / "export"),
            "--push-to",
            "../evil",
        ],
        says="--push-to '../evil' is not a Hub repository name",
        absent=("export",),
    ),
    Case(
        "push-to-invalid",
        "--push-to my-org/na..me (.. inside the name)",
        lambda d: [
            "export",
            MODEL,
            "--format",
            "sentence-transformers",
            "--out",
            str(d / "export"),
            "--push-to",
            "my-org/na..me",
        ],
        says="Cannot have -- or .. in repo_id",
        absent=("export",),
    ),
    Case(
        "fifo-fit",
        "training data path is a FIFO (named pipe)",
        lambda d: _fit(d, _fifo(d / "pipe.jsonl")),
        says="pipe.jsonl' is a FIFO (named pipe), not a regular file",
        absent=("runs",),
    ),
    Case(
        "fifo-encode",
        "encode input is a FIFO",
        lambda d: _encode(d, _fifo(d / "pipe.txt")),
        says="pipe.txt' is a FIFO (named pipe), not a regular file",
        absent=("out.npy",),
    ),
    Case(
        "fifo-amr",
        "AMR input is a FIFO",
        lambda d: ["data", "amr-linearize", "--input", str(_fifo(d / "pipe.amr")), "--output", str(d / "out.jsonl")],
        says="pipe.amr' is a FIFO (named pipe), not a regular file",
        absent=("out.jsonl",),
    ),
    Case(
        "empty-fit",
        "empty training file",
        lambda d: _fit(d, _write(d / "empty.jsonl", b"")),
        says="empty.jsonl: no usable records",
        absent=("runs",),
    ),
    Case(
        "empty-encode",
        "empty encode input",
        lambda d: _encode(d, _write(d / "empty.txt", b"")),
        says="empty.txt: has no sentences to encode",
        absent=("out.npy",),
    ),
    Case(
        "non-object-fit",
        "JSONL records that are arrays, not objects",
        lambda d: _fit(d, _write(d / "arrays.jsonl", b'["a", "b", "c"]\n' * 4)),
        says="arrays.jsonl:line 1: is a JSON array, expected an object",
        absent=("runs",),
    ),
    Case(
        "deep-json-encode",
        "a JSONL line nested 100,000 levels deep",
        lambda d: _encode(d, _deep_json(d / "deep.jsonl")),
        says="deep.jsonl:line 1: not valid JSON here: nested too deeply",
        absent=("out.npy",),
    ),
    Case(
        "directory-encode",
        "a directory given as the encode input",
        lambda d: _encode(d, Path(d / "folder.txt").mkdir() or d / "folder.txt"),
        says="folder.txt' is a directory, not a file",
        absent=("out.npy",),
    ),
    Case(
        "symlink-loop-fit",
        "training data path is a symbolic link loop",
        lambda d: _fit(d, _loop(d, ".jsonl")),
        says="loop-a.jsonl' is a symbolic link loop",
        absent=("runs",),
    ),
    Case(
        "symlink-loop-encode",
        "encode input is a symbolic link loop",
        lambda d: _encode(d, _loop(d, ".txt")),
        says="loop-a.txt' is a symbolic link loop",
        absent=("out.npy",),
    ),
    Case(
        "yaml-alias-bomb",
        "recipe with a billion-laughs alias bomb (9**10 values)",
        lambda d: _fit(d, None, "-c", str(_alias_bomb(d / "bomb.yaml"))),
        says="the YAML expands to more than 100,000 values",
        absent=("runs",),
    ),
    Case(
        "yaml-recursive",
        "recipe whose alias refers to itself",
        lambda d: _fit(d, None, "-c", str(_write(d / "self.yaml", "trainer: &t\n  plugins: [*t]\n"))),
        says="an alias refers to the value that holds it",
        absent=("runs",),
    ),
    Case(
        "recipe-not-mapping",
        "recipe that is a YAML list, not a mapping",
        lambda d: _fit(d, None, "-c", str(_write(d / "list.yaml", "- model\n- data\n"))),
        says="list.yaml",
        absent=("runs",),
    ),
    Case(
        "huge-batch-size",
        "data.batch_size = 10**26",
        lambda d: _fit(d, None, "--data.batch_size=100000000000000000000000000"),
        says="fewer than one batch of 100000000000000000000000000; lower data.batch_size",
        absent=("runs",),
    ),
    Case(
        "huge-max-length",
        "model.encoder.max_length = 10**20",
        lambda d: _fit(d, None, "--model.encoder.max_length=100000000000000000000"),
        says="exceeds the 512 positions of the backbone",
        absent=("runs",),
    ),
    Case(
        "infinite-lr",
        "model.optimizer.init_args.lr = 1e400 (inf)",
        lambda d: _fit(d, None, "--model.optimizer.init_args.lr=1e400"),
        says="model.optimizer.init_args.lr must be a finite number >= 0, got inf",
        absent=("runs",),
    ),
    Case(
        "tsv-missing-column",
        "STS-B evaluation file with a line of 6 of 7 columns",
        lambda d: ["evaluate", "--model", MODEL, "--tasks", "stsb-dev", "--data_dir", str(_eval_dir(d)), "--quiet"],
        says="sts-dev.csv:line 21: expected at least 7 tab-separated fields, got 6",
    ),
    Case(
        "ckpt-zip-not-checkpoint",
        "a .ckpt that is a zip archive but no checkpoint",
        lambda d: _encode(d, SAMPLES / "sentences.txt", model=_fake_ckpt(d / "fake.ckpt")),
        says="fake.ckpt",
        absent=("out.npy",),
    ),
    Case(
        "config-not-json",
        "model directory whose config.json is not JSON",
        lambda d: _encode(d, SAMPLES / "sentences.txt", model=_bad_model_dir(d)),
        says="config.json: not valid JSON",
        absent=("out.npy",),
    ),
]


# ------------------------------------------------------------------------------------------- running
def run_subprocess(argv: list[str], cwd: Path, timeout: float = TIMEOUT) -> tuple[int | None, str, str]:
    """``unisent ARGV`` in a fresh interpreter; ``None`` as the exit code when it ran past ``timeout``."""
    command = [sys.executable, "-c", "from unisent.cli import main; main()", *argv]
    process = subprocess.Popen(
        command,
        cwd=cwd,
        env={**os.environ, **ENV},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        errors="replace",
        start_new_session=True,
    )
    try:
        out, err = process.communicate(timeout=timeout)
        return process.returncode, out, err
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        out, err = process.communicate()
        return None, out, err


def run_in_process(argv: list[str], cwd: Path, timeout: float = TIMEOUT) -> tuple[int | None, str, str]:
    """``unisent.cli.main(ARGV)`` in this interpreter (stdout and stderr captured); a case that runs
    past ``timeout`` is stopped by SIGALRM and reported as a hang (``None``)."""
    from unisent.cli import main

    class _Hang(BaseException):
        pass

    def alarm(signum, frame):
        raise _Hang

    out, err = io.StringIO(), io.StringIO()
    previous = signal.signal(signal.SIGALRM, alarm)
    signal.alarm(int(timeout))
    here = Path.cwd()
    code: int | None = 0
    try:
        os.chdir(cwd)
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                main(list(argv))
            except SystemExit as exit_:
                if isinstance(exit_.code, str):
                    print(exit_.code, file=sys.stderr)
                    code = 1
                else:
                    code = exit_.code or 0
            except _Hang:
                code = None
            except Exception:  # noqa: BLE001 - a traceback is what the case reports
                import traceback

                traceback.print_exc()
                code = 1
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
        os.chdir(here)
    return code, out.getvalue(), err.getvalue()


def check(case: Case, directory: Path, returncode: int | None, stdout: str, stderr: str, seconds: float) -> Outcome:
    """The outcome of ``case`` and what is wrong with it (``problems``, empty when as expected)."""
    outcome = Outcome(case.name, returncode, seconds, stdout, stderr)
    problems = outcome.problems
    if returncode is None:
        problems.append(f"no answer within {TIMEOUT} s (a hang)")
    if "Traceback (most recent call last)" in stderr:
        problems.append("a Python traceback on stderr")
    errors = [line for line in stderr.splitlines() if _ERROR_LINE.match(line)]
    if case.expect == "ok":
        if returncode != 0:
            problems.append(f"exit code {returncode}, expected 0")
        if case.says and case.says not in stderr + stdout:
            problems.append(f"output does not say {case.says!r}")
    else:
        if returncode == 0:
            problems.append("exit code 0, expected an error")
        if len(errors) != 1:
            problems.append(f"{len(errors)} error lines on stderr, expected one")
        elif case.says and case.says not in errors[0]:
            problems.append(f"the error line does not say {case.says!r}")
    for name in case.absent:
        if (directory / name).exists() or (directory / name).is_symlink():
            problems.append(f"{name} was left behind")
    return outcome


def run_case(case: Case, root: Path, in_process: bool = False) -> Outcome:
    """Build ``case``'s input in ``root/<case>`` and run its command there."""
    directory = root / case.name
    directory.mkdir(parents=True, exist_ok=True)
    argv = case.build(directory)
    runner = run_in_process if in_process else run_subprocess
    start = time.perf_counter()
    returncode, stdout, stderr = runner(argv, directory)
    seconds = time.perf_counter() - start
    for big in directory.glob("huge.*"):  # 200 MB inputs: not kept
        big.unlink()
    outcome = check(case, directory, returncode, stdout, stderr, seconds)
    outcome.command = case.command(argv, directory)
    outcome.directory = str(directory)
    return outcome


def _cell(text: str, width: int = 220) -> str:
    text = " ".join(text.split()).replace("|", "\\|")
    return text if len(text) <= width else text[: width - 3] + "..."


def markdown(cases: list[Case], outcomes: list[Outcome]) -> str:
    rows = [
        "| case | input | command | outcome (exit code, seconds, the one line) |",
        "|---|---|---|---|",
    ]
    for case, outcome in zip(cases, outcomes):
        code = "hang" if outcome.returncode is None else str(outcome.returncode)
        verdict = "" if outcome.ok else f" **{'; '.join(outcome.problems)}**"
        shown = outcome.line.replace(outcome.directory + os.sep, "").replace(str(ROOT) + os.sep, "")
        rows.append(
            f"| {case.name} | {_cell(case.input)} | `{_cell(outcome.command, 300)}` | "
            f"exit {code}, {outcome.seconds:.1f} s: {_cell(shown, 400)}{verdict} |"
        )
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--case", action="append", help="run only these cases (repeatable)")
    parser.add_argument("--keep", help="build the inputs in this directory and keep them (default: a temporary one)")
    parser.add_argument("--in-process", action="store_true", help="call unisent.cli.main instead of subprocesses")
    parser.add_argument("--json", help="also write the outcomes as JSON to this file")
    args = parser.parse_args(argv)
    os.environ.update(ENV)
    cases = [case for case in CASES if not args.case or case.name in args.case]
    with contextlib.ExitStack() as stack:
        root = Path(args.keep) if args.keep else Path(stack.enter_context(tempfile.TemporaryDirectory()))
        outcomes = []
        for case in cases:
            outcomes.append(run_case(case, root, in_process=args.in_process))
            verdict = "as expected" if outcomes[-1].ok else "; ".join(outcomes[-1].problems)
            print(f"{case.name}: {verdict} ({outcomes[-1].seconds:.1f} s)", file=sys.stderr)
        print(markdown(cases, outcomes))
    if args.json:
        Path(args.json).write_text(
            json.dumps([o.__dict__ | {"line": o.line} for o in outcomes], indent=1, ensure_ascii=False) + "\n"
        )
    failed = [o.case for o in outcomes if not o.ok]
    print(
        f"\n{len(outcomes) - len(failed)} of {len(outcomes)} cases as expected"
        + (f"; not: {', '.join(failed)}" if failed else "")
    )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
