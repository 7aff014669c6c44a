"""What a model costs (unisent/inference/cost.py): parameters per part, file sizes, encode time per output, against
the start; ``unisent evaluate --cost`` and the exported model card report it."""

from __future__ import annotations

import json

import pytest

from unisent.encoders import EncoderConfig
from unisent.inference.cost import cost_table, model_cost, parameter_parts
from unisent.lightning_module import UnisentModule
from unisent.objectives import GaussCSE

pytestmark = pytest.mark.usefixtures("one_thread")


def _gaussian(tiny_bert_dir, tmp_path):
    module = UnisentModule(
        encoder=EncoderConfig(model=str(tiny_bert_dir), pooler="mean"),
        objectives=[GaussCSE(own_layers=1, point="pooled")],
    )
    model = module.inference_model().eval()
    folder = model.save_pretrained(tmp_path / "gauss")
    return module, model, folder


def test_parameters_per_part_add_up_and_name_the_own_tower(tiny_bert_dir, tmp_path):
    module, model, folder = _gaussian(tiny_bert_dir, tmp_path)
    parts = parameter_parts(model)
    shared = sum(p.numel() for p in module.encoder.parameters())
    layer = sum(p.numel() for p in module.encoder.backbone.encoder.layer[-1].parameters())
    head = module.objectives[0].head
    linear = sum(p.numel() for m in (head.mean, head.var) for p in m.parameters())
    assert parts == {"shared encoder": shared, "own top layers (a head's own tower)": layer, "head": linear}
    plain = parameter_parts(module.encoder)
    assert plain == {"shared encoder": shared}

    sentences = [f"sentence number {i} is here." for i in range(24)]
    cost = model_cost(model, folder, sentences, start=module.encoder, batch_size=8)
    assert cost["total_parameters"] == shared + layer + linear
    assert cost["total_bytes"] == sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())
    assert set(cost["encode_seconds"]) == {"vectors", "gaussians"} and all(
        v > 0 for v in cost["encode_seconds"].values()
    )
    assert set(cost["start"]["encode_seconds"]) == {"vectors"}
    assert cost["vs_start"]["parameters"] == pytest.approx((shared + layer + linear) / shared, abs=1e-3)
    text = "\n".join(cost_table(cost))
    assert (
        f"| own top layers (a head's own tower) | {layer:,} |" in text and "Encode time of 24 sentences (fp32)" in text
    )


@pytest.mark.integration
def test_evaluate_cost_and_the_exported_card(tiny_bert_dir, tmp_path, unisent_cli):
    _, model, _ = _gaussian(tiny_bert_dir, tmp_path)
    folder = model.save_pretrained(tmp_path / "run" / "encoder")  # a run's encoder: its config.yaml names the start
    run_config = {"model": {"encoder": {"model": str(tiny_bert_dir)}}, "trainer": {}}
    (tmp_path / "run" / "config.yaml").write_text(json.dumps(run_config), encoding="utf-8")
    out = tmp_path / "results.json"
    unisent_cli("evaluate", "--model", str(folder), "--tasks", "stsb-dev", "--cost", "--output", str(out), "--quiet")
    cost = json.loads(out.read_text())["cost"]
    assert cost["start"]["total_parameters"] < cost["total_parameters"] and "gaussians" in cost["encode_seconds"]
    unisent_cli("export", str(folder), "--format", "sentence-transformers", "--out", str(tmp_path / "st"),
                "--results", str(out))  # fmt: skip
    card = (tmp_path / "st" / "README.md").read_text()
    assert "## Cost" in card and "| own top layers (a head's own tower) |" in card and "the start's vectors" in card
