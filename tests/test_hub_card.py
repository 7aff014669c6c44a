"""Cards and the Hub: the front matter is huggingface_hub's, the similarity is the model's, --push-to
fails in one line offline and leaves the export."""

from __future__ import annotations

import json

import pytest

from unisent.cli import main
from unisent.encoders import Encoder, EncoderConfig

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.mark.parametrize("similarity", ["cosine", "dot"])
def test_card_front_matter_is_huggingface_hubs_and_similarity_is_the_models(similarity, tiny_bert_dir, tmp_path):
    from huggingface_hub import ModelCard
    from sentence_transformers import SentenceTransformer

    saved = Encoder(EncoderConfig(model=str(tiny_bert_dir), pooler="mean", similarity=similarity)).save_pretrained(
        tmp_path / "model"
    )
    results = tmp_path / "results.json"
    results.write_text(
        json.dumps(
            {
                "tasks": {
                    "stsb-test": {"group": "sts", "main_metric": "spearman", "score": 53.4787, "metrics": {}},
                    "STSBenchmark": {
                        "group": "mteb",
                        "task_type": "STS",
                        "main_metric": "cosine_spearman",
                        "score": 53.4785,
                        "metrics": {},
                    },
                }
            }
        )
    )
    out = tmp_path / "st"
    main(
        [
            "export",
            str(saved),
            "--format",
            "sentence-transformers",
            "--out",
            str(out),
            "--results",
            str(results),
            "--name",
            "tiny-mean",
        ]
    )

    readme = out / "README.md"
    card = ModelCard.load(readme)
    front = readme.read_text().split("---\n")[1]
    assert front.strip() == card.data.to_yaml().strip()  # written by huggingface_hub's serialiser, parses back
    assert card.data.library_name == "sentence-transformers" and "unisent" in card.data.tags
    evals = {(r.dataset_type, r.task_type, r.metric_type, r.metric_value) for r in card.data.eval_results}
    assert evals == {("stsb-test", "STS", "spearman", 53.4787), ("STSBenchmark", "STS", "cosine_spearman", 53.4785)}
    assert card.data.model_name == "tiny-mean"

    config = json.loads((out / "config_sentence_transformers.json").read_text())
    assert config["similarity_fn_name"] == similarity
    assert SentenceTransformer(str(out), device="cpu").similarity_fn_name == similarity
    assert f"| similarity | {similarity} |" in readme.read_text()


def test_push_to_fails_in_one_line_offline_and_keeps_the_export(tiny_bert_dir, tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    saved = Encoder(EncoderConfig(model=str(tiny_bert_dir), pooler="mean")).save_pretrained(tmp_path / "model")
    out = tmp_path / "st"
    with pytest.raises(SystemExit) as exit_:
        main(
            [
                "export",
                str(saved),
                "--format",
                "sentence-transformers",
                "--out",
                str(out),
                "--push-to",
                "my-org/tiny-mean",
                "--no-verify",
            ]
        )
    message = exit_.value.code
    assert isinstance(message, str) and "\n" not in message
    assert message.startswith("unisent export: error: --push-to my-org/tiny-mean: HF_HUB_OFFLINE is set")
    assert f"hf upload my-org/tiny-mean {out}" in message
    assert (out / "README.md").is_file() and (out / "modules.json").is_file()


def test_a_base_model_card_with_an_alias_bomb_is_left_out_quickly(tmp_path):
    """The front matter of a base model's README is a model's file: a billion-laughs YAML (9**9 values when
    walked) is refused by its expansion limit, not walked into the card."""
    import time

    from unisent.export.hub import _front_matter_of

    lines = ['a: &a ["x","x","x","x","x","x","x","x","x"]']
    lines += [f"{chr(98 + i)}: &{chr(98 + i)} [{','.join(['*' + chr(97 + i)] * 9)}]" for i in range(8)]
    (tmp_path / "README.md").write_text("---\n" + "\n".join(lines) + "\nlicense: *i\n---\n# card\n")
    started = time.perf_counter()
    assert _front_matter_of(tmp_path / "README.md") == {}
    assert time.perf_counter() - started < 10
    (tmp_path / "README.md").write_text("---\nlicense: mit\nlanguage: [en]\n---\n# card\n")
    assert _front_matter_of(tmp_path / "README.md") == {"license": "mit", "language": ["en"]}
