"""EASE: the entity loss against a hand computation of eq. 2, the entity table, Wikipedia2Vec, training."""

import json
import math
from pathlib import Path

import lightning as L
import numpy as np
import pandas as pd
import pytest
import torch
import torch.distributed as dist

from unisent.data import DataSource, UnisentDataModule
from unisent.data.entities import read_wikipedia2vec
from unisent.encoders import EncoderConfig
from unisent.lightning_module import UnisentModule
from unisent.objectives import EASE
from unisent.optim import AdamW
from unisent.testing import run_distributed

#: the repository's training, benchmark and test samples (not in the wheel)
SAMPLE_DIR = Path(__file__).resolve().parents[1] / "samples"

pytestmark = pytest.mark.usefixtures("one_thread")


class ToyEncoder(torch.nn.Module):
    """Mean of token embeddings: deterministic (no dropout), so results can be computed by hand."""

    hidden_size = 6

    def __init__(self, vocab=20):
        super().__init__()
        self.emb = torch.nn.Embedding(vocab, self.hidden_size)

    def forward(self, ids, mask):
        m = mask.unsqueeze(-1).float()
        return (self.emb(ids) * m).sum(1) / m.sum(1)


def _batch(objective, ids, entities, negatives):
    ids = torch.tensor(ids)
    return {
        "text": {"input_ids": ids, "attention_mask": torch.ones_like(ids)},
        "entity": objective.entity_ids(entities),
        "hard_negative": objective.entity_ids(negatives),
    }


def _cos(a, b):
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))


def _hand_entity_loss(s, pos, neg, tau, neg_present, same=None):
    """Eq. 2 written out with numpy loops:
    -log e^{sim(s_i, We_i)/t} / sum_j (e^{sim(s_i, We_j)/t} + e^{sim(s_i, We_j^-)/t})."""
    losses = []
    for i in range(len(s)):
        denominator = 0.0
        for j in range(len(s)):
            if same is None or j == i or not same[i][j]:
                denominator += math.exp(_cos(s[i], pos[j]) / tau)
            if neg_present[j] and (same is None or not same[i][len(s) + j]):
                denominator += math.exp(_cos(s[i], neg[j]) / tau)
        losses.append(-math.log(math.exp(_cos(s[i], pos[i]) / tau) / denominator))
    return float(np.mean(losses))


@pytest.mark.parametrize("projection", ["linear", "linear_tanh"])
def test_entity_loss_equals_hand_computation_of_eq2(projection):
    torch.manual_seed(0)
    encoder = ToyEncoder()
    objective = EASE(entity_temperature=0.5, temperature=0.7, projection=projection, entity_dim=5)
    objective.setup_for(encoder)
    objective.build_vocabulary(["Q1", "Q2", "Q3", "Q4"], ["Q5", None, "Q1", "Q6"])
    batch = _batch(
        objective, [[1, 2, 3], [4, 5, 6], [7, 8, 9], [3, 5, 7]], ["Q1", "Q2", "Q3", "Q4"], ["Q5", None, "Q1", "Q6"]
    )
    terms = objective(encoder, batch)
    with torch.no_grad():
        s = encoder(batch["text"]["input_ids"], batch["text"]["attention_mask"]).numpy()
        w, b = objective.projection[0].weight.numpy(), objective.projection[0].bias.numpy()
        table = objective.entity_table.weight.numpy()
    act = np.tanh if projection == "linear_tanh" else (lambda x: x)
    pos = [act(w @ table[objective.entities.index(e)] + b) for e in ["Q1", "Q2", "Q3", "Q4"]]
    neg = [act(w @ table[objective.entities.index(e)] + b) if e else None for e in ["Q5", None, "Q1", "Q6"]]
    expected = _hand_entity_loss(s, pos, neg, 0.5, [True, False, True, True])
    assert terms["entity"].item() == pytest.approx(expected, rel=1e-5)
    # eq. 3 with identical views (no dropout in the toy encoder): -log e^{1/t} / sum_j e^{cos(s_i, s_j)/t}
    t = 0.7
    simcse = np.mean(
        [-math.log(math.exp(1 / t) / sum(math.exp(_cos(s[i], s[j]) / t) for j in range(4))) for i in range(4)]
    )
    assert terms["contrastive"].item() == pytest.approx(simcse, rel=1e-5)
    assert objective.total(terms).item() == pytest.approx(0.01 * expected + simcse, rel=1e-5)


def _authors_entity_loss(s, pos, neg, tau, w):
    """The authors' ``cl_forward`` (studio-ousia/ease, ease/ease_models.py) on one process, in numpy:
    ``cos(z1, W e) / tau`` then ``cos(z1, W e^-) / tau + eye * hard_negative_weight``, concatenated,
    cross-entropy with labels ``arange``. Rows of ``neg`` that are None are left out (unisent drops a
    missing hard negative; the authors' code would score their padding entity there)."""
    s, pos = np.asarray(s, dtype=np.float64), np.asarray(pos, dtype=np.float64)
    unit = lambda m: m / np.linalg.norm(m, axis=-1, keepdims=True)  # noqa: E731
    logits = unit(s) @ unit(pos).T / tau
    present = [j for j, n in enumerate(neg) if n is not None]
    hn = unit(s) @ unit(np.asarray([neg[j] for j in present], dtype=np.float64)).T / tau
    hn = hn + w * np.eye(len(s))[:, present]  # the weight sits on each sentence's own hard negative
    logits = np.concatenate([logits, hn], axis=1)
    log_softmax = logits - np.log(np.exp(logits).sum(1, keepdims=True))
    return float(-np.mean(log_softmax[np.arange(len(s)), np.arange(len(s))]))


@pytest.mark.parametrize("missing", [False, True])
@pytest.mark.parametrize("w", [1.0, -0.5, 2.5])
def test_hard_negative_weight_equals_the_authors_formula(w, missing):
    torch.manual_seed(0)
    encoder = ToyEncoder()
    entities, negatives = ["Q1", "Q2", "Q3", "Q4"], ["Q5", None if missing else "Q6", "Q1", "Q7"]
    tokens = [[1, 2, 3], [4, 5, 6], [7, 8, 9], [3, 5, 7]]
    weighted = EASE(entity_temperature=0.5, entity_dim=5, hard_negative_weight=w)
    weighted.setup_for(encoder)
    weighted.build_vocabulary(entities, negatives)
    plain = EASE(entity_temperature=0.5, entity_dim=5)  # the default: eq. 2, no weight
    plain.projection, plain.entity_table, plain._index = weighted.projection, weighted.entity_table, weighted._index
    batch = _batch(weighted, tokens, entities, negatives)
    got = weighted(encoder, batch)["entity"].item()
    old = plain(encoder, batch)["entity"].item()
    with torch.no_grad():
        s = encoder(batch["text"]["input_ids"], batch["text"]["attention_mask"]).numpy()
        pos = weighted.project(batch["entity"]).numpy()
        neg = [weighted.project(weighted.entity_ids([n]))[0].numpy() if n else None for n in negatives]
    assert got == pytest.approx(_authors_entity_loss(s, pos, neg, 0.5, w), rel=1e-5)
    # w = 0 is the value before the option existed, the hand computation of eq. 2
    assert old == pytest.approx(_authors_entity_loss(s, pos, neg, 0.5, 0.0), rel=1e-5)
    assert old == pytest.approx(_hand_entity_loss(s, pos, neg, 0.5, [n is not None for n in negatives]), rel=1e-5)
    # a positive weight makes the own hard negative more probable: the loss rises (and falls for w < 0)
    assert (got > old + 1e-4) if w > 0 else (got < old - 1e-4)
    assert weighted.config()["init_args"]["hard_negative_weight"] == w


def test_hard_negative_weight_is_ignored_without_hard_negatives_and_must_be_finite():
    torch.manual_seed(0)
    encoder = ToyEncoder()
    ablation = EASE(entity_dim=4, entity_temperature=0.5, use_hard_negatives=False, hard_negative_weight=1.0)
    plain = EASE(entity_dim=4, entity_temperature=0.5, use_hard_negatives=False)
    ablation.setup_for(encoder)
    ablation.build_vocabulary(["Q1", "Q2", "Q3"])
    plain.projection, plain.entity_table, plain._index = ablation.projection, ablation.entity_table, ablation._index
    batch = _batch(ablation, [[1, 2], [3, 4], [5, 6]], ["Q1", "Q2", "Q3"], [None] * 3)
    del batch["hard_negative"]
    assert ablation(encoder, batch)["entity"].item() == plain(encoder, batch)["entity"].item()
    with pytest.raises(ValueError, match="hard_negative_weight must be a finite number"):
        EASE(hard_negative_weight=float("nan"))


def test_duplicate_entities_can_be_masked_and_the_temperature_divides():
    torch.manual_seed(0)
    encoder = ToyEncoder()
    objective = EASE(entity_dim=4, mask_duplicate_entities=True)  # the paper's tau = 100: a divisor
    objective.setup_for(encoder)
    objective.build_vocabulary(["Q1", "Q1", "Q2"], ["Q2", "Q3", "Q1"])
    batch = _batch(objective, [[1, 2], [3, 4], [5, 6]], ["Q1", "Q1", "Q2"], ["Q2", "Q3", "Q1"])
    terms = objective(encoder, batch)
    with torch.no_grad():
        s = encoder(batch["text"]["input_ids"], batch["text"]["attention_mask"]).numpy()
        pos = objective.project(batch["entity"]).numpy()
        neg = objective.project(batch["hard_negative"]).numpy()
    ids = ["Q1", "Q1", "Q2", "Q2", "Q3", "Q1"]
    same = [[ids[c] == ids[i] for c in range(6)] for i in range(3)]
    expected = _hand_entity_loss(s, pos, neg, 100.0, [True, True, True], same=same)
    assert terms["entity"].item() == pytest.approx(expected, rel=1e-5)
    # cos/100 makes the logits nearly uniform: the loss is close to log(number of candidates), which
    # masking makes 4, 4 and 5 (6 candidates minus the other mentions of the sentence's own entity)
    assert abs(terms["entity"].item() - (2 * math.log(4) + math.log(5)) / 3) < 0.01


def test_masking_also_drops_the_other_entities_of_the_same_sentence():
    torch.manual_seed(0)
    encoder = ToyEncoder()
    objective = EASE(entity_dim=4, entity_temperature=0.5, mask_duplicate_entities=True, use_hard_negatives=False)
    objective.setup_for(encoder)
    objective.build_vocabulary(["Q1", "Q2", "Q3"])
    # rows 0 and 1 are one sentence (padded differently would not matter) with two linked entities
    ids = torch.tensor([[1, 2, 3, 0], [1, 2, 3, 0], [4, 5, 6, 7]])
    mask = torch.tensor([[1, 1, 1, 0], [1, 1, 1, 0], [1, 1, 1, 1]])
    batch = {"text": {"input_ids": ids, "attention_mask": mask}, "entity": objective.entity_ids(["Q1", "Q2", "Q3"])}
    terms = objective(encoder, batch)
    with torch.no_grad():
        s = encoder(ids, mask).numpy()
        pos = objective.project(batch["entity"]).numpy()
    same = [[c in (0, 1) and i in (0, 1) for c in range(6)] for i in range(3)]
    expected = _hand_entity_loss(s, pos, None, 0.5, [False] * 3, same=same)
    assert terms["entity"].item() == pytest.approx(expected, rel=1e-5)
    unmasked = EASE(entity_dim=4, entity_temperature=0.5, use_hard_negatives=False)
    unmasked.projection, unmasked.entity_table, unmasked._index = (
        objective.projection,
        objective.entity_table,
        objective._index,
    )
    assert unmasked(encoder, batch)["entity"].item() > terms["entity"].item() + 1e-3


def test_ablations_change_what_is_computed():
    encoder = ToyEncoder()
    no_simcse = EASE(simcse_weight=0.0, entity_dim=4)
    no_negatives = EASE(use_hard_negatives=False, entity_dim=4)
    assert no_negatives.batch_keys == ("text", "entity") and "hard_negative" in EASE().batch_keys
    for objective in (no_simcse, no_negatives):
        objective.setup_for(encoder)
        objective.build_vocabulary(["Q1", "Q2"], ["Q2", "Q1"])
    batch = _batch(no_simcse, [[1, 2], [3, 4]], ["Q1", "Q2"], ["Q2", "Q1"])
    assert set(no_simcse(encoder, batch)) == {"entity"}
    del batch["hard_negative"]
    terms = no_negatives(encoder, batch)
    assert set(terms) == {"entity", "contrastive"}


def test_vocabulary_min_count_drops_rare_positives_and_keeps_their_negatives():
    objective = EASE(min_count=2, entity_dim=3)
    keep = objective.build_vocabulary(["Q1", "Q2", "Q1", "Q3", "Q2", "Q1"], ["Q9", "Q8", None, "Q1", "Q7", "Q2"])
    assert keep == [True, True, True, False, True, True]
    assert objective.entities == ["<pad>", "Q1", "Q2", "Q7", "Q8", "Q9"]  # by count, then the kept negatives
    assert torch.equal(objective.entity_table.weight[0], torch.zeros(3))
    with pytest.raises(KeyError, match="'Q3' is not in the EASE entity vocabulary"):
        objective.entity_ids(["Q3"])


def _write_w2v(path, fmt):
    vectors = {"Studio Ghibli": [0.1, 0.2, 0.3], "Japan": [1.0, -1.0, 0.5], "cat": [9.0, 9.0, 9.0]}
    lines = []
    for name, vec in vectors.items():
        key = name if name == "cat" else f"ENTITY/{name}"
        values = " ".join(map(str, vec))
        lines.append(f"{key}\t{values}" if fmt == "default" else f"{key.replace(' ', '_')} {values}")
    header = [f"{len(lines)} 3"] if fmt == "word2vec" else []
    path.write_text("\n".join(header + lines) + "\n", encoding="utf-8")


@pytest.mark.parametrize("fmt", ["default", "word2vec", "glove"])
def test_wikipedia2vec_text_formats(tmp_path, fmt):
    path = tmp_path / "w2v.txt"
    _write_w2v(path, fmt)
    vectors, dim = read_wikipedia2vec(path)
    assert dim == 3 and set(vectors) == {"Studio Ghibli", "Japan"}  # words are skipped
    np.testing.assert_allclose(vectors["Studio Ghibli"], [0.1, 0.2, 0.3])
    assert set(read_wikipedia2vec(path, {"Japan"})[0]) == {"Japan"}


def test_entity_table_initialised_from_wikipedia2vec_by_title(tmp_path):
    _write_w2v(tmp_path / "w2v.txt", "default")
    (tmp_path / "entities.tsv").write_text(
        "id\ttitle\tcount\nQ1\tStudio Ghibli\t5\nQ17\tJapan\t9\nQ5\tUnknown page\t1\n"
    )
    objective = EASE(
        entity_dim=3, wikipedia2vec=str(tmp_path / "w2v.txt"), entity_titles=str(tmp_path / "entities.tsv")
    )
    objective.build_vocabulary(["Q17", "Q1", "Q17", "Q5"], [None, None, None, None])
    table = objective.entity_table.weight.detach()
    np.testing.assert_allclose(table[objective.entities.index("Q1")], [0.1, 0.2, 0.3], rtol=1e-6)
    np.testing.assert_allclose(table[objective.entities.index("Q17")], [1.0, -1.0, 0.5], rtol=1e-6)
    missing = table[objective.entities.index("Q5")]
    assert missing.abs().max() <= 0.05 and missing.abs().sum() > 0  # U(-0.05, 0.05), as the authors' code
    assert objective.init_report == {"entities": 3, "from_wikipedia2vec": 2}
    with pytest.raises(ValueError, match="entity_dim: 3"):
        EASE(entity_dim=8, wikipedia2vec=str(tmp_path / "w2v.txt")).build_vocabulary(["Q1"], [None])


def _ease_records(path, n=96):
    """Real sentences, entities assigned by a content word so that the entity is predictable from the text."""
    sentences = (SAMPLE_DIR / "sentences.txt").read_text(encoding="utf-8").splitlines()
    words = {"man": "Q8441", "woman": "Q467", "dog": "Q144", "cat": "Q146", "playing": "Q11410"}
    records = []
    for sentence in sentences:
        for word, qid in words.items():
            if f" {word} " in f" {sentence.lower()} ":
                negative = sorted(set(words.values()) - {qid})[len(records) % 4]
                records.append(
                    {
                        "text": sentence,
                        "entity": qid,
                        "hard_negative": negative if len(records) % 5 else None,
                        "language": "en",
                    }
                )
                break
        if len(records) == n:
            break
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return path


def test_fit_saves_the_entity_vocabulary_and_a_checkpoint_restores_it(tiny_model_dir, tmp_path):
    data = _ease_records(tmp_path / "ease.jsonl")
    module = UnisentModule(
        encoder=EncoderConfig(model=str(tiny_model_dir), pooler="cls_mlp_train_only"),
        objectives=[EASE(entity_dim=16, entity_weight=1.0, entity_temperature=0.1)],
        optimizer=lambda p: AdamW(p, lr=1e-3),
    )
    trainer = L.Trainer(
        default_root_dir=tmp_path,
        logger=L.pytorch.loggers.CSVLogger(tmp_path, name="run"),
        log_every_n_steps=1,
        enable_progress_bar=False,
        enable_model_summary=False,
        max_steps=6,
        accelerator="cpu",
        limit_val_batches=0,
    )
    trainer.fit(module, datamodule=UnisentDataModule(train={"ease": DataSource(str(data))}, batch_size=16))
    objective = module.objectives[0]
    assert objective.entities[0] == "<pad>" and set(objective.entities[1:]) == {
        "Q8441",
        "Q467",
        "Q144",
        "Q146",
        "Q11410",
    }
    metrics = pd.read_csv(next(tmp_path.glob("run/version_*/metrics.csv")))
    assert metrics["train/ease/entity"].notna().sum() == 6 and metrics["train/ease/contrastive"].notna().sum() == 6
    ckpt = tmp_path / "ease.ckpt"
    trainer.save_checkpoint(ckpt)
    loaded = UnisentModule.from_checkpoint(ckpt)
    restored = loaded.objectives[0]
    assert restored.entities == objective.entities
    torch.testing.assert_close(restored.entity_table.weight, objective.entity_table.weight)
    torch.testing.assert_close(restored.projection[0].weight, objective.projection[0].weight)


def test_the_entity_term_learns_entities_from_sentences(tiny_model_dir, tmp_path):
    """On records whose entity is named by a word of the sentence, the entity loss falls well below chance."""
    data = _ease_records(tmp_path / "ease.jsonl", n=160)
    module = UnisentModule(
        encoder=EncoderConfig(model=str(tiny_model_dir), pooler="mean"),
        objectives=[
            EASE(
                entity_dim=16,
                entity_weight=1.0,
                entity_temperature=0.1,
                simcse_weight=0.0,
                mask_duplicate_entities=True,
            )
        ],  # 5 entities: many repeats per batch
        optimizer=lambda p: AdamW(p, lr=3e-3),
    )
    trainer = L.Trainer(
        default_root_dir=tmp_path,
        logger=L.pytorch.loggers.CSVLogger(tmp_path, name="run"),
        log_every_n_steps=1,
        enable_progress_bar=False,
        enable_model_summary=False,
        max_epochs=6,
        accelerator="cpu",
        limit_val_batches=0,
    )
    trainer.fit(module, datamodule=UnisentDataModule(train={"ease": DataSource(str(data))}, batch_size=16))
    losses = pd.read_csv(next(tmp_path.glob("run/version_*/metrics.csv")))["train/ease/entity"].dropna().to_numpy()
    assert losses[:5].mean() > 1.0  # near log(own entity + the 4 others and their hard negatives) at the start
    assert losses[-10:].mean() < 0.5 * losses[:5].mean()


# ------------------------------------------------------------------------------------ two processes
WORLD, LOCAL = 2, 4
ENTITIES = ["Q1", "Q2", "Q3", "Q1", "Q4", "Q5", "Q2", "Q6"]
NEGATIVES = ["Q7", None, "Q1", "Q2", "Q8", "Q3", None, "Q4"]
TOKENS = [[1, 2, 3], [4, 5, 6], [7, 8, 9], [3, 5, 7], [2, 4, 6], [9, 8, 7], [1, 1, 2], [5, 5, 5]]


def _parity_objective(mask_duplicates, hard_negative_weight=0.0):
    torch.manual_seed(0)
    encoder = ToyEncoder()
    objective = EASE(
        entity_dim=5,
        entity_temperature=0.3,
        temperature=0.5,
        mask_duplicate_entities=mask_duplicates,
        hard_negative_weight=hard_negative_weight,
    )
    objective.setup_for(encoder)
    objective.build_vocabulary(ENTITIES, NEGATIVES)
    return encoder, objective


def _terms_and_grads(encoder, objective, rows):
    batch = _batch(objective, [TOKENS[i] for i in rows], [ENTITIES[i] for i in rows], [NEGATIVES[i] for i in rows])
    terms = objective(encoder, batch)
    out = {}
    for name, value in terms.items():
        params = [encoder.emb.weight, objective.entity_table.weight, objective.projection[0].weight]
        grads = torch.autograd.grad(value, params, retain_graph=True, allow_unused=True)
        out[name] = (value.detach(), [torch.zeros_like(p) if g is None else g for g, p in zip(grads, params)])
    return out


def _parity_worker(rank, world, mask_duplicates, hard_negative_weight=0.0):
    encoder, objective = _parity_objective(mask_duplicates, hard_negative_weight)
    result = {}
    for name, (value, grads) in _terms_and_grads(encoder, objective, range(rank * LOCAL, (rank + 1) * LOCAL)).items():
        dist.all_reduce(value)
        for g in grads:
            dist.all_reduce(g)  # DDP averages the gradients of the processes
        result[name] = (value.item() / world, [(g / world).numpy().copy() for g in grads])
    return result


@pytest.mark.integration
@pytest.mark.distributed
@pytest.mark.parametrize(  # the default run keeps the plain case; the other two are slow (14 s each)
    ("mask_duplicates", "hard_negative_weight"),
    [(False, 0.0), pytest.param(True, 0.0, marks=pytest.mark.slow), pytest.param(False, 1.0, marks=pytest.mark.slow)],
)
def test_two_processes_equal_one_process_for_both_terms(mask_duplicates, hard_negative_weight):
    # with a weight, each process must put it on its own sentences' hard negatives in the gathered columns
    distributed = run_distributed(_parity_worker, mask_duplicates, hard_negative_weight, world_size=WORLD)
    single = _terms_and_grads(*_parity_objective(mask_duplicates, hard_negative_weight), range(WORLD * LOCAL))
    assert set(distributed) == set(single) == {"entity", "contrastive"}
    for name in single:
        assert distributed[name][0] == pytest.approx(single[name][0].item(), rel=1e-5), name
        for got, want in zip(distributed[name][1], single[name][1]):
            np.testing.assert_allclose(got, want.numpy(), rtol=1e-4, atol=1e-6, err_msg=name)
    # the entity table receives gradient from the other process's sentences only if it is gathered
    assert np.abs(distributed["entity"][1][1]).sum() > 0


@pytest.mark.slow
def test_wikipedia2vec_trained_on_the_dump_sample_initialises_the_table(tmp_path):
    """End to end: Wikipedia2Vec trained on the 3-page dump, EASE records built from the same dump."""
    import subprocess
    import sys
    from pathlib import Path

    from unisent.commands.data import main as data_main

    pytest.importorskip(
        "wikipedia2vec", reason="wikipedia2vec is in the `ease` extra, not `dev` (nox -s slow installs it)"
    )
    dump = Path(__file__).parent / "fixtures" / "ease" / "enwiki-pages-articles-sample.xml.bz2"
    cli = str(Path(sys.executable).parent / "wikipedia2vec")
    subprocess.run(
        [
            cli,
            "train",
            str(dump),
            "w2v.pkl",
            "--dim-size",
            "32",
            "--iteration",
            "1",
            "--min-entity-count",
            "1",
            "--min-word-count",
            "1",
        ],
        cwd=tmp_path,
        check=True,
        capture_output=True,
    )
    subprocess.run([cli, "save-text", "w2v.pkl", "w2v.txt"], cwd=tmp_path, check=True, capture_output=True)
    data_main(["ease-wikipedia", "--input", str(dump), "--output", str(tmp_path / "ease"), "--min-link-count", "0"])
    records = [json.loads(line) for line in (tmp_path / "ease" / "records.jsonl").read_text().splitlines()]
    binary, dim = read_wikipedia2vec(tmp_path / "w2v.pkl")
    text, _ = read_wikipedia2vec(tmp_path / "w2v.txt")
    assert dim == 32 and set(text) == set(binary) and len(binary) > 100
    for source in ("w2v.pkl", "w2v.txt"):
        objective = EASE(
            entity_dim=32, wikipedia2vec=str(tmp_path / source), entity_titles=str(tmp_path / "ease" / "entities.tsv")
        )
        objective.build_vocabulary([r["entity"] for r in records], [r["hard_negative"] for r in records])
        report = objective.init_report
        assert report["from_wikipedia2vec"] >= 0.8 * report["entities"], report  # the same dump's entities
        entity = next(e for e in objective.entities[1:] if e in binary)
        np.testing.assert_allclose(
            objective.entity_table.weight[objective.entities.index(entity)].detach().numpy(), binary[entity], atol=5e-4
        )  # save-text keeps 3 decimals
