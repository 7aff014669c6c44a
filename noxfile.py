"""Sessions: tests, lint, quickstart. Every session installs torch==2.13.0 (the CPU wheel) FIRST:
a bare `torch` requirement would otherwise pull a multi-GB CUDA build."""

import re
import tempfile
from pathlib import Path

import nox
import tomllib

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
def docs(session: nox.Session) -> None:
    """The docs site with its API reference (mkdocs.yml), built strictly into site/: a warning (a docstring
    cross-reference to a name that moved, a broken link or anchor) fails it. Open site/index.html."""
    _install(session)
    session.run("mkdocs", "build", "--strict", "--site-dir", "site", env={"NO_MKDOCS_2_WARNING": "1"})


@nox.session(python=False)
def types(session: nox.Session) -> None:
    """basedpyright over unisent/ (pyproject's [tool.basedpyright]: standard, strict on the extension surface)."""
    session.run("bash", "scripts/setup.sh", external=True)
    session.run(".venv/bin/basedpyright", "--project", "pyproject.toml", external=True)


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


#: the checks of `lowest` and `latest`: offline, one thread per test process (2-core machines)
CHECK_ENV = {
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "WANDB_MODE": "offline",
    "TOKENIZERS_PARALLELISM": "false",
    "OMP_NUM_THREADS": "1",
    "MKL_NUM_THREADS": "1",
}
_FLOOR = re.compile(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)\s*(\[[^\]]*\])?\s*>=\s*([^,;\s]+)\s*(,[^;]*)?")


def floor_pins(pyproject: str = "pyproject.toml") -> list[str]:
    """Every direct runtime dependency of `[project] dependencies` at its declared lower bound:
    `name[extras]>=X` -> `name[extras]==X` (extras kept); torch stays at TORCH."""
    pins = [TORCH]
    for requirement in tomllib.loads(Path(pyproject).read_text(encoding="utf-8"))["project"]["dependencies"]:
        match = _FLOOR.fullmatch(requirement)
        if match is None:
            raise ValueError(f"{pyproject}: no lower bound (name>=X) in the dependency {requirement!r}")
        name, extras, floor = match.group(1), match.group(2) or "", match.group(3)
        if name.lower() != "torch":
            pins.append(f"{name}{extras}=={floor}")
    return pins


def _check(session: nox.Session, name: str) -> None:
    """Record what is installed (pip freeze, printed and written to .nox/freeze-NAME.txt), then train the
    quickstart recipe for two steps on the packaged MiniLM and run the fast test tier, offline."""
    freeze = session.run("python", "-m", "pip", "freeze", "--exclude-editable", silent=True)
    print(freeze)
    out = Path(".nox") / f"freeze-{name}.txt"
    out.write_text(freeze, encoding="utf-8")
    session.log(f"pip freeze written to {out}")
    runs = session.create_tmp()
    session.run(
        "unisent", "fit", "-c", "recipes/quickstart.yaml", "--trainer.max_steps=2",
        f"--trainer.logger.init_args.save_dir={runs}", "--trainer.enable_model_summary=false",
        env=CHECK_ENV,
    )  # fmt: skip
    # nox points TMPDIR into .nox/, inside the repository: the tests' temporary files go outside it, as in .venv
    tmp = tempfile.mkdtemp(prefix=f"unisent-nox-{name}-")
    session.run(
        "python", "-m", "pytest", "-n", "2", "--dist", "loadfile", "-q",
        "-m", "not slow and not gpu and not integration", *session.posargs,
        env={**CHECK_ENV, "TMPDIR": tmp},
    )  # fmt: skip


@nox.session
def lowest(session: nox.Session) -> None:
    """The project with every direct runtime dependency at its declared lower bound (`.[dev]` on top, its
    extras resolved by pip): installs, trains the quickstart for two steps and passes the fast tier."""
    pins = Path(session.create_tmp()) / "lowest-pins.txt"
    pins.write_text("\n".join(floor_pins()) + "\n", encoding="utf-8")
    session.log("pins: " + ", ".join(floor_pins()))
    session.install(TORCH)
    session.install("-r", str(pins), "-e", ".[dev]")
    _check(session, "lowest")


@nox.session
def latest(session: nox.Session) -> None:
    """The project with the newest releases its ranges allow (torch stays at TORCH): the same checks."""
    session.install(TORCH)
    session.install("--upgrade", "--upgrade-strategy", "eager", TORCH, "-e", ".[dev]")
    _check(session, "latest")
