"""Any backbone transformers can load: a matrix of tiny random models (BERT, RoBERTa, XLM-R, MPNet, DistilBERT,
ModernBERT) built from their configs with a tokenizer trained on the bundled sentences (WordPiece, byte-level BPE,
Unigram), each built once per module. Each trains every objective (SimCSE unsupervised and supervised, EASE, GaussCSE,
AMRSimCSE with its vocabulary extension, CMLM with its MLM head, BitextRetrieval, NLIClassifier) for 2 steps in one
``unisent fit``, exports to both formats, and the Sentence Transformers export gives the vectors of ``unisent.load``
(fp32, 1e-6). BERT, RoBERTa, XLM-R, MPNet and DistilBERT also train every objective in one 2-process gloo run.
MPNet has no SDPA attention: it falls back to eager, once."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import yaml

import unisent
from tests.conftest import st_encode
from unisent.cli import main
from unisent.training_config import TrainConfig

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


def build_tiny(arch: str, directory: Path, mlm: bool = False, **settings) -> Path:
    """A random 2-layer ``arch`` model and its tokenizer, saved as a model directory; ``mlm``: with the architecture's
    MLM head (``AutoModelForMaskedLM``); ``settings`` change the config."""
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
    config.update(settings)
    torch.manual_seed(0)
    (tf.AutoModelForMaskedLM if mlm else tf.AutoModel).from_config(config).save_pretrained(directory)
    fast.save_pretrained(directory)
    return directory


ARCHITECTURES = ["bert", "roberta", "xlm-roberta", "mpnet", "distilbert", "modernbert"]


def _hf_mean(directory: Path, sentences: list[str]) -> torch.Tensor:
    """The Hugging Face export's card recipe for mean pooling: ``AutoModel``, the masked mean, the trained length."""
    from transformers import AutoModel, AutoTokenizer

    tokenizer, model = AutoTokenizer.from_pretrained(directory), AutoModel.from_pretrained(directory).eval()
    batch = tokenizer(sentences, padding=True, truncation=True, max_length=24, return_tensors="pt")
    with torch.no_grad():
        hidden = model(**batch).last_hidden_state
    mask = batch["attention_mask"].unsqueeze(-1).to(hidden.dtype)
    return (hidden * mask).sum(1) / mask.sum(1)


#: every objective of unisent, on its bundled sample: (class, settings, training file under samples/ or written
#: by :func:`_nli_labelled`); one run trains them all, so each backbone is set up, trained and saved once
OBJECTIVES = {
    "simcse": ("SimCSE", {}, "sentences.txt"),
    "simcse_sup": ("SimCSE", {"supervised": True}, "nli_triples.jsonl"),
    "ease": ("EASE", {"entity_dim": HIDDEN, "entity_titles": "ease_fewrel_entities.tsv"}, "ease_fewrel.jsonl"),
    "gausscse": ("GaussCSE", {}, "nli_triples.jsonl"),
    # the AMR names are added to the vocabulary: a WordPiece, a byte-level BPE and a Unigram tokenizer
    "amr": ("AMRSimCSE", {"mode": "self", "forms": {"anchor": "text", "positive": "graph"}}, "amr_little_prince.jsonl"),
    "cmlm": ("CMLM", {"num_projections": 3}, "cmlm_pairs.jsonl"),
    "bitext": ("BitextRetrieval", {}, "bitext_xnli_dev_deu_eng.jsonl"),
    "nli": ("NLIClassifier", {}, "nli_labelled.jsonl"),
}
#: the loss terms each objective logs (``train/<name>/<term>``)
TERMS = {
    "simcse": ["contrastive"],
    "simcse_sup": ["contrastive"],
    "ease": ["contrastive", "entity"],
    "gausscse": ["contrastive"],
    "amr": ["contrastive"],
    "cmlm": ["mlm"],
    "bitext": ["retrieval"],
    "nli": ["classification"],
}
AMR_SYMBOLS = [ROOT / "unisent/resources/amr_predicates.tsv", ROOT / "unisent/resources/amr_additions.txt"]


def _nli_labelled(directory: Path) -> Path:
    """(premise, hypothesis, label) records from the bundled NLI triples."""
    import json

    rows = []
    for line in (ROOT / "samples/nli_triples.jsonl").read_text(encoding="utf-8").splitlines()[:16]:
        triple = json.loads(line)
        rows.append({"premise": triple["anchor"], "hypothesis": triple["positive"], "label": "entailment"})
        rows.append({"premise": triple["anchor"], "hypothesis": triple["negative"], "label": "contradiction"})
    path = directory / "nli_labelled.jsonl"
    path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    return path


def _objectives(directory: Path) -> tuple[list[dict], dict[str, dict]]:
    """The objectives (``class_path`` / ``init_args``) and their training data, 8 records each (files written under
    ``directory``). Every objective applies to every architecture of the matrix: none is left out."""
    objectives, train = [], {}
    for name in OBJECTIVES:
        cls, settings, sample = OBJECTIVES[name]
        settings = dict(settings, name=name)
        if cls == "EASE":
            settings["entity_titles"] = str(ROOT / "samples" / settings["entity_titles"])
        if cls == "AMRSimCSE":
            # 43 frames seen at least 390 times (want-01, go-02, ...) and the 245 names of the list (:ARG0, ...)
            settings.update(
                symbol_counts=str(AMR_SYMBOLS[0]), symbol_lists=str(AMR_SYMBOLS[1]), min_count=390, max_length=48
            )
        objectives.append({"class_path": f"unisent.objectives.{cls}", "init_args": settings})
        path = _nli_labelled(directory) if cls == "NLIClassifier" else ROOT / "samples" / sample
        train[name] = {"path": str(path), "max_records": 8}
    return objectives, train


def _recipe(model_dir: Path, tmp_path: Path) -> Path:
    """Every objective in one run on the quickstart recipe: 8 records and a batch of 4 per
    objective, 24 tokens (48 for AMR graphs), no validation."""
    recipe = yaml.safe_load((ROOT / "recipes/quickstart.yaml").read_text(encoding="utf-8"))
    recipe["model"]["encoder"].update(model=str(model_dir), max_length=24)
    recipe["model"]["objectives"], train = _objectives(tmp_path)
    recipe["model"]["evaluation"] = {"val_tasks": [], "test_tasks": []}
    recipe["data"].update(train=train, batch_size=4, cache_dir=str(tmp_path / "cache"))
    recipe["trainer"].update(
        max_steps=2,
        max_epochs=1,
        default_root_dir=str(tmp_path),
        enable_progress_bar=False,
        limit_val_batches=0,
        log_every_n_steps=1,
    )
    recipe["trainer"]["logger"]["init_args"]["save_dir"] = str(tmp_path / "runs")
    path = tmp_path / "recipe.yaml"
    path.write_text(yaml.safe_dump(recipe, sort_keys=False), encoding="utf-8")
    return path


def _trained(tmp_path: Path) -> Path:
    """The run's checkpoint says 2 optimizer steps, every term of every objective was logged at both and is finite;
    returns its encoder directory."""
    import pandas as pd

    run = next((tmp_path / "runs").rglob("checkpoints")).parent
    assert torch.load(run / "checkpoints/last.ckpt", map_location="cpu", weights_only=False)["global_step"] == 2
    metrics = pd.read_csv(run / "metrics.csv")
    for name in OBJECTIVES:
        for term in TERMS[name]:
            loss = metrics[f"train/{name}/{term}"].dropna()
            assert len(loss) == 2 and loss.map(lambda v: abs(v) < float("inf")).all(), (name, term)
    return run / "encoder"


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory):
    """``tiny_model(arch) -> Path``: each architecture's tiny model, built once per module."""
    built: dict[str, Path] = {}

    def get(arch: str) -> Path:
        if arch not in built:
            built[arch] = build_tiny(arch, tmp_path_factory.mktemp(f"tiny-{arch}"))
        return built[arch]

    return get


@pytest.mark.integration
@pytest.mark.parametrize("arch", ARCHITECTURES)
def test_a_tiny_backbone_trains_every_objective_exports_and_reloads_in_sentence_transformers(
    arch, tiny_model, tmp_path, capsys
):
    from transformers import AutoTokenizer

    model_dir = tiny_model(arch)
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    ids = tokenizer("the cat")["input_ids"]
    assert (ids[0], ids[-1]) == (tokenizer.cls_token_id, tokenizer.sep_token_id) and tokenizer.unk_token_id not in ids
    capsys.readouterr()
    main(["fit", "-c", str(_recipe(model_dir, tmp_path))])
    err = capsys.readouterr().err
    fallback = [line for line in err.splitlines() if "does not support SDPA" in line]
    assert len(fallback) == (1 if arch == "mpnet" else 0), err  # once per model
    encoder = _trained(tmp_path)
    main(["export", str(encoder), "--format", "sentence-transformers", "--out", str(tmp_path / "st")])
    model = unisent.load(str(encoder))  # GaussCSE's: the encoder and its Gaussian head (encode: the means)
    # no Hugging Face format for a Gaussian head (docs/export.md): its encoder exports alone
    with pytest.raises(SystemExit, match="no 'huggingface' exporter is registered for GaussianEncoder"):
        main(["export", str(encoder), "--format", "huggingface", "--out", str(tmp_path / "refused")])
    model.encoder.save_pretrained(tmp_path / "plain")
    main(["export", str(tmp_path / "plain"), "--format", "huggingface", "--out", str(tmp_path / "hf")])
    # the AMR names are whole tokens of the saved tokenizer, whatever its kind, and embed as the run left them
    graph = "( want-01 :ARG0 ( boy ) :ARG1 ( go-02 :ARG0 boy ) )"
    assert {":ARG0", "want-01"} <= set(model.tokenizer.tokenize(graph)), model.tokenizer.tokenize(graph)
    sentences = SENTENCES + [graph]
    expected = torch.as_tensor(model.encode(sentences, precision="fp32"))
    assert expected.dtype == torch.float32 and torch.isfinite(expected).all()
    got = st_encode(tmp_path / "st", sentences, batch_size=len(sentences))
    torch.testing.assert_close(got, expected, atol=1e-6, rtol=0)
    pooled = torch.as_tensor(model.encoder.encode(sentences, precision="fp32"))
    assert not torch.allclose(pooled, expected)  # the head is in the Sentence Transformers export
    for directory in ("hf", "plain"):
        hf = torch.as_tensor(unisent.load(str(tmp_path / directory)).encode(sentences, precision="fp32"))
        torch.testing.assert_close(hf, pooled, atol=1e-6, rtol=0)
    torch.testing.assert_close(_hf_mean(tmp_path / "hf", sentences), pooled, atol=1e-6, rtol=0)


#: MLM-head settings an architecture names its own way, unlike the defaults (gelu, 1e-12): CMLM must read them
HEAD_SETTINGS = {"distilbert": {"activation": "relu"}, "modernbert": {"classifier_activation": "relu", "norm_eps": 0.5}}


@pytest.mark.parametrize("arch", ARCHITECTURES)
def test_cmlm_loads_the_mlm_head_of_each_architecture(arch, tmp_path):
    """CMLM's MLM head is the checkpoint's own where it has one (the logits of ``AutoModelForMaskedLM``, vocabulary
    projection tied to the input embeddings), a fresh one where it has none (the matrix's models)."""
    from transformers import AutoModelForMaskedLM

    from unisent.encoders import Encoder, EncoderConfig
    from unisent.objectives import CMLM

    directory = build_tiny(arch, tmp_path / arch, mlm=True, **HEAD_SETTINGS.get(arch, {}))
    torch.manual_seed(1)
    mlm = AutoModelForMaskedLM.from_pretrained(directory).eval()
    with torch.no_grad():  # a head that differs from a fresh one in every weight
        for name, p in mlm.named_parameters():
            if p.shape != mlm.get_input_embeddings().weight.shape and mlm.base_model_prefix not in name.split("."):
                p.normal_(std=0.5)
    mlm.save_pretrained(directory)
    encoder = Encoder(EncoderConfig(model=str(directory))).eval()
    objective = CMLM()
    objective.setup_for(encoder)
    assert objective.mlm_head_source == "pretrained"
    ids = encoder.tokenizer(SENTENCES[:2], padding=True, return_tensors="pt")
    with torch.no_grad():
        hidden = encoder.backbone(input_ids=ids["input_ids"], attention_mask=ids["attention_mask"]).last_hidden_state
        ours = objective.head(hidden, encoder.backbone.get_input_embeddings().weight)
        torch.testing.assert_close(ours, mlm(**ids).logits, atol=1e-5, rtol=1e-5)
    plain = CMLM()
    plain.setup_for(Encoder(EncoderConfig(model=str(build_tiny(arch, tmp_path / "plain")))))
    assert plain.mlm_head_source == "fresh"


#: the architectures issue 39 asks for in the 2-process run (ModernBERT trains in one process only)
GLOO_ARCHITECTURES = ["bert", "roberta", "xlm-roberta", "mpnet", "distilbert"]


def _gloo_fits(rank: int, world: int, runs: list[tuple[str, str, str]]) -> dict:
    """One of two gloo processes: a Lightning DDP fit of every objective (a batch of 2 per process, so that the
    8 records make 2 steps) on each ``(arch, model, directory)`` of ``runs``, in the process group of
    :func:`run_distributed` (Lightning joins it: the processes start once for all the models). Per architecture:
    the steps taken, every logged term at each step, and how far the two processes' encoder weights are apart."""
    import os

    import lightning as L
    import torch.distributed as dist

    from unisent.data import DataSource, UnisentDataModule
    from unisent.encoders import EncoderConfig
    from unisent.io import import_object
    from unisent.lightning_module import UnisentModule
    from unisent.training_config import EvaluationConfig

    os.environ.update(LOCAL_RANK=str(rank), NODE_RANK="0", WORLD_SIZE=str(world), RANK=str(rank))
    torch.set_num_threads(1)

    class Record(L.Callback):
        def __init__(self) -> None:
            self.steps: list[dict[str, float]] = []

        def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
            self.steps.append({k: float(v) for k, v in trainer.callback_metrics.items() if k.startswith("train/")})

    out = {}
    for arch, model_dir, directory in runs:
        record = Record()
        specs, train = _objectives(Path(directory))
        module = UnisentModule(
            encoder=EncoderConfig(model=model_dir, max_length=24),
            objectives=[import_object(o["class_path"])(**o["init_args"]) for o in specs],
            evaluation=EvaluationConfig(val_tasks=[], test_tasks=[]),
            train=TrainConfig(save_encoder=False),
        )
        before = torch.cat([p.detach().flatten().clone() for p in module.encoder.parameters()])
        data = UnisentDataModule(
            train={k: DataSource(**v) for k, v in train.items()}, batch_size=2, cache_dir=f"{directory}/cache"
        )
        trainer = L.Trainer(
            accelerator="cpu",
            devices=world,
            strategy="ddp_find_unused_parameters_true",
            precision="32-true",
            max_steps=2,
            max_epochs=1,
            logger=False,
            default_root_dir=directory,
            enable_checkpointing=False,
            enable_progress_bar=False,
            enable_model_summary=False,
            callbacks=[record],
        )
        trainer.fit(module, datamodule=data)
        after = torch.cat([p.detach().flatten() for p in module.encoder.parameters()])
        weights = [None] * world
        dist.all_gather_object(weights, after)
        moved = float((after - before).abs().max()) if after.numel() == before.numel() else float("nan")
        out[arch] = {
            "steps": trainer.global_step,
            "terms": record.steps,
            "apart": float((weights[0] - weights[1]).abs().max()),
            "moved": moved,
        }
    return out


@pytest.mark.slow  # 26 s: each backbone trains every objective in one process in the default run
@pytest.mark.distributed
def test_every_tiny_backbone_trains_every_objective_in_two_gloo_processes(tiny_model, tmp_path):
    from unisent.testing import run_distributed

    runs = []
    for arch in GLOO_ARCHITECTURES:
        (tmp_path / arch).mkdir()
        runs.append((arch, str(tiny_model(arch)), str(tmp_path / arch)))
    results = run_distributed(_gloo_fits, runs, world_size=2, timeout=600)
    for arch in GLOO_ARCHITECTURES:
        result = results[arch]
        assert result["steps"] == 2 and len(result["terms"]) == 2, (arch, result)
        for name in OBJECTIVES:
            for term in TERMS[name]:
                values = [step[f"train/{name}/{term}"] for step in result["terms"]]
                assert all(abs(v) < float("inf") for v in values), (arch, name, term, values)
        # DDP: the gradients were averaged, the two processes hold the same trained weights
        assert result["apart"] == 0.0 and result["moved"] > 0, (arch, result["apart"], result["moved"])


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
