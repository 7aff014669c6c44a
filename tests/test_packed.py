"""The unpadded forward computes what the Hugging Face forward computes, on real tokens only."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from unisent.data.schema import pad_batch
from unisent.encoders import Encoder, EncoderConfig
from unisent.encoders import encoder as encoder_module
from unisent.encoders.packed import packed_forward, supports_packing

#: the repository's training, benchmark and test samples (not in the wheel)
SAMPLE_DIR = Path(__file__).resolve().parents[1] / "samples"

pytestmark = pytest.mark.usefixtures("one_thread")


def sample_sentences() -> list[str]:
    return (SAMPLE_DIR / "sentences.txt").read_text(encoding="utf-8").splitlines()


def _batch(encoder: Encoder, n: int = 12):
    sentences = sample_sentences()[:n]
    return pad_batch(encoder.tokenize_ids(sentences), encoder.pad_token_id)


def _outputs_and_grads(encoder: Encoder, input_ids, attention_mask, packs: bool):
    encoder.packs = packs
    encoder.zero_grad()
    out = encoder(input_ids, attention_mask)
    (out * torch.linspace(-1, 1, out.shape[-1])).sum().backward()  # a loss that weighs dimensions differently
    return out.detach(), {n: p.grad.clone() for n, p in encoder.named_parameters() if p.grad is not None}


@pytest.mark.parametrize("pooler", ["mean", "cls", "max", "avg_first_last", "cls_mlp"])
def test_packed_matches_hugging_face_outputs_and_gradients(tiny_bert_dir, pooler):
    encoder = Encoder(EncoderConfig(model=str(tiny_bert_dir), pooler=pooler, max_length=24)).eval()
    assert encoder.packs
    input_ids, attention_mask = _batch(encoder)
    assert (attention_mask == 0).any(), "the batch must contain padding for the test to mean anything"
    packed, packed_grads = _outputs_and_grads(encoder, input_ids, attention_mask, packs=True)
    reference, reference_grads = _outputs_and_grads(encoder, input_ids, attention_mask, packs=False)
    torch.testing.assert_close(packed, reference, atol=1e-5, rtol=1e-5)
    assert packed_grads.keys() == reference_grads.keys()
    for name, grad in reference_grads.items():
        # key biases have a zero true gradient (softmax ignores a per-query constant): compare absolutely
        torch.testing.assert_close(packed_grads[name], grad, atol=1e-5, rtol=1e-4, msg=name)


def test_packed_hidden_states_match_on_real_tokens_and_are_zero_on_padding(tiny_bert_dir):
    encoder = Encoder(EncoderConfig(model=str(tiny_bert_dir), max_length=24)).eval()
    input_ids, attention_mask = _batch(encoder)
    with torch.no_grad():
        last, states = packed_forward(encoder.backbone, input_ids, attention_mask, output_hidden_states=True)
        reference = encoder.backbone(input_ids=input_ids, attention_mask=attention_mask, output_hidden_states=True)
    assert len(states) == len(reference.hidden_states) == encoder.backbone.config.num_hidden_layers + 1
    real = attention_mask.bool()
    for ours, theirs in zip(states, reference.hidden_states):
        torch.testing.assert_close(ours[real], theirs[real], atol=1e-5, rtol=1e-5)
        assert not ours[~real].any()
    torch.testing.assert_close(last, states[-1])


def test_packed_roberta_matches_hugging_face(tmp_path, tiny_bert_dir):
    from transformers import AutoTokenizer, RobertaConfig, RobertaModel

    tokenizer = AutoTokenizer.from_pretrained(tiny_bert_dir)
    config = RobertaConfig(
        vocab_size=len(tokenizer),
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=130,
        pad_token_id=tokenizer.pad_token_id,
    )
    RobertaModel(config).save_pretrained(tmp_path / "roberta")
    tokenizer.save_pretrained(tmp_path / "roberta")
    encoder = Encoder(EncoderConfig(model=str(tmp_path / "roberta"), pooler="mean", max_length=24)).eval()
    assert encoder.packs
    input_ids, attention_mask = _batch(encoder)
    packed, _ = _outputs_and_grads(encoder, input_ids, attention_mask, packs=True)
    reference, _ = _outputs_and_grads(encoder, input_ids, attention_mask, packs=False)
    torch.testing.assert_close(packed, reference, atol=1e-5, rtol=1e-5)


def test_packed_without_padding_and_with_a_single_token_row(tiny_bert_dir):
    encoder = Encoder(EncoderConfig(model=str(tiny_bert_dir), pooler="mean")).eval()
    ids = encoder.tokenize_ids(["a cat sat on the mat", "a dog sat on the rug"])
    ids.append(ids[0][:1])  # a row with one real token, the rest padding
    assert len(ids[0]) == len(ids[1])  # the first two rows have no padding: the gather-free path
    for rows in (ids[:2], ids):
        input_ids, attention_mask = pad_batch(rows, encoder.pad_token_id)
        with torch.no_grad():
            encoder.packs = True
            packed = encoder(input_ids, attention_mask)
            encoder.packs = False
            reference = encoder(input_ids, attention_mask)
        torch.testing.assert_close(packed, reference, atol=1e-5, rtol=1e-5)


def test_packed_applies_attention_dropout_in_training_only(tiny_bert_dir):
    encoder = Encoder(EncoderConfig(model=str(tiny_bert_dir), pooler="mean"))
    encoder.backbone.config.hidden_dropout_prob = 0.0
    for module in encoder.backbone.modules():
        if isinstance(module, torch.nn.Dropout):
            module.p = 0.0
    for layer in encoder.backbone.encoder.layer:
        layer.attention.self.dropout.p = 0.5
    input_ids, attention_mask = _batch(encoder, 4)
    with torch.no_grad():
        first, second = encoder(input_ids, attention_mask), encoder(input_ids, attention_mask)
        assert not torch.allclose(first, second)
        encoder.eval()
        torch.testing.assert_close(encoder(input_ids, attention_mask), encoder(input_ids, attention_mask))


def test_encoder_uses_the_packed_path_only_where_it_applies(tiny_bert_dir, monkeypatch):
    calls = []
    real = encoder_module.packed_forward
    monkeypatch.setattr(encoder_module, "packed_forward", lambda *a, **k: calls.append(1) or real(*a, **k))
    input_ids, attention_mask = None, None
    for unpad, expected in ((True, 1), (False, 0)):
        calls.clear()
        encoder = Encoder(EncoderConfig(model=str(tiny_bert_dir), unpad=unpad))
        input_ids, attention_mask = _batch(encoder, 3)
        encoder(input_ids, attention_mask)
        assert len(calls) == expected
    # gradient checkpointing (the HF layers' own) and extra backbone arguments take the HF path
    encoder = Encoder(EncoderConfig(model=str(tiny_bert_dir)))
    encoder.backbone.gradient_checkpointing_enable()
    calls.clear()
    encoder(input_ids, attention_mask)
    encoder(input_ids, attention_mask, output_attentions=False)
    assert calls == []


def test_supports_packing_rejects_other_architectures(tiny_bert_dir):
    from transformers import BertConfig, BertModel

    assert supports_packing(Encoder(EncoderConfig(model=str(tiny_bert_dir))).backbone)
    assert not supports_packing(torch.nn.Linear(2, 2))
    tiny = dict(vocab_size=50, hidden_size=8, num_hidden_layers=1, num_attention_heads=2, intermediate_size=16)
    assert not supports_packing(BertModel(BertConfig(**tiny, is_decoder=True)))
    assert not supports_packing(BertModel(BertConfig(**tiny, chunk_size_feed_forward=4)))


def test_packed_encode_matches_unpadded_off(tiny_bert_dir):
    sentences = sample_sentences()[:40]
    packed = Encoder(EncoderConfig(model=str(tiny_bert_dir), pooler="mean")).encode(sentences, batch_size=16)
    plain = Encoder(EncoderConfig(model=str(tiny_bert_dir), pooler="mean", unpad=False)).encode(
        sentences, batch_size=16
    )
    torch.testing.assert_close(packed, plain, atol=1e-5, rtol=1e-5)


def test_reference_batching_is_sentence_transformers_batching(tiny_bert_dir, monkeypatch):
    """Inside ``reference_batching``: character-length order, one batch at a time, the padded forward."""
    import numpy as np

    from unisent.encoders import reference_batching

    encoder = Encoder(EncoderConfig(model=str(tiny_bert_dir), pooler="mean")).eval()
    # character length and token length disagree on these: the two orders differ
    texts = ["a b c d e f g", "abcdefghijklmnopqrstuvwxyz", "x y", "hello world again", "z", "the the the the"]
    calls, seen = [], []
    real_packed = encoder_module.packed_forward
    monkeypatch.setattr(encoder_module, "packed_forward", lambda *a, **k: calls.append(1) or real_packed(*a, **k))
    real_forward = Encoder.forward

    def recording(self, input_ids, attention_mask, **kwargs):
        seen.append(attention_mask.sum(1).tolist())
        return real_forward(self, input_ids, attention_mask, **kwargs)

    monkeypatch.setattr(Encoder, "forward", recording)
    fast = encoder.encode(texts, batch_size=2)
    assert calls and len(seen) == 3
    calls.clear(), seen.clear()
    with reference_batching():
        exact = encoder.encode(texts, batch_size=2)
    assert calls == []  # the backbone's own forward
    order = np.argsort([-len(t) for t in texts]).tolist()
    lengths = [len(ids) for ids in encoder.tokenizer(texts)["input_ids"]]
    assert seen == [[lengths[i] for i in order[s : s + 2]] for s in range(0, 6, 2)]  # in that order, one by one
    torch.testing.assert_close(exact, fast, atol=1e-5, rtol=0)  # the same vectors up to float rounding
    calls.clear()
    encoder.encode(texts, batch_size=2)
    assert calls  # the setting ends with the block
