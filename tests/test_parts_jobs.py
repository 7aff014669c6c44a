"""Parts trained as processes (``jobs: 2``, unisent/commands/parts.py): a SIGTERM in each part, then the same
command, gives the model one process gives; one progress line for the parts at work. Its own file, so that the
test tier's workers run it beside tests/test_parts.py."""

from __future__ import annotations

import os
import re

import pytest

from unisent.commands import parts as parts_command

from .conftest import run_cli
from .test_parts import _assert_same, _parts, _recipe

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.mark.integration
def test_parts_as_processes_resume_after_sigterm_in_each_to_the_model_of_one_process(
    tiny_recipe, tmp_path, unisent_cli, monkeypatch
):
    recipe = _recipe(tiny_recipe, tmp_path)
    one = _parts(recipe, tmp_path / "one", precision="32-true")
    unisent_cli("fit", "-c", str(one))
    env = dict(os.environ, OMP_NUM_THREADS="1")
    # both parts at once, each a `unisent fit` process with its log; SIGTERM in each part's 2nd step (a scheduler
    # stopping the job), then the same command: the same model
    both = _parts(recipe, tmp_path / "both", precision="32-true")
    stopped = run_cli(
        ["fit", "-c", str(both), "--parts.jobs", "2"], env={**env, "UNISENT_FAULT": "train_step@2=SIGTERM"}
    )
    assert stopped.returncode == 143 and "interrupted (SIGTERM)" in stopped.stderr, stopped.stderr[-2000:]
    assert "started part only-gausscse" in stopped.stderr and "started part without-gausscse" in stopped.stderr
    monkeypatch.setattr(parts_command, "PROGRESS_SECONDS", 0.0)  # a progress line every second (the fork keeps it)
    done = run_cli(["fit", "-c", str(both), "--parts.jobs", "2"], env=env)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "finished part without-gausscse (status 0)" in done.stderr
    assert re.search(r"unisent fit: without-gausscse step [0-4]/4\n", done.stderr)
    assert (tmp_path / "both" / "seed3" / "parts" / "only-gausscse.log").stat().st_size > 0
    _assert_same(tmp_path / "both" / "seed3", tmp_path / "one" / "seed3")
