"""Any backbone transformers can load: a matrix of tiny random models (BERT, RoBERTa, XLM-R, MPNet, DistilBERT,
ModernBERT) built from their configs with a tokenizer trained on the bundled sentences. Each trains unsupervised
SimCSE for 2 steps through ``unisent fit``, exports its encoder to both formats, and its Sentence Transformers
export gives the vectors of ``unisent.load`` (fp32). MPNet has no SDPA attention: it falls back to eager, once."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import yaml

import unisent
from unisent.cli import main

ROOT = Path(__file__).resolve().parents[1]
SENTENCES = ["A man is playing a guitar.", "Two dogs run across the field.", "The cat sleeps.", "unisent"]
HIDDEN, LAYERS, HEADS = 32, 2, 2


def sample_sentences() -> list[str]:
    return (ROOT / "samples/sentences.txt").read_text(encoding="utf-8").splitlines()


pytestmark = pytest.mark.usefixtures("one_thread")


def _wordpiece(lower: bool, special: list[str], cls: str, sep: str):
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, processors, trainers

    tok = Tokenizer(models.WordPiece(unk_token=special[1] if special[1].startswith("[") else "<unk>"))
    tok.normalizer = normalizers.BertNormalizer(lowercase=lower)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.train_from_iterator(sample_sentences(), trainers.WordPieceTrainer(vocab_size=500, special_tokens=special))
    ids = (tok.token_to_id(cls), tok.token_to_id(sep))
    tok.post_processor = processors.TemplateProcessing(
        single=f"{cls} $A {sep}", pair=f"{cls} $A {sep} $B {sep}", special_tokens=[(cls, ids[0]), (sep, ids[1])]
    )
    return tok


def _byte_bpe():
    """RoBERTa's and ModernBERT's kind: byte-level BPE, ``<s> ... </s>``."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    special = ["<s>", "<pad>", "</s>", "<unk>", "<mask>"]
    trainer = trainers.BpeTrainer(
        vocab_size=500, special_tokens=special, initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
    )
    tok.train_from_iterator(sample_sentences(), trainer)
    tok.post_processor = processors.RobertaProcessing(("</s>", 2), ("<s>", 0), add_prefix_space=False)
    return tok


def _unigram():
    """XLM-R's kind: a sentencepiece-style Unigram model (Metaspace), ``<s> ... </s>``."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

    tok = Tokenizer(models.Unigram())
    tok.pre_tokenizer = pre_tokenizers.Metaspace()
    tok.decoder = decoders.Metaspace()
    special = ["<s>", "<pad>", "</s>", "<unk>", "<mask>"]
    tok.train_from_iterator(
        sample_sentences(), trainers.UnigramTrainer(vocab_size=400, special_tokens=special, unk_token="<unk>")
    )
    tok.post_processor = processors.TemplateProcessing(
        single="<s> $A </s>", pair="<s> $A </s> </s> $B </s>", special_tokens=[("<s>", 0), ("</s>", 2)]
    )
    return tok


ROBERTA_SPECIAL = dict(
    bos_token="<s>", eos_token="</s>", cls_token="<s>", sep_token="</s>", pad_token="<pad>", unk_token="<unk>"
)


def build_tiny(arch: str, directory: Path) -> Path:
    """A random 2-layer ``arch`` model and its tokenizer, saved as a model directory."""
    import transformers as tf

    if arch in ("bert", "distilbert"):
        special = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
        tok = _wordpiece(True, special, "[CLS]", "[SEP]")
        names = dict(unk_token="[UNK]", pad_token="[PAD]", cls_token="[CLS]", sep_token="[SEP]", mask_token="[MASK]")
        if arch == "bert":
            fast = tf.BertTokenizerFast(tokenizer_object=tok, **names)
            config = tf.BertConfig(
                vocab_size=tok.get_vocab_size(),
                hidden_size=HIDDEN,
                num_hidden_layers=LAYERS,
                num_attention_heads=HEADS,
                intermediate_size=2 * HIDDEN,
                max_position_embeddings=64,
            )
        else:
            fast = tf.DistilBertTokenizerFast(tokenizer_object=tok, **names)
            config = tf.DistilBertConfig(
                vocab_size=tok.get_vocab_size(),
                dim=HIDDEN,
                n_layers=LAYERS,
                n_heads=HEADS,
                hidden_dim=2 * HIDDEN,
                max_position_embeddings=64,
            )
    elif arch == "mpnet":
        special = ["<s>", "<pad>", "</s>", "<unk>", "<mask>"]
        tok = _wordpiece(True, special, "<s>", "</s>")
        fast = tf.MPNetTokenizerFast(tokenizer_object=tok, mask_token="<mask>", **ROBERTA_SPECIAL)
        config = tf.MPNetConfig(
            vocab_size=tok.get_vocab_size(),
            hidden_size=HIDDEN,
            num_hidden_layers=LAYERS,
            num_attention_heads=HEADS,
            intermediate_size=2 * HIDDEN,
            max_position_embeddings=66,
            pad_token_id=1,
            bos_token_id=0,
            eos_token_id=2,
        )
    elif arch in ("roberta", "xlm-roberta"):
        tok = _byte_bpe() if arch == "roberta" else _unigram()
        cls = tf.RobertaTokenizerFast if arch == "roberta" else tf.XLMRobertaTokenizerFast
        fast = cls(tokenizer_object=tok, mask_token="<mask>", **ROBERTA_SPECIAL)
        config = (tf.RobertaConfig if arch == "roberta" else tf.XLMRobertaConfig)(
            vocab_size=tok.get_vocab_size(),
            hidden_size=HIDDEN,
            num_hidden_layers=LAYERS,
            num_attention_heads=HEADS,
            intermediate_size=2 * HIDDEN,
            max_position_embeddings=66,
            pad_token_id=1,
            bos_token_id=0,
            eos_token_id=2,
        )
    elif arch == "modernbert":
        tok = _byte_bpe()
        fast = tf.PreTrainedTokenizerFast(tokenizer_object=tok, mask_token="<mask>", **ROBERTA_SPECIAL)
        config = tf.ModernBertConfig(
            vocab_size=tok.get_vocab_size(),
            hidden_size=HIDDEN,
            num_hidden_layers=LAYERS,
            num_attention_heads=HEADS,
            intermediate_size=2 * HIDDEN,
            max_position_embeddings=64,
            local_attention=16,
            pad_token_id=1,
            bos_token_id=0,
            eos_token_id=2,
            cls_token_id=0,
            sep_token_id=2,
        )
    else:
        raise KeyError(arch)
    torch.manual_seed(0)
    tf.AutoModel.from_config(config).save_pretrained(directory)
    fast.save_pretrained(directory)
    return directory


ARCHITECTURES = ["bert", "roberta", "xlm-roberta", "mpnet", "distilbert", "modernbert"]


def _st_encode(directory: Path, sentences: list[str]) -> torch.Tensor:
    from sentence_transformers import SentenceTransformer

    model = SentenceTransformer(str(directory), device="cpu")
    return torch.as_tensor(model.encode(sentences, convert_to_numpy=True, batch_size=len(sentences)))


def _recipe(model_dir: Path, tmp_path: Path, **trainer) -> Path:
    """Unsupervised SimCSE on the quickstart recipe: 32 sentences, 24 tokens, no validation."""
    recipe = yaml.safe_load((ROOT / "recipes/quickstart.yaml").read_text(encoding="utf-8"))
    recipe["model"]["encoder"].update(model=str(model_dir), max_length=24)
    recipe["model"]["objectives"] = [{"class_path": "unisent.objectives.SimCSE", "init_args": {"temperature": 0.05}}]
    recipe["model"]["evaluation"] = {"val_tasks": [], "test_tasks": []}
    recipe["data"].update(train={"simcse": {"path": str(ROOT / "samples/sentences.txt"), "max_records": 32}})
    recipe["data"]["batch_size"] = 8
    recipe["trainer"].update(
        max_steps=2, max_epochs=1, default_root_dir=str(tmp_path), enable_progress_bar=False, limit_val_batches=0
    )
    recipe["trainer"].update(trainer)
    recipe["trainer"]["logger"]["init_args"]["save_dir"] = str(tmp_path / "runs")
    path = tmp_path / "recipe.yaml"
    path.write_text(yaml.safe_dump(recipe, sort_keys=False), encoding="utf-8")
    return path


def _trained(tmp_path: Path) -> Path:
    """The run's checkpoint says 2 optimizer steps, with a finite logged loss; returns its encoder directory."""
    import pandas as pd

    run = next((tmp_path / "runs").rglob("checkpoints")).parent
    assert torch.load(run / "checkpoints/last.ckpt", map_location="cpu", weights_only=False)["global_step"] == 2
    loss = pd.read_csv(run / "metrics.csv")["train/simcse/contrastive"].dropna()
    assert len(loss) and loss.map(lambda v: abs(v) < float("inf")).all()
    return run / "encoder"


@pytest.mark.parametrize("arch", ARCHITECTURES)
def test_a_tiny_backbone_trains_exports_and_reloads_in_sentence_transformers(arch, tmp_path, capsys):
    from transformers import AutoTokenizer

    model_dir = build_tiny(arch, tmp_path / f"tiny-{arch}")
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    ids = tokenizer("the cat")["input_ids"]
    assert (ids[0], ids[-1]) == (tokenizer.cls_token_id, tokenizer.sep_token_id) and tokenizer.unk_token_id not in ids
    capsys.readouterr()
    main(["fit", "-c", str(_recipe(model_dir, tmp_path)), "--trainer.log_every_n_steps", "1"])
    err = capsys.readouterr().err
    fallback = [line for line in err.splitlines() if "does not support SDPA" in line]
    assert len(fallback) == (1 if arch == "mpnet" else 0), err  # once per model
    encoder = _trained(tmp_path)
    for fmt in ("sentence-transformers", "huggingface"):
        main(["export", str(encoder), "--format", fmt, "--out", str(tmp_path / fmt)])
    expected = torch.as_tensor(unisent.load(str(encoder)).encode(SENTENCES, bf16=False))
    assert expected.dtype == torch.float32 and torch.isfinite(expected).all()
    got = _st_encode(tmp_path / "sentence-transformers", SENTENCES)
    torch.testing.assert_close(got, expected, atol=1e-6, rtol=0)
    hf = torch.as_tensor(unisent.load(str(tmp_path / "huggingface")).encode(SENTENCES, bf16=False))
    torch.testing.assert_close(hf, expected, atol=1e-6, rtol=0)


@pytest.mark.distributed
@pytest.mark.parametrize("arch", ["roberta", "mpnet"])
def test_a_tiny_backbone_trains_in_two_gloo_processes(arch, tmp_path):
    import os
    import subprocess
    import sys

    model_dir = build_tiny(arch, tmp_path / f"tiny-{arch}")
    recipe = _recipe(
        model_dir,
        tmp_path,
        devices=2,
        accelerator="cpu",
        strategy="ddp_find_unused_parameters_true",
        log_every_n_steps=1,
    )
    done = subprocess.run(
        [sys.executable, "-m", "unisent.cli", "fit", "-c", str(recipe)],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=ROOT,
        env=dict(os.environ, OMP_NUM_THREADS="1"),
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert (_trained(tmp_path) / "config.json").is_file()


def test_an_explicit_attention_a_model_cannot_use_fails_in_one_error(tmp_path, capsys):
    from unisent.encoders.loading import load_backbone

    model_dir = build_tiny("mpnet", tmp_path / "tiny-mpnet")
    for _ in range(2):  # the default falls back to eager, saying so once per model
        assert load_backbone(str(model_dir)).config._attn_implementation == "eager"
    assert capsys.readouterr().err.count("does not support SDPA") == 1
    with pytest.raises(ValueError, match=r"(?s)attn_implementation='sdpa-nope'.*mpnet.*'eager'") as info:
        load_backbone(str(model_dir), attn_implementation="sdpa-nope")
    assert "\n" not in str(info.value).split(" Use ")[0]
    assert load_backbone(str(model_dir), attn_implementation="eager").config._attn_implementation == "eager"
