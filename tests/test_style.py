"""The house style holds in the default test run (CI runs no lint session): ruff's rules and the declared
line length (``[tool.ruff] line-length`` in pyproject.toml, E501 enforced), and ``ruff format``."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PATHS = ["unisent", "tests", "benchmarks", "scripts", "noxfile.py"]


def _ruff() -> list[str]:
    found = shutil.which("ruff", path=str(Path(sys.executable).parent)) or shutil.which("ruff")
    if found is None:
        pytest.skip("ruff is not installed (pip install -e '.[dev]')")
    return [found]


def test_ruff_check_passes_with_the_declared_line_length():
    done = subprocess.run([*_ruff(), "check", "--no-cache", *PATHS], cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-1000:]


def test_the_code_is_formatted():
    done = subprocess.run(
        [*_ruff(), "format", "--check", "--no-cache", *PATHS], cwd=ROOT, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-1000:]


def test_e501_is_enforced():
    text = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    ignored = text.split("[tool.ruff.lint]", 1)[1].split("ignore", 1)[1].split("]", 1)[0]
    assert "E501" not in ignored and "line-length = 120" in text
