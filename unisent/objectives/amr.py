"""AMR embeddings (Cai et al., 2022): SimCSE's contrastive loss over a per-step mix of texts and AMR graphs.

Parsing and translation happen once, before training (``unisent data amr-nli``): every record carries every form of
every sentence (``anchor``, ``anchor_graph``, ``anchor_graph_de``, ...), all tokenised once; the draw of Algorithm 1
happens in [`AMRSimCSE.collate`][unisent.objectives.AMRSimCSE.collate], per example and step, and only the chosen forms
are padded.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any, Literal, cast

import torch
from torch.utils.data import get_worker_info

from ..data.schema import pad_batch
from ..encoders.encoder import Encoder
from ..losses import info_nce, rank_and_world
from .objective import EncodeFn, Objective, encode_views

__all__ = ["AMRSimCSE", "PAPER_LANGUAGES", "read_amr_symbols"]

CITATION = (
    "Cai, Li, Ho, Bing and Lam. Retrofitting Multilingual Sentence Embeddings with Abstract Meaning "
    "Representation. EMNLP 2022. https://aclanthology.org/2022.emnlp-main.433"
)

#: The languages of the paper's AMR encoder (Sec. 6.2).
PAPER_LANGUAGES = ("en", "de", "es", "it", "zh", "fr", "ar")

Form = Literal["draw", "text", "graph"]
_SLOTS = {
    "triples": ("anchor", "positive", "negative"),
    "pairs": ("anchor", "positive"),
    "self": ("anchor", "positive"),
}


def _as_list(value: str | Sequence[str] | None) -> list[str]:
    if value is None:
        return []
    if isinstance(value, (str, os.PathLike)):
        return [str(value)]
    return [str(v) for v in value]


def read_amr_symbols(
    counts: str | Sequence[str] | None = None, lists: str | Sequence[str] | None = None, min_count: int = 5
) -> list[str]:
    """The paper's vocabulary extension: names with ``count >= min_count`` in the count files
    (``NAME<TAB>COUNT``, e.g. MSE-AMR's ``predicates.txt``), most frequent first, then every name of
    the plain lists (e.g. ``additions.txt``), without repeats."""
    from ..amr.symbols import read_counts, read_symbols, select_symbols

    symbols: list[str] = []
    for path in _as_list(counts):
        symbols += select_symbols(read_counts(path), min_count)
    for path in _as_list(lists):
        symbols += read_symbols(path)
    return list(dict.fromkeys(symbols))


class AMRSimCSE(Objective):
    """Supervised SimCSE on NLI triples whose sentences are drawn as text or AMR graphs (Algorithm 1).

    A record slot ``s`` has the forms ``s`` (text), ``s_graph`` (the English sentence's graph) and ``s_graph_xx`` (the
    graph of its translation into ``xx``). The draw, per example, view and step: ``l ~ languages``
    (``language_weights``); ``l != source_language`` -> ``s_graph_l``; else ``s_graph`` with probability
    ``graph_probability``, otherwise the text. A missing (null) form falls back to ``s_graph``, then the text.
    [`setup_for`][unisent.objectives.AMRSimCSE.setup_for] extends the encoder's vocabulary with the AMR names and
    records them in ``symbols``.

    Args:
        mode: ``triples`` (the paper): (premise, entailment, contradiction); ``pairs``: (anchor, positive), in-batch
            negatives only; ``self``: two forms of one sentence (``anchor``) as the two views
            (``forms: {anchor: text, positive: graph}``: text-graph alignment).
        languages: the language set of Algorithm 1 (default ``["en"]``: text and English graphs only); the paper's
            is ``PAPER_LANGUAGES``.
        language_weights: sampling weights of ``languages`` (default uniform; normalised).
        graph_probability: probability of the graph when the source language is drawn (0.5; 1.0 is the paper's
            variant #4, "without English sentences").
        source_language: the language of the texts (``en``).
        forms: ``{view: draw | text | graph}``; unset views draw.
        temperature: tau (0.05).
        hard_negative_weight: SimCSE's log-weight of the own hard negative (0 = off).
        symmetric: also the positive -> anchor direction.
        symbol_counts: count file(s) ``NAME<TAB>COUNT`` for the vocabulary extension.
        symbol_lists: plain list file(s), one name per line, always added.
        min_count: threshold on the counts (5 in the paper).
        symbols: the exact names to add instead of the files' (``[]``: no extension).
        linearization: the style of the graph fields (``unisent data amr-linearize --style``): ``clean`` or
            ``authors`` (MSE-AMR's). Not applied here; ``authors`` without any symbol setting selects the authors'
            bundled token set (``unisent.amr.authors_style.authors_vocabulary``).
        seed: seed of the draw (default: ``torch.initial_seed()``), mixed with rank and dataloader worker.
        weight: see [`Objective`][unisent.objectives.Objective].
        name: see [`Objective`][unisent.objectives.Objective].
        max_length: see [`Objective`][unisent.objectives.Objective]; it applies to texts and graphs (graphs are
            longer than their sentences).
    """

    name = "amr"
    citation = CITATION
    extends_vocabulary = True  # set up before objectives sized by the vocabulary (CMLM's MLM head)

    def __init__(
        self,
        mode: Literal["triples", "pairs", "self"] = "triples",
        languages: list[str] | None = None,
        language_weights: list[float] | None = None,
        graph_probability: float = 0.5,
        source_language: str = "en",
        forms: dict[str, Form] | None = None,
        temperature: float = 0.05,
        hard_negative_weight: float = 0.0,
        symmetric: bool = False,
        symbol_counts: str | list[str] | None = None,
        symbol_lists: str | list[str] | None = None,
        min_count: int = 5,
        symbols: list[str] | None = None,
        linearization: Literal["clean", "authors"] = "clean",
        seed: int | None = None,
        weight: float = 1.0,
        name: str | None = None,
        max_length: int | None = None,
    ) -> None:
        super().__init__(weight=weight, name=name, max_length=max_length)
        if mode not in _SLOTS:
            raise ValueError(f"mode must be one of {', '.join(_SLOTS)}, got {mode!r}")
        if temperature <= 0:
            raise ValueError(f"temperature must be positive, got {temperature}")
        if not 0.0 <= graph_probability <= 1.0:
            raise ValueError(f"graph_probability must be in [0, 1], got {graph_probability}")
        self.languages = list(languages) if languages else [source_language]
        if len(set(self.languages)) != len(self.languages):
            raise ValueError(f"languages must be distinct, got {self.languages}")
        weights = [1.0] * len(self.languages) if language_weights is None else [float(w) for w in language_weights]
        if len(weights) != len(self.languages) or any(w < 0 for w in weights) or sum(weights) <= 0:
            raise ValueError(
                f"language_weights must give one non-negative weight per language ({self.languages}) with a "
                f"positive sum, got {language_weights}"
            )
        self.language_weights = torch.tensor(weights, dtype=torch.float64) / sum(weights)
        self.mode = mode
        self.graph_probability = float(graph_probability)
        self.source_language = source_language
        self.views = _SLOTS[mode]
        forms = dict(forms or {})
        unknown = sorted(set(forms) - set(self.views))
        if unknown or any(f not in ("draw", "text", "graph") for f in forms.values()):
            raise ValueError(f"forms maps views ({', '.join(self.views)}) to draw, text or graph; got {forms}")
        self.forms = {view: forms.get(view, "draw") for view in self.views}
        # the record slot each view reads: in `self` mode both views are forms of the anchor
        self.slot_of = {view: ("anchor" if mode == "self" else view) for view in self.views}
        self.temperature = temperature
        self.hard_negative_weight = hard_negative_weight
        self.symmetric = symmetric
        self.symbol_counts = symbol_counts
        self.symbol_lists = symbol_lists
        self.min_count = min_count
        self.symbols = list(symbols) if symbols is not None else None
        self.added_symbols: list[str] = []
        if linearization not in ("clean", "authors"):
            raise ValueError(f"linearization must be 'clean' or 'authors', got {linearization!r}")
        self.linearization = linearization
        self.seed = seed
        self._draw_state: dict[str, Any] = {}

        fields = [(self.key(self.slot_of[v], form), form) for v in self.views for form in self.possible_forms(v)]
        self.batch_keys = self.text_keys = tuple(dict.fromkeys(key for key, _ in fields))
        self.optional_keys = tuple(dict.fromkeys(key for key, form in fields if form != "text"))

    # ------------------------------------------------------------------------------------ forms
    @staticmethod
    def key(slot: str, form: str) -> str:
        """The record field of a form: ``text`` -> ``slot``; ``graph_de`` -> ``slot_graph_de``."""
        return slot if form == "text" else f"{slot}_{form}"

    def form_probabilities(self, view: str = "anchor") -> dict[str, float]:
        """``{form: probability}`` of a view: ``text``, ``graph`` (English), ``graph_xx``."""
        setting = self.forms[view]
        if setting != "draw":
            return {setting: 1.0}
        probs: dict[str, float] = {}  # the form distribution of a drawn view
        weights = cast(list[float], self.language_weights.tolist())  # pyright: ignore[reportUnknownMemberType]  # torch: a bare list
        for lang, w in zip(self.languages, weights):
            if lang == self.source_language:
                probs["text"] = probs.get("text", 0.0) + w * (1.0 - self.graph_probability)
                probs["graph"] = probs.get("graph", 0.0) + w * self.graph_probability
            else:
                probs[f"graph_{lang}"] = w
        return {form: p for form, p in probs.items() if p > 0}

    def possible_forms(self, view: str) -> list[str]:
        """The forms a view can take (text always: it is the fallback)."""
        return ["text"] + [f for f in self.form_probabilities(view) if f != "text"]

    def _generator(self) -> torch.Generator:
        info = get_worker_info()
        worker = info.id if info is not None else -1
        key = (os.getpid(), worker)
        if self._draw_state.get("key") != key:
            base = self.seed if self.seed is not None else torch.initial_seed()
            generator = torch.Generator()
            generator.manual_seed(hash((int(base), rank_and_world()[0], worker)) % (2**63))
            self._draw_state = {"key": key, "generator": generator}
        return self._draw_state["generator"]

    def draw(self, n: int, view: str = "anchor", generator: torch.Generator | None = None) -> list[str]:
        """Algorithm 1 for ``n`` sentences of ``view``: a language per sentence, then text or graph for
        the source language. Returns form names (``text``, ``graph``, ``graph_xx``)."""
        setting = self.forms[view]
        if setting != "draw":
            return [setting] * n
        generator = generator if generator is not None else self._generator()
        langs = torch.multinomial(self.language_weights, n, replacement=True, generator=generator)
        q = torch.rand(n, generator=generator, dtype=torch.float64)
        out: list[str] = []
        for lang_index, u in zip(cast(list[int], langs.tolist()), cast(list[float], q.tolist())):  # pyright: ignore[reportUnknownMemberType]  # torch: bare lists
            lang = self.languages[lang_index]
            if lang != self.source_language:
                out.append(f"graph_{lang}")
            else:
                out.append("graph" if u < self.graph_probability else "text")
        return out

    @staticmethod
    def fallback(form: str) -> str | None:
        """The next form to try when ``form`` is missing: ``graph_xx`` -> ``graph`` -> ``text``."""
        if form.startswith("graph_"):
            return "graph"
        if form == "graph":
            return "text"
        return None

    # ------------------------------------------------------------------------------------ data side
    def collate(self, features: Sequence[dict[str, Any]], pad_id: int) -> dict[str, Any]:
        """Draw one form per view and example, pad only the chosen ids (all views to one length, for
        [`encode_views`][unisent.objectives.encode_views]); ``batch["forms"]`` = ``{view: [form used]}``."""
        generator = self._generator()
        chosen: dict[str, list[list[int]]] = {}
        used: dict[str, list[str]] = {}
        for view in self.views:
            slot = self.slot_of[view]
            sequences: list[list[int]] = []
            names: list[str] = []
            for feature, form in zip(features, self.draw(len(features), view, generator)):
                while feature.get(self.key(slot, form)) is None:
                    nxt = self.fallback(form)
                    if nxt is None:
                        raise ValueError(f"a record has no text in field {slot!r}")
                    form = nxt
                sequences.append(feature[self.key(slot, form)])
                names.append(form)
            chosen[view], used[view] = sequences, names
        length = max(len(s) for sequences in chosen.values() for s in sequences)
        batch: dict[str, Any] = {}
        for view, sequences in chosen.items():
            ids, mask = pad_batch(sequences, pad_id, length)
            batch[view] = {"input_ids": ids, "attention_mask": mask}
        batch["forms"] = used
        return batch

    def __getstate__(self) -> dict[str, Any]:  # dataloader workers (spawn) get a fresh draw state
        state = self.__dict__.copy()
        state["_draw_state"] = {}
        return state

    # ------------------------------------------------------------------------------------ vocabulary
    def read_symbols(self) -> list[str]:
        """The names to add, from ``symbol_counts`` (threshold ``min_count``) and ``symbol_lists``; with
        neither and ``linearization="authors"``, the authors' token set (sorted, as they add it)."""
        if self.linearization == "authors" and not _as_list(self.symbol_counts) and not _as_list(self.symbol_lists):
            from ..amr.authors_style import authors_vocabulary

            return sorted(t for t in authors_vocabulary() if not (t.startswith("<") and t.endswith(">")))
        return read_amr_symbols(self.symbol_counts, self.symbol_lists, self.min_count)

    def setup_for(self, encoder: Encoder) -> None:
        """Extend ``encoder``'s vocabulary with the AMR names (before the data is tokenised); records them
        in ``symbols``."""
        if self.symbols is None:
            self.symbols = self.read_symbols()
            if not self.symbols:
                from lightning.pytorch.utilities import rank_zero_warn

                rank_zero_warn(
                    "AMRSimCSE: no AMR vocabulary (symbol_counts / symbol_lists / symbols): frame and "
                    "relation names are split into subwords"
                )
        self._init_args["symbols"] = list(self.symbols)
        if self.symbols:
            from ..amr.vocab import extend_vocabulary

            self.added_symbols += extend_vocabulary(encoder, self.symbols)

    # ------------------------------------------------------------------------------------ model side
    def embed(self, encode: EncodeFn, batch: dict[str, Any]) -> list[torch.Tensor]:
        return encode_views(encode, batch, self.views)

    def loss(self, views: list[torch.Tensor], batch: dict[str, Any]) -> dict[str, torch.Tensor]:
        loss = info_nce(
            views[0],
            views[1],
            hard_negatives=views[2] if len(views) == 3 else None,
            temperature=self.temperature,
            hard_negative_weight=self.hard_negative_weight,
            symmetric=self.symmetric,
        )
        return {"contrastive": loss}
