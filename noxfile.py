"""Sessions: tests, lint, quickstart. Every session installs torch==2.13.0 (the CPU wheel) FIRST:
a bare `torch` requirement would otherwise pull a multi-GB CUDA build."""

import nox

nox.options.sessions = ["tests", "lint"]
nox.options.reuse_existing_virtualenvs = True
TORCH = "torch==2.13.0"


def _install(session: nox.Session, extras: str = "dev") -> None:
    session.install(TORCH)
    session.install("-e", f".[{extras}]")


@nox.session(python=False, name="tests")
def tests(session: nox.Session) -> None:
    """Both tiers, the default and the integration one (no slow or GPU tests), in the project's .venv: as CI."""
    session.run("bash", "scripts/test.sh", *session.posargs, external=True)


@nox.session(python=False)
def fast(session: nox.Session) -> None:
    """The default tier only (no integration, slow or GPU tests): what a contributor runs after each change."""
    session.run("bash", "scripts/test.sh", "--fast", *session.posargs, external=True)


@nox.session(python=False)
def quickstart(session: nox.Session) -> None:
    """Train the quickstart recipe, evaluate it and show where the model went."""
    session.run("bash", "scripts/quickstart.sh", *session.posargs, external=True)


@nox.session
def lint(session: nox.Session) -> None:
    session.install("ruff==0.17.6")
    session.run("ruff", "check", "unisent", "tests", "benchmarks", "studies", "scripts", "noxfile.py")
    session.run("ruff", "format", "--check", "unisent", "tests", "benchmarks", "studies", "scripts", "noxfile.py")


@nox.session(python=False)
def slow(session: nox.Session) -> None:
    """Slow tests: every recipe for a few steps on a tiny model, and the optional paths. The `ease` extra
    (Wikipedia2Vec) is installed on top of `dev` first, so that its end-to-end test runs instead of
    skipping; the default run (`nox -s tests`, scripts/setup.sh, CI) keeps installing `.[dev]` only.
    `-rs` prints the reason of any test that still skips."""
    session.run("bash", "scripts/setup.sh", external=True)
    session.run(".venv/bin/pip", "install", "-q", TORCH, "-e", ".[dev,ease]", external=True)
    session.run("bash", "scripts/test.sh", "-m", "slow", "-rs", *session.posargs, external=True)


@nox.session(python=False)
def bench(session: nox.Session) -> None:
    """Throughput against sentence-transformers (training and encode, ablations, bf16, the cost of
    each objective, scaling); writes docs/benchmarks.md (about 30 minutes on 2 CPU cores). Run it on an
    otherwise idle machine: other jobs on the CPU distort the timings. `nox -s bench -- --quick` is a
    smoke run; any other arguments go to benchmarks/throughput.py instead of `--all`."""
    session.run("bash", "scripts/setup.sh", external=True)
    session.run(".venv/bin/pip", "install", "-q", "torch==2.13.0", "-e", ".[dev,bench]", external=True)
    args = session.posargs or ["--all", "--json", "docs/benchmarks.json"]
    session.run(".venv/bin/python", "benchmarks/throughput.py", *args, external=True)
