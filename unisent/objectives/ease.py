"""EASE (Nishikawa et al., 2022): contrastive learning between sentences and their hyperlinked entities."""

from __future__ import annotations

import math
import sys
import warnings
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal, cast

import torch
from torch import nn

from ..encoders.encoder import Encoder
from ..losses import gather_no_grad, info_nce
from .objective import EncodeFn, Objective, encode_views

if TYPE_CHECKING:
    from datasets import Dataset  # pyright: ignore[reportMissingTypeStubs]  # datasets ships no stubs

__all__ = ["EASE", "find_ease"]

CITATION = (
    "Nishikawa, Ri, Yamada, Tsuruoka and Echizen. EASE: Entity-Aware Contrastive Learning of Sentence "
    "Embedding. NAACL 2022. https://aclanthology.org/2022.naacl-main.284"
)

PAD = "<pad>"


def _sentence_keys(ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """An int64 hash per row of token ids (padding ignored): equal sentences get equal keys on every
    process, whatever their padded length (fixed 64-bit LCG position weights, wrapping arithmetic)."""
    weights = torch.arange(1, ids.shape[1] + 1, device=ids.device) * 6364136223846793005 + 1442695040888963407
    return (ids * mask * weights).sum(-1)


class EASE(Objective):
    """Entity contrastive learning plus SimCSE's dropout contrastive loss (EASE, eq. 2 and 4).

    Records: ``{"text", "entity", "hard_negative": entity id or null}`` (``unisent data ease-wikipedia``); the
    paper's entity ids are Wikidata's, so one entity table serves all languages.

    The first of two dropout views ``s_i`` is contrasted with the projected vectors ``W e_j`` of every positive and
    hard-negative entity of the global batch (eq. 2): logits ``cos(s_i, W e_j) / tau_e``, label ``i`` (entity
    vectors are gathered across processes too; the authors' code gathers only sentences). The SimCSE term (eq. 3)
    uses both views; the loss is ``entity_weight * entity + simcse_weight * contrastive`` (eq. 4).

    The entity table (row 0: padding) is built when ``fit`` starts from the entities linked as positive at least
    ``min_count`` times (rarer records are dropped) and the kept records' hard negatives; its rows are Wikipedia2Vec
    vectors when given (missing ones ~ U(-0.05, 0.05), as the authors' code), else N(0, 1).

    Args:
        entity_weight: lambda of eq. 4 (0.01 in the paper).
        entity_temperature: tau of the entity term, a DIVISOR of the cosine as in the authors' code: the paper's
            tau = 100 (monolingual) and 10 (multilingual) give logits cos/100.
        temperature: tau of the SimCSE term (0.05).
        simcse_weight: weight of the SimCSE term; 0 is the "w/o SimCSE" ablation (one view only).
        use_hard_negatives: ``False`` is the "w/o hard negatives" ablation (field not needed).
        hard_negative_weight: added to the logit of each sentence's own hard-negative entity after the division by
            ``tau_e``: 0 is the paper's eq. 2, the authors' ``conf/config.yaml`` uses 1.0; ignored without them.
        projection: ``linear_tanh`` (``tanh(W e)``, the authors' code) or ``linear`` (the paper's ``W e``).
        entity_dim: size of the entity vectors (768 in the paper; must match the Wikipedia2Vec file).
        wikipedia2vec: Wikipedia2Vec model (text or ``.pkl``) for the table; none: the "w/o Wikipedia2Vec" ablation.
        entity_titles: tsv ``id<TAB>title`` (the pipeline's ``entities.tsv``) mapping entity ids to the
            Wikipedia2Vec titles; without it, ids are titles.
        min_count: minimum number of records linking an entity as positive.
        mask_duplicate_entities: drop false negatives (other records' positives of the same entity or sentence)
            from a sentence's softmax; off in the paper.
    """

    name = "ease"
    citation = CITATION
    text_keys = ("text",)

    def __init__(
        self,
        entity_weight: float = 0.01,
        entity_temperature: float = 100.0,
        temperature: float = 0.05,
        simcse_weight: float = 1.0,
        use_hard_negatives: bool = True,
        hard_negative_weight: float = 0.0,
        projection: Literal["linear", "linear_tanh"] = "linear_tanh",
        entity_dim: int = 768,
        wikipedia2vec: str | None = None,
        entity_titles: str | None = None,
        min_count: int = 1,
        mask_duplicate_entities: bool = False,
        weight: float = 1.0,
        name: str | None = None,
        max_length: int | None = None,
    ) -> None:
        super().__init__(weight=weight, name=name, max_length=max_length)
        if entity_temperature <= 0 or temperature <= 0:
            raise ValueError(f"temperatures must be positive, got {entity_temperature} and {temperature}")
        if projection not in ("linear", "linear_tanh"):
            raise ValueError(f"projection must be 'linear' or 'linear_tanh', got {projection!r}")
        if entity_weight < 0 or simcse_weight < 0 or min_count < 1 or entity_dim < 1:
            raise ValueError("need entity_weight >= 0, simcse_weight >= 0, min_count >= 1 and entity_dim >= 1")
        if not math.isfinite(hard_negative_weight):
            raise ValueError(f"hard_negative_weight must be a finite number, got {hard_negative_weight}")
        self.entity_temperature = entity_temperature
        self.temperature = temperature
        self.simcse_weight = simcse_weight
        self.use_hard_negatives = use_hard_negatives
        self.hard_negative_weight = float(hard_negative_weight)
        self.projection_kind = projection
        self.entity_dim = entity_dim
        self.wikipedia2vec = wikipedia2vec
        self.entity_titles = entity_titles
        self.min_count = min_count
        self.mask_duplicate_entities = mask_duplicate_entities
        self.term_weights = {"entity": entity_weight, "contrastive": simcse_weight}
        self.batch_keys = ("text", "entity", "hard_negative") if use_hard_negatives else ("text", "entity")
        self.optional_keys = ("hard_negative",) if use_hard_negatives else ()
        self.projection: nn.Module | None = None
        self.entity_table: nn.Embedding | None = None
        self.entities: list[str] = []
        self._index: dict[str, int] = {}
        self.register_load_state_dict_pre_hook(EASE._resize_to_checkpoint)  # pyright: ignore[reportUnknownMemberType]  # torch: hook untyped

    # ---------------------------------------------------------------------------------- entity table
    def setup_for(self, encoder: Encoder) -> None:
        """Create the projection ``W`` for ``encoder``."""
        if self.projection is None:
            linear = nn.Linear(self.entity_dim, encoder.hidden_size)
            self.projection = (
                nn.Sequential(linear, nn.Tanh()) if self.projection_kind == "linear_tanh" else nn.Sequential(linear)
            )

    def _set_vocabulary(self, entities: list[str]) -> None:
        self.entities = list(entities)
        self._index = {e: i for i, e in enumerate(self.entities)}

    def build_vocabulary(self, positives: Sequence[str], negatives: Sequence[str | None] = ()) -> list[bool]:
        """Build the entity vocabulary and table; returns which records (by position) are kept."""
        counts = Counter(positives)
        kept = {e for e, c in counts.items() if c >= self.min_count}
        keep = [e in kept for e in positives]
        vocab = sorted(kept, key=lambda e: (-counts[e], e))
        extra = sorted({n for n, k in zip(negatives, keep) if k and n is not None and n not in kept})
        self._set_vocabulary([PAD, *vocab, *extra])
        table = self.entity_table = nn.Embedding(len(self.entities), self.entity_dim, padding_idx=0)
        if self.wikipedia2vec:
            self._init_from_wikipedia2vec(table, self.wikipedia2vec)
        with torch.no_grad():
            table.weight[0].zero_()
        return keep

    def _init_from_wikipedia2vec(self, table: nn.Embedding, path: str) -> None:
        from ..data.entities import read_entity_titles, read_wikipedia2vec

        titles = read_entity_titles(self.entity_titles) if self.entity_titles else {}
        wanted = {titles.get(e, e) for e in self.entities[1:]}
        vectors, dim = read_wikipedia2vec(path, wanted)
        if dim != self.entity_dim:
            raise ValueError(f"{path} has {dim}-dimensional vectors; set the objective's entity_dim: {dim}")
        weight = torch.empty(len(self.entities), dim).uniform_(-0.05, 0.05)
        found = 0
        for i, entity in enumerate(self.entities[1:], start=1):
            vector = vectors.get(titles.get(entity, entity))
            if vector is not None:
                weight[i] = torch.as_tensor(vector)
                found += 1
        with torch.no_grad():
            table.weight.copy_(weight)
        self.init_report = {"entities": len(self.entities) - 1, "from_wikipedia2vec": found}
        if found == 0:
            warnings.warn(
                f"none of the {len(self.entities) - 1} entities was found in {path}; "
                "do the entity ids need `entity_titles` to map them to Wikipedia titles?",
                stacklevel=2,
            )

    def setup_data(self, dataset: Dataset) -> Dataset | None:
        """Build the entity vocabulary and table from the training records (see the class doc)."""
        positives = cast(list[str], dataset["entity"])
        negatives = cast(list[str | None], dataset["hard_negative"]) if self.use_hard_negatives else []
        keep = self.build_vocabulary(positives, negatives)
        dropped = len(keep) - sum(keep)
        from lightning.fabric.utilities.rank_zero import rank_zero_only

        if getattr(rank_zero_only, "rank", 0) == 0:  # (printed, not logged: shown by a quiet `unisent fit` too)
            print(
                f"EASE: {len(self.entities) - 1} entities ({dropped} of {len(keep)} records dropped: positive "
                f"entity linked fewer than min_count={self.min_count} times)",
                file=sys.stderr,
            )
        if dropped:
            return dataset.select([i for i, k in enumerate(keep) if k])  # pyright: ignore[reportUnknownMemberType]  # datasets: bare Iterable
        return None

    def get_extra_state(self) -> dict[str, Any]:
        return {"entities": self.entities}

    def set_extra_state(self, state: dict[str, Any]) -> None:
        self._set_vocabulary(state["entities"])

    @staticmethod
    def _resize_to_checkpoint(module: EASE, state_dict: Mapping[str, Any], prefix: str, *args: object) -> None:
        # the table's size comes from the data; a checkpoint brings its own
        weight: torch.Tensor | None = state_dict.get(prefix + "entity_table.weight")
        if weight is not None and (module.entity_table is None or module.entity_table.weight.shape != weight.shape):
            module.entity_table = nn.Embedding(weight.shape[0], weight.shape[1], padding_idx=0)

    def entity_ids(self, entities: Sequence[str | None]) -> torch.Tensor:
        """Indices of entity ids in the table (0 for ``None``); an id not in the vocabulary is an error."""
        try:
            return torch.tensor([0 if e is None else self._index[e] for e in entities], dtype=torch.long)
        except KeyError as err:
            raise KeyError(
                f"entity {err.args[0]!r} is not in the EASE entity vocabulary "
                f"({len(self.entities) - 1} entities built from the training data)"
            ) from None

    # ---------------------------------------------------------------------------------- training
    def collate(self, features: Sequence[dict[str, Any]], pad_id: int) -> dict[str, Any]:
        batch = super().collate(features, pad_id)
        batch["entity"] = self.entity_ids(batch["entity"])
        if self.use_hard_negatives:
            batch["hard_negative"] = self.entity_ids(batch["hard_negative"])
        return batch

    def project(self, index: torch.Tensor) -> torch.Tensor:
        """``W e`` (or ``tanh(W e)``) of entity indices: (batch,) -> (batch, sentence dim)."""
        if self.projection is None or self.entity_table is None:
            raise RuntimeError("EASE.project needs setup_for(encoder) and the entity table (built when fit starts)")
        return self.projection(self.entity_table(index))

    def forward(self, encoder: Encoder, batch: dict[str, Any]) -> dict[str, torch.Tensor]:
        self.setup_for(encoder)
        return cast(dict[str, torch.Tensor], super().forward(encoder, batch))  # the base's loss(embed(...))

    def embed(self, encode: EncodeFn, batch: dict[str, Any]) -> list[torch.Tensor]:
        """The sentences (twice, two dropout views, when SimCSE's loss is on)."""
        return encode_views(encode, batch, ("text",), repeat=2 if self.simcse_weight > 0 else 1)

    def prefix_error(self) -> str | None:
        return "its loss is not computed from the sentence vectors alone (entities are projected to full size)"

    def loss(self, views: list[torch.Tensor], batch: dict[str, Any]) -> dict[str, torch.Tensor]:
        if self.entity_table is None:
            raise RuntimeError(
                "the EASE entity table is built from the training data when fit starts (or call build_vocabulary)"
            )
        sentences = views[0]
        positive = batch["entity"]
        negative = batch["hard_negative"] if self.use_hard_negatives else None
        candidates = gather_no_grad(positive)
        if negative is not None:
            candidates = torch.cat([candidates, gather_no_grad(negative)])
        exclude = (candidates == 0).expand(len(positive), -1)  # missing hard negatives
        if self.mask_duplicate_entities:
            exclude = exclude | (candidates[None, :] == positive[:, None])
            # the entity of another record of the same sentence is not a negative either
            key = _sentence_keys(batch["text"]["input_ids"], batch["text"]["attention_mask"])
            same_text = key[:, None] == gather_no_grad(key)[None, :]
            exclude = exclude | torch.cat([same_text, torch.zeros_like(exclude[:, same_text.shape[1] :])], dim=1)
        terms = {
            "entity": info_nce(
                sentences,
                self.project(positive),
                hard_negatives=self.project(negative) if negative is not None else None,
                temperature=self.entity_temperature,
                exclude=exclude,
                hard_negative_weight=self.hard_negative_weight if negative is not None else 0.0,
            )
        }
        if self.simcse_weight > 0:
            terms["contrastive"] = info_nce(views[0], views[1], temperature=self.temperature)
        return terms

    # ---------------------------------------------------------------------------------- evaluation
    @torch.no_grad()
    def retrieve_entities(
        self,
        encoder: Encoder,
        texts: Sequence[str],
        entities: Sequence[str],
        ks: Sequence[int] = (1, 10),
        batch_size: int = 64,
    ) -> dict[str, Any]:
        """Entity retrieval: rank EVERY entity of the table for each of ``texts`` (pooled, eval mode) by cosine to
        ``W e`` and report how often the gold entity ``entities[i]`` (a ``KeyError`` if not in the table) is in the
        top k; ties count against it. Returns ``{"records", "entities", "top{k}", "chance_top{k}",
        "best_fixed_ranking_top{k}", "median_rank", "mean_reciprocal_rank"}``, where ``best_fixed_ranking_top{k}``
        scores one ranking shared by every sentence (the k most frequent gold entities).
        """
        if self.entity_table is None or self.projection is None:
            raise RuntimeError(
                "the EASE objective has no entity table or projection: load a trained checkpoint "
                "(UnisentModule.from_checkpoint) or call setup_for and build_vocabulary"
            )
        if len(texts) != len(entities) or not texts:
            raise ValueError(
                f"need as many sentences as gold entities (at least one), got {len(texts)} and {len(entities)}"
            )
        ks = sorted({int(k) for k in ks})
        if not ks or ks[0] < 1:
            raise ValueError(f"k must be >= 1, got {ks}")
        gold = self.entity_ids(entities) - 1  # row 0 (padding) is not a candidate
        if bool((gold < 0).any()):
            raise ValueError("a gold entity is missing (None)")
        table = self.entity_table.weight
        was_training = self.training
        self.eval()
        try:
            candidates = self.projection(table[1:]).float().cpu()
        finally:
            self.train(was_training)
        candidates = nn.functional.normalize(candidates, dim=-1)
        sentences = nn.functional.normalize(encoder.encode_pooled(list(texts), batch_size, precision="fp32"), dim=-1)
        ranks = torch.empty(len(texts), dtype=torch.long)
        for start in range(0, len(texts), 1024):  # (1024, entities) scores at a time
            scores = sentences[start : start + 1024] @ candidates.T
            own = scores.gather(1, gold[start : start + 1024, None])
            ranks[start : start + 1024] = (scores >= own).sum(1)
        n_entities = candidates.shape[0]
        counts = sorted(Counter(cast(list[int], gold.tolist())).values(), reverse=True)  # pyright: ignore[reportUnknownMemberType]  # torch: a bare list
        result: dict[str, Any] = {"records": len(texts), "entities": n_entities}
        result |= {f"top{k}": float((ranks <= k).float().mean()) for k in ks}
        result |= {f"chance_top{k}": min(1.0, k / n_entities) for k in ks}
        result |= {f"best_fixed_ranking_top{k}": sum(counts[:k]) / len(texts) for k in ks}
        result["median_rank"] = float(ranks.float().median())
        result["mean_reciprocal_rank"] = float((1.0 / ranks.float()).mean())
        return result


def find_ease(objectives: Sequence[Objective], name: str | None = None) -> EASE:
    """The EASE objective among ``objectives``; with several, ``name`` picks one (else a one-line
    ``ValueError`` naming what is there)."""
    found = [o for o in objectives if isinstance(o, EASE)]
    if name is not None:
        found = [o for o in found if o.name == name]
    if len(found) == 1:
        return found[0]
    present = ", ".join(f"{o.name} ({type(o).__name__})" for o in objectives) or "none"
    if not found:
        wanted = f"an EASE objective named {name!r}" if name is not None else "an EASE objective"
        raise ValueError(f"need {wanted}; the objectives are: {present}")
    raise ValueError(f"several EASE objectives ({', '.join(o.name for o in found)}): pick one by name")
