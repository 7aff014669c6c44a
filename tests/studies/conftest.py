"""The study tests (this project's results pages and the scripts in studies/) import ``studies`` from the
repository's root, as ``python -m studies.NAME`` does; every test runs its tiny models on one thread."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


@pytest.fixture(autouse=True)
def _studies_on_one_thread(one_thread):
    yield
