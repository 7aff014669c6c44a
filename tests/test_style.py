"""The house style holds in the default test run (CI runs no lint session): ruff's rules and the declared
line length (``[tool.ruff] line-length`` in pyproject.toml, E501 enforced), and ``ruff format``; and no tracked
file is a leftover of a patch, an editor or a merge (``git ls-files``: every file, not only ``*.py``)."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PATHS = ["unisent", "tests", "benchmarks", "studies", "scripts", "noxfile.py"]


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


#: what a patch (``.orig``, ``.rej``), an editor (``~``, ``.swp``, ``.bak``) or a file manager leaves behind
STRAY_SUFFIXES = (".orig", ".rej", ".bak", ".swp", ".swo", "~")
STRAY_NAMES = (".DS_Store", "Thumbs.db")
#: a line of a merge conflict (``git merge``, diff3 style included); a lone ``=======`` only beside these
CONFLICT_LINE = re.compile(rb"^(?:<{7}|>{7}|\|{7})(?: |$)", re.MULTILINE)


def stray_files(root: Path, paths: list[str]) -> list[str]:
    """The tracked ``paths`` (relative to ``root``) that are leftovers by name, or text files (no NUL byte)
    with a merge-conflict line, each with the reason; files deleted in the working tree are skipped."""
    found = []
    for name in paths:
        if name.endswith(STRAY_SUFFIXES) or Path(name).name in STRAY_NAMES:
            found.append(f"{name}: a leftover file (patch, editor or merge)")
            continue
        path = root / name
        if not path.is_file():
            continue
        data = path.read_bytes()
        if b"\0" in data[:8192]:
            continue  # binary: weights, images
        match = CONFLICT_LINE.search(data)
        if match:
            line = data.count(b"\n", 0, match.start()) + 1
            found.append(f"{name}:{line}: a merge-conflict marker")
    return found


def test_no_tracked_file_is_a_leftover_or_holds_a_conflict_marker():
    """Every file ``git ls-files`` lists (not only ``*.py``): none named like a patch's, an editor's or a merge's
    leftover (``formats.py.orig`` was committed once), no text file with a merge-conflict marker."""
    git = shutil.which("git")
    if git is None or not (ROOT / ".git").exists():
        pytest.skip("not a git checkout (an sdist or a wheel): no tracked files to check")
    done = subprocess.run([git, "ls-files", "-z"], cwd=ROOT, capture_output=True)
    assert done.returncode == 0, done.stderr.decode(errors="replace")[-1000:]
    paths = [p for p in done.stdout.decode("utf-8", errors="surrogateescape").split("\0") if p]
    assert len(paths) > 100 and "pyproject.toml" in paths and any(p.endswith(".md") for p in paths)
    problems = stray_files(ROOT, paths)
    assert not problems, "tracked files that should not be (git rm them):\n" + "\n".join(problems)


def test_the_leftover_check_sees_every_kind_of_file(tmp_path):
    """The check above fails on a leftover of any type and on a conflict in any text file, not only Python's."""
    marker = "\n".join(["<" * 7 + " HEAD", "ours", "=" * 7, "theirs", ">" * 7 + " branch"]) + "\n"
    files = {
        "unisent/export/formats.py.orig": "x = 1\n",
        "docs/page.md.rej": "@@ -1 +1 @@\n",
        "recipes/a.yaml~": "a: 1\n",
        "notes.bak": "",
        "docs/conflicted.md": "# Title\n\n" + marker,
        "recipes/conflicted.yaml": "a: 1\n" + marker,
        "diff3.txt": "a\n" + "|" * 7 + " base\nb\n",
        "clean.md": "Title\n=======\n\ntext <<<<<<< not at a line start\n",
        "weights.bin": "\0" + marker,
    }
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text, encoding="utf-8")
    problems = stray_files(tmp_path, [*files, "deleted/in/the/tree.py"])
    assert [p.split(":")[0] for p in problems] == [
        "unisent/export/formats.py.orig",
        "docs/page.md.rej",
        "recipes/a.yaml~",
        "notes.bak",
        "docs/conflicted.md",
        "recipes/conflicted.yaml",
        "diff3.txt",
    ]
    assert "docs/conflicted.md:3: a merge-conflict marker" in problems
