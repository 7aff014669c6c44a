"""The data layer on ``datasets``: sources (file, glob, repository directory, Hub id), tokenising once per
machine, streams (sharded, resumed exactly)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch
import yaml

from unisent.cli import main
from unisent.data import DataSource, RecordError, UnisentDataModule, load_source
from unisent.data.sources import resolve_source
from unisent.data.tokenized_stream import StreamLoader, TokenizedStream, worker_batches
from unisent.data.tokenizing import RowTokenizer

ROOT = Path(__file__).resolve().parents[1]
SAMPLE_DIR = ROOT / "samples"


def sample_sentences() -> list[str]:
    return (SAMPLE_DIR / "sentences.txt").read_text(encoding="utf-8").splitlines()


KEYS = ("anchor", "positive", "negative")

pytestmark = pytest.mark.usefixtures("one_thread")


def _tokenizer(model_dir):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(model_dir))


def _triples() -> list[dict]:
    return [json.loads(line) for line in (SAMPLE_DIR / "nli_triples.jsonl").read_text(encoding="utf-8").splitlines()]


# ------------------------------------------------------------------------------------------ tokenising
def test_row_tokenizer_gives_the_encoders_ids_with_added_tokens_and_nulls(tiny_model_dir):
    from unisent.encoders import Encoder, EncoderConfig

    encoder = Encoder(EncoderConfig(model=str(tiny_model_dir), max_length=12))
    encoder.tokenizer.add_tokens(["zebra-01", ":ARG0"])
    texts = sample_sentences()[:300] + ["a zebra-01 :ARG0 man " * 10]
    tokenize = RowTokenizer(encoder.tokenizer, ["text"], 12)
    assert tokenize.ids(texts) == encoder.tokenize_ids(texts, 12)
    assert any(len(ids) == 12 for ids in tokenize.ids(texts))  # truncated ones too
    out = tokenize({"text": ["one two", None]})
    assert out["text"][1] is None and out["length"] == [len(out["text"][0]), 0]
    import pickle

    assert pickle.loads(pickle.dumps(tokenize)).ids(texts[:5]) == tokenize.ids(texts[:5])  # for num_proc


# ------------------------------------------------------------------------------------------ sources
def test_a_glob_of_jsonl_and_parquet_shards_and_csv_fields_stay_text(tmp_path):
    rows = _triples()[:30]
    for i in range(3):
        (tmp_path / f"part-{i}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows[i * 10 : (i + 1) * 10]))
    data = load_source(DataSource(str(tmp_path / "part-*.jsonl")), KEYS, KEYS)
    assert data["anchor"] == [r["anchor"] for r in rows]
    for i in range(2):
        pq.write_table(
            pa.table({k: [r[k] for r in rows[i * 15 : (i + 1) * 15]] for k in KEYS}), tmp_path / f"p{i}.parquet"
        )
    assert load_source(DataSource(str(tmp_path / "p*.parquet")), KEYS, KEYS)["negative"] == [
        r["negative"] for r in rows
    ]
    # csv through pandas: fields stay the text they are ("007", "NA" are sentences, not a number / a null)
    (tmp_path / "d.csv").write_text('sent0,sent1,hard_neg\n007,NA,"a, b"\n')
    src = DataSource(str(tmp_path / "d.csv"), columns={"sent0": "anchor", "sent1": "positive", "hard_neg": "negative"})
    assert load_source(src, KEYS, KEYS)[0] == {"anchor": "007", "positive": "NA", "negative": "a, b"}


def test_bad_records_of_a_glob_are_named_by_file_and_line(tmp_path, capsys):
    good = {"anchor": "a", "positive": "b", "negative": "c"}
    (tmp_path / "a-1.jsonl").write_text(json.dumps(good) + "\n")
    (tmp_path / "a-2.jsonl").write_text(json.dumps(good) + "\n" + json.dumps({**good, "positive": " "}) + "\n")
    with pytest.raises(RecordError, match=r"a-2.jsonl:line 2: field 'positive' is an empty sentence"):
        load_source(DataSource(str(tmp_path / "a-*.jsonl")), KEYS, KEYS)
    kept = load_source(DataSource(str(tmp_path / "a-*.jsonl"), on_error="skip"), KEYS, KEYS)
    assert len(kept) == 2
    notices = [line for line in capsys.readouterr().err.splitlines() if "malformed" in line]
    assert notices == [
        f"unisent: skipped 1 malformed record(s) of {tmp_path / 'a-2.jsonl'}, kept 1 (on_error=skip): "
        f"{tmp_path / 'a-2.jsonl'}:line 2: field 'positive' is an empty sentence"
    ]
    with pytest.raises(FileNotFoundError, match="no file matches"):
        load_source(DataSource(str(tmp_path / "none-*.jsonl")), KEYS, KEYS)


def test_rows_of_a_parquet_repository_are_named_by_row(tmp_path):
    repo = tmp_path / "repo"
    (repo / "data").mkdir(parents=True)
    pq.write_table(pa.table({"text": ["one", None, "three", ""]}), repo / "data" / "train-00000-of-00001.parquet")
    with pytest.raises(RecordError) as err:
        load_source(DataSource(str(repo)), ("text",), ("text",))
    assert "2 malformed record(s)" in str(err.value) and ":row 2: field 'text' is missing (null)" in str(err.value)
    assert ":row 4: field 'text' is an empty sentence" in str(err.value)


def test_a_hub_id_not_in_the_cache_is_one_clear_line(tmp_path, monkeypatch):
    import datasets

    assert datasets.config.HF_HUB_OFFLINE  # tests run offline (conftest)
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", str(tmp_path / "hf"))
    resolved = resolve_source(DataSource("unisent-tests/no-such-dataset", name="pair-class"))
    assert resolved.kind == "hub"
    with pytest.raises(FileNotFoundError) as err:
        load_source(resolved, ("text",), ("text",))
    message = str(err.value)
    assert "\n" not in message and "unisent-tests/no-such-dataset[name=pair-class, split=train]" in message
    assert "not in the datasets cache" in message and "offline" in message


def _repository(directory: Path) -> Path:
    """A dataset repository: parquet shards of two configurations and a README that declares them."""
    rows = _triples()
    (directory / "triples").mkdir(parents=True)
    (directory / "labels").mkdir()
    for i, part in enumerate((rows[:96], rows[96:160])):
        pq.write_table(
            pa.table(
                {
                    "sent0": [r["anchor"] for r in part],
                    "sent1": [r["positive"] for r in part],
                    "hard_neg": [r["negative"] for r in part],
                }
            ),
            directory / "triples" / f"train-{i:05d}-of-00002.parquet",
        )
    pq.write_table(
        pa.table({"premise": ["x"] * 10, "label": [0] * 10}), directory / "labels" / "train-00000-of-00001.parquet"
    )
    (directory / "README.md").write_text(
        "---\nconfigs:\n- config_name: triples\n  data_files:\n  - split: train\n    path: triples/train-*.parquet\n"
        "- config_name: labels\n  data_files:\n  - split: train\n    path: labels/*.parquet\n---\n# test repository\n"
    )
    return directory


def test_a_repository_configuration_without_a_field_is_one_error_naming_its_columns(tmp_path):
    repo = _repository(tmp_path / "repo")
    with pytest.raises(
        RecordError,
        match=r"repo\[name=labels, split=train\]: no column 'anchor', 'positive', 'negative' "
        r"\(columns: premise, label\)",
    ):
        load_source(DataSource(str(repo), name="labels"), KEYS, KEYS)
    triples = load_source(
        DataSource(str(repo), name="triples", columns={"sent0": "anchor", "sent1": "positive", "hard_neg": "negative"}),
        KEYS,
        KEYS,
    )
    assert len(triples) == 160 and triples[0] == dict(zip(KEYS, (_triples()[0][k] for k in KEYS)))


def test_a_recipe_whose_source_is_a_dataset_repository_directory_trains(tmp_path, tiny_bert_dir, monkeypatch):
    from datasets import Dataset

    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    repo = _repository(tmp_path / "my-nli")
    recipe = yaml.safe_load((ROOT / "recipes/quickstart.yaml").read_text())
    recipe["data"]["train"]["simcse"] = {
        "path": str(repo),
        "name": "triples",
        "columns": {"sent0": "anchor", "sent1": "positive", "hard_neg": "negative"},
    }
    path = tmp_path / "recipe.yaml"
    path.write_text(yaml.safe_dump(recipe))
    main(
        [
            "fit",
            "-c",
            str(path),
            "--model.encoder.model",
            str(tiny_bert_dir),
            "--trainer.max_steps",
            "3",
            "--trainer.logger.init_args.save_dir",
            str(tmp_path / "runs"),
            "--trainer.enable_progress_bar",
            "false",
            "--data.batch_size",
            "16",
            "--model.evaluation.val_tasks",
            "[]",
        ]
    )
    run = next((tmp_path / "runs" / "quickstart").iterdir())
    assert (run / "encoder" / "model.safetensors").is_file()
    assert torch.load(run / "checkpoints" / "last.ckpt", weights_only=True)["global_step"] == 3
    # the configuration's two shards and nothing of the other one, tokenised once into the cache
    caches = list((Path(os.environ["UNISENT_CACHE"]) / "tokenized").glob("*.arrow"))
    assert len(caches) == 1 and len(Dataset.from_file(str(caches[0]))) == 160


def test_the_bundled_samples_load_through_load_dataset(tmp_path):
    for name, keys in (("sentences.txt", ("text",)), ("nli_triples.jsonl", KEYS), ("snli_dev_triples.jsonl", KEYS)):
        data = load_source(DataSource(str(SAMPLE_DIR / name)), keys, keys)
        lines = (SAMPLE_DIR / name).read_text(encoding="utf-8").splitlines()
        assert len(data) == len(lines), name
        first = lines[0] if name.endswith(".txt") else json.loads(lines[0])[keys[0]]
        assert data[0][keys[0]] == first


@pytest.mark.integration
def test_tokenising_in_two_processes_writes_the_same_cache_as_one(tiny_bert_dir, tmp_path, monkeypatch):
    from unisent.data import token_cache
    from unisent.encoders import EncoderConfig
    from unisent.lightning_module import UnisentModule
    from unisent.objectives import SimCSE

    path = tmp_path / "s.txt"
    path.write_text("\n".join(sample_sentences()[:400]) + "\n")
    module = UnisentModule(encoder=EncoderConfig(model=str(tiny_bert_dir), max_length=32), objectives=[SimCSE()])
    monkeypatch.setattr(token_cache, "RECORDS_PER_PROCESS", 100)
    caches = []
    for num_proc in (1, 2):
        data = UnisentDataModule(
            train={"simcse": str(path)}, cache_dir=str(tmp_path / f"c{num_proc}"), num_proc=num_proc
        )
        caches.append(data.attach(module).tokenized(data.train["simcse"], module.objectives[0]))
        assert len(data.tokenised_here) == 1
    assert caches[0].to_dict() == caches[1].to_dict() and len(caches[1]) == 400
    assert caches[1]["text"][3] == RowTokenizer(_tokenizer(tiny_bert_dir), ["text"], 32).ids([sample_sentences()[3]])[0]
    assert [p.name for p in (tmp_path / "c2").iterdir()] == [Path(caches[1].cache_files[0]["filename"]).name]
    # a killed writer's part directory (a process that no longer runs) is removed by the next writer
    import socket
    import subprocess
    import sys

    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    stale = tmp_path / "c2" / f".x.1234abcd.{int(dead.stdout)}@{socket.gethostname()}.tmp"
    (stale / "part.arrow").parent.mkdir()
    (stale / "part.arrow").write_bytes(b"half")
    other = tmp_path / "other.txt"
    other.write_text("\n".join(sample_sentences()[:50]) + "\n")
    data = UnisentDataModule(train={"simcse": str(other)}, cache_dir=str(tmp_path / "c2")).attach(module)
    data.tokenized(data.train["simcse"], module.objectives[0])
    assert not stale.exists() and len(list((tmp_path / "c2").glob("*.arrow"))) == 2


# ------------------------------------------------------------------------------------------ streams
def _stream(tiny_bert_dir, path, *, batch_size=8, rank=0, world=1, **kw) -> TokenizedStream:
    source = DataSource(str(path), streaming=True, **kw)
    tokenize = RowTokenizer(_tokenizer(tiny_bert_dir), ["text"], 32)
    return TokenizedStream(
        resolve_source(source), ["text"], ["text"], [], tokenize, batch_size, seed=3, rank=rank, world_size=world
    )


def _batches(stream, n, workers=0):
    loader = StreamLoader(
        stream,
        batch_size=stream.batch_size,
        num_workers=workers,
        collate_fn=lambda rows: [tuple(r["text"]) for r in rows],
    )
    out = []
    for batch in loader:
        out.append(batch)
        if len(out) == n:
            return out
    raise AssertionError(f"the stream ended after {len(out)} batches")


@pytest.mark.parametrize("workers", [0, 2], ids=["in-process", "two-workers"])
def test_a_stream_resumed_at_a_batch_continues_exactly(tiny_bert_dir, tmp_path, workers):
    lines = sample_sentences()[:200]
    for i in range(4):  # 4 files: each of two workers reads two
        (tmp_path / f"s{i}.txt").write_text("\n".join(lines[i * 50 : (i + 1) * 50]) + "\n")
    stream = _stream(tiny_bert_dir, tmp_path / "s*.txt", shuffle_buffer=16)
    full = _batches(stream, 60, workers)  # 200 / 8 = 25 batches a pass: three passes
    first_pass = [ids for batch in full[:25] for ids in batch]
    assert len(first_pass) == 200 and full[:25] != full[25:50]  # every record, and a new order each pass
    for start in (7, 13, 31):
        again = _stream(tiny_bert_dir, tmp_path / "s*.txt", shuffle_buffer=16)
        again.set_position(start)
        assert _batches(again, 60 - start, workers) == full[start:], start
    assert [worker_batches(5, w, 2) for w in (0, 1)] == [3, 2]


def test_two_processes_stream_disjoint_shares(tiny_bert_dir, tmp_path):
    lines = sample_sentences()[:160]
    path = tmp_path / "one.txt"
    path.write_text("\n".join(lines) + "\n")
    shares = [_batches(_stream(tiny_bert_dir, path, rank=r, world=2, batch_size=8), 10) for r in (0, 1)]
    a, b = ({ids for batch in share for ids in batch} for share in shares)
    tokenize = RowTokenizer(_tokenizer(tiny_bert_dir), ["text"], 32)
    everything = {tuple(ids) for ids in tokenize.ids(lines)}
    assert not a & b and a | b == everything


def test_a_streamed_bad_record_names_the_source(tiny_bert_dir, tmp_path, capsys):
    path = tmp_path / "bad.jsonl"
    path.write_text("".join(json.dumps({"text": t}) + "\n" for t in ["one", "two", "", "four"] * 4))
    with pytest.raises(RecordError, match=r"bad.jsonl: a streamed record .* field 'text' is an empty sentence"):
        _batches(_stream(tiny_bert_dir, path, batch_size=2, shuffle_buffer=0), 4)
    capsys.readouterr()
    batches = _batches(_stream(tiny_bert_dir, path, batch_size=2, shuffle_buffer=0, on_error="skip"), 8)
    notice = capsys.readouterr().err.splitlines()[0]
    assert notice.startswith(f"unisent: skipped 4 malformed record(s) of {path} in pass 0, kept 12 (on_error=skip): ")
    assert len({ids for batch in batches for ids in batch}) == 3


def test_streaming_refuses_an_objective_that_needs_all_its_records(tiny_bert_dir, tmp_path):
    from unisent.encoders import EncoderConfig
    from unisent.lightning_module import UnisentModule
    from unisent.objectives import EASE

    module = UnisentModule(encoder=EncoderConfig(model=str(tiny_bert_dir)), objectives=[EASE()])
    data = UnisentDataModule(train={"ease": DataSource(str(SAMPLE_DIR / "ease_fewrel.jsonl"), streaming=True)})
    with pytest.raises(ValueError, match="'ease' builds its state from all its training records"):
        data.attach(module).setup("fit")


# ------------------------------------------------------------------------------------------ two processes
def _ddp_fit(rank, world, model_dir, path, cache_dir, root):
    """One of two gloo processes: a Lightning DDP fit of one epoch; what it tokenised and which records it saw."""
    import lightning as L
    import torch.distributed as dist

    from unisent.encoders import EncoderConfig
    from unisent.lightning_module import UnisentModule
    from unisent.objectives import SimCSE
    from unisent.training_config import EvaluationConfig

    os.environ.update(LOCAL_RANK=str(rank), NODE_RANK="0", WORLD_SIZE=str(world), RANK=str(rank))
    torch.set_num_threads(1)
    seen: list[list[int]] = []

    class Record(L.Callback):
        def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
            ids, mask = batch["simcse"]["text"]["input_ids"], batch["simcse"]["text"]["attention_mask"]
            seen.extend(row[m.bool()].tolist() for row, m in zip(ids, mask))

    module = UnisentModule(
        encoder=EncoderConfig(model=model_dir, max_length=32),
        objectives=[SimCSE()],
        evaluation=EvaluationConfig(val_tasks=[], test_tasks=[]),
    )
    data = UnisentDataModule(train={"simcse": path}, batch_size=8, cache_dir=cache_dir, num_proc=2)
    trainer = L.Trainer(
        accelerator="cpu",
        devices=world,
        strategy="ddp_find_unused_parameters_true",
        max_epochs=1,
        logger=False,
        default_root_dir=root,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        callbacks=[Record()],
    )
    trainer.fit(module, datamodule=data)
    gathered = [None] * world
    dist.all_gather_object(gathered, {"tokenised": data.tokenised_here, "seen": seen})
    return gathered


@pytest.mark.integration
@pytest.mark.distributed
def test_a_two_process_fit_tokenises_once_and_the_ranks_share_the_epoch(tiny_bert_dir, tmp_path):
    from unisent.testing import run_distributed

    tokenize = RowTokenizer(_tokenizer(tiny_bert_dir), ["text"], 32)
    by_ids: dict[tuple, str] = {}
    for line in sample_sentences():
        by_ids.setdefault(tuple(tokenize.ids([line])[0]), line)
    lines = list(by_ids.values())[:160]  # distinct token sequences: a batch row names its record
    path = tmp_path / "s.txt"
    path.write_text("\n".join(lines) + "\n")
    cache = tmp_path / "cache"
    gathered = run_distributed(
        _ddp_fit, str(tiny_bert_dir), str(path), str(cache), str(tmp_path / "run"), world_size=2, timeout=300
    )
    assert [len(g["tokenised"]) for g in gathered] == [1, 0]  # rank 0 in prepare_data; rank 1 read its cache
    assert [p.name for p in cache.glob("*.arrow")] == [Path(gathered[0]["tokenised"][0]).name]
    index = {tuple(tokenize.ids([line])[0]): i for i, line in enumerate(lines)}
    shares = [[index[tuple(ids)] for ids in g["seen"]] for g in gathered]
    assert len(shares[0]) == len(shares[1]) == 80  # 160 / (8 x 2) = 10 batches each
    assert not set(shares[0]) & set(shares[1]) and sorted(shares[0] + shares[1]) == list(range(160))
