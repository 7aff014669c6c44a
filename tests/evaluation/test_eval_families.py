"""Every evaluation task family scored on a hand-made fixture whose right score is known.

The files under ``fixtures/families/`` are written in the public layouts the registered tasks read
(``evaluate`` runs the real registry entries on them). The model is a lexicon: each sentence's vector
is the sum of the vectors of its lexicon words (a sentence without one is an error, so a reader that
garbles a sentence fails loudly). Each test computes the right score itself, from the raw files read
with plain Python and the lexicon, without the package's readers or metrics, and also checks the number
worked out by hand in the comments: a reader that pairs labels with the wrong sentences, or a metric
that scores the wrong thing, changes the score.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import math
import re
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import torch

from unisent.evaluation import TASKS, ProbeConfig, evaluate
from unisent.evaluation.similarities import get_similarity

FAMILIES = Path(__file__).parent / "fixtures" / "families"


class LexiconModel:
    """``encode``: the sum of the lexicon vectors of a sentence's words (lower-cased ``\\w+`` tokens).

    With ``variances``, ``encode_gaussian`` returns that mean and, in every dimension, the product of the
    variances of the sentence's lexicon words (1 for a word without one).
    """

    def __init__(self, lexicon: dict[str, list[float]], variances: dict[str, float] | None = None) -> None:
        self.lexicon = {word: np.asarray(vector, dtype=np.float32) for word, vector in lexicon.items()}
        self.dim = len(next(iter(self.lexicon.values())))
        self.variances = variances or {}
        if variances is not None:
            self.encode_gaussian = self._encode_gaussian

    def words(self, sentence: str) -> list[str]:
        found = [w for w in re.findall(r"\w+", sentence.lower()) if w in self.lexicon]
        if not found:
            raise KeyError(f"no lexicon word in {sentence!r}")
        return found

    def vector(self, sentence: str) -> np.ndarray:
        return np.sum([self.lexicon[w] for w in self.words(sentence)], axis=0)

    def variance(self, sentence: str) -> float:
        return float(np.prod([self.variances.get(w, 1.0) for w in self.words(sentence)]))

    def encode(self, sentences: list[str], batch_size: int = 64, **kwargs) -> np.ndarray:
        return np.stack([self.vector(s) for s in sentences])

    def _encode_gaussian(self, sentences: list[str], batch_size: int = 64) -> tuple[torch.Tensor, torch.Tensor]:
        mu = torch.as_tensor(self.encode(sentences))
        var = torch.tensor([[self.variance(s)] * self.dim for s in sentences])
        return mu, var


def run(model: LexiconModel, task: str, **kwargs) -> dict[str, float]:
    results = evaluate(model, [task], FAMILIES, progress=False, on_error="raise", **kwargs)
    return results["tasks"][task]["metrics"]


def lines(relative: str, encoding: str = "utf-8") -> list[str]:
    return (FAMILIES / relative).read_text(encoding=encoding).splitlines()


def cosine(a: np.ndarray, b: np.ndarray) -> float:
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))


def unit(degrees: float) -> list[float]:
    return [math.cos(math.radians(degrees)), math.sin(math.radians(degrees))]


# --- clustering ------------------------------------------------------------------------------------

# three topics far apart; the fixture has 12 texts (gold sizes 5/4/3, interleaved) and one "sports"
# text about a club's election, which the model puts with politics
TOPICS = LexiconModel(
    {
        "striker": [10, 0, 0],
        "football": [10, 0, 0],
        "parliament": [0, 10, 0],
        "election": [0, 10, 0],
        "telescope": [0, 0, 10],
        "galaxy": [0, 0, 10],
    }
)


def _agnews() -> list[tuple[str, str]]:
    return [tuple(line.split("\t", 1)[::-1]) for line in lines("clustering/stc/agnews.txt")]


def _searchsnippets() -> list[tuple[str, str]]:
    folder = "clustering/stc"
    return list(zip(lines(f"{folder}/searchsnippets.txt"), lines(f"{folder}/searchsnippets_label.txt")))


def _tweet() -> list[tuple[str, str]]:
    rows = [json.loads(line) for line in lines("clustering/stc/tweet.txt")]
    return [(row["text"], str(row["cluster"])) for row in rows]


def _mewsc16() -> list[tuple[str, str]]:
    folder = "clustering/mewsc16"
    pairs = zip(lines(f"{folder}/en_sentences.txt"), lines(f"{folder}/en_categories.txt"))
    return [(text, label) for text, label in pairs if text]  # the empty sentence is dropped


@pytest.mark.parametrize(
    ("task", "raw"),
    [
        ("stc-agnews", _agnews),
        ("stc-searchsnippets", _searchsnippets),
        ("stc-tweet", _tweet),
        ("mewsc16-en", _mewsc16),
    ],
)
def test_clustering_scores_the_known_assignment(task: str, raw: Callable[[], list[tuple[str, str]]]) -> None:
    items = raw()
    assert len(items) == 12
    clusters = [tuple(TOPICS.vector(text)) for text, _ in items]  # the model's (well separated) blobs
    gold = [label for _, label in items]
    classes, blobs = sorted(set(gold)), sorted(set(clusters))
    assert len(classes) == len(blobs) == 3
    # best one-to-one mapping of blobs to classes, by brute force
    best = max(
        sum(gold[i] == mapping[blobs.index(c)] for i, c in enumerate(clusters))
        for mapping in itertools.permutations(classes)
    )
    assert best == 11  # 4 sports + 4 politics + 3 science; the club election is counted wrong
    metrics = run(TOPICS, task)
    assert metrics["accuracy"] == pytest.approx(100 * best / 12)
    assert metrics["accuracy_std"] == pytest.approx(0.0)
    assert (metrics["n_texts"], metrics["n_classes"]) == (12, 3)


# --- SentEval probes (logistic regression on frozen embeddings) ---------------------------------------

# MR and CR: the first coordinate is the sentiment, the second varies within a class without telling it
SENTIMENT = LexiconModel(
    {
        word: [sign, 0.1 * i]
        for sign, words in (
            (1.0, ["wonderful", "moving", "brilliant", "delightful", "charming", "superb",
                   "excellent", "reliable", "sturdy", "love"]),
            (-1.0, ["dull", "tedious", "awful", "clumsy", "bland", "broke", "useless", "flimsy", "noisy"]),
        )
        for i, word in enumerate(words)
    }
)  # fmt: skip


@pytest.fixture
def quick_cv_probes(monkeypatch: pytest.MonkeyPatch) -> None:
    """MR and CR as registered, with a 2-value C grid and 2 inner folds (still 10 outer folds)."""
    quick = ProbeConfig(c_grid=(0.25, 1.0), inner_kfold=2)
    for name in ("mr", "cr"):
        monkeypatch.setitem(TASKS, name, dataclasses.replace(TASKS[name], probe=quick))


def test_probe_on_separable_labels_scores_100(quick_cv_probes) -> None:
    # MR: 12 positive (one line with a Latin-1 byte) and 10 negative reviews, each with a sentiment word
    positive = lines("senteval/rt-polarity.pos", "latin-1")
    negative = lines("senteval/rt-polarity.neg", "latin-1")
    assert all(SENTIMENT.vector(s)[0] > 0 for s in positive) and all(SENTIMENT.vector(s)[0] < 0 for s in negative)
    metrics = run(SENTIMENT, "mr")
    assert metrics["accuracy"] == 100.0
    assert metrics["n"] == len(positive) + len(negative) == 22


def test_probe_on_noisy_labels_scores_the_consistent_fraction(quick_cv_probes) -> None:
    # CR: 10 + 10 reviews, one in each file carries the other class's word; 10 stratified folds of one
    # positive and one negative review each, so the mean fold accuracy is the fraction of consistent reviews
    positive, negative = lines("senteval/custrev.pos"), lines("senteval/custrev.neg")
    consistent = sum(SENTIMENT.vector(s)[0] > 0 for s in positive) + sum(SENTIMENT.vector(s)[0] < 0 for s in negative)
    assert (consistent, len(positive) + len(negative)) == (18, 20)
    assert run(SENTIMENT, "cr")["accuracy"] == pytest.approx(100 * 18 / 20)


def test_split_probe_multiclass_with_a_mislabelled_test_question() -> None:
    # TREC: the question word decides the coarse class; the last test question is labelled HUM but asks
    # "Where", so the probe (100% consistent training set) answers LOC for it
    model = LexiconModel({"who": [1, 0, 0], "where": [0, 1, 0], "many": [0, 0, 1]})
    by_word = {(1, 0, 0): "HUM", (0, 1, 0): "LOC", (0, 0, 1): "NUM"}
    for split in ("train", "test"):
        rows = [line.split(" ", 1) for line in lines(f"senteval/TREC.{split}", "latin-1")]
        gold = [label.split(":")[0] for label, _ in rows]
        predicted = [by_word[tuple(model.vector(question))] for _, question in rows]
        right = sum(g == p for g, p in zip(gold, predicted))
        assert (right, len(rows)) == ((12, 12) if split == "train" else (5, 6))
    metrics = run(model, "trec")
    assert metrics["accuracy"] == pytest.approx(100 * 5 / 6)
    assert (metrics["n_train"], metrics["n_test"]) == (12, 6)


# --- pair classification (MRPC, PAWS-X zero-shot) ------------------------------------------------------

# four topics; a pair is a paraphrase exactly when both sentences are about the same topic
PAIRS = LexiconModel(
    {
        word: np.eye(4)[topic].tolist()
        for topic, words in enumerate(
            (["profit", "earnings", "gewinn"], ["merger", "takeover", "fusion"],
             ["lawsuit", "court", "klage"], ["storm", "hurricane", "sturm"])
        )
        for word in words
    }
)  # fmt: skip


def _pair_counts(rows: list[tuple[str, str, str]], positive: str = "1") -> tuple[int, int, int, int]:
    """``(true positives, false positives, false negatives, true negatives)`` of the same-topic rule."""
    outcomes = []
    for label, first, second in rows:
        same = bool(np.array_equal(PAIRS.vector(first), PAIRS.vector(second)))
        outcomes.append((same, label == positive))
    return tuple(outcomes.count(case) for case in ((True, True), (True, False), (False, True), (False, False)))


def test_mrpc_pair_probe_accuracy_and_f1() -> None:
    def mrpc(split: str) -> list[tuple[str, str, str]]:
        rows = [line.split("\t") for line in lines(f"senteval/mrpc/msr_paraphrase_{split}.txt")[1:]]
        return [(row[0], row[3], row[4]) for row in rows]

    assert _pair_counts(mrpc("train")) == (6, 0, 0, 6)
    tp, fp, fn, tn = _pair_counts(mrpc("test"))
    assert (tp, fp, fn, tn) == (4, 0, 1, 3)  # one pair labelled paraphrase is about two topics
    metrics = run(PAIRS, "mrpc")
    assert metrics["accuracy"] == pytest.approx(100 * (tp + tn) / 8)  # 87.5
    assert metrics["f1"] == pytest.approx(100 * 2 * tp / (2 * tp + fp + fn))  # 88.89


def test_zero_shot_pair_probe_transfers_to_german() -> None:
    def tsv(name: str) -> list[tuple[str, str, str]]:
        return [tuple(line.split("\t")[::-1]) for line in lines(f"nli/pawsx/{name}")]

    assert _pair_counts(tsv("dev-en.tsv")) == (6, 0, 0, 6)
    tp, fp, fn, tn = _pair_counts(tsv("test-de.tsv"))
    assert (tp, fp, fn, tn) == (3, 0, 1, 2)
    metrics = run(PAIRS, "pawsx-de")  # trained on English dev, tested on German
    assert metrics["accuracy"] == pytest.approx(100 * (tp + tn) / 6)
    assert (metrics["n_train"], metrics["n_test"]) == (12, 6)


# --- bitext retrieval (Tatoeba) -------------------------------------------------------------------------

# "Welpe" lies nearest "dog" rather than its translation "puppy", and "Tee mit Kaffee" nearest "coffee"
BITEXT = LexiconModel(
    {
        "dog": [1, 0, 0, 0], "hund": [1, 0, 0, 0], "cat": [0, 1, 0, 0], "katze": [0, 1, 0, 0],
        "tea": [0, 0, 1, 0], "tee": [0, 0, 1, 0], "raining": [0, 0, 0, 1], "regnet": [0, 0, 0, 1],
        "puppy": [1, 0.5, 0, 0], "welpe": [1, 0, 0, 0.2], "coffee": [0, 0, 1, 1], "kaffee": [0, 0, 1, 1],
    }
)  # fmt: skip


def test_tatoeba_top1_accuracy_of_known_neighbours() -> None:
    german = lines("retrieval/tatoeba/tatoeba.deu-eng.deu")
    english = lines("retrieval/tatoeba/tatoeba.deu-eng.eng")
    similarity = np.array([[cosine(BITEXT.vector(g), BITEXT.vector(e)) for e in english] for g in german])
    to_eng = 100 * np.mean(similarity.argmax(axis=1) == np.arange(6))
    from_eng = 100 * np.mean(similarity.argmax(axis=0) == np.arange(6))
    assert (to_eng, from_eng) == (pytest.approx(100 * 4 / 6), pytest.approx(100 * 5 / 6))
    metrics = run(BITEXT, "tatoeba-deu")
    assert metrics["accuracy_to_eng"] == pytest.approx(to_eng)
    assert metrics["accuracy_from_eng"] == pytest.approx(from_eng)
    assert metrics["accuracy"] == pytest.approx(75.0)


# --- STS ----------------------------------------------------------------------------------------------

# unit vectors at angles: each pair's cosine is the cosine of the angle between its two words; the gold
# order of the six pairs is the cosine order except pairs 3 and 4, which are swapped
ANGLES = {"guitar": 0, "onion": 90, "shallot": 110, "dog": 180, "puppy": 220, "swimming": 270,
          "diving": 300, "market": 45, "bond": 105, "cat": 135, "plane": 215}  # fmt: skip


def test_sts_spearman_of_one_swapped_pair() -> None:
    model = LexiconModel({word: unit(angle) for word, angle in ANGLES.items()})
    rows = [line.split("\t") for line in lines("sts/stsbenchmark/sts-test.csv")]
    gold = [float(row[4]) for row in rows]
    predicted = [cosine(model.vector(row[5]), model.vector(row[6])) for row in rows]
    n = len(rows)
    rank = lambda values: np.argsort(np.argsort(values))  # noqa: E731 (no ties here)
    d = rank(predicted) - rank(gold)
    spearman = 100 * (1 - 6 * float(np.sum(d**2)) / (n * (n * n - 1)))
    assert spearman == pytest.approx(100 * (1 - 12 / 210))  # one adjacent swap: sum of d^2 = 2
    pearson = 100 * float(np.corrcoef(predicted, gold)[0, 1])
    metrics = run(model, "stsb-test")
    assert metrics["spearman"] == pytest.approx(spearman)
    assert metrics["pearson"] == pytest.approx(pearson, abs=1e-4)
    assert metrics["n_pairs"] == 6


# --- NLI by similarity (threshold from dev, entailment direction) -----------------------------------

# word: (angle in degrees, variance); dev entailment pairs differ by 0/10/20 degrees, the others by
# 45/60/90; test entailment pairs by 0/30/50, neutral 40, contradictions 70 and 90
NLI_WORDS = {
    "ball": (0, 1.0), "newspaper": (300, 1.0), "train": (0, 1.0), "coffee": (100, 1.0), "drink": (110, 1.0),
    "cyclist": (30, 1.0), "nobody": (120, 1.0), "pasta": (200, 1.0), "food": (220, 1.0),
    "fence": (160, 1.0), "student": (205, 1.0),
    "violinist": (0, 2.0), "music": (0, 1.0), "frisbee": (45, 1.0), "asleep": (135, 1.0),
    "surfer": (90, 1.5), "ocean": (120, 1.0), "farmer": (270, 1.0), "farm": (310, 3.0),
    "toddler": (180, 1.0), "resting": (230, 3.0), "sandcastle": (200, 1.0), "school": (270, 1.0),
}  # fmt: skip
NLI = LexiconModel(
    {word: unit(angle) for word, (angle, _) in NLI_WORDS.items()},
    variances={word: var for word, (_, var) in NLI_WORDS.items()},
)


def _snli(split: str) -> list[tuple[str, str, str]]:
    return list(zip(lines(f"nli/snli/s1.{split}"), lines(f"nli/snli/s2.{split}"), lines(f"nli/snli/labels.{split}")))


def test_nli_threshold_chosen_on_dev_and_applied_to_test() -> None:
    def scored(split: str) -> tuple[np.ndarray, np.ndarray]:
        rows = _snli(split)
        scores = np.array([cosine(NLI.vector(h), NLI.vector(p)) for p, h, _ in rows], dtype=np.float32)
        return scores, np.array([label == "entailment" for _, _, label in rows])

    dev_scores, dev_gold = scored("dev")
    # every grid threshold above the highest non-entailment score (cos 45 deg) and up to the lowest
    # entailment score (cos 20 deg) is perfect on dev; ties go to the smallest
    assert dev_scores[~dev_gold].max() < dev_scores[dev_gold].min()
    grid = np.round(np.arange(0, 1001) / 1000, 3)
    threshold = float(grid[grid > dev_scores[~dev_gold].max()][0])
    assert threshold == 0.708
    test_scores, test_gold = scored("test")
    right = int(np.sum((test_scores >= threshold) == test_gold))
    assert right == 4  # the 50-degree entailment and the 40-degree neutral pair are wrong
    metrics = run(NLI, "snli-nli")
    assert metrics["threshold"] == pytest.approx(threshold)
    assert metrics["dev_accuracy"] == 100.0
    assert metrics["accuracy"] == pytest.approx(100 * right / 6)


def _kl(mu_a: np.ndarray, var_a: float, mu_b: np.ndarray, var_b: float) -> float:
    """KL(N(mu_a, var_a I) || N(mu_b, var_b I)), summed over the dimensions."""
    d = len(mu_a)
    return 0.5 * float(d * var_a / var_b + np.sum((mu_b - mu_a) ** 2) / var_b - d + d * math.log(var_b / var_a))


def test_entailment_direction_with_kl_similarity() -> None:
    entailed = [(p, h) for p, h, label in _snli("test") if label == "entailment"]
    assert len(entailed) == 3  # the neutral pair (hypothesis wider, like the third) is left out
    by_sim = by_var = 0
    for premise, hypothesis in entailed:
        p, h = (
            (NLI.vector(premise), NLI.variance(premise)),
            (NLI.vector(hypothesis), NLI.variance(hypothesis)),
        )
        # sim(a || b) = 1 / (1 + KL(a || b)): right when the hypothesis is covered better by the premise
        by_sim += 1 / (1 + _kl(*h, *p)) > 1 / (1 + _kl(*p, *h))
        by_var += p[1] > h[1]
    assert (by_sim, by_var) == (2, 2)  # the toddler/resting pair has the wider hypothesis
    metrics = run(NLI, "snli-direction", similarity=get_similarity("kl"))
    assert metrics["direction_sim"] == pytest.approx(100 * by_sim / 3)
    assert metrics["direction_var"] == pytest.approx(100 * by_var / 3)
    assert metrics["n_pairs"] == 3
