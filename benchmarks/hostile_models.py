"""Hostile models (issue 46): the corpus of tests/hostile_model_cases.py and tests/hostile_run_cases.py fed to the
entry points that read each kind of model, through the real CLI (a fresh interpreter per run, ``python -c`` in the
run's folder, so that ``evil_mod.py`` there is importable, its address space capped), printing the table of
docs/operations.md#hostile-inputs.

    python benchmarks/hostile_models.py                       # each case through one entry point (encode, else ...)
    python benchmarks/hostile_models.py --all-entries         # every entry point that reads the case's kind
    python benchmarks/hostile_models.py --in-process --all-entries   # forks of one warm process (what the tests do)
    python benchmarks/hostile_models.py --case issue-1-encoder-st-module-popen --keep /tmp/hostile

Expected of every run (tests/hostile_models.py ``judge``): no payload ran (no ``PWNED``), the secret beside the
model is in no output, no hang, memory bounded, and one error line naming the file (and field); an entry point that
does not read the hostile file may succeed instead. ``tests/test_hostile_models.py`` runs the same corpus in the
default test suite.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import resource
import shlex
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

import hostile_models as H  # noqa: E402 - tests/ is put on sys.path above

#: the entry point shown for a case when only one runs: the first of these that reads its kind
SHOWN = ("encode", "encode-onnx", "export", "evaluate-data")
#: address space of a fresh interpreter with torch imported, before the run's own allowance
INTERPRETER = 6 << 30
LOAD_CODE = (
    "import sys, unisent\n"
    "try:\n"
    "    m = unisent.load(sys.argv[1], backend=sys.argv[2])\n"
    "    m.encode(['A cat sits.'], **({'graphs': ['(c / cat)']} if type(m).__name__ == 'RetrofittedEncoder' else {}))\n"
    "except Exception as err:\n"
    "    print(f'{type(err).__name__}: {err}', file=sys.stderr); sys.exit(1)\n"
)


def shown_entry(case: H.Case) -> str:
    """The entry point a case's row shows: the first of :data:`SHOWN` that reads the hostile file."""
    reading = [e for e in case.entry_points() if e not in case.may_pass] or list(case.entry_points())
    return "export" if case.kind == "run" else next((e for e in SHOWN if e in reading), reading[0])


def _limit() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (INTERPRETER + H.ADDRESS_SPACE, resource.RLIM_INFINITY))


def run_real_cli(case: H.Case, entry: str, bases, root: Path) -> H.Outcome:
    """One run through a fresh interpreter: ``python -c`` of the CLI (or of ``unisent.load``) in the run's folder."""
    ctx = H.prepare(case.kind, entry, bases, root / f"{case.name}--{entry}")
    case.make(ctx)
    argv = H.ENTRIES[entry](ctx)
    code = (
        [sys.executable, "-c", LOAD_CODE, *argv[1:]]
        if argv[0] == H.LOAD
        else [sys.executable, "-c", "from unisent.cli import main; main()", *argv]
    )
    logs = {name: root / f".{case.name}--{entry}.{name}" for name in ("stdout", "stderr")}
    start = time.monotonic()
    with open(logs["stdout"], "w") as out, open(logs["stderr"], "w") as err:
        process = subprocess.Popen(
            code,
            cwd=ctx.directory,
            env={**os.environ, **H.ENV},
            stdout=out,
            stderr=err,
            preexec_fn=_limit,
            start_new_session=True,
        )
    while True:  # wait4: this child's own peak RSS
        pid, status, usage = os.wait4(process.pid, os.WNOHANG)
        if pid:
            returncode = -os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)
            break
        if time.monotonic() - start > H.TIMEOUT + 30:  # + a fresh interpreter's start
            with contextlib.suppress(OSError):
                os.killpg(process.pid, signal.SIGKILL)
            _, _, usage = os.wait4(process.pid, 0)
            returncode = None
            break
        time.sleep(0.05)
    process.returncode = returncode  # reaped here, not by subprocess
    out, err = (logs[name].read_text(encoding="utf-8", errors="replace") for name in ("stdout", "stderr"))
    message = err.strip().splitlines()[-1] if argv[0] == H.LOAD and returncode == 1 and err.strip() else ""
    peak = max(0, usage.ru_maxrss * 1024 - (1 << 30))  # less an interpreter with torch and unisent imported
    outcome = H.Outcome(case.name, entry, returncode, time.monotonic() - start, out, err, message, peak)
    outcome.command = _command(argv)
    return H.judge(case, entry, ctx, outcome)


def _command(argv: list[str]) -> str:
    return "python -c 'unisent.load(MODEL).encode(...)'" if argv[0] == H.LOAD else shlex.join(["unisent", *argv])


def _cell(text: str, width: int) -> str:
    text = " ".join(text.split()).replace("|", "\\|")
    return text if len(text) <= width else text[: width - 3] + "..."


def _shown(text: str, directory: Path) -> str:
    """Paths relative to the run's folder (``$RUN/`` inside quotes, where the message shows a full path) or the
    repository."""
    text = re.sub(r"(['\"])" + re.escape(str(directory)), r"\1$RUN", text)
    text = text.replace(str(directory) + os.sep, "").replace(str(ROOT) + os.sep, "")
    return re.sub(r"\S*hostile-bases\S*?/", "", text)


def _line(case: H.Case, outcome: H.Outcome) -> str:
    """The error line; for a run that succeeded, the line naming the case's file, if any."""
    if outcome.returncode != 0:
        return outcome.line
    named = [line for line in outcome.stderr.splitlines() if case.says and case.says[0] in line]
    return named[-1] if named else f"(no line names {case.says[0]})" if case.says else ""


def markdown(rows: list[tuple[H.Case, list[H.Outcome], Path]]) -> str:
    lines = [
        "| case | input | command | outcome (exit code, seconds, the one line) |",
        "|---|---|---|---|",
    ]
    for case, outcomes, root in rows:
        first = next(o for o in outcomes if o.entry == shown_entry(case))
        directory = root / f"{case.name}--{first.entry}"
        code = "hang" if first.returncode is None else str(first.returncode)
        verdict = "" if first.ok else f" **{'; '.join(first.problems)}**"
        entries = (
            f" ({sum(o.ok for o in outcomes)} of {len(outcomes)} entry points as expected)" if len(outcomes) > 1 else ""
        )
        command = _shown(first.command or first.entry, directory)
        lines.append(
            f"| {case.name} | {_cell(case.input, 160)} | `{_cell(command, 160)}` | exit {code}, "
            f"{first.seconds:.1f} s: {_cell(_shown(_line(case, first), directory), 360)}{verdict}{entries} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--case", action="append", help="run only these cases (repeatable)")
    parser.add_argument("--all-entries", action="store_true", help="every entry point that reads each case's kind")
    parser.add_argument("--in-process", action="store_true", help="forks of this process instead of fresh interpreters")
    parser.add_argument("--keep", help="build the models in this directory and keep them (default: a temporary one)")
    args = parser.parse_args(argv)
    os.environ.update(H.ENV)
    import torch

    torch.set_num_threads(1)
    import hostile_model_cases
    from conftest import build_tiny_bert  # the tests' tiny BERT

    cases = [case for case in H.corpus() if not args.case or case.name in args.case]
    with contextlib.ExitStack() as stack:
        root = Path(args.keep) if args.keep else Path(stack.enter_context(tempfile.TemporaryDirectory()))
        tiny = (
            build_tiny_bert((root / "tiny-bert").resolve()) if not (root / "tiny-bert").is_dir() else root / "tiny-bert"
        )
        bases = hostile_model_cases.build_bases(root / "hostile-bases", tiny)
        rows, failed = [], []
        for case in cases:
            entries = case.entry_points() if args.all_entries else [shown_entry(case)]
            if args.in_process:
                done = H.run_cases([(case, e) for e in entries], bases, root / "runs")
                outcomes = [done[case.name, e] for e in entries]
            else:
                outcomes = [run_real_cli(case, e, bases, root / "runs") for e in entries]
            rows.append((case, outcomes, root / "runs"))
            for o in outcomes:
                print(
                    f"{case.name}:{o.entry}: {'as expected' if o.ok else '; '.join(o.problems)} ({o.seconds:.1f} s)",
                    file=sys.stderr,
                )
                if not o.ok:
                    failed.append(f"{case.name}:{o.entry}")
        print(markdown(rows))
    total = sum(len(outcomes) for _, outcomes, _ in rows)
    print(f"\n{total - len(failed)} of {total} runs as expected" + (f"; not: {', '.join(failed)}" if failed else ""))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
