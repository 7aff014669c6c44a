"""Models written before the architecture change (issue 15) still load and embed as they did.

The fixtures were written by ``tests/fixtures/legacy/make_legacy.py`` at commit 069356c: a
checkpoint (GaussCSE + unsupervised SimCSE on a tiny BERT), the saved inference model
(``GaussianEncoder``) and its sentence-transformers export, with the vectors they gave then.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

import unisent

ROOT = Path(__file__).resolve().parents[1]
LEGACY = ROOT / "tests" / "fixtures" / "legacy"
EXPECTED = json.loads((LEGACY / "expected.json").read_text())


@pytest.fixture(autouse=True)
def _at_root(monkeypatch):
    monkeypatch.chdir(ROOT)  # the checkpoint names its backbone by a path relative to the repository


@pytest.mark.parametrize("artifact", ["legacy.ckpt", "encoder", "st"])
def test_legacy_artifact_loads_and_embeds_as_before(artifact):
    model = unisent.load(str(LEGACY / artifact))
    sentences = EXPECTED["sentences"]
    mean, variance = model.encode_gaussian(sentences)
    torch.testing.assert_close(mean, torch.tensor(EXPECTED["mean"]), atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(variance, torch.tensor(EXPECTED["variance"]), atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(
        torch.as_tensor(model.encode(sentences)), torch.tensor(EXPECTED["encode"]), atol=1e-5, rtol=1e-5
    )


def test_legacy_export_loads_in_sentence_transformers():
    from sentence_transformers import SentenceTransformer

    st = SentenceTransformer(str(LEGACY / "st"), device="cpu")
    got = st.encode(EXPECTED["sentences"], convert_to_tensor=True)
    torch.testing.assert_close(got, torch.tensor(EXPECTED["mean"]), atol=1e-5, rtol=1e-5)
