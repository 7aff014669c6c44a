"""EASE entity retrieval (EASE.retrieve_entities, benchmarks/ease_entity_retrieval.py) on a hand-made
case, a checkpoint with two objectives, and the bundled held-out FewRel file's integrity."""

from __future__ import annotations

import importlib.util
import json
from collections import Counter
from pathlib import Path

import pytest
import torch

from unisent.data.entities import read_entity_records
from unisent.data.record_errors import RecordError
from unisent.encoders import EncoderConfig
from unisent.lightning_module import UnisentModule
from unisent.objectives import EASE, SimCSE
from unisent.objectives.ease import find_ease

#: the repository's training, benchmark and test samples (not in the wheel)
SAMPLE_DIR = Path(__file__).resolve().parents[1] / "samples"

pytestmark = pytest.mark.usefixtures("one_thread")

ROOT = Path(__file__).resolve().parents[1]


def _script():
    spec = importlib.util.spec_from_file_location(
        "ease_entity_retrieval", ROOT / "benchmarks" / "ease_entity_retrieval.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class FixedEncoder:
    """Returns a fixed vector per sentence: the hand computation needs nothing else."""

    def __init__(self, vectors: dict[str, list[float]]):
        self.vectors = vectors
        self.precisions: list[str] = []

    def encode_pooled(self, sentences, batch_size=64, *, precision="auto"):
        self.precisions.append(precision)
        return torch.tensor([self.vectors[s] for s in sentences])


# entity directions after the projection (degrees): Q1 0, Q2 90, Q3 180, Q4 45
DIRECTIONS = {"Q1": [1.0, 0.0], "Q2": [0.0, 1.0], "Q3": [-1.0, 0.0], "Q4": [1.0, 1.0]}


def _objective(entity_temperature=100.0) -> EASE:
    """An EASE objective whose projection rotates by +90 degrees (linear, no bias), with table rows rotated
    by -90 degrees, so the projected entities point in DIRECTIONS (and a retrieval that skipped the
    projection would rank them otherwise)."""
    objective = EASE(entity_dim=2, projection="linear", entity_temperature=entity_temperature)
    objective.projection = torch.nn.Sequential(torch.nn.Linear(2, 2))
    with torch.no_grad():
        objective.projection[0].weight.copy_(torch.tensor([[0.0, -1.0], [1.0, 0.0]]))  # (x, y) -> (-y, x)
        objective.projection[0].bias.zero_()
    objective.build_vocabulary(["Q1", "Q2", "Q3", "Q4"])
    with torch.no_grad():
        for entity, (x, y) in DIRECTIONS.items():
            objective.entity_table.weight[objective.entities.index(entity)] = torch.tensor([y, -x]) * 3.0
    return objective


def test_retrieval_ranks_every_entity_by_cosine_as_computed_by_hand():
    encoder = FixedEncoder({"a": [1.0, 0.1], "b": [0.0, 2.0], "c": [5.0, 5.0]})
    texts, gold = ["a", "b", "c"], ["Q1", "Q1", "Q2"]
    # by hand, cosines with Q1, Q2, Q3, Q4:
    #   a (5.7 deg): 0.995, 0.0995, -0.995, 0.774 -> gold Q1 rank 1
    #   b (90 deg):  0, 1, 0, 0.707              -> gold Q1 ties with Q3 at 0: rank 4 (ties count against)
    #   c (45 deg):  0.707, 0.707, -0.707, 1     -> gold Q2 ties with Q1: rank 3
    ranks = [1, 4, 3]
    result = _objective().retrieve_entities(encoder, texts, gold, ks=(1, 2, 3, 10))
    assert result["records"] == 3 and result["entities"] == 4  # the padding row is not a candidate
    for k in (1, 2, 3, 10):
        assert result[f"top{k}"] == pytest.approx(sum(r <= k for r in ranks) / 3)
        assert result[f"chance_top{k}"] == pytest.approx(min(1.0, k / 4))
    assert result["top1"] == pytest.approx(1 / 3) and result["top3"] == pytest.approx(2 / 3)
    # the best sentence-blind ranking puts Q1 (2 of the 3 records) first
    assert result["best_fixed_ranking_top1"] == pytest.approx(2 / 3)
    assert result["best_fixed_ranking_top2"] == pytest.approx(1.0)
    assert result["median_rank"] == 3
    assert result["mean_reciprocal_rank"] == pytest.approx((1 + 1 / 4 + 1 / 3) / 3)
    # the temperature divides every score alike: the ranking does not change
    sharp = _objective(entity_temperature=0.05).retrieve_entities(encoder, texts, gold, ks=(1, 2, 3, 10))
    assert sharp == result
    assert encoder.precisions == ["fp32", "fp32"]  # a score: fp32 on any machine, whatever auto would pick


def test_retrieval_rejects_unknown_entities_and_untrained_objectives():
    encoder = FixedEncoder({"a": [1.0, 0.0]})
    with pytest.raises(KeyError, match="Q9"):
        _objective().retrieve_entities(encoder, ["a"], ["Q9"])
    with pytest.raises(RuntimeError, match="entity table"):
        EASE(entity_dim=2).retrieve_entities(encoder, ["a"], ["Q1"])


def test_find_ease_picks_the_ease_objective_by_type():
    simcse, ease = SimCSE(), EASE(entity_dim=2)
    assert find_ease([simcse, ease]) is ease
    with pytest.raises(ValueError, match=r"need an EASE objective; the objectives are: simcse \(SimCSE\)"):
        find_ease([simcse])
    second = EASE(entity_dim=2, name="ease2")
    with pytest.raises(ValueError, match="several EASE objectives"):
        find_ease([ease, second])
    assert find_ease([ease, second], "ease2") is second


def test_read_entity_records_names_file_line_and_field(tmp_path):
    path = tmp_path / "heldout.jsonl"
    path.write_text('{"text": "A sentence.", "entity": "Q1"}\n{"text": "Another.", "entity": "Q7"}\n')
    assert read_entity_records(path) == (["A sentence.", "Another."], ["Q1", "Q7"])
    with pytest.raises(RecordError, match=r"heldout.jsonl:line 2: field 'entity': 'Q7' is not in the entity table"):
        read_entity_records(path, {"Q1", "Q2"})
    path.write_text('{"text": "", "entity": "Q1"}\n')
    with pytest.raises(RecordError, match=r"line 1: field 'text'"):
        read_entity_records(path)


def test_the_script_scores_a_checkpoint_with_two_objectives(tiny_model_dir, tmp_path):
    """A checkpoint of SimCSE + EASE: the script finds EASE, reads the records against its table, and its
    numbers equal retrieve_entities on the module it saved."""
    ease = EASE(entity_dim=8, entity_temperature=0.1)
    module = UnisentModule(encoder=EncoderConfig(model=str(tiny_model_dir), pooler="mean"), objectives=[SimCSE(), ease])
    entities = ["Q1", "Q2", "Q3", "Q4", "Q5"]
    ease.build_vocabulary(entities, [None] * 5)
    ckpt = tmp_path / "two.ckpt"
    # what Lightning writes (UnisentModule.on_save_checkpoint adds the "unisent" record)
    checkpoint = {"state_dict": module.state_dict(), "global_step": 7}
    module.on_save_checkpoint(checkpoint)
    torch.save(checkpoint, ckpt)
    texts = [
        "a man plays a guitar .",
        "two dogs run on the grass .",
        "a woman is slicing onions .",
        "the cat sleeps .",
        "a child rides a bike .",
        "the man sings .",
    ]
    gold = ["Q1", "Q2", "Q3", "Q4", "Q5", "Q1"]
    records = tmp_path / "heldout.jsonl"
    records.write_text("".join(json.dumps({"text": t, "entity": e}) + "\n" for t, e in zip(texts, gold)))
    out = tmp_path / "result.json"
    script = _script()
    assert script.main(["--ckpt", str(ckpt), "--records", str(records), "--k", "1", "3", "--output", str(out)]) == 0
    result = json.loads(out.read_text())
    module.eval()
    expected = ease.retrieve_entities(module.encoder, texts, gold, ks=(1, 3))
    assert result["objective"] == "ease" and result["global_step"] == 7 and result["entities"] == 5
    for key, value in expected.items():
        assert result[key] == pytest.approx(value, abs=1e-6), key
    # an entity outside the checkpoint's table: one line naming the file and line, exit 1
    records.write_text(json.dumps({"text": "x", "entity": "Q99"}) + "\n")
    assert script.main(["--ckpt", str(ckpt), "--records", str(records)]) == 1


def _records(path):
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def test_the_bundled_heldout_file_is_held_out_and_in_the_training_vocabulary():
    train = _records(SAMPLE_DIR / "ease_fewrel.jsonl")
    heldout = _records(SAMPLE_DIR / "ease_fewrel_heldout.jsonl")
    assert len(heldout) == 995
    norm = lambda s: " ".join(s.split()).lower()  # noqa: E731
    train_texts = {norm(r["text"]) for r in train}
    linked = {r["entity"] for r in train}
    assert not {norm(r["text"]) for r in heldout} & train_texts  # no held-out sentence in training
    assert {r["entity"] for r in heldout} <= linked  # every gold entity was a training positive
    assert len({r["text"] for r in heldout}) == len(heldout)  # one record per sentence
    per_entity = Counter(r["entity"] for r in heldout)
    assert max(per_entity.values()) <= 3 and len(per_entity) == 497
    texts, entities = read_entity_records(SAMPLE_DIR / "ease_fewrel_heldout.jsonl", linked)
    assert texts == [r["text"] for r in heldout] and entities == [r["entity"] for r in heldout]
