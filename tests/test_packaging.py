"""Installs that work with every pip: each extra that pyproject.toml asks of another package is spelled
as that package declares it (pip before PEP 685 compares extras as written: ``torchjd[quadprog_projector]``
installed neither solver, and UPGrad failed), and unisent's own extras are in the normalised spelling. A
balancer whose optional solver is missing is one line before training, with a pip command that works."""

from __future__ import annotations

import re
import sys
from importlib import metadata
from pathlib import Path

import pytest
from packaging.requirements import Requirement

tomllib = pytest.importorskip("tomllib")  # Python 3.11+

ROOT = Path(__file__).resolve().parents[1]


def _normalised(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _requirements() -> list[Requirement]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    lines = list(project["dependencies"])
    for group in project.get("optional-dependencies", {}).values():
        lines += group
    return [Requirement(line) for line in lines]


def test_own_extras_are_normalised():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    for extra in project.get("optional-dependencies", {}):
        assert extra == _normalised(extra), f"extra {extra!r}: spell it {_normalised(extra)!r}"


def test_requested_extras_are_spelled_as_their_packages_declare_them():
    checked = 0
    for requirement in _requirements():
        for extra in requirement.extras:
            assert extra == _normalised(extra), f"{requirement}: spell the extra {_normalised(extra)!r} (PEP 685)"
            try:
                provided = metadata.metadata(requirement.name).get_all("Provides-Extra") or []
            except metadata.PackageNotFoundError:
                continue  # an optional package not installed here: the spelling rule above still holds
            assert extra in provided, (
                f"{requirement}: {requirement.name} declares the extras {provided}; a pip without PEP 685 "
                f"normalisation installs nothing for {extra!r}"
            )
            checked += 1
    assert checked >= 2  # torchjd[quadprog-projector] and jsonargparse[signatures] at least


def test_the_default_balancers_solvers_are_installed():
    """What the spelling is for: UPGrad (the balanced unified recipe's balancer) builds."""
    from unisent.balancers import JacobianAggregator

    assert JacobianAggregator("UPGrad")._aggregator is not None


def test_a_missing_solver_is_one_line_before_training(monkeypatch, capsys):
    import torchjd._linalg._dual_cone as dual_cone

    from unisent.cli import main

    monkeypatch.setattr(dual_cone.QuadprogProjector, "_REQUIRED_DEPS", ["numpy", "qpsolvers", "no_such_solver"])
    monkeypatch.setattr(sys, "argv", ["unisent"])
    with pytest.raises(SystemExit) as done:
        main(["fit", "-c", str(ROOT / "recipes" / "unified" / "minilm-cpu-balanced.yaml"), "--trainer.max_steps=1"])
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert done.value.code == 1
    assert err == [
        "unisent fit: error: balancer aggregator 'UPGrad' needs no_such_solver, which is not installed: "
        "pip install no_such_solver (full traceback: UNISENT_TRACEBACK=1 unisent fit ...)"
    ]


@pytest.mark.integration
def test_the_wheel_holds_py_typed_and_the_resources_and_nothing_beside_the_package(tmp_path):
    """The wheel built from the sources (a copy, so that no build folder is left in the repository; offline,
    without build isolation): ``unisent/py.typed`` (PEP 561: type checkers read the package's annotations), the
    files read at run time, and no study, benchmark or test code."""
    import shutil
    import subprocess
    import zipfile

    source = tmp_path / "source"
    shutil.copytree(ROOT / "unisent", source / "unisent", ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, source / name)
    done = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", str(source), "--no-deps", "--no-build-isolation", "-q"]
        + ["-w", str(tmp_path / "dist")],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    (wheel,) = (tmp_path / "dist").glob("unisent-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert "unisent/py.typed" in names
    assert any(n.startswith("unisent/resources/sts/stsbenchmark/") for n in names)  # STS-B dev/test, read at run time
    assert not [n for n in names if n.split("/")[0] in ("studies", "benchmarks", "tests", "samples", "docs")]
