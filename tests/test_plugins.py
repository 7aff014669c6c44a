"""Plugins through the command line (issue 39): an objective, a pooler, a balancer, an evaluation task and an
export format from outside unisent, used by ``unisent fit``, ``unisent evaluate`` and ``unisent export`` in
subprocesses, once from an installed package (entry point of ``unisent.plugins``) and once from a plain
module named by ``--import``. The plugin is the example of docs/plugins.md.

The package is installed with pip into a ``--target`` folder put on the subprocesses' ``PYTHONPATH`` (offline,
no build isolation), so the shared virtual environment never sees it.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import yaml

from tests.conftest import run_cli

ROOT = Path(__file__).resolve().parents[1]


def plugin_source() -> str:
    """The plugin of docs/plugins.md (the python block that registers an export format), for ``myplug``."""
    blocks = re.findall(r"```python\n(.*?)```", (ROOT / "docs" / "plugins.md").read_text(), flags=re.S)
    (block,) = [b for b in blocks if "register_export_format" in b]
    return block


STS_ROWS = [
    ("a man is playing a guitar .", "a man plays a guitar .", 4.8),
    ("a woman is slicing an onion .", "a man is playing a flute .", 0.4),
    ("two dogs run on the grass .", "two dogs are running on the grass .", 4.6),
    ("a child throws a ball .", "the sun sets behind the trees .", 0.2),
    ("a man is riding a horse .", "a person rides a horse .", 4.0),
    ("a cat sleeps on the sofa .", "a man is cooking dinner .", 0.6),
]


def write_plugin(folder: Path, name: str) -> Path:
    """The plugin package ``name`` (``name/__init__.py`` and its ``sts.csv``) in ``folder``."""
    package = folder / name
    package.mkdir(parents=True)
    (package / "__init__.py").write_text(plugin_source().replace("myplug", name))
    rows = [f"main-captions\tMSRvid\t2012test\t{i:04d}\t{s}\t{a}\t{b}" for i, (a, b, s) in enumerate(STS_ROWS)]
    (package / "sts.csv").write_text("\n".join(rows) + "\n")
    return package


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> Path:
    """The package ``myplug`` (entry point ``myplug = "myplug"`` of ``unisent.plugins``), installed with pip
    into a folder of its own; that folder (put it on ``PYTHONPATH``)."""
    source = tmp_path_factory.mktemp("myplug-src")
    write_plugin(source, "myplug")
    (source / "pyproject.toml").write_text(
        "[build-system]\n"
        'requires = ["setuptools"]\n'
        'build-backend = "setuptools.build_meta"\n\n'
        "[project]\n"
        'name = "myplug"\n'
        'version = "0.1"\n\n'
        '[project.entry-points."unisent.plugins"]\n'
        'myplug = "myplug"\n\n'
        "[tool.setuptools]\n"
        'packages = ["myplug"]\n\n'
        "[tool.setuptools.package-data]\n"
        'myplug = ["sts.csv"]\n'
    )
    target = tmp_path_factory.mktemp("myplug-site")
    done = subprocess.run(
        [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-build-isolation", "--no-index"]
        + ["--target", str(target), str(source)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return target


def unisent(*args: str, cwd: Path, pythonpath: Path | None = None) -> subprocess.CompletedProcess:
    """``unisent ARGS`` as a new command: a fork of this process (run_cli), which loads the installed plugins
    (``pythonpath``'s entry points) and ``--import`` modules again, as a command's start does."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "UNISENT_IMPORT")}
    env.update(OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", UNISENT_CACHE=str(cwd / "cache"))
    if pythonpath is not None:
        env["PYTHONPATH"] = str(pythonpath)
    return run_cli(args, cwd=cwd, env=env)


def recipe(folder: Path, plug: str, model_dir: Path) -> Path:
    """Two steps on the tiny BERT: two of the plugin's objectives, its pooler and balancer, its task validated."""
    sentences = str(ROOT / "samples" / "sentences.txt")
    config = {
        "seed_everything": 0,
        "model": {
            "encoder": {"model": str(model_dir), "pooler": f"{plug}_mean", "max_length": 24},
            "objectives": [
                {"class_path": f"{plug}.AlignDropout", "init_args": {"name": "first"}},
                {"class_path": f"{plug}.AlignDropout", "init_args": {"name": "second"}},
            ],
            "balancer": {"class_path": f"{plug}.FixedWeights", "init_args": {"weights": {"second": 0.5}}},
            "evaluation": {"val_tasks": [f"{plug}-sts"], "test_tasks": []},
        },
        "data": {"train": {"first": {"path": sentences}, "second": {"path": sentences}}, "batch_size": 8},
        "trainer": {
            "max_steps": 2,
            "log_every_n_steps": 1,
            "val_check_interval": 2,
            "precision": "32-true",
            "accelerator": "cpu",
            "enable_progress_bar": False,
            "logger": {
                "class_path": "lightning.pytorch.loggers.CSVLogger",
                "init_args": {"save_dir": str(folder / "runs"), "name": plug, "version": "v"},
            },
        },
    }
    path = folder / f"{plug}.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


def fit_evaluate_export(plug: str, folder: Path, model_dir: Path, extra: tuple[str, ...], pythonpath: Path | None):
    """``unisent fit`` / ``evaluate`` / ``export`` with the plugin ``plug``, each with the words ``extra``."""
    done = unisent("fit", *extra, "-c", str(recipe(folder, plug, model_dir)), cwd=folder, pythonpath=pythonpath)
    assert done.returncode == 0, done.stderr[-4000:]
    run = folder / "runs" / plug / "v"
    metrics = (run / "metrics.csv").read_text()
    assert f"val/{plug}-sts" in metrics and "train/first/alignment" in metrics and "train/second/uniformity" in metrics
    encoder = run / "encoder"
    assert json.loads((encoder / "unisent_encoder.json").read_text())["pooler"] == f"{plug}.PlugMean"

    out = folder / "scores.json"
    done = unisent(
        "evaluate", *extra, "--model", str(encoder), "--tasks", f"{plug}-sts", "--output", str(out), "--quiet",
        cwd=folder, pythonpath=pythonpath,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-4000:]
    assert f"{plug}-sts" in out.read_text()

    done = unisent(
        "export", *extra, str(encoder), "--format", f"{plug}-vectors", "--out", str(folder / "vectors"),
        cwd=folder, pythonpath=pythonpath,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-4000:]
    assert {"vectors.npy", "README.md"} <= {p.name for p in (folder / "vectors").iterdir()}

    sentences = folder / "in.txt"  # encode: the saved encoder's pooler is the plugin's
    sentences.write_text("A man is playing a guitar.\nRain.\n")
    done = unisent(
        "encode", *extra, "--model", str(encoder), "--input", str(sentences), "--output", str(folder / "out.npy"),
        "--quiet", cwd=folder, pythonpath=pythonpath,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-4000:]
    assert np.load(folder / "out.npy").shape == (2, 32)

    done = unisent(  # ablate plans the recipe's runs by the plugin's objective classes (names, data, balancer)
        "ablate", *extra, str(recipe(folder, plug, model_dir)), "--out", str(folder / "ablate"), "--runs", "unified",
        "single", "--balancers", f"{plug}.FixedWeights", "--seeds", "1", "--steps", "2", "--columns", "stsb-test",
        "--dry_run",
        cwd=folder, pythonpath=pythonpath,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-4000:]
    assert "only first" in done.stdout and "only second" in done.stdout and "unified (" in done.stdout


@pytest.mark.integration
def test_an_installed_plugin_works_in_fit_evaluate_and_export(installed, tiny_bert_dir, tmp_path):
    fit_evaluate_export("myplug", tmp_path, tiny_bert_dir, (), pythonpath=installed)


@pytest.mark.integration  # 8 s as forks (run_cli); 40 s as processes, when it was a slow test
def test_a_module_named_by_import_works_in_fit_evaluate_and_export(tiny_bert_dir, tmp_path):
    write_plugin(tmp_path, "localplug")  # in the current directory, not installed, not on PYTHONPATH
    fit_evaluate_export("localplug", tmp_path, tiny_bert_dir, ("--import", "localplug"), pythonpath=None)


def test_an_unknown_format_is_one_line_with_the_registered_ones(tmp_path, capsys):
    from unisent.cli import main

    with pytest.raises(SystemExit) as exit_:
        main(["export", "x", "--format", "sentence-transformer", "--out", str(tmp_path / "y")])
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and len(err.strip().splitlines()) == 1, err
    assert "unknown export format 'sentence-transformer'; did you mean sentence-transformers?" in err
    assert "huggingface, onnx, sentence-transformers" in err


def test_import_errors_are_one_line(tmp_path, monkeypatch, capsys):
    from unisent import plugins
    from unisent.cli import main

    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv(plugins.IMPORT_ENV, raising=False)
    for argv, expected in (
        (["fit", "--import", "my_mod"], "unisent fit: error: --import my_mod: No module named 'my_mod' (is its folder"),
        (["evaluate", "--import=my_mod"], "unisent evaluate: error: --import my_mod: No module named 'my_mod'"),
        (["encode", "--import"], "unisent encode: error: --import needs a module name"),
    ):
        with pytest.raises(SystemExit) as exit_:
            main(argv)
        err = capsys.readouterr().err
        assert exit_.value.code == 2 and len(err.strip().splitlines()) == 1 and err.startswith(expected), err
    (tmp_path / "broken_mod.py").write_text("import not_installed_dependency\n")
    with pytest.raises(SystemExit) as exit_:
        main(["export", "--import", "broken_mod"])
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and "--import broken_mod: importing it failed: No module named" in err


def test_a_failing_entry_point_names_its_distribution(monkeypatch, capsys):
    from importlib import metadata

    from unisent import plugins
    from unisent.cli import main

    class Dist:
        name, version = "brokenplug", "1.0"

    class Entry:
        name, value, dist = "brokenplug", "brokenplug:setup", Dist()

        def load(self):
            raise RuntimeError("boom")

    monkeypatch.setattr(plugins, "_loaded_entry_points", False)
    monkeypatch.setattr(metadata, "entry_points", lambda group: [Entry()] if group == "unisent.plugins" else [])
    with pytest.raises(SystemExit) as exit_:
        main(["evaluate", "--list"])
    err = capsys.readouterr().err
    assert exit_.value.code == 1 and len(err.strip().splitlines()) == 1, err
    assert "plugin brokenplug = 'brokenplug:setup'" in err and "installed by brokenplug 1.0" in err and "boom" in err


def test_imports_reach_child_processes(tmp_path, monkeypatch):
    """``--import`` writes the modules (and the current directory) to the environment the commands' own child
    processes (``unisent ablate --jobs N``, ``unisent sweep``'s trials) inherit, and a child reads them."""
    from unisent import plugins

    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv(plugins.IMPORT_ENV, raising=False)
    monkeypatch.setenv("PYTHONPATH", "")
    monkeypatch.setattr(sys, "path", list(sys.path))
    (tmp_path / "childplug.py").write_text("import os\nprint('childplug', os.getpid())\n")
    modules, rest = plugins.split_imports(["ablate", "--import", "childplug", "r.yaml", "--", "--import", "x"])
    assert modules == ["childplug"] and rest == ["ablate", "r.yaml", "--", "--import", "x"]
    try:
        assert plugins.load_plugins(modules) == ["childplug"]
        assert os.environ[plugins.IMPORT_ENV] == "childplug"
        assert os.environ["PYTHONPATH"].split(os.pathsep)[0] == str(tmp_path)
        code = "from unisent.plugins import load_plugins; print(load_plugins())"
        done = subprocess.run(
            [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120, check=True
        )
        assert done.stdout.startswith("childplug") and "['childplug']" in done.stdout
    finally:
        sys.modules.pop("childplug", None)
