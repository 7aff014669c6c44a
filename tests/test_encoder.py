from pathlib import Path

import pytest
import torch

import unisent
from unisent.encoders import (
    POOLERS,
    Encoder,
    EncoderConfig,
    ModelNotAvailableError,
    build_pooler,
    resolve_encoder_config,
)

#: the repository's training, benchmark and test samples (not in the wheel)
SAMPLE_DIR = Path(__file__).resolve().parents[1] / "samples"


def test_poolers_match_manual_computation():
    g = torch.Generator().manual_seed(0)
    states = [torch.randn(2, 4, 3, generator=g) for _ in range(3)]  # embeddings, layer 1, last
    last = states[-1]
    mask = torch.tensor([[1, 1, 1, 0], [1, 1, 0, 0]])
    pool = {name: build_pooler(name, 3) for name in POOLERS}
    torch.testing.assert_close(pool["cls"](last, mask), last[:, 0])
    torch.testing.assert_close(pool["mean"](last, mask)[0], last[0, :3].mean(0))
    torch.testing.assert_close(pool["mean"](last, mask)[1], last[1, :2].mean(0))
    torch.testing.assert_close(pool["max"](last, mask)[1], last[1, :2].max(0).values)
    first_last = (states[1] + states[2]) / 2
    torch.testing.assert_close(pool["avg_first_last"](last, mask, tuple(states))[0], first_last[0, :3].mean(0))
    mlp = pool["cls_mlp"]
    torch.testing.assert_close(mlp(last, mask), torch.tanh(mlp.dense(last[:, 0])))


def test_cls_mlp_train_only_drops_mlp_at_inference():
    pooler = build_pooler("cls_mlp_train_only", 3)
    last, mask = torch.randn(2, 4, 3), torch.ones(2, 4)
    assert not torch.allclose(pooler.train()(last, mask), last[:, 0])
    torch.testing.assert_close(pooler.eval()(last, mask), last[:, 0])


def test_unknown_pooler_lists_valid_choices():
    with pytest.raises(ValueError, match=r"pooler 'average' is not a registered pooler \(avg_first_last, cls, cls_mlp"):
        EncoderConfig(model="x", pooler="average")


def test_encode_restores_order_and_matches_single_sentences(tiny_bert_dir):
    enc = Encoder(EncoderConfig(model=str(tiny_bert_dir), pooler="mean"))
    sentences = ["a short one .", "a much longer sentence with many more words in it .", "mid length here ."]
    batched = enc.encode(sentences, batch_size=2)
    singles = torch.cat([enc.encode([s]) for s in sentences])
    assert batched.shape == (3, 32) and batched.dtype == torch.float32
    torch.testing.assert_close(batched, singles, rtol=1e-4, atol=1e-5)
    normed = enc.encode(sentences, normalize=True)
    torch.testing.assert_close(normed.norm(dim=-1), torch.ones(3))
    with pytest.raises(TypeError, match="list of sentences"):
        enc.encode("one string")


def test_save_and_load_round_trip(tiny_bert_dir, tmp_path):
    enc = Encoder(EncoderConfig(model=str(tiny_bert_dir), pooler="cls_mlp", max_length=16))
    torch.nn.init.normal_(enc.pooler.dense.weight)
    out = enc.save_pretrained(tmp_path / "saved")
    loaded = unisent.load(str(out))
    assert loaded.config.pooler == "cls_mlp" and loaded.config.max_length == 16
    sents = ["the dog runs .", "a cat sleeps on the mat ."]
    torch.testing.assert_close(loaded.encode(sents), enc.encode(sents))


def test_offline_hub_id_fails_at_once_with_instructions():
    with pytest.raises(ModelNotAvailableError, match="--local-dir DIR.*minilm-l6"):
        Encoder(EncoderConfig(model="bert-base-uncased"))
    with pytest.raises(FileNotFoundError, match="does not exist"):
        Encoder(EncoderConfig(model="./no/such/model"))


def test_presets_fill_defaults():
    cfg = EncoderConfig(model="bert-base-uncased")
    assert (cfg.pooler, cfg.max_length) == (None, 0)  # data: as given, until resolved when an encoder is built
    resolved = resolve_encoder_config(cfg)
    assert (resolved.pooler, resolved.max_length) == ("cls_mlp_train_only", 32)
    assert (cfg.pooler, cfg.max_length) == (None, 0)  # the given config is left as it is
    assert resolve_encoder_config(resolved) == resolved
    assert resolve_encoder_config(EncoderConfig(model="xlm-roberta-base")).pooler == "mean"


def test_encode_in_worker_threads_matches_one_worker_and_restores_threads(tiny_bert_dir):

    sentences = (SAMPLE_DIR / "sentences.txt").read_text(encoding="utf-8").splitlines()[:70]
    enc = Encoder(EncoderConfig(model=str(tiny_bert_dir), pooler="mean"))
    before = torch.get_num_threads()
    single = enc.encode(sentences, batch_size=8, workers=1)
    for workers in (2, 3):
        torch.testing.assert_close(enc.encode(sentences, batch_size=8, workers=workers), single, atol=1e-5, rtol=1e-5)
        assert torch.get_num_threads() == before
    torch.testing.assert_close(
        enc.encode(sentences, batch_size=8, workers=2, normalize=True),
        torch.nn.functional.normalize(single, dim=-1),
        atol=1e-5,
        rtol=1e-5,
    )
    bf16 = enc.encode(sentences, batch_size=8, workers=2, precision="bf16")  # autocast is per thread: set in the worker
    assert bf16.dtype == torch.float32 and not torch.equal(bf16, single)
    torch.testing.assert_close(bf16, single, atol=0.1, rtol=0.1)
    assert enc.training  # the encoder's mode is restored too


def test_ordered_map_keeps_order_and_reads_ahead_boundedly():
    from unisent.encoders.batching import ordered_map as _ordered_map

    read = []

    def items():
        for i in range(50):
            read.append(i)
            yield i

    out = []
    for result in _ordered_map(lambda x: x * x, items(), workers=3):
        out.append(result)
        assert len(read) - len(out) <= 6  # at most 2 * workers items in flight
    assert out == [i * i for i in range(50)]
