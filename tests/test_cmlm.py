"""CMLM and its parts: masking, projection, MLM head, conditioning, bitext retrieval, stages, NLI, PCR, LAMB."""

import json
import math
import shutil
from pathlib import Path

import lightning as L
import numpy as np
import pandas as pd
import pytest
import torch

import unisent
from unisent.builders.cmlm_records import bitext_pairs, consecutive_pairs, nli_pairs, read_documents
from unisent.cli import main
from unisent.data import DataSource, UnisentDataModule
from unisent.data.schema import pad_batch
from unisent.encoders import Encoder, EncoderConfig
from unisent.lightning_module import UnisentModule
from unisent.losses import additive_margin_softmax
from unisent.models import PCREncoder, PrincipalComponentRemoval, fit_pcr
from unisent.objectives import CMLM, BitextRetrieval, NLIClassifier, ProjectionEncoder
from unisent.objectives.cmlm import SentenceProjection, mask_tokens
from unisent.objectives.nli_classifier import label_id
from unisent.optim import Lamb, split_weight_decay
from unisent.resources import EVALUATION_DATA_DIR  # noqa: E402
from unisent.training_config import TrainConfig

#: the repository's training, benchmark and test samples (not in the wheel)
SAMPLE_DIR = Path(__file__).resolve().parents[1] / "samples"

pytestmark = pytest.mark.usefixtures("one_thread")

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = Path(__file__).resolve().parent / "evaluation" / "fixtures" / "data"


def _sentences() -> list[str]:
    return (SAMPLE_DIR / "sentences.txt").read_text(encoding="utf-8").splitlines()


def _encoder(model_dir, **kw) -> Encoder:
    return Encoder(EncoderConfig(model=str(model_dir), pooler="mean", **kw))


def _pad(ids):
    input_ids, mask = pad_batch(ids, 0)
    return {"input_ids": input_ids, "attention_mask": mask}


# ------------------------------------------------------------------------------------------ masking
def test_masking_ratio_and_80_10_10_hold_and_specials_and_padding_are_never_touched():
    g = torch.Generator().manual_seed(0)
    special = torch.tensor([0, 1, 2, 3, 4])  # pad, unk, cls, sep, mask
    vocab = 500
    lengths = torch.randint(6, 40, (64,), generator=g)
    ids = torch.randint(5, vocab, (64, 40), generator=g)
    mask = (torch.arange(40) < lengths[:, None]).long()
    ids[:, 0] = 2
    ids[torch.arange(64), lengths - 1] = 3
    ids[mask == 0] = 0
    ids[:, 5] = torch.where(mask[:, 5].bool(), 1, 0)  # an [UNK] inside every sentence
    replacement = torch.arange(5, vocab)
    n_targets = n_candidates = n_mask = n_same = n_random = 0
    for _ in range(200):
        masked, targets = mask_tokens(
            ids, mask, special_ids=special, mask_token_id=4, replacement_ids=replacement, ratio=0.3125, generator=g
        )
        candidates = mask.bool() & ~torch.isin(ids, special)
        assert not (targets & ~candidates).any()  # never specials or padding
        assert torch.equal(masked[~targets], ids[~targets])  # nothing else changes
        assert (targets.sum(1) >= 1).all()
        n_targets += targets.sum().item()
        n_candidates += candidates.sum().item()
        n_mask += (masked[targets] == 4).sum().item()
        n_same += (masked[targets] == ids[targets]).sum().item()
        n_random += ((masked[targets] != 4) & (masked[targets] != ids[targets])).sum().item()
        assert not torch.isin(masked[targets & (masked != 4)], special).any()  # random tokens are not specials
    assert n_targets / n_candidates == pytest.approx(0.3125, abs=0.01)
    assert n_mask / n_targets == pytest.approx(0.8, abs=0.01)
    assert n_same / n_targets == pytest.approx(0.1 + 0.1 / len(replacement), abs=0.01)
    assert n_random / n_targets == pytest.approx(0.1 - 0.1 / len(replacement), abs=0.01)


def test_masking_settings_are_validated():
    kw = {"special_ids": torch.tensor([0]), "mask_token_id": 4, "replacement_ids": torch.arange(5, 9)}
    ids, mask = torch.ones(2, 3, dtype=torch.long) * 5, torch.ones(2, 3, dtype=torch.long)
    with pytest.raises(ValueError, match="ratio"):
        mask_tokens(ids, mask, ratio=0.0, **kw)
    with pytest.raises(ValueError, match="mask_prob"):
        mask_tokens(ids, mask, mask_prob=0.95, random_prob=0.1, **kw)
    with pytest.raises(ValueError, match="positions"):
        CMLM(positions="left")


# ------------------------------------------------------------------------------------------ projection
def test_projection_gives_n_vectors_with_the_identity_first():
    v = torch.randn(3, 8)
    out = SentenceProjection(8, num_projections=15)(v)
    assert out.shape == (3, 15, 8)
    torch.testing.assert_close(out[:, 0], v)
    assert not torch.allclose(out[:, 1], v)
    linear_layers = [m for m in SentenceProjection(8, 15).mlp if isinstance(m, torch.nn.Linear)]
    assert len(linear_layers) == 3 and linear_layers[-1].out_features == 14 * 8
    assert SentenceProjection(8, 1)(v).shape == (3, 1, 8) and SentenceProjection(8, 1).mlp is None
    no_identity = SentenceProjection(8, 4, identity=False)(v)
    assert no_identity.shape == (3, 4, 8) and not any(torch.allclose(no_identity[:, i], v) for i in range(4))


# ------------------------------------------------------------------------------------------ MLM head
def _with_mlm_head(model_dir: Path, target: Path) -> tuple[Path, torch.nn.Module]:
    from transformers import AutoTokenizer, BertConfig, BertForMaskedLM

    torch.manual_seed(1)
    mlm = BertForMaskedLM(BertConfig.from_pretrained(model_dir))
    with torch.no_grad():
        mlm.cls.predictions.bias.normal_()
        mlm.cls.predictions.transform.dense.weight.normal_()
    mlm.save_pretrained(target)
    AutoTokenizer.from_pretrained(model_dir).save_pretrained(target)
    return target, mlm.eval()


def test_mlm_head_is_loaded_from_a_checkpoint_that_has_one_else_fresh(tiny_bert_dir, tmp_path):
    plain = CMLM()
    plain.setup_for(_encoder(tiny_bert_dir))
    assert plain.mlm_head_source == "fresh"

    directory, mlm = _with_mlm_head(tiny_bert_dir, tmp_path / "with-head")
    encoder = _encoder(directory).eval()
    objective = CMLM()
    objective.setup_for(encoder)
    assert objective.mlm_head_source == "pretrained"
    ids = torch.tensor([[2, 10, 11, 12, 3]])
    hidden = encoder.backbone(input_ids=ids).last_hidden_state[0]
    with torch.no_grad():  # same logits as BertForMaskedLM: head loaded, decoder tied to the input embeddings
        torch.testing.assert_close(
            objective.head(hidden, encoder.backbone.get_input_embeddings().weight), mlm(input_ids=ids).logits[0]
        )
    fresh = CMLM(head_init="fresh")
    fresh.setup_for(encoder)
    assert fresh.mlm_head_source == "fresh"


# ------------------------------------------------------------------------------------------ objective
def _pair_batch(encoder, first, second):
    ids = encoder.tokenize_ids(first + second)
    batch = _pad(ids)
    n = len(first)
    return ({k: v[:n] for k, v in batch.items()}, {k: v[n:] for k, v in batch.items()})


def test_order_is_swapped_for_about_half_of_the_examples(tiny_bert_dir):
    encoder = _encoder(tiny_bert_dir)
    objective = CMLM(num_projections=2)
    objective.setup_for(encoder)
    s1 = {"input_ids": torch.tensor([[2, 10, 10, 3]] * 400), "attention_mask": torch.ones(400, 4, dtype=torch.long)}
    s2 = {"input_ids": torch.tensor([[2, 20, 20, 3]] * 400), "attention_mask": torch.ones(400, 4, dtype=torch.long)}
    seen = []
    forward = encoder.forward
    encoder.forward = lambda ids, mask, **kw: seen.append(ids.clone()) or forward(ids, mask, **kw)
    out = objective(encoder, {"s1": s1, "s2": s2})
    first = seen[0]
    from_s2 = (first[:, 1] == 20).float().mean().item()
    assert 0.42 < from_s2 < 0.58
    assert set(out.terms) == {"mlm"} and set(out.metrics) == {"accuracy"}  # accuracy is a metric, not in the loss
    assert objective.total(out) == out.terms["mlm"]
    objective.swap_prob = 0.0
    seen.clear()
    objective(encoder, {"s1": s1, "s2": s2})
    assert (seen[0][:, 1] == 10).all()


def test_second_pass_prefixes_the_projections_with_the_documented_positions(tiny_bert_dir):
    encoder = _encoder(tiny_bert_dir)
    calls = []
    backbone_forward = encoder.backbone.forward

    def spy(*args, **kw):
        calls.append(kw)
        return backbone_forward(*args, **kw)

    encoder.backbone.forward = spy
    first, second = _pair_batch(encoder, ["a man plays a guitar ."], ["two dogs run on the grass ."])
    length = second["input_ids"].shape[1]
    for positions, expected in (("own", [0] * 3 + list(range(length))), ("continuous", list(range(3 + length)))):
        calls.clear()
        objective = CMLM(num_projections=3, positions=positions)
        objective.setup_for(encoder)
        objective(encoder, {"s1": first, "s2": second})
        prefixed = calls[-1]
        assert prefixed["inputs_embeds"].shape[1] == 3 + length
        assert prefixed["attention_mask"][0, :3].tolist() == [1, 1, 1]
        assert prefixed["position_ids"][0].tolist() == expected


def test_skip_variant_starts_as_the_plain_path_and_trains(tiny_bert_dir):
    encoder = _encoder(tiny_bert_dir).eval()
    first, second = _pair_batch(encoder, _sentences()[:4], _sentences()[4:8])
    torch.manual_seed(3)
    plain = CMLM(num_projections=3)
    plain.setup_for(encoder)
    skip = CMLM(num_projections=3, skip=True)
    skip.setup_for(encoder)
    skip.load_state_dict(plain.state_dict(), strict=False)
    masked, targets = plain.mask(second["input_ids"], second["attention_mask"])
    args = (
        encoder,
        first,
        {"input_ids": masked, "attention_mask": second["attention_mask"]},
        targets,
        second["input_ids"],
    )
    torch.testing.assert_close(skip.masked_lm(*args)[0], plain.masked_lm(*args)[0])
    assert skip.skip_layer.in_features == 4 * encoder.hidden_size
    skip.masked_lm(*args)[0].backward()
    assert skip.skip_layer.weight.grad[:, encoder.hidden_size :].abs().sum() > 0  # the projections reach the head


def test_a_batch_without_maskable_tokens_gives_a_zero_loss(tiny_bert_dir):
    encoder = _encoder(tiny_bert_dir)
    objective = CMLM(num_projections=2)
    objective.setup_for(encoder)
    only_specials = {"input_ids": torch.tensor([[2, 1, 3]]), "attention_mask": torch.ones(1, 3, dtype=torch.long)}
    terms = objective(encoder, {"s1": only_specials, "s2": only_specials})
    assert terms["mlm"].item() == 0.0
    terms["mlm"].backward()


@pytest.mark.integration
def test_conditioning_on_the_true_first_sentence_lowers_the_masked_loss(tiny_bert_dir):
    """Train briefly on pairs whose second sentence repeats the first (real STS-B sentences), then
    compare the masked-token loss on held-out sentences under fixed masks: given the true s1 it must
    be clearly lower than given another sentence's s1 (measured margin ~0.3 nats over 5 seeds)."""
    torch.manual_seed(0)
    encoder = _encoder(tiny_bert_dir, max_length=24)
    objective = CMLM(num_projections=4)
    objective.setup_for(encoder)
    sentences = _sentences()
    train_ids = encoder.tokenize_ids(sentences[:256])
    held_out = encoder.tokenize_ids(sentences[-64:])
    optimizer = torch.optim.AdamW(list(encoder.parameters()) + list(objective.parameters()), lr=3e-3)
    g = torch.Generator().manual_seed(123)
    for _ in range(300):
        batch = _pad([train_ids[j] for j in torch.randint(len(train_ids), (32,), generator=g).tolist()])
        loss = objective(encoder, {"s1": batch, "s2": batch})["mlm"]
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    encoder.eval()
    objective.eval()
    s = _pad(held_out)
    masks = torch.Generator().manual_seed(7)
    true_losses, shuffled_losses = [], []
    with torch.no_grad():
        for shift in (1, 2, 3):
            masked, targets = objective.mask(s["input_ids"], s["attention_mask"], generator=masks)
            second = {"input_ids": masked, "attention_mask": s["attention_mask"]}
            other = {k: v.roll(shift, dims=0) for k, v in s.items()}  # every row gets another sentence
            true_losses.append(objective.masked_lm(encoder, s, second, targets, s["input_ids"])[0].item())
            shuffled_losses.append(objective.masked_lm(encoder, other, second, targets, s["input_ids"])[0].item())
    true, shuffled = np.mean(true_losses), np.mean(shuffled_losses)
    assert shuffled - true > 0.15, (true, shuffled)
    assert all(t < s for t, s in zip(true_losses, shuffled_losses))


# ------------------------------------------------------------------------------------------ proj variant
def test_proj_variant_encodes_with_the_mean_projection_and_round_trips(tiny_bert_dir, tmp_path):
    module = UnisentModule(
        encoder=EncoderConfig(model=str(tiny_bert_dir), pooler="mean"), objectives=[CMLM(num_projections=3, proj=True)]
    )
    model = module.inference_model()
    assert isinstance(model, ProjectionEncoder)
    sentences = _sentences()[:5]
    with torch.inference_mode():
        expected = module.objectives[0].projection.eval()(module.encoder.encode(sentences)).mean(1)
    torch.testing.assert_close(model.encode(sentences), expected)
    model.save_pretrained(tmp_path / "proj")
    loaded = unisent.load(str(tmp_path / "proj"))
    assert isinstance(loaded, ProjectionEncoder)
    torch.testing.assert_close(loaded.encode(sentences), expected)
    wrapped = fit_pcr(loaded, {"en": _sentences()[10:30]}, k=1)  # PCR over the "proj" model round-trips too
    wrapped.save_pretrained(tmp_path / "proj-pcr")
    again = unisent.load(str(tmp_path / "proj-pcr"))
    assert isinstance(again, PCREncoder) and isinstance(again.encoder, ProjectionEncoder)
    torch.testing.assert_close(again.encode(sentences), wrapped.encode(sentences))
    plain = UnisentModule(
        encoder=EncoderConfig(model=str(tiny_bert_dir), pooler="mean"), objectives=[CMLM(num_projections=3)]
    )
    assert plain.inference_model() is plain.encoder  # without proj, inference keeps only s1 -> v


# ------------------------------------------------------------------------------------------ bitext
def _hand_margin_loss(s, t, m, scale=1.0, normalize=False):
    if normalize:
        s, t = torch.nn.functional.normalize(s, dim=-1), torch.nn.functional.normalize(t, dim=-1)
    s, t = s.tolist(), t.tolist()
    b = len(s)

    def phi(x, y):
        return sum(p * q for p, q in zip(x, y))

    total = 0.0
    for queries, cands in ((s, t), (t, s)):
        for i in range(b):
            true = math.exp(scale * (phi(queries[i], cands[i]) - m))
            others = sum(math.exp(scale * phi(queries[i], cands[j])) for j in range(b) if j != i)
            total += -math.log(true / (true + others)) / b
    return total


@pytest.mark.parametrize("kw", [{}, {"scale": 20.0, "normalize": True}], ids=["inner-product", "scaled-cosine"])
def test_additive_margin_loss_matches_hand_computation(kw):
    g = torch.Generator().manual_seed(0)
    s, t = torch.randn(4, 3, generator=g), torch.randn(4, 3, generator=g)
    got = additive_margin_softmax(s, t, margin=0.3, **kw)
    assert got.item() == pytest.approx(_hand_margin_loss(s, t, 0.3, **kw), rel=1e-5)
    one_way = additive_margin_softmax(s, t, margin=0.3, bidirectional=False, **kw)
    assert one_way.item() < got.item()
    assert additive_margin_softmax(s, t, margin=0.0, **kw).item() < got.item()  # the margin makes it harder


def test_bitext_objective_one_stacked_forward(tiny_bert_dir):
    encoder = _encoder(tiny_bert_dir)
    calls = []
    forward = encoder.forward
    encoder.forward = lambda ids, mask, **kw: calls.append(ids.shape) or forward(ids, mask, **kw)
    source, target = _pair_batch(encoder, _sentences()[:3], _sentences()[3:6])
    terms = BitextRetrieval()(encoder, {"source": source, "target": target})
    assert len(calls) == 1 and calls[0][0] == 6
    assert set(terms) == {"retrieval"} and terms["retrieval"].requires_grad


# ------------------------------------------------------------------------------------------ stages
def test_weight_schedule_switches_the_objectives_at_the_right_steps(tiny_model_dir, tmp_path):
    bitext = tmp_path / "bitext.jsonl"
    sents = _sentences()[:64]
    bitext.write_text(
        "".join(json.dumps({"source": a, "target": b}) + "\n" for a, b in zip(sents, sents[1:] + sents[:1]))
    )
    module = UnisentModule(
        encoder=EncoderConfig(model=str(tiny_model_dir), pooler="mean", max_length=24),
        objectives=[CMLM(num_projections=2), BitextRetrieval(weight=0.2)],
        # S3, then BR only from step 5
        train=TrainConfig(weight_schedule={"bitext": [[0, 0.0], [3, 0.2]], "cmlm": [[5, 0.0]]}),
        evaluation=None,
    )
    module.evaluation.val_tasks = []
    assert [module.objective_weight(module.objectives[1], s) for s in (0, 2, 3, 10)] == [0.0, 0.0, 0.2, 0.2]
    assert [module.objective_weight(module.objectives[0], s) for s in (0, 4, 5)] == [1.0, 1.0, 0.0]
    data = UnisentDataModule(
        train={
            "cmlm": DataSource(str(SAMPLE_DIR / "cmlm_pairs.jsonl"), max_records=64),
            "bitext": DataSource(str(bitext)),
        },
        batch_size=8,
    )
    trainer = L.Trainer(
        default_root_dir=tmp_path,
        logger=L.pytorch.loggers.CSVLogger(tmp_path, name="run"),
        log_every_n_steps=1,
        enable_progress_bar=False,
        enable_model_summary=False,
        accelerator="cpu",
        max_steps=7,
        enable_checkpointing=False,
    )
    trainer.fit(module, datamodule=data)
    metrics = pd.read_csv(next(tmp_path.glob("run/version_*/metrics.csv")))
    rows = metrics.dropna(subset=["train/bitext/weight"]).reset_index(drop=True)
    np.testing.assert_allclose(rows["train/bitext/weight"], [0.0] * 3 + [0.2] * 4, rtol=1e-6)
    np.testing.assert_allclose(rows["train/cmlm/weight"], [1.0] * 5 + [0.0] * 2, rtol=1e-6)
    assert rows["train/bitext/retrieval"].notna().tolist() == [False] * 3 + [True] * 4  # skipped while 0
    assert rows["train/cmlm/mlm"].notna().tolist() == [True] * 5 + [False] * 2
    assert rows["train/cmlm/accuracy"].between(0, 1).tolist() == [True] * 5 + [False] * 2  # logged, not in the loss
    expected = rows["train/cmlm/mlm"].fillna(0) + 0.2 * rows["train/bitext/retrieval"].fillna(0)
    assert (expected - rows["train/loss"]).abs().max() < 1e-4


# ------------------------------------------------------------------------------------------ NLI
def test_nli_labels_are_validated_with_the_record_named():
    assert [label_id(v) for v in ("entailment", "Neutral", "contradictory", 0, 2, "1")] == [0, 1, 2, 0, 2, 1]
    for bad in ("maybe", 3, -1, True, None, 1.0):
        with pytest.raises(ValueError, match="record 7"):
            label_id(bad, "record 7")
    objective = NLIClassifier()
    with pytest.raises(ValueError, match="training record 2: field 'label' is 'unknown'"):
        objective.setup_data({"label": ["neutral", "unknown"]})


def test_nli_classifier_one_stacked_forward_on_cross_lingual_pairs(tiny_bert_dir, tmp_path):
    pairs = nli_pairs(
        "xnli", str(FIXTURES / "nli/xnli/test-en.tsv"), hypothesis_path=str(FIXTURES / "nli/xnli/test-de.tsv")
    )
    de = (FIXTURES / "nli/xnli/test-de.tsv").read_text(encoding="utf-8").splitlines()[0].split("\t")
    assert pairs[0]["premise"].startswith("Well, I wasn't") and pairs[0]["hypothesis"] == de[1]
    assert pairs[0]["label"] == "contradiction" and len(pairs) == 9
    encoder = _encoder(tiny_bert_dir).eval()  # no dropout: the stacked pass is compared with separate ones
    objective = NLIClassifier()
    objective.setup_for(encoder)
    assert objective.classifier.in_features == 4 * encoder.hidden_size and objective.classifier.out_features == 3
    features = [
        {
            "premise": encoder.tokenize_ids([p["premise"]])[0],
            "hypothesis": encoder.tokenize_ids([p["hypothesis"]])[0],
            "label": p["label"],
        }
        for p in pairs
    ]
    batch = objective.collate(features, pad_id=0)
    assert batch["label"].tolist() == [label_id(p["label"]) for p in pairs]
    calls = []
    forward = encoder.forward
    encoder.forward = lambda ids, mask, **kw: calls.append(ids.shape) or forward(ids, mask, **kw)
    out = objective(encoder, batch)
    assert len(calls) == 1 and calls[0][0] == 18
    u, v = (
        forward(batch["premise"]["input_ids"], batch["premise"]["attention_mask"]),
        forward(batch["hypothesis"]["input_ids"], batch["hypothesis"]["attention_mask"]),
    )
    assert out.terms["classification"].item() == pytest.approx(
        torch.nn.functional.cross_entropy(objective.logits(u, v), batch["label"]).item(), rel=1e-4, abs=1e-5
    )
    assert set(out.metrics) == {"accuracy"} and 0 <= out.metrics["accuracy"] <= 1
    assert objective.total(out) == out.terms["classification"]  # the accuracy never enters the loss


def test_nli_pairs_refuses_misaligned_translations(tmp_path):
    shifted = tmp_path / "de.tsv"
    lines = (FIXTURES / "nli/xnli/test-de.tsv").read_text(encoding="utf-8").splitlines()
    shifted.write_text("\n".join(lines[1:] + lines[:1]) + "\n", encoding="utf-8")
    with pytest.raises(ValueError, match="pair 1: label"):
        nli_pairs("xnli", str(FIXTURES / "nli/xnli/test-en.tsv"), hypothesis_path=str(shifted))


# ------------------------------------------------------------------------------------------ data builders
def test_cmlm_pairs_from_text_and_jsonl_documents(tmp_path):
    text = tmp_path / "docs.txt"
    text.write_text("A one.\nA two.\nA three.\n\n\nB one.\n\nC one.\nC two.\n", encoding="utf-8")
    pairs = list(consecutive_pairs(read_documents(text)))
    assert pairs == [
        {"s1": "A one.", "s2": "A two."},
        {"s1": "A two.", "s2": "A three."},
        {"s1": "C one.", "s2": "C two."},
    ]
    docs = tmp_path / "docs.jsonl"
    docs.write_text(json.dumps({"sentences": ["x1", " ", "x2", "x3"]}) + "\n" + json.dumps({"sentences": ["y"]}) + "\n")
    out = tmp_path / "pairs.jsonl"
    main(["data", "cmlm-pairs", "--input", str(docs), "--output", str(out), "--max-pairs", "1"])
    assert [json.loads(line) for line in out.read_text().splitlines()] == [{"s1": "x1", "s2": "x2"}]
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"sentences": ["ok"]}) + "\n" + json.dumps({"text": "no"}) + "\n")
    with pytest.raises(SystemExit, match="line 2"):
        main(["data", "cmlm-pairs", "--input", str(bad), "--output", str(tmp_path / "o.jsonl")])


def test_bundled_cmlm_sample_is_consecutive_little_prince_text():
    rows = [json.loads(line) for line in (SAMPLE_DIR / "cmlm_pairs.jsonl").read_text(encoding="utf-8").splitlines()]
    assert len(rows) == 1508 and all(set(r) == {"s1", "s2"} for r in rows)
    assert rows[0]["s2"] == rows[1]["s1"] and "boa constrictor" in rows[0]["s2"]
    assert "cmlm_pairs.jsonl" in (SAMPLE_DIR / "LICENSE.md").read_text(encoding="utf-8")


def test_bitext_from_tsv_and_tatoeba_layout(tmp_path):
    tsv = tmp_path / "pairs.tsv"
    tsv.write_text("hello\thallo\n\nbye\ttschüss\n", encoding="utf-8")
    assert list(bitext_pairs(tsv, language="deu")) == [
        {"source": "hello", "target": "hallo", "language": "deu"},
        {"source": "bye", "target": "tschüss", "language": "deu"},
    ]
    out = tmp_path / "tatoeba.jsonl"
    main(["data", "bitext", "--input", str(FIXTURES / "retrieval/tatoeba"), "--languages", "deu", "--output", str(out)])
    rows = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]
    eng = (FIXTURES / "retrieval/tatoeba/tatoeba.deu-eng.eng").read_text(encoding="utf-8").splitlines()
    deu = (FIXTURES / "retrieval/tatoeba/tatoeba.deu-eng.deu").read_text(encoding="utf-8").splitlines()
    assert rows[0] == {"source": eng[0].strip(), "target": deu[0].strip(), "language": "deu"} and len(rows) == 10
    single = list(bitext_pairs(FIXTURES / "retrieval/tatoeba/tatoeba.deu-eng.deu", english_source=False))
    assert single[0]["source"] == deu[0].strip()
    tsv.write_text("only one field\n", encoding="utf-8")
    with pytest.raises(SystemExit, match="line 1"):
        main(["data", "bitext", "--input", str(tsv), "--output", str(out)])
    with pytest.raises(SystemExit, match="xyz"):
        main(
            [
                "data",
                "bitext",
                "--input",
                str(FIXTURES / "retrieval/tatoeba"),
                "--languages",
                "xyz",
                "--output",
                str(out),
            ]
        )


# ------------------------------------------------------------------------------------------ PCR
def _languages():
    rng = np.random.default_rng(0)
    return {lang: rng.normal(size=(120, 8)) * 0.5 + rng.normal(size=8) * 4 for lang in ("en", "de")}


@pytest.mark.parametrize("k", [1, 2])
@pytest.mark.parametrize("center", [False, True])
def test_pcr_removes_the_top_components_per_language_like_numpy_svd(k, center):
    data = _languages()
    pcr = PrincipalComponentRemoval(k=k, center=center).fit(data)
    for lang, x in data.items():
        mean = x.mean(0) if center else np.zeros(x.shape[1])
        _, _, vt = np.linalg.svd(x - mean, full_matrices=False)
        top = vt[:k]
        expected = (x - mean) - (x - mean) @ top.T @ top
        got = pcr.transform(torch.tensor(x, dtype=torch.float32), lang)
        np.testing.assert_allclose(got.numpy(), expected, atol=2e-4)
        assert np.abs(got.numpy() @ top.T).max() < 1e-3  # nothing left along the removed components
    en, de = data["en"], data["de"]
    assert not np.allclose(pcr.transform(en, "en").numpy(), pcr.transform(en, "de").numpy(), atol=1e-2)  # per language
    mixed = pcr.transform(np.concatenate([en[:2], de[:2]]), ["en", "en", "de", "de"])
    torch.testing.assert_close(mixed[2:], pcr.transform(de[:2], "de"))


def test_pcr_uncentred_first_component_removes_the_language_offset():
    data = _languages()
    before = np.linalg.norm(data["en"].mean(0) - data["de"].mean(0))
    pcr = PrincipalComponentRemoval(k=1).fit(data)
    after = np.linalg.norm(
        pcr.transform(data["en"], "en").numpy().mean(0) - pcr.transform(data["de"], "de").numpy().mean(0)
    )
    assert after < 0.3 * before


def test_pcr_round_trips_and_the_wrapper_applies_it_by_language(tiny_bert_dir, tmp_path):
    data = _languages()
    pcr = PrincipalComponentRemoval(k=2).fit(data)
    pcr.save(tmp_path / "pcr.json")
    loaded = PrincipalComponentRemoval.load(tmp_path / "pcr.json")
    assert loaded.languages == ["de", "en"] and loaded.k == 2
    for lang in loaded.languages:
        assert torch.equal(loaded.components[lang], pcr.components[lang])
        assert torch.equal(loaded.transform(data[lang], lang), pcr.transform(data[lang], lang))
    with pytest.raises(KeyError, match="fitted: de, en"):
        pcr.transform(data["en"], "fr")

    encoder = _encoder(tiny_bert_dir)
    sents = _sentences()
    model = fit_pcr(encoder, {"en": sents[:40], "de": sents[40:80]}, k=1)
    probe = sents[100:104]
    expected = model.pcr.transform(encoder.encode(probe), "de")
    torch.testing.assert_close(model.encode(probe, language="de"), expected)
    with pytest.raises(ValueError, match="language"):
        model.encode(probe)
    model.save_pretrained(tmp_path / "pcr-model")
    again = unisent.load(str(tmp_path / "pcr-model"))
    assert isinstance(again, PCREncoder) and isinstance(again.encoder, Encoder)
    torch.testing.assert_close(again.encode(probe, language="de"), expected)
    one = PCREncoder(encoder, PrincipalComponentRemoval().fit({"en": encoder.encode(sents[:40])}))
    torch.testing.assert_close(one.encode(probe), one.encode(probe, language="en"))  # the only language is the default


# ------------------------------------------------------------------------------------------ LAMB
def _numpy_lamb(p, grads, lr, b1, b2, eps, wd, adapt=True):
    m, v = np.zeros_like(p), np.zeros_like(p)
    for t, g in enumerate(grads, 1):
        m = b1 * m + (1 - b1) * g
        v = b2 * v + (1 - b2) * g * g
        u = (m / (1 - b1**t)) / (np.sqrt(v / (1 - b2**t)) + eps) + wd * p
        w_norm, u_norm = np.linalg.norm(p), np.linalg.norm(u)
        trust = w_norm / u_norm if adapt and w_norm > 0 and u_norm > 0 else 1.0
        p = p - lr * trust * u
    return p


@pytest.mark.parametrize("adapt_no_decay", [True, False])
def test_lamb_steps_match_a_numpy_computation(adapt_no_decay):
    rng = np.random.default_rng(0)
    layer = torch.nn.Linear(4, 3)
    w0, b0 = rng.normal(size=(3, 4)), rng.normal(size=3)
    zero = torch.nn.Parameter(torch.zeros(5))
    with torch.no_grad():
        layer.weight.copy_(torch.tensor(w0))
        layer.bias.copy_(torch.tensor(b0))
    groups = split_weight_decay([*layer.named_parameters(), ("extra", zero)])
    opt = Lamb(groups, lr=0.01, betas=(0.9, 0.99), eps=1e-6, weight_decay=0.1, adapt_no_decay=adapt_no_decay)
    grads_w, grads_b, grads_z = ([rng.normal(size=s) for _ in range(3)] for s in ((3, 4), 3, 5))
    for gw, gb, gz in zip(grads_w, grads_b, grads_z):
        layer.weight.grad, layer.bias.grad = (
            torch.tensor(gw, dtype=torch.float32),
            torch.tensor(gb, dtype=torch.float32),
        )
        zero.grad = torch.tensor(gz, dtype=torch.float32)
        opt.step()
    np.testing.assert_allclose(
        layer.weight.detach().numpy(), _numpy_lamb(w0, grads_w, 0.01, 0.9, 0.99, 1e-6, 0.1), rtol=1e-5, atol=1e-6
    )
    np.testing.assert_allclose(
        layer.bias.detach().numpy(),  # the no-decay group: weight decay 0
        _numpy_lamb(b0, grads_b, 0.01, 0.9, 0.99, 1e-6, 0.0, adapt=adapt_no_decay),
        rtol=1e-5,
        atol=1e-6,
    )
    # a zero tensor has trust ratio 1 at the first step (||p|| = 0)
    np.testing.assert_allclose(
        zero.detach().numpy(),
        _numpy_lamb(np.zeros(5), grads_z, 0.01, 0.9, 0.99, 1e-6, 0.0, adapt=adapt_no_decay),
        rtol=1e-5,
        atol=1e-6,
    )


# ------------------------------------------------------------------------------------------ recipes
CMLM_RECIPES = sorted((ROOT / "recipes" / "cmlm").glob("*.yaml"))


def _recipe_data(recipe: Path, tmp_path: Path) -> list[str]:
    import yaml

    sents = _sentences()[:64]
    files = {
        "CMLM": SAMPLE_DIR / "cmlm_pairs.jsonl",
        "BitextRetrieval": tmp_path / "bitext.jsonl",
        "NLIClassifier": tmp_path / "nli.jsonl",
    }
    files["BitextRetrieval"].write_text("".join(json.dumps({"source": s, "target": s}) + "\n" for s in sents))
    files["NLIClassifier"].write_text(
        "".join(
            json.dumps({"premise": s, "hypothesis": t, "label": i % 3}) + "\n"
            for i, (s, t) in enumerate(zip(sents, sents[1:]))
        )
    )
    args = []
    for objective in yaml.safe_load(recipe.read_text())["model"]["objectives"]:
        cls = objective["class_path"].rsplit(".", 1)[-1]
        name = (
            objective.get("init_args", {}).get("name")
            or {"CMLM": "cmlm", "BitextRetrieval": "bitext", "NLIClassifier": "nli"}[cls]
        )
        args += [f"--data.train.{name}.path", str(files[cls]), f"--data.train.{name}.max_records", "64"]
    return args


@pytest.mark.slow
@pytest.mark.parametrize("recipe", CMLM_RECIPES, ids=lambda p: p.name)
def test_cmlm_recipe_runs_a_few_steps_on_a_tiny_model(recipe, tmp_path, tiny_bert_dir):
    model_dir = Path(shutil.copytree(tiny_bert_dir, tmp_path / "tiny"))
    args = [
        "fit",
        "-c",
        str(recipe),
        "--model.encoder.model",
        str(model_dir),
        "--model.encoder.max_length",
        "24",
        "--trainer.max_steps",
        "3",
        "--trainer.max_epochs",
        "1",
        "--trainer.precision",
        "32-true",
        "--trainer.logger",
        "lightning.pytorch.loggers.CSVLogger",
        "--trainer.logger.init_args.save_dir",
        str(tmp_path / "runs"),
        "--trainer.default_root_dir",
        str(tmp_path),
        "--trainer.enable_progress_bar",
        "false",
        "--trainer.log_every_n_steps",
        "1",
        "--data.batch_size",
        "8",
        "--model.evaluation.val_tasks=[stsb-dev]",
        "--model.evaluation.test_tasks=[stsb-test]",
        f"--model.evaluation.data_dir={EVALUATION_DATA_DIR}",
        "--trainer.val_check_interval=3",
        "--trainer.check_val_every_n_epoch=null",
        "--trainer.accumulate_grad_batches=1",
    ] + _recipe_data(recipe, tmp_path)
    main(args)
    metrics = pd.read_csv(next((tmp_path / "runs").rglob("metrics.csv")))
    assert metrics["train/loss"].notna().sum() == 3
    assert metrics["val/stsb-dev"].notna().any()
    assert list((tmp_path / "runs").rglob("encoder/unisent_encoder.json"))
