"""Hostile inputs (issue 37): every case of ``benchmarks/hostile_inputs.py`` fed to the command that reads
it ends within the time bound in one line naming the file, field or limit, with no traceback and no
partial output (or, for an input that is fine, exit 0). The cases run in-process (``unisent.cli.main``);
the benchmark script runs them through the real CLI and writes the table of docs/operations.md."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

pytestmark = [
    pytest.mark.usefixtures("one_thread"),
    pytest.mark.filterwarnings("ignore:LightningCLI's args parameter"),  # fit run in-process, as a user's argv
]


def _harness():
    spec = importlib.util.spec_from_file_location("hostile_inputs", ROOT / "benchmarks" / "hostile_inputs.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("hostile_inputs", module)  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


HARNESS = _harness()


def test_there_are_at_least_15_cases_with_distinct_names():
    names = [case.name for case in HARNESS.CASES]
    assert len(names) >= 15 and len(set(names)) == len(names)
    assert sum(not case.slow for case in HARNESS.CASES) >= 0.8 * len(names)  # most run by default


@pytest.mark.integration
@pytest.mark.parametrize(
    "case", [pytest.param(case, id=case.name, marks=[pytest.mark.slow] if case.slow else []) for case in HARNESS.CASES]
)
def test_hostile_input(case, tmp_path):
    outcome = HARNESS.run_case(case, tmp_path, in_process=True)
    assert outcome.ok, (outcome.problems, outcome.line, outcome.stderr[-3000:])


def test_the_line_of_an_error_is_one_line_naming_the_file(tmp_path):
    """The in-process runner sees what a user sees: one ``unisent encode: error:`` line, exit 1."""
    case = next(case for case in HARNESS.CASES if case.name == "fifo-encode")
    outcome = HARNESS.run_case(case, tmp_path, in_process=True)
    assert outcome.returncode == 1 and "\n" not in outcome.line
    assert outcome.line.startswith("unisent encode: error: input file ") and "pipe.txt" in outcome.line


@pytest.mark.slow
def test_the_script_prints_the_table_through_the_real_cli(tmp_path):
    done = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "hostile_inputs.py"), "--case", "fifo-encode", "--case", "amr-deep"],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "| fifo-encode |" in done.stdout and "| amr-deep |" in done.stdout
    assert "2 of 2 cases as expected" in done.stdout
