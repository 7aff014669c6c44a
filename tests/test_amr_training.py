"""AMR: mixed training (Algorithm 1), the amr-nli builder, retrofitting and its export (issue 7 parts 4-6, issue 8)."""

from __future__ import annotations

import csv
import json
import re
import shutil
from collections import Counter
from pathlib import Path

import lightning as L
import pytest
import torch
import torch.nn.functional as F

import unisent
from unisent.amr import (
    PreParsedAMR,
    extend_vocabulary,
    read_counts,
    read_symbols,
    select_symbols,
)
from unisent.builders.amr_nli import amr_nli_records
from unisent.cli import main
from unisent.data import DataSource, UnisentDataModule
from unisent.encoders import Encoder, EncoderConfig
from unisent.evaluation import evaluate
from unisent.lightning_module import UnisentModule
from unisent.models.retrofit_combination import combine
from unisent.models.retrofit_inputs import MissingGraphError
from unisent.models.retrofitted_encoder import RetrofittedEncoder
from unisent.objectives import AMRSimCSE
from unisent.optim import AdamW
from unisent.training_config import EvaluationConfig

#: the repository's training, benchmark and test samples (not in the wheel)
SAMPLE_DIR = Path(__file__).resolve().parents[1] / "samples"

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "amr"
SAMPLE = SAMPLE_DIR / "amr_little_prince.jsonl"

pytestmark = pytest.mark.usefixtures("one_thread")


def sample_records(n: int = 120) -> list[dict]:
    with SAMPLE.open(encoding="utf-8") as fh:
        return [json.loads(line) for _, line in zip(range(n), fh)]


def write_jsonl(path: Path, rows) -> Path:
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    return path


def german_graph(graph: str) -> str:
    return graph[:-1] + ":mod ( deutsch ) )"  # a distinguishable graph for the "translation"


@pytest.fixture(scope="module")
def nli_setup(tmp_path_factory):
    """32 NLI-shaped triples of Little Prince sentences, a lookup of their (linearised) graphs, German
    "translations" with their own graphs; one sentence is not in the lookup and one has no translation."""
    root = tmp_path_factory.mktemp("amr-nli")
    rows = sample_records(96)
    triples = [
        {"anchor": rows[i]["anchor"], "positive": rows[i + 1]["anchor"], "negative": rows[i + 2]["anchor"]}
        for i in range(0, 96, 3)
    ]
    unparsed, untranslated = rows[4]["anchor"], rows[5]["anchor"]
    lookup = [{"text": r["anchor"], "penman": r["anchor_graph"]} for r in rows if r["anchor"] != unparsed]
    lookup += [{"text": "DE " + r["anchor"], "penman": german_graph(r["anchor_graph"])} for r in rows]
    translations = [
        {"text": r["anchor"], "lang": "de", "translation": "DE " + r["anchor"]}
        for r in rows
        if r["anchor"] != untranslated
    ]
    paths = {
        "triples": write_jsonl(root / "triples.jsonl", triples),
        "lookup": write_jsonl(root / "lookup.jsonl", lookup),
        "translations": write_jsonl(root / "translations.jsonl", translations),
        "out": root / "amr-nli.jsonl",
    }
    main(
        [
            "data",
            "amr-nli",
            "--input",
            str(paths["triples"]),
            "--output",
            str(paths["out"]),
            "--parser-lookup",
            str(paths["lookup"]),
            "--languages",
            "de",
            "--translations",
            str(paths["translations"]),
        ]
    )
    return {"paths": paths, "rows": rows, "unparsed": unparsed, "untranslated": untranslated}


# ------------------------------------------------------------------------------------------ builder
def test_builder_writes_every_form_and_nulls_what_failed(nli_setup, capsys, tmp_path):
    out = [json.loads(line) for line in nli_setup["paths"]["out"].read_text().splitlines()]
    graphs = {r["anchor"]: r["anchor_graph"] for r in nli_setup["rows"]}
    assert len(out) == 32
    assert set(out[0]) == {f"{s}{f}" for s in ("anchor", "positive", "negative") for f in ("", "_graph", "_graph_de")}
    for record in out:
        for slot in ("anchor", "positive", "negative"):
            sentence = record[slot]
            expected = None if sentence == nli_setup["unparsed"] else graphs[sentence]
            assert record[f"{slot}_graph"] == expected
            expected_de = None if sentence == nli_setup["untranslated"] else german_graph(graphs[sentence])
            assert record[f"{slot}_graph_de"] == expected_de
    # PENMAN from a lookup is linearised; the summary counts the nulls; --strict stops at the first
    sentence = "Chapter 1 ."
    records = list(
        amr_nli_records([{"anchor": sentence}], PreParsedAMR(FIXTURES / "little-prince.txt"), slots=("anchor",))
    )
    assert records == [{"anchor": sentence, "anchor_graph": "( chapter :mod 1 )"}]
    paths = nli_setup["paths"]
    capsys.readouterr()
    main(
        [
            "data",
            "amr-nli",
            "--input",
            str(paths["triples"]),
            "--output",
            str(tmp_path / "x.jsonl"),
            "--parser-lookup",
            str(paths["lookup"]),
            "--languages",
            "de",
            "--translations",
            str(paths["translations"]),
        ]
    )
    printed = capsys.readouterr().out
    assert "32 records" in printed and "1 null graph (en)" in printed and "1 null translation (de)" in printed
    with pytest.raises(SystemExit) as exit_:
        main(
            [
                "data",
                "amr-nli",
                "--input",
                str(paths["triples"]),
                "--output",
                str(tmp_path / "y.jsonl"),
                "--parser-lookup",
                str(paths["lookup"]),
                "--strict",
            ]
        )
    assert nli_setup["unparsed"][:30] in str(exit_.value.code)
    with pytest.raises(SystemExit) as exit_:  # languages without a translator
        main(
            [
                "data",
                "amr-nli",
                "--input",
                str(paths["triples"]),
                "--output",
                str(tmp_path / "z.jsonl"),
                "--parser-lookup",
                str(paths["lookup"]),
                "--languages",
                "de",
            ]
        )
    assert "--translations" in str(exit_.value.code)


# ------------------------------------------------------------------------------------------ the draw
def _features(n: int, languages=("de", "fr"), slots=("anchor", "positive", "negative")) -> list[dict]:
    """Records whose forms are told apart by their first token id: text 1, graph 2, graph_de 3, graph_fr 4."""
    ids = {"": 1, "_graph": 2, **{f"_graph_{lang}": 3 + i for i, lang in enumerate(languages)}}
    return [{f"{slot}{suffix}": [v, 100 + k] for slot in slots for suffix, v in ids.items()} for k in range(n)]


def test_the_draw_follows_algorithm_1():
    objective = AMRSimCSE(languages=["en", "de", "fr"], language_weights=[1, 1, 2], graph_probability=0.5, seed=3)
    # w_en = 1/4: text and English graph 1/8 each; German 1/4; French 1/2
    expected = {"text": 0.125, "graph": 0.125, "graph_de": 0.25, "graph_fr": 0.5}
    assert objective.form_probabilities() == pytest.approx(expected)
    assert objective.text_keys == tuple(
        f"{s}{f}" for s in ("anchor", "positive", "negative") for f in ("", "_graph", "_graph_de", "_graph_fr")
    )
    assert set(objective.optional_keys) == {k for k in objective.text_keys if "_graph" in k}
    counts: Counter = Counter()
    first_ids = {"text": 1, "graph": 2, "graph_de": 3, "graph_fr": 4}
    n = 0
    for _ in range(40):
        batch = objective.collate(_features(256), pad_id=0)
        for view in ("anchor", "positive", "negative"):
            forms = batch["forms"][view]
            counts.update(forms)
            n += len(forms)
            # the padded rows hold exactly the chosen form's ids
            assert batch[view]["input_ids"][:, 0].tolist() == [first_ids[f] for f in forms]
            assert batch[view]["input_ids"].shape == (256, 2)
    for form, p in expected.items():
        assert counts[form] / n == pytest.approx(p, abs=0.015), (form, counts)
    # a seeded draw repeats; every view and example draws on its own
    again = AMRSimCSE(languages=["en", "de", "fr"], language_weights=[1, 1, 2], seed=3)
    assert (
        again.collate(_features(64), 0)["forms"]
        == AMRSimCSE(languages=["en", "de", "fr"], language_weights=[1, 1, 2], seed=3).collate(_features(64), 0)[
            "forms"
        ]
    )
    forms = again.collate(_features(64), 0)["forms"]
    assert forms["anchor"] != forms["positive"]


def test_graph_probability_languages_and_fixed_forms():
    only_graphs = AMRSimCSE(graph_probability=1.0, seed=0)  # variant #4: no English sentences
    assert set(only_graphs.collate(_features(200, ()), 0)["forms"]["anchor"]) == {"graph"}
    only_text = AMRSimCSE(graph_probability=0.0)
    assert only_text.text_keys == ("anchor", "positive", "negative") and only_text.optional_keys == ()
    pairs = AMRSimCSE(mode="pairs")
    assert pairs.text_keys == ("anchor", "anchor_graph", "positive", "positive_graph")
    align = AMRSimCSE(mode="self", forms={"anchor": "text", "positive": "graph"})
    assert align.text_keys == ("anchor", "anchor_graph") and align.optional_keys == ("anchor_graph",)
    batch = align.collate(_features(8, (), ("anchor",)), 0)
    assert batch["forms"] == {"anchor": ["text"] * 8, "positive": ["graph"] * 8}
    assert (
        batch["anchor"]["input_ids"][:, 0].tolist() == [1] * 8
        and batch["positive"]["input_ids"][:, 0].tolist() == [2] * 8
    )
    for bad in (
        {"languages": ["en", "en"]},
        {"language_weights": [1.0, 2.0]},
        {"graph_probability": 1.5},
        {"forms": {"premise": "text"}},
        {"forms": {"anchor": "amr"}},
        {"mode": "quads"},
    ):
        with pytest.raises(ValueError):
            AMRSimCSE(**bad)


def test_missing_forms_fall_back_to_the_english_graph_then_the_text():
    objective = AMRSimCSE(mode="pairs", languages=["de"], seed=0)  # always the German graph
    features = _features(3, ("de",), ("anchor", "positive"))
    features[1]["anchor_graph_de"] = None  # -> English graph
    features[2]["anchor_graph_de"] = features[2]["anchor_graph"] = None  # -> text
    batch = objective.collate(features, pad_id=0)
    assert batch["forms"]["anchor"] == ["graph_de", "graph", "text"]
    assert batch["anchor"]["input_ids"][:, 0].tolist() == [3, 2, 1]
    assert batch["forms"]["positive"] == ["graph_de"] * 3


@pytest.fixture(scope="module")
def amr_module(tiny_bert_dir, nli_setup):
    objective = AMRSimCSE(languages=["en", "de"], symbol_counts=str(FIXTURES / "predicates.txt"), seed=1)
    return UnisentModule(
        encoder=EncoderConfig(model=str(tiny_bert_dir), max_length=64),
        objectives=[objective],
        evaluation=EvaluationConfig(val_tasks=[], test_tasks=[]),
    )


def test_collate_pads_only_the_chosen_forms(amr_module, nli_setup, tmp_path):
    objective = amr_module.objectives[0]
    data = UnisentDataModule(train={"amr": DataSource(str(nli_setup["paths"]["out"]))}, cache_dir=str(tmp_path))
    dataset = data.attach(amr_module).tokenized(data.train["amr"], objective)  # nulls stay null
    records = [json.loads(line) for line in nli_setup["paths"]["out"].read_text().splitlines()]
    assert sum(row is None for row in dataset["anchor_graph"]) == sum(r["anchor_graph"] is None for r in records)
    features = [dataset.select_columns(list(objective.batch_keys)).with_format(None)[i] for i in range(16)]
    encoder = amr_module.encoder
    for _ in range(3):
        batch = objective.collate(features, pad_id=encoder.pad_token_id)
        lengths = []
        for view in objective.views:
            for i, form in enumerate(batch["forms"][view]):
                text = records[i][objective.key(view, form)]
                expected = encoder.tokenize_ids([text], 64)[0]
                mask = batch[view]["attention_mask"][i]
                assert batch[view]["input_ids"][i][mask.bool()].tolist() == expected
                assert (batch[view]["input_ids"][i][~mask.bool()] == encoder.pad_token_id).all()
                lengths.append(len(expected))
        assert batch["anchor"]["input_ids"].shape[1] == max(lengths)  # padded to the chosen forms only
    short = [f for f in features if all(len(f[v]) < 40 for v in objective.views)]  # no truncated text
    every_form = max(len(f[k]) for f in short for k in objective.text_keys if f[k] is not None)
    text_only = AMRSimCSE(languages=["en", "de"], forms={v: "text" for v in objective.views}, symbols=[])
    longest_text = max(len(f[v]) for f in short for v in objective.views)
    assert text_only.collate(short, 0)["anchor"]["input_ids"].shape[1] == longest_text < every_form


def test_a_form_missing_in_a_whole_tokenisation_batch(amr_module, tmp_path):
    """Nulls in the first 1,000 records (one datasets.map batch) must not fix the column's type."""
    rows = sample_records(1000)
    records = [
        {
            "anchor": r["anchor"],
            "anchor_graph": r["anchor_graph"],
            "anchor_graph_de": german_graph(r["anchor_graph"]) if i >= 1000 else None,
        }
        for i, r in enumerate(rows + rows[:50])
    ]
    path = write_jsonl(tmp_path / "self.jsonl", records)
    objective = AMRSimCSE(mode="self", languages=["en", "de"], symbols=[])
    data = UnisentDataModule(train={"amr": DataSource(str(path))}, cache_dir=str(tmp_path / "cache")).attach(amr_module)
    dataset = data.tokenized(data.train["amr"], objective)
    assert dataset[0]["anchor_graph_de"] is None and dataset[1000]["anchor_graph_de"]
    assert data.tokenized(data.train["amr"], objective)[1000] == dataset[1000]  # from the Arrow cache


# ------------------------------------------------------------------------------------------ training
def test_tiny_fit_extends_the_vocabulary_and_the_checkpoint_rebuilds_without_the_file(
    tiny_model_dir, nli_setup, tmp_path
):
    symbols_file = Path(shutil.copy(FIXTURES / "predicates.txt", tmp_path / "predicates.txt"))
    base = Encoder(EncoderConfig(model=str(tiny_model_dir)))
    expected = [s for s in select_symbols(read_counts(symbols_file), 5) if s not in base.tokenizer.get_vocab()]
    assert 0 < len(expected) < len(read_counts(symbols_file))  # the threshold drops some
    objective = AMRSimCSE(
        languages=["en", "de"],
        symbol_counts=str(symbols_file),
        symbol_lists=str(FIXTURES / "additions.txt"),
        min_count=5,
        seed=0,
    )
    module = UnisentModule(
        encoder=EncoderConfig(model=str(tiny_model_dir), max_length=64),
        objectives=[objective],
        optimizer=lambda params: AdamW(params, lr=1e-3),
        evaluation=EvaluationConfig(val_tasks=[], test_tasks=[]),
    )
    additions = [s for s in read_symbols(FIXTURES / "additions.txt") if s not in base.tokenizer.get_vocab()]
    assert len(module.encoder.tokenizer) == len(base.tokenizer) + len(expected) + len(set(additions) - set(expected))
    assert module.encoder.backbone.get_input_embeddings().weight.shape[0] == len(module.encoder.tokenizer)
    assert (
        objective.config()["init_args"]["symbols"] == objective.symbols
        and objective.symbols[: len(expected)] == expected
    )

    trainer = L.Trainer(
        default_root_dir=tmp_path,
        max_steps=3,
        logger=L.pytorch.loggers.CSVLogger(tmp_path, name="run"),
        enable_progress_bar=False,
        enable_model_summary=False,
        accelerator="cpu",
        log_every_n_steps=1,
    )
    trainer.fit(
        module, datamodule=UnisentDataModule(train={"amr": DataSource(str(nli_setup["paths"]["out"]))}, batch_size=8)
    )
    ckpt = tmp_path / "amr.ckpt"
    trainer.save_checkpoint(ckpt)
    symbols_file.unlink()  # the checkpoint records the symbol list itself

    rebuilt = UnisentModule.from_checkpoint(ckpt)
    assert rebuilt.objectives[0].symbols == objective.symbols
    assert len(rebuilt.encoder.tokenizer) == len(module.encoder.tokenizer)
    graphs = [r["anchor_graph"] for r in sample_records(6)]
    torch.testing.assert_close(rebuilt.encoder.encode(graphs), module.encoder.encode(graphs))
    # the saved encoder carries the extended tokenizer
    saved = unisent.load(str(tmp_path / "run" / "version_0" / "encoder"))
    graph = "( cause-01 :ARG0 ( boy ) :ARG1 ( possible-01 ) )"
    tokens = saved.tokenizer.tokenize(graph)
    assert "cause-01" in tokens and "possible-01" in tokens and ":ARG0" in tokens
    torch.testing.assert_close(saved.encode([graph] + graphs), module.encoder.encode([graph] + graphs))


# ------------------------------------------------------------------------------------------ retrofitting
class Stub:
    """A sentence encoder with fixed vectors."""

    def __init__(self, table: dict[str, list[float]], size: int | None = None) -> None:
        self.table = {k: torch.as_tensor(v, dtype=torch.float32) for k, v in table.items()}
        if size is not None:
            self.hidden_size = size

    def encode(self, sentences, batch_size=64, **kwargs):
        return torch.stack([self.table[s] for s in sentences])


def test_each_combination_equals_the_hand_computation():
    s = torch.tensor([[3.0, 4.0], [1.0, 0.0]])
    h = torch.tensor([[0.0, 2.0], [6.0, 8.0]])
    assert combine(s, h, "concat").tolist() == [[3, 4, 0, 2], [1, 0, 6, 8]]
    assert combine(s, h, "sum").tolist() == [[3, 6], [7, 8]]
    torch.testing.assert_close(combine(s, h, "norm_concat"), torch.tensor([[0.6, 0.8, 0, 1], [1, 0, 0.6, 0.8]]))
    torch.testing.assert_close(combine(s, h, "norm_sum"), torch.tensor([[0.6, 1.8], [1.6, 0.8]]))

    text = Stub({"a": [3.0, 4.0], "b": [1.0, 0.0]}, size=2)
    amr = Stub({"( x )": [0.0, 2.0], "( y :ARG0 ( z ) )": [6.0, 8.0]}, size=2)
    graphs = ["( x )", "(y / y :ARG0 (z / z))"]  # linearised, and PENMAN (linearised on the way)
    for combination in ("concat", "sum", "norm_concat", "norm_sum"):
        model = RetrofittedEncoder(text, amr, combination)
        torch.testing.assert_close(model.encode(["a", "b"], graphs=graphs), combine(s, h, combination))
        assert model.dimension == (4 if combination.endswith("concat") else 2)
    normalised = RetrofittedEncoder(text, amr, "concat").encode(["a", "b"], graphs=graphs, normalize=True)
    torch.testing.assert_close(normalised, F.normalize(combine(s, h, "concat"), dim=-1))
    assert RetrofittedEncoder(text, amr).combination == "norm_concat"  # the paper's best is the default


def test_sum_of_different_sizes_and_missing_graphs_fail_clearly():
    text = Stub({"a": [1.0, 2.0, 3.0]}, size=3)
    amr = Stub({"( x )": [1.0, 2.0]}, size=2)
    for combination in ("sum", "norm_sum"):
        with pytest.raises(ValueError, match=r"size 3.*size 2.*must be equal"):
            RetrofittedEncoder(text, amr, combination)
        with pytest.raises(ValueError, match="must be equal"):  # sizes known only after encoding
            RetrofittedEncoder(Stub(text.table), Stub(amr.table), combination).encode(["a"], graphs=["( x )"])
    with pytest.raises(ValueError, match="unknown combination"):
        RetrofittedEncoder(text, amr, "product")
    model = RetrofittedEncoder(text, amr, "concat")
    with pytest.raises(MissingGraphError, match="no parser"):
        model.encode(["a"])
    model = RetrofittedEncoder(text, amr, "concat", parser={"b": "(x / x)"})
    with pytest.raises(MissingGraphError, match="'a'"):
        model.encode(["a"])
    model = RetrofittedEncoder(text, amr, "concat", parser={"a": "(x / x)"})
    assert model.encode(["a"]).tolist() == [[1.0, 2.0, 3.0, 1.0, 2.0]]


@pytest.fixture(scope="module")
def tiny_encoders(tiny_bert_dir):
    """A tiny text encoder (mean pooling) and a tiny AMR encoder with the fixture vocabulary."""
    text = Encoder(EncoderConfig(model=str(tiny_bert_dir), pooler="mean", max_length=48)).eval()
    amr = Encoder(EncoderConfig(model=str(tiny_bert_dir), pooler="cls", max_length=96))
    extend_vocabulary(
        amr, select_symbols(read_counts(FIXTURES / "predicates.txt"), 5) + read_symbols(FIXTURES / "additions.txt")
    )
    torch.manual_seed(0)
    with torch.no_grad():  # move away from the initialisation so that the graph tokens matter
        for p in amr.backbone.encoder.parameters():
            p.add_(0.02 * torch.randn_like(p))
    return text, amr.eval()


def _sts_fixture(root: Path, rows: list[dict]) -> Path:
    directory = root / "sts" / "stsbenchmark"
    directory.mkdir(parents=True)
    with (directory / "sts-test.csv").open("w", encoding="utf-8", newline="") as fh:
        writer = csv.writer(fh, delimiter="\t", quoting=csv.QUOTE_NONE, quotechar=None, escapechar="\\")
        for i in range(len(rows) - 1):
            writer.writerow(
                ["main", "lpp", "test", f"{i:04d}", f"{(i * 7) % 6:.3f}", rows[i]["anchor"], rows[i + 1]["anchor"]]
            )
    return root


def test_a_retrofitted_model_evaluates_saves_and_loads(tiny_encoders, tmp_path):
    from scipy.stats import spearmanr

    text, amr = tiny_encoders
    rows = [r for r in sample_records(40) if "\t" not in r["anchor"] and '"' not in r["anchor"]][:24]
    lookup = {r["anchor"]: r["anchor_graph"] for r in rows}
    model = RetrofittedEncoder(text, amr, "norm_concat", parser=lookup)
    data_dir = _sts_fixture(tmp_path / "data", rows)
    results = evaluate(model, ["stsb-test"], data_dir, batch_size=4, progress=False)
    s1, s2 = [r["anchor"] for r in rows[:-1]], [r["anchor"] for r in rows[1:]]
    cos = F.cosine_similarity(model.encode(s1), model.encode(s2)).numpy()
    gold = [(i * 7) % 6 for i in range(len(rows) - 1)]
    assert results["tasks"]["stsb-test"]["score"] == pytest.approx(100 * spearmanr(cos, gold).correlation, abs=1e-6)
    # the graphs of the lookup were used: the embedding is not the text alone
    emb = model.encode(s1[:3])
    torch.testing.assert_close(emb[:, : text.hidden_size], F.normalize(text.encode(s1[:3]), dim=-1))
    torch.testing.assert_close(emb[:, text.hidden_size :], F.normalize(amr.encode([lookup[s] for s in s1[:3]]), dim=-1))

    saved = model.save_pretrained(tmp_path / "retrofitted")
    config = json.loads((saved / "retrofit.json").read_text())
    assert config["combination"] == "norm_concat" and config["parser"]["init_args"]["sources"] == ["amr_lookup.jsonl"]
    assert (saved / "text" / "unisent_encoder.json").is_file() and (saved / "amr" / "unisent_encoder.json").is_file()
    loaded = unisent.load(str(saved))
    assert isinstance(loaded, RetrofittedEncoder) and loaded.dimension == 2 * text.hidden_size
    torch.testing.assert_close(loaded.encode(s1), model.encode(s1))
    # `unisent evaluate` on the saved directory parses through the copied lookup
    main(
        [
            "evaluate",
            "--model",
            str(saved),
            "--tasks",
            "stsb-test",
            "--data-dir",
            str(data_dir),
            "--quiet",
            "--output",
            str(tmp_path / "results.json"),
        ]
    )
    score = json.loads((tmp_path / "results.json").read_text())["tasks"]["stsb-test"]["score"]
    assert score == pytest.approx(results["tasks"]["stsb-test"]["score"], abs=1e-4)


def test_sentence_transformers_text_encoder_and_the_command_line(tiny_encoders, tmp_path):
    from sentence_transformers import SentenceTransformer

    from unisent.commands.retrofit import main as retrofit_main
    from unisent.export import export_model

    text, amr = tiny_encoders
    st_dir = export_model(text, tmp_path / "st", "sentence-transformers").out
    for name in ("unisent_encoder.json", "README.md"):
        (st_dir / name).unlink()  # a plain Sentence Transformers directory
    amr_dir = amr.save_pretrained(tmp_path / "amr")
    rows = sample_records(5)
    sentences, graphs = [r["anchor"] for r in rows], [r["anchor_graph"] for r in rows]
    lookup = write_jsonl(tmp_path / "lookup.jsonl", [{"text": s, "penman": g} for s, g in zip(sentences, graphs)])
    retrofit_main(
        [
            "--text-encoder",
            str(st_dir),
            "--amr-encoder",
            str(amr_dir),
            "--out",
            str(tmp_path / "out"),
            "--combination",
            "concat",
            "--parser-lookup",
            str(lookup),
        ]
    )
    loaded = unisent.load(str(tmp_path / "out"))
    assert isinstance(loaded.text_encoder, SentenceTransformer)
    assert (
        json.loads((tmp_path / "out" / "retrofit.json").read_text())["text_encoder"]["kind"] == "sentence-transformers"
    )
    expected = torch.cat([text.encode(sentences), amr.encode(graphs)], dim=-1)
    torch.testing.assert_close(loaded.encode(sentences), expected, atol=1e-5, rtol=0)
    torch.testing.assert_close(loaded.encode(sentences, graphs), expected, atol=1e-5, rtol=0)


def test_export_round_trips_and_the_card_code_reproduces_encode(tiny_encoders, tmp_path, monkeypatch):
    from sentence_transformers import SentenceTransformer

    from unisent.export import export_model

    text, amr = tiny_encoders
    rows = sample_records(6)
    sentences, graphs = [r["anchor"] for r in rows], [r["anchor_graph"] for r in rows]
    model = RetrofittedEncoder(text, amr, "norm_concat", parser={s: g for s, g in zip(sentences, graphs)})
    report = export_model(model, tmp_path / "export", "sentence-transformers")
    out = report.out
    assert report.max_diff is not None and report.max_diff < 1e-5
    expected = model.encode(sentences, graphs=graphs)
    torch.testing.assert_close(
        unisent.load(str(out)).encode(sentences), expected, atol=1e-6, rtol=0
    )  # parses via the lookup
    st_text = SentenceTransformer(str(out / "text"), device="cpu")
    torch.testing.assert_close(torch.as_tensor(st_text.encode(sentences)), text.encode(sentences), atol=1e-5, rtol=0)
    card = (out / "README.md").read_text()
    assert "retrofitted" in card and "norm_concat" in card and "amr_lookup.jsonl" in card
    code = next(block for block in re.findall(r"```python\n(.*?)```", card, re.S) if "SentenceTransformer(" in block)
    monkeypatch.chdir(out)  # the card's code loads model_dir = "."
    namespace: dict = {}
    exec(code, namespace)
    torch.testing.assert_close(namespace["embed"](sentences, graphs), expected, atol=1e-5, rtol=0)
    for combination in ("concat", "sum", "norm_sum"):  # every combination's card code is right
        other = RetrofittedEncoder(text, amr, combination)
        from unisent.models.retrofit_combination import retrofit_usage_code

        namespace = {}
        exec(retrofit_usage_code(combination), namespace)
        torch.testing.assert_close(
            namespace["embed"](sentences, graphs), other.encode(sentences, graphs=graphs), atol=1e-5, rtol=0
        )
    # a second export replaces the first; the sub-directories record no absolute path (".": their own place)
    export_model(model, out, "sentence-transformers", overwrite=True)
    assert json.loads((out / "amr" / "unisent_encoder.json").read_text())["model"] == "."


def test_a_failing_batch_is_retried_sentence_by_sentence():
    from collections import Counter

    from unisent.builders.amr_nli import _translations

    class Translator:
        calls = 0

        def translate(self, sentences, lang):
            Translator.calls += 1
            if any("bad" in s for s in sentences):
                raise RuntimeError("cannot translate")
            return [f"{lang}:{s}" for s in sentences]

    failures = Counter()
    out = _translations(Translator(), ["one", "a bad one", "two"], "de", "null", failures)
    assert out == ["de:one", None, "de:two"] and failures == Counter({"translation (de)": 1})
    assert Translator.calls == 4  # the batch, then each sentence alone
    assert _translations(Translator(), [], "de", "null", failures) == []
    with pytest.raises(ValueError, match="could not translate 'a bad one' into de: cannot translate"):
        _translations(Translator(), ["one", "a bad one"], "de", "error", Counter())
