"""A retrofitted AMR model (Cai et al., 2022, Sec. 4.2): a text embedding combined with the embedding
of the sentence's AMR graph.

For a sentence ``x``: ``s = g(x)`` from any existing sentence encoder, ``h = f(linearize(parse(x)))`` from an AMR
encoder (trained with [`unisent.objectives.AMRSimCSE`][unisent.objectives.AMRSimCSE]), and the final embedding is one of
the paper's four integrations:

============== ==================================== ==========================
``concat``     ``s ⊕ h``                            size ``d_s + d_h``
``sum``        ``s + h``                            ``d_s == d_h`` required
``norm_concat`` ``s/|s| ⊕ h/|h|`` (default, best)   size ``d_s + d_h``
``norm_sum``   ``s/|s| + h/|h|``                    ``d_s == d_h`` required
============== ==================================== ==========================

Python::

    from unisent.models import RetrofittedEncoder

    model = RetrofittedEncoder("minilm-l6", "runs/amr/version_0/encoder", parser="lookup.txt")
    model.encode(["The boy wants to go."])                       # parsed through the lookup
    model.encode(["The boy wants to go."], graphs=["(w / want-01 :ARG0 (b / boy) :ARG1 (g / go-02 :ARG0 b))"])
    model.save_pretrained("runs/retrofitted")                    # unisent.load("runs/retrofitted") reads it

Its Sentence Transformers export serves both worlds, since Sentence Transformers cannot parse AMR:
``unisent.load(DIR)`` gives the full model (``retrofit.json``, the parser's pre-parsed lookup if any),
and ``DIR/text`` (the text encoder) and ``DIR/amr`` (the AMR encoder, over linearised graphs) each
load with ``SentenceTransformer``; the model card shows how to combine them by hand. The command line
builder is ``unisent retrofit``. How ``s`` and ``h`` combine is ``retrofit_combination``; what the
model is built from (encoders, parser) is ``retrofit_inputs``.
"""

from __future__ import annotations

import json
import os
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

from ..amr.parsing import AmrlibParser, parser_classes
from ..hardware import inference_precision
from ..inference.base import InferenceModel, NotExportableError, max_abs_diff, to_tensor
from ..inference.model_types import register_model
from ..io import atomic_write, write_json
from ..io.model_files import ModelFileError, inside, read_model_json
from ..io.registry import resolve
from .retrofit_combination import COMBINATIONS, FORMULA, Combination, check_sizes, combine, retrofit_usage_code
from .retrofit_inputs import (
    MissingGraphError,
    dimension_of,
    is_penman,
    is_sentence_transformer,
    load_encoder,
    resolve_parser,
    resolve_paths,
)

__all__ = ["AMR_DIR", "CONFIG_FILE", "LOOKUP_FILE", "PROBE_GRAPHS", "TEXT_DIR", "RetrofittedEncoder"]

CONFIG_FILE = "retrofit.json"
LOOKUP_FILE = "amr_lookup.jsonl"
TEXT_DIR, AMR_DIR = "text", "amr"

#: Sentences with hand-written linearised AMR graphs on which an export is checked.
PROBE_GRAPHS: tuple[tuple[str, str], ...] = (
    ("A man is playing a guitar.", "( play-11 :ARG0 ( man ) :ARG2 ( guitar ) )"),
    ("The boy wants to go.", "( want-01 :ARG0 ( boy ) :ARG1 ( go-02 :ARG0 boy ) )"),
    (
        "Two dogs run across the grass in the park while a child throws a ball for them to catch again.",
        "( run-02 :ARG0 ( dog :quant 2 ) :path ( across :op1 ( grass :location ( park ) ) ) :time ( throw-01 :ARG0 "
        "( child ) :ARG1 ( ball ) :purpose ( catch-01 :ARG0 dog :ARG1 ball :mod ( again ) ) ) )",
    ),
    ("ok", "( okay-04 )"),
    ("Ein Mann spielt Gitarre.", "( play-11 :ARG0 ( man ) :ARG2 ( guitar ) )"),
)


def _folder(directory: Path, config: dict, key: str, default: str) -> Path:
    """``retrofit.json``'s ``key.path`` (an encoder's sub-folder): inside ``directory``, or one line."""
    entry = config.get(key) or {}
    if not isinstance(entry, dict):
        raise ModelFileError(f"{directory / CONFIG_FILE}: {key} must be a JSON object with a path, got {entry!r:.80}")
    return inside(directory, entry.get("path", default), source=directory / CONFIG_FILE, field=f"{key}.path")


def _encode_with(model: Any, texts: list[str], batch_size: int, what: str, **options: Any) -> torch.Tensor:
    """``model``'s vectors, float32 (n, d) on the CPU; ``options``: ``precision`` and ``show_progress_bar``. A
    ``SentenceTransformer`` (or another object with ``encode``) runs under bf16 autocast where ``precision`` is bf16."""
    if isinstance(model, InferenceModel):
        return to_tensor(model.encode(texts, batch_size, **options), len(texts), what)
    kwargs = {"show_progress_bar": True} if options["show_progress_bar"] else {}
    kwargs |= {"convert_to_numpy": True} if is_sentence_transformer(model) else {}
    device = torch.device(getattr(model, "device", "cpu"))
    with torch.autocast(device.type, torch.bfloat16, enabled=inference_precision(options["precision"], device.type)[0]):
        return to_tensor(model.encode(texts, batch_size=batch_size, **kwargs), len(texts), what)


@register_model("retrofitted")
class RetrofittedEncoder(InferenceModel):
    """A text encoder and an AMR encoder whose embeddings are combined (Cai et al., 2022, Sec. 4.2).

    Args:
        text_encoder: any sentence encoder: an ``unisent.load`` result (of a ``.ckpt`` too) or a preset or saved
            directory, a ``SentenceTransformer`` or a Sentence Transformers directory (see ``load_encoder``).
        amr_encoder: the AMR encoder (an [`Encoder`][unisent.encoders.Encoder] trained with
            [`AMRSimCSE`][unisent.objectives.AMRSimCSE], e.g. ``<run>/encoder``), or its directory.
        combination: ``norm_concat`` (default, the paper's best), ``concat``, ``sum`` or ``norm_sum``.
        parser: how raw sentences get their graphs: an [`AMRParser`][unisent.amr.AMRParser], pre-parsed
            file(s) or a ``{sentence: PENMAN}`` dict (a [`PreParsedAMR`][unisent.amr.PreParsedAMR] lookup), or a
            ``{"class_path", "init_args"}`` spec (e.g. of [`AmrlibParser`][unisent.amr.AmrlibParser]). None: graphs
            must be passed to [`encode`][unisent.models.RetrofittedEncoder.encode].
        language: the language passed to the parser by default (a multilingual parser parses each
            language; the lookup ignores it).
        parentheses: linearisation of PENMAN graphs (as the AMR encoder was trained).
        drop_wiki: linearisation of PENMAN graphs (as the AMR encoder was trained).

    Raises:
        ValueError: an unknown combination, or ``sum``/``norm_sum`` with encoders of different sizes.
    """

    card_tags = ("amr", "retrofitted")

    def __init__(
        self,
        text_encoder: Any,
        amr_encoder: Any,
        combination: Combination = "norm_concat",
        parser: Any = None,
        *,
        language: str = "en",
        parentheses: bool = True,
        drop_wiki: bool = True,
    ) -> None:
        super().__init__()
        if combination not in COMBINATIONS:
            raise ValueError(f"unknown combination {combination!r}; valid: {', '.join(COMBINATIONS)}")
        self.text_encoder = load_encoder(text_encoder)
        self.amr_encoder = load_encoder(amr_encoder, "an AMR encoder")
        self.combination = combination
        self.parser, self.parser_spec = resolve_parser(parser)
        self.language = language
        self.parentheses = parentheses
        self.drop_wiki = drop_wiki
        check_sizes(combination, self.text_dimension, self.amr_dimension)

    # ------------------------------------------------------------------------------------ sizes
    @property
    def text_dimension(self) -> int | None:
        return dimension_of(self.text_encoder)

    @property
    def amr_dimension(self) -> int | None:
        return dimension_of(self.amr_encoder)

    @property
    def dimension(self) -> int | None:
        """Size of the combined embedding (None when a part's size is only known after encoding)."""
        ds, dh = self.text_dimension, self.amr_dimension
        if ds is None or dh is None:
            return None
        return ds + dh if self.combination.endswith("concat") else ds

    # ------------------------------------------------------------------------------------ graphs
    def linearize(self, graph: str) -> str:
        """A PENMAN graph linearised as the AMR encoder reads it; a linearised graph is returned as is."""
        from ..amr.linearize import linearize

        if is_penman(graph):
            return linearize(graph, parentheses=self.parentheses, drop_wiki=self.drop_wiki)
        return " ".join(graph.split())

    def graphs_for(
        self, sentences: Sequence[str], graphs: Sequence[str | None] | None = None, lang: str | None = None
    ) -> list[str]:
        """The linearised graph of each sentence: from ``graphs`` (PENMAN or linearised; a None entry is
        parsed) or from the parser."""
        from ..amr.parsing import NotInLookupError

        if graphs is not None and len(graphs) != len(sentences):
            raise ValueError(f"{len(sentences)} sentences but {len(graphs)} graphs")
        given = list(graphs) if graphs is not None else [None] * len(sentences)
        todo = [i for i, g in enumerate(given) if g is None]
        parsed: dict[int, str] = {}
        if todo:
            if self.parser is None:
                raise MissingGraphError(
                    f"{len(todo)} sentence(s) without an AMR graph (e.g. {sentences[todo[0]]!r}) and no parser: pass "
                    "graphs=[...] (PENMAN or linearised) or configure a parser (parser='pre-parsed.txt', a "
                    "PreParsedAMR / AmrlibParser, or --parser-lookup when building the model)"
                )
            try:
                parsed = dict(zip(todo, self.parser.parse([sentences[i] for i in todo], lang or self.language)))
            except NotInLookupError as err:
                raise MissingGraphError(f"{err}; add it to the pre-parsed lookup or pass graphs=[...]") from err
        return [self.linearize(g if g is not None else parsed[i]) for i, g in enumerate(given)]

    # ------------------------------------------------------------------------------------ encoding
    @torch.inference_mode()
    def encode(
        self,
        sentences: Sequence[str],
        batch_size: int | Sequence[str | None] = 64,
        *,
        graphs: Sequence[str | None] | None = None,
        lang: str | None = None,
        normalize: bool = False,
        precision: str = "auto",
        show_progress_bar: bool = False,
    ) -> torch.Tensor:
        """Embed ``sentences``: ``combine(text_encoder(x), amr_encoder(linearize(graph of x)))``.

        Args:
            sentences: the sentences.
            batch_size: encoding batch size (a list here is taken as ``graphs``: ``encode(s, graphs)``).
            graphs: the AMR graph of each sentence, PENMAN or linearised; None entries (or no list)
                are parsed with the configured parser.
            lang: the sentences' language for the parser (default: ``language``).
            normalize: L2-normalise the combined embeddings.
            precision: ``auto``, ``fp32`` or ``bf16``, of both encoders (``_encode_with``).
            show_progress_bar: progress bars of both encoders.

        Returns:
            A float32 tensor (n, dimension) on the CPU, rows in input order.

        Raises:
            MissingGraphError: a sentence has no graph and the parser has none for it (or there is no parser).
        """
        if isinstance(sentences, str):
            raise TypeError("encode takes a list of sentences, not a single string")
        if not isinstance(batch_size, int):
            if graphs is not None:
                raise TypeError("graphs given twice (as the second argument and as graphs=)")
            graphs, batch_size = batch_size, 64
        sentences = list(sentences)
        linearised = self.graphs_for(sentences, graphs, lang)
        options = {"precision": precision, "show_progress_bar": show_progress_bar}
        s = _encode_with(self.text_encoder, sentences, batch_size, "the text encoder's encode", **options)
        h = _encode_with(self.amr_encoder, linearised, batch_size, "the AMR encoder's encode", **options)
        out = combine(s, h, self.combination)
        return F.normalize(out, dim=-1) if normalize else out

    # ------------------------------------------------------------------------------------ save/load
    def save_config(self, directory: str | os.PathLike) -> Path:
        """Write ``retrofit.json`` (combination, parser spec, linearisation) and, for a pre-parsed lookup,
        the lookup itself (``amr_lookup.jsonl``), so that the directory works on its own."""
        from ..amr.parsing import PreParsedAMR

        directory = Path(directory)
        text_kind = "sentence-transformers" if is_sentence_transformer(self.text_encoder) else "unisent"
        config = {
            "format": "unisent-retrofit",
            "version": 1,
            "combination": self.combination,
            "text_encoder": {"path": TEXT_DIR, "kind": text_kind},
            "amr_encoder": {"path": AMR_DIR},
            "parser": self.parser_spec,
            "language": self.language,
            "linearization": {"parentheses": self.parentheses, "drop_wiki": self.drop_wiki},
            "dimension": self.dimension,
        }
        if isinstance(self.parser, PreParsedAMR):
            with atomic_write(directory / LOOKUP_FILE) as fh:
                for sentence, graph in self.parser.graphs.items():
                    fh.write(json.dumps({"text": sentence, "penman": graph}, ensure_ascii=False) + "\n")
            config["parser"] = {
                "class_path": "unisent.amr.parsing.PreParsedAMR",
                "init_args": {"sources": [LOOKUP_FILE]},
            }
        elif self.parser is not None and self.parser_spec is None:
            warnings.warn(
                f"the parser ({type(self.parser).__name__}) is not saved: give it as a {{class_path, init_args}} spec "
                "to record it, or pass parser= to from_pretrained",
                stacklevel=3,
            )
        write_json(directory / CONFIG_FILE, config)
        self.write_model_record(directory)
        return directory

    def save_pretrained(self, directory: str | os.PathLike) -> Path:
        """``text/`` (the text encoder), ``amr/`` (the AMR encoder), ``retrofit.json`` and the parser's lookup;
        ``unisent.load(directory)`` or [`from_pretrained`][unisent.models.RetrofittedEncoder.from_pretrained] reads it
        back."""
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        text = self.text_encoder
        if is_sentence_transformer(text):
            text.save(str(directory / TEXT_DIR))
        elif callable(getattr(text, "save_pretrained", None)):
            text.save_pretrained(directory / TEXT_DIR)
        else:
            raise TypeError(f"cannot save the text encoder ({type(text).__name__}): it has no save_pretrained")
        self.amr_encoder.save_pretrained(directory / AMR_DIR)
        return self.save_config(directory)

    @classmethod
    def from_pretrained(cls, directory: str | os.PathLike, parser: Any = None) -> RetrofittedEncoder:
        """Load a directory written by [`save_pretrained`][unisent.models.RetrofittedEncoder.save_pretrained] (or the
        retrofit exporter). ``parser`` overrides the recorded one."""
        directory = Path(directory)
        config = read_model_json(directory / CONFIG_FILE, dict)  # size and depth bounded, one line if malformed
        text_dir = _folder(directory, config, "text_encoder", TEXT_DIR)  # inside the directory, or one line
        amr_dir = _folder(directory, config, "amr_encoder", AMR_DIR)
        if config.get("combination") not in COMBINATIONS:
            raise ModelFileError(
                f"{directory / CONFIG_FILE}: combination {config.get('combination')!r} is not one of "
                f"{', '.join(COMBINATIONS)}"
            )
        if not isinstance(config.get("linearization", {}), dict):
            raise ModelFileError(f"{directory / CONFIG_FILE}: linearization must be a JSON object")
        if parser is None and config.get("parser"):
            spec = config["parser"]
            if not isinstance(spec, dict):
                raise ValueError(f"{directory / CONFIG_FILE}: parser must be a {{class_path, init_args}} object")
            # the class first, through the registry, before any encoder is loaded: nothing is imported
            parser_cls = resolve(
                spec.get("class_path"),
                parser_classes(),
                source=str(directory / CONFIG_FILE),
                field="parser.class_path",
                what="AMR parser",
            )
            if issubclass(parser_cls, AmrlibParser) and (spec.get("init_args") or {}).get("model_dir") is not None:
                raise ModelFileError(
                    f"{directory / CONFIG_FILE}: parser.init_args.model_dir: an amrlib model directory names Python "
                    "modules that amrlib imports (its amrlib_meta.json), so a model's files do not choose one; pass "
                    "a parser you trust: RetrofittedEncoder.from_pretrained(DIR, parser=AmrlibParser(MODEL_DIR))"
                )
            parser = {
                "class_path": spec["class_path"],
                "init_args": resolve_paths(spec.get("init_args") or {}, directory, directory / CONFIG_FILE),
            }
        linearization = config.get("linearization", {})
        model = cls(
            load_encoder(str(text_dir)),
            load_encoder(str(amr_dir), "an AMR encoder"),
            config["combination"],
            parser,
            language=config.get("language", "en"),
            parentheses=linearization.get("parentheses", True),
            drop_wiki=linearization.get("drop_wiki", True),
        )
        if config.get("parser") and model.parser_spec is not None:
            model.parser_spec = config["parser"]  # keep paths relative to the directory
        return model

    @classmethod
    def is_saved_in(cls, directory: str | os.PathLike) -> bool:
        return Path(directory, CONFIG_FILE).is_file()

    # ------------------------------------------------------------------------------------ exports
    generic_export_check = False  # encode needs graphs: export_checks runs on PROBE_GRAPHS

    def card_facts(self) -> list[tuple[str, str]]:
        from ..amr.parsing import PreParsedAMR
        from ..encoders.encoder import Encoder

        text = self.text_encoder
        text_kind = "Sentence Transformers model" if is_sentence_transformer(text) else type(text).__name__
        if isinstance(self.parser, PreParsedAMR):
            parser = f"pre-parsed lookup of {len(self.parser)} sentences (`amr_lookup.jsonl`)"
        elif self.parser_spec:
            parser = f"`{self.parser_spec['class_path']}`"
        else:
            parser = (
                "none recorded: pass the graphs, or a parser to `unisent.models.RetrofittedEncoder.from_pretrained`"
            )
        amr = self.amr_encoder
        if isinstance(amr, Encoder):
            amr_facts = dict(amr.card_facts())
            amr_text = (
                f"{amr_facts['architecture']}; pooling: {amr_facts['pooling']}; dimension {amr.hidden_size}; "
                f"extended vocabulary of {len(amr.tokenizer)} tokens"
            )
        else:
            amr_text = f"{type(amr).__name__}, dimension {self.amr_dimension or '?'}"
        return [
            ("combination", f"`{self.combination}`: {FORMULA[self.combination]} (s: text embedding, h: AMR embedding)"),
            ("embedding dimension", str(self.dimension or "?")),
            ("text encoder (`text/`)", f"{text_kind}, dimension {self.text_dimension or '?'}"),
            ("AMR encoder (`amr/`)", amr_text),
            (
                "AMR linearisation",
                f"depth-first, no variables, :wiki dropped, parentheses "
                f"{'on' if self.parentheses else 'off'} (`unisent.amr.linearize`)",
            ),
            ("parser", parser),
            ("similarity", "cosine"),
        ]

    def write_sentence_transformers_layout(self, out: Path, write) -> bool:
        """``text/`` and ``amr/`` as Sentence Transformers models (each through ``write``), ``retrofit.json``
        and the parser's lookup beside them."""
        from ..encoders.encoder import Encoder

        if not isinstance(self.amr_encoder, Encoder):
            raise TypeError(
                f"the AMR encoder must be an unisent Encoder to export, got {type(self.amr_encoder).__name__}"
            )
        text_dir, amr_dir = Path(out) / TEXT_DIR, Path(out) / AMR_DIR
        if is_sentence_transformer(self.text_encoder):
            self.text_encoder.save(str(text_dir))
        elif isinstance(self.text_encoder, InferenceModel):
            text_dir.mkdir()
            write(self.text_encoder, text_dir)
        else:
            raise NotExportableError(
                f"the text encoder ({type(self.text_encoder).__name__}) is neither a Sentence "
                "Transformers model nor a unisent model"
            )
        amr_dir.mkdir()
        write(self.amr_encoder, amr_dir)
        self.save_config(out)
        return True

    def sentence_transformers_facts(self) -> list[tuple[str, str]]:
        return self.card_facts()

    def sentence_transformers_usage(self) -> str:
        code = retrofit_usage_code(self.combination, TEXT_DIR, AMR_DIR)
        return f"""A **retrofitted** sentence embedding model (Cai et al. 2022): the text embedding `s` of a
sentence is combined with the embedding `h` of its AMR graph (`{self.combination}`:
{FORMULA[self.combination]}). Sentence Transformers cannot parse AMR, so the graphs are an input.

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

    def export_checks(self, out: Path, sentences: Sequence[str], format: str) -> list[tuple[float, str]]:
        """On ``PROBE_GRAPHS`` (sentences with graphs; the generic check cannot parse): ``unisent.load`` of the
        directory, and the card's recipe (``text/`` + ``amr/`` with ``SentenceTransformer``, combined by hand)."""
        probe_sentences = [s for s, _ in PROBE_GRAPHS]
        graphs = [g for _, g in PROBE_GRAPHS]
        expected = self.encode(probe_sentences, graphs=graphs, precision="fp32")
        reloaded = type(self).from_pretrained(out, parser=self.parser).eval()
        diff = max_abs_diff(reloaded.encode(probe_sentences, graphs=graphs, precision="fp32"), expected)
        how = f"`unisent.load(DIR).encode(sentences, graphs=...)` on {len(graphs)} sentences with graphs"
        try:
            from sentence_transformers import SentenceTransformer
        except ImportError:
            return [(diff, how)]
        no_code = {"device": "cpu", "trust_remote_code": False}
        s = torch.as_tensor(SentenceTransformer(str(Path(out) / TEXT_DIR), **no_code).encode(probe_sentences))
        h = torch.as_tensor(SentenceTransformer(str(Path(out) / AMR_DIR), **no_code).encode(graphs))
        by_hand = combine(s.float(), h.float(), self.combination)
        return [(diff, how), (max_abs_diff(by_hand, expected), "`text/` + `amr/` with `SentenceTransformer`")]
