"""Exporter of retrofitted AMR models: two Sentence Transformers models plus the combination.

A :class:`~unisent.amr.RetrofittedEncoder` embeds a sentence with a text encoder and its AMR graph
with an AMR encoder, and combines the two vectors. Sentence Transformers cannot parse AMR, so the
honest export is a directory that serves both worlds:

- ``unisent.load(DIR)`` gives the full model (``retrofit.json``, the parser's pre-parsed lookup if
  any): ``encode(sentences)`` parses, ``encode(sentences, graphs=...)`` takes the graphs;
- ``DIR/text`` is the text encoder and ``DIR/amr`` the AMR encoder (over linearised graphs), each
  loadable with ``SentenceTransformer``; the model card shows how to combine them by hand.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import torch
from torch import nn

from ..amr.retrofit import AMR_DIR, TEXT_DIR, RetrofittedEncoder, _is_sentence_transformer, combine
from ..encoders import Encoder
from .encoder import EncoderSentenceTransformersExporter, _common_facts, _max_abs_diff
from .registry import Exporter, exporter_for, register_exporter

__all__ = ["PROBE_GRAPHS", "RetrofittedSentenceTransformersExporter", "retrofit_usage_code"]

#: Sentences with hand-written linearised AMR graphs on which an export is checked.
PROBE_GRAPHS: tuple[tuple[str, str], ...] = (
    ("A man is playing a guitar.", "( play-11 :ARG0 ( man ) :ARG2 ( guitar ) )"),
    ("The boy wants to go.", "( want-01 :ARG0 ( boy ) :ARG1 ( go-02 :ARG0 boy ) )"),
    ("Two dogs run across the grass in the park while a child throws a ball for them to catch again.",
     "( run-02 :ARG0 ( dog :quant 2 ) :path ( across :op1 ( grass :location ( park ) ) ) :time ( throw-01 :ARG0 "
     "( child ) :ARG1 ( ball ) :purpose ( catch-01 :ARG0 dog :ARG1 ball :mod ( again ) ) ) )"),
    ("ok", "( okay-04 )"),
    ("Ein Mann spielt Gitarre.", "( play-11 :ARG0 ( man ) :ARG2 ( guitar ) )"),
)

_NORMALIZE = {
    "concat": ("s", "h"),
    "sum": ("s", "h"),
    "norm_concat": ("F.normalize(s, dim=-1)", "F.normalize(h, dim=-1)"),
    "norm_sum": ("F.normalize(s, dim=-1)", "F.normalize(h, dim=-1)"),
}
_FORMULA = {"concat": "s ⊕ h", "sum": "s + h", "norm_concat": "s/|s| ⊕ h/|h|", "norm_sum": "s/|s| + h/|h|"}


def retrofit_usage_code(combination: str) -> str:
    """Runnable Sentence Transformers code that reproduces ``RetrofittedEncoder.encode`` given graphs.

    It loads ``model_dir = "."`` (the exported directory as the working directory) and defines
    ``embed(sentences, graphs) -> torch.Tensor``.
    """
    s, h = _NORMALIZE[combination]
    op = f"torch.cat([{s}, {h}], dim=-1)" if combination.endswith("concat") else f"{s} + {h}"
    lines = [
        "import torch",
        "import torch.nn.functional as F",
        "from sentence_transformers import SentenceTransformer",
        "",
        'model_dir = "."  # this directory',
        f'text_model = SentenceTransformer(f"{{model_dir}}/{TEXT_DIR}", device="cpu")  # sentences -> s',
        f'amr_model = SentenceTransformer(f"{{model_dir}}/{AMR_DIR}", device="cpu")  # linearised AMR graphs -> h',
        "",
        "",
        "def embed(sentences: list[str], graphs: list[str]) -> torch.Tensor:",
        '    """graphs[i]: the linearised AMR graph of sentences[i] (unisent.amr.linearize of its PENMAN)."""',
        "    s = text_model.encode(sentences, convert_to_tensor=True).float().cpu()",
        "    h = amr_model.encode(graphs, convert_to_tensor=True).float().cpu()",
        f"    return {op}  # {combination}: {_FORMULA[combination]}",
        "",
        "",
        'embeddings = embed(["The boy wants to go."], ["( want-01 :ARG0 ( boy ) :ARG1 ( go-02 :ARG0 boy ) )"])',
    ]
    return "\n".join(lines) + "\n"


def _text_exporter(text: nn.Module) -> Exporter:
    return exporter_for(text, "sentence-transformers")


@register_exporter(RetrofittedEncoder)
class RetrofittedSentenceTransformersExporter(Exporter):
    """A :class:`RetrofittedEncoder`: ``text/`` and ``amr/`` as Sentence Transformers models, the
    combination and parser for ``unisent.load``."""

    format = "sentence-transformers"
    library_name = "sentence-transformers"
    pipeline_tag = "sentence-similarity"
    tags = ("sentence-transformers", "sentence-similarity", "feature-extraction", "amr", "retrofitted")

    def write(self, model: nn.Module, out: Path) -> None:
        assert isinstance(model, RetrofittedEncoder)
        if not isinstance(model.amr_encoder, Encoder):
            raise TypeError(f"the AMR encoder must be an unisent Encoder to export, got {type(model.amr_encoder).__name__}")
        text_dir, amr_dir = out / TEXT_DIR, out / AMR_DIR
        if _is_sentence_transformer(model.text_encoder):
            model.text_encoder.save(str(text_dir))
        else:
            text_dir.mkdir()
            _text_exporter(model.text_encoder).write(model.text_encoder, text_dir)
        amr_dir.mkdir()
        EncoderSentenceTransformersExporter().write(model.amr_encoder, amr_dir)
        kind = "sentence-transformers" if _is_sentence_transformer(model.text_encoder) else "unisent"
        model.save_config(out, kind)

    def facts(self, model: nn.Module) -> list[tuple[str, str]]:
        assert isinstance(model, RetrofittedEncoder)
        text = model.text_encoder
        text_kind = "Sentence Transformers model" if _is_sentence_transformer(text) else type(text).__name__
        from ..amr.parsing import PreParsedAMR

        if isinstance(model.parser, PreParsedAMR):
            parser = f"pre-parsed lookup of {len(model.parser)} sentences (`amr_lookup.jsonl`)"
        elif model.parser_spec:
            parser = f"`{model.parser_spec['class_path']}`"
        else:
            parser = "none recorded: pass the graphs, or a parser to `unisent.amr.RetrofittedEncoder.from_pretrained`"
        amr_facts = dict(_common_facts(model.amr_encoder))
        return [
            ("combination", f"`{model.combination}`: {_FORMULA[model.combination]} (s: text embedding, h: AMR embedding)"),
            ("embedding dimension", str(model.dimension or "?")),
            ("text encoder (`text/`)", f"{text_kind}, dimension {model.text_dimension or '?'}"),
            ("AMR encoder (`amr/`)", f"{amr_facts['architecture']}; pooling: {amr_facts['pooling']}; "
                                     f"dimension {model.amr_encoder.hidden_size}; extended vocabulary of "
                                     f"{len(model.amr_encoder.tokenizer)} tokens"),
            ("AMR linearisation", f"depth-first, no variables, :wiki dropped, parentheses "
                                  f"{'on' if model.parentheses else 'off'} (`unisent.amr.linearize`)"),
            ("parser", parser),
            ("similarity", "cosine"),
        ]

    def usage(self, model: nn.Module) -> str:
        assert isinstance(model, RetrofittedEncoder)
        code = retrofit_usage_code(model.combination)
        return f"""A **retrofitted** sentence embedding model (Cai et al. 2022): the text embedding `s` of a
sentence is combined with the embedding `h` of its AMR graph (`{model.combination}`:
{_FORMULA[model.combination]}). Sentence Transformers cannot parse AMR, so the graphs are an input.

The **full model** with unisent (it parses through the recorded parser, or takes the graphs, PENMAN
or linearised):

```python
import unisent

model = unisent.load("path/to/this/directory")
embeddings = model.encode(["The boy wants to go."],
                          graphs=["(w / want-01 :ARG0 (b / boy) :ARG1 (g / go-02 :ARG0 b))"])
```

By hand with [Sentence Transformers](https://www.sbert.net): `text/` is the text encoder and `amr/` the
AMR encoder over **linearised** graphs (`unisent.amr.linearize(penman)`: depth-first, no variables,
`:wiki` dropped); the same embeddings as `model.encode(sentences, graphs=graphs)`:

```python
{code.rstrip()}
```
"""

    def verify(self, model: nn.Module, out: Path, sentences: Sequence[str]) -> tuple[float | None, str]:
        assert isinstance(model, RetrofittedEncoder)
        probe_sentences = [s for s, _ in PROBE_GRAPHS]
        graphs = [g for _, g in PROBE_GRAPHS]
        expected = model.encode(probe_sentences, graphs=graphs)
        reloaded = RetrofittedEncoder.from_pretrained(out, parser=model.parser).eval()
        diff = _max_abs_diff(reloaded.encode(probe_sentences, graphs=graphs), expected)
        how = f"`unisent.load(DIR).encode(sentences, graphs=...)` on {len(graphs)} sentences with graphs"
        try:
            from sentence_transformers import SentenceTransformer
        except ImportError:
            return diff, how
        s = torch.as_tensor(SentenceTransformer(str(out / TEXT_DIR), device="cpu").encode(probe_sentences))
        h = torch.as_tensor(SentenceTransformer(str(out / AMR_DIR), device="cpu").encode(graphs))
        by_hand = combine(s.float(), h.float(), model.combination)
        return max(diff, _max_abs_diff(by_hand, expected)), how + " and `text/` + `amr/` with `SentenceTransformer`"
