"""The built-in formats, written by the model itself: each exporter here only adapts what an
[`InferenceModel`][unisent.inference.InferenceModel] declares (how it writes, its card rows, usage, tags and
checks) to [`Exporter`][unisent.export.Exporter]; none knows a model type or a pooler."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ..inference.base import HUGGINGFACE, SENTENCE_TRANSFORMERS, InferenceModel, max_abs_diff
from ..io import write_json
from .exporters import Exporter, model_format

__all__ = ["HuggingFaceExporter", "ModelFormat", "SentenceTransformersExporter"]


class ModelFormat(Exporter[InferenceModel]):
    """A built-in format: the model card's tags are the format's and the model type's; ``verify`` loads the
    directory back with ``unisent.load`` (and ``library_checks``) against ``model.encode``, then runs the model's
    own ``export_checks``."""

    def verify(self, model: InferenceModel, out: Path, sentences: Sequence[str]) -> tuple[float | None, str]:
        from .._loader import load  # the written directory read back as ``unisent.load`` reads it

        checks = []
        if model.generic_export_check:
            expected = model.encode(list(sentences), precision="fp32")
            checks.append(
                (
                    max_abs_diff(load(out).encode(list(sentences), precision="fp32"), expected),
                    f"`unisent.load(DIR).encode` on {len(sentences)} sentences",
                )
            )
            checks += self.library_checks(out, sentences, expected)
        checks += model.export_checks(out, sentences, self.format)
        if not checks:  # the largest difference of all checks and how they were made
            return None, "not checked: the model declares no check"
        return max(diff for diff, _ in checks), " and ".join(how for _, how in checks)

    def library_checks(self, out: Path, sentences: Sequence[str], expected: Any) -> list[tuple[float, str]]:
        """The format's own library loading ``out``, against ``expected`` (none by default)."""
        return []

    def model_tags(self, model: InferenceModel) -> tuple[str, ...]:
        return self.tags + tuple(type(model).card_tags)


@model_format
class SentenceTransformersExporter(ModelFormat):
    """Any inference model as a Sentence Transformers directory (``SentenceTransformer(DIR)``)."""

    format = SENTENCE_TRANSFORMERS
    library_name = "sentence-transformers"
    pipeline_tag = "sentence-similarity"
    tags = ("sentence-transformers", "sentence-similarity", "feature-extraction")

    def write(self, model: InferenceModel, out: Path) -> None:
        write_sentence_transformers(model, out)

    def facts(self, model: InferenceModel) -> list[tuple[str, str]]:
        return model.sentence_transformers_facts()

    def usage(self, model: InferenceModel) -> str:
        return model.sentence_transformers_usage()

    def library_checks(self, out: Path, sentences: Sequence[str], expected: Any) -> list[tuple[float, str]]:
        """``SentenceTransformer(DIR)`` (when installed) against ``model.encode``."""
        try:
            from sentence_transformers import SentenceTransformer
        except ImportError:
            return []
        st = SentenceTransformer(str(out), device="cpu", trust_remote_code=False)
        diff = max_abs_diff(st.encode(list(sentences), convert_to_numpy=True), expected)
        return [(diff, "`SentenceTransformer(DIR).encode`")]


@model_format
class HuggingFaceExporter(ModelFormat):
    """An inference model as a ``transformers`` directory plus unisent's files."""

    format = HUGGINGFACE
    library_name = "transformers"  # pipeline_tag: Exporter's feature-extraction
    tags = ("feature-extraction",)

    def write(self, model: InferenceModel, out: Path) -> None:
        model.write_huggingface(out)

    def facts(self, model: InferenceModel) -> list[tuple[str, str]]:
        return model.card_facts()

    def usage(self, model: InferenceModel) -> str:
        return model.huggingface_usage()


def write_sentence_transformers(model: InferenceModel, out: Path) -> None:
    """Write a directory that ``SentenceTransformer(out)`` and ``unisent.load(out)`` both load: the model's
    own layout where it has one, else its root files and the modules it declares, with the Sentence
    Transformers 3+ files around the ``Transformer`` at the root (module folders, ``modules.json``, configs;
    the model's ``sentence_transformers_model_config`` default: no prompts, cosine), loadable without
    ``trust_remote_code``."""
    from safetensors.torch import save_file

    if model.write_sentence_transformers_layout(out, write_sentence_transformers):
        return
    modules = model.sentence_transformers_modules()
    model.save_sentence_transformers_root(out)
    write_json(out / "sentence_bert_config.json", model.sentence_transformers_config())
    entries = [{"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"}]
    for idx, module in enumerate(modules, start=1):
        folder = out / f"{idx}_{module.name}"
        folder.mkdir()
        write_json(folder / "config.json", module.config)
        if module.weights is not None:
            save_file(module.weights, str(folder / "model.safetensors"))
        entries.append({"idx": idx, "name": str(idx), "path": folder.name, "type": module.class_path})
    write_json(out / "modules.json", entries)
    model_config = model.sentence_transformers_model_config() or {}
    write_json(
        out / "config_sentence_transformers.json",
        {"prompts": {}, "default_prompt_name": None, "similarity_fn_name": "cosine", **model_config},
    )
