"""Our STS Spearman against sentence-transformers' EmbeddingSimilarityEvaluator on the same embeddings."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from unisent.data.benchmark_readers import read_stsbenchmark
from unisent.evaluation import evaluate

try:  # sentence-transformers is in the dev extra: a missing install fails, not skips
    from sentence_transformers.sentence_transformer.evaluation import EmbeddingSimilarityEvaluator
except ImportError:  # sentence-transformers < 6
    from sentence_transformers.evaluation import EmbeddingSimilarityEvaluator


class _ModelCard:
    def set_evaluation_metrics(self, *args, **kwargs) -> None:
        pass


class LookupModel:
    """Returns fixed random embeddings per sentence; speaks both our ``encode`` and the evaluator's."""

    similarity_fn_name = "cosine"

    def __init__(self, sentences: list[str], dim: int = 16, seed: int = 0) -> None:
        rng = np.random.default_rng(seed)
        self.table = {s: rng.normal(size=dim).astype(np.float32) for s in dict.fromkeys(sentences)}
        self.model_card_data = _ModelCard()

    def encode(self, sentences, batch_size: int = 64, **kwargs) -> np.ndarray:
        return np.stack([self.table[s] for s in sentences])


def _evaluator_spearman(model, data) -> float:
    evaluator = EmbeddingSimilarityEvaluator(
        data.sentences1, data.sentences2, data.scores, main_similarity="cosine", write_csv=False
    )
    return float(evaluator(model)["spearman_cosine"])


def test_spearman_matches_embedding_similarity_evaluator_on_fixed_embeddings(data_dir: Path) -> None:
    data = read_stsbenchmark(data_dir / "sts/stsbenchmark/sts-test.csv")
    model = LookupModel(data.sentences1 + data.sentences2)
    ours = evaluate(model, ["stsb-test"], data_dir, progress=False)["tasks"]["stsb-test"]["score"]
    assert ours == pytest.approx(100 * _evaluator_spearman(model, data), abs=1e-6)


def _tiny_sentence_transformer(sentences: list[str], folder: Path):
    """A 2-layer, hidden-32 BERT with a WordPiece vocabulary trained on ``sentences``, built offline."""
    from sentence_transformers import SentenceTransformer, models
    from tokenizers import Tokenizer, normalizers, pre_tokenizers, processors, trainers
    from tokenizers.models import WordPiece
    from transformers import BertConfig, BertModel, BertTokenizerFast

    special = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    tokenizer = Tokenizer(WordPiece(unk_token="[UNK]"))
    tokenizer.normalizer = normalizers.BertNormalizer(lowercase=True)
    tokenizer.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tokenizer.train_from_iterator(sentences, trainers.WordPieceTrainer(vocab_size=300, special_tokens=special))
    cls, sep = tokenizer.token_to_id("[CLS]"), tokenizer.token_to_id("[SEP]")
    tokenizer.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]",
        pair="[CLS] $A [SEP] $B:1 [SEP]:1",
        special_tokens=[("[CLS]", cls), ("[SEP]", sep)],
    )
    fast = BertTokenizerFast(
        tokenizer_object=tokenizer,
        unk_token="[UNK]",
        pad_token="[PAD]",
        cls_token="[CLS]",
        sep_token="[SEP]",
        mask_token="[MASK]",
    )
    fast.save_pretrained(folder)
    torch.manual_seed(0)
    config = BertConfig(
        vocab_size=tokenizer.get_vocab_size(),
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=128,
    )
    BertModel(config).save_pretrained(folder)
    word = models.Transformer(str(folder), max_seq_length=64)
    pooling = models.Pooling(config.hidden_size, pooling_mode="mean")
    return SentenceTransformer(modules=[word, pooling], device="cpu")


def test_spearman_matches_evaluator_with_a_tiny_sentence_transformer(data_dir: Path, tmp_path: Path) -> None:
    data = read_stsbenchmark(data_dir / "sts/stsbenchmark/sts-test.csv")
    model = _tiny_sentence_transformer(data.sentences1 + data.sentences2, tmp_path / "tiny-bert")
    model.eval()
    ours = evaluate(model, ["stsb-test"], data_dir, batch_size=4, progress=False)["tasks"]["stsb-test"]["score"]
    assert ours == pytest.approx(100 * _evaluator_spearman(model, data), abs=1e-4)
