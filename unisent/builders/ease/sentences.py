"""Sentences of an article: wikitext lines split by pysbd, each with its links (the extract step's task)."""

from __future__ import annotations

from collections import Counter

from ._extra import require
from .wikitext import wikitext_to_lines

__all__ = ["SentenceSplitter", "page_sentences", "init_worker", "process_article"]


class SentenceSplitter:
    """pysbd's rule-based splitter for ``language``, with spans aligned on the input text."""

    def __init__(self, language: str):
        pysbd = require("pysbd")
        from pysbd.languages import LANGUAGE_CODES

        if language not in LANGUAGE_CODES:
            raise ValueError(
                f"pysbd has no sentence rules for {language!r}; pass --splitter-language with one of "
                f"{', '.join(sorted(LANGUAGE_CODES))} (the closest language, or en)"
            )
        self.segmenter = pysbd.Segmenter(language=language, clean=False)

    def spans(self, text: str) -> list[tuple[int, int]]:
        """Stripped sentence spans on ``text`` (pysbd's own alignment silently drops sentences; unaligned skipped)."""
        spans = []
        pos = 0
        for sent in self.segmenter.processor(text).process():
            sent = sent.strip()
            if not sent:
                continue
            i = text.find(sent, pos)
            if i < 0:
                continue
            spans.append((i, i + len(sent)))
            pos = i + len(sent)
        return spans


def page_sentences(
    wikitext: str, splitter: SentenceSplitter, min_chars: int, namespaces=None, stats: Counter | None = None
):
    """One article's wikitext -> ``([{"text", "links"}, ...], page_links)``."""
    stats = Counter() if stats is None else stats
    lines, page_links = wikitext_to_lines(wikitext, namespaces, stats)
    sentences = []
    for text, links in lines:
        spans = splitter.spans(text) if len(text) >= min_chars else []
        used = [False] * len(links)
        for a, b in spans:
            if b - a < min_chars:
                continue
            sent_links = []
            for k, (s, e, t) in enumerate(links):
                if s >= a and e <= b:
                    sent_links.append([s - a, e - a, t])
                    used[k] = True
            sentences.append({"text": text[a:b], "links": sent_links})
            stats["links_in_sentences"] += len(sent_links)
        n_unused = used.count(False)
        if n_unused:
            inside_kept = sum(
                not used[k] and any(a < e and s < b and b - a >= min_chars for a, b in spans)
                for k, (s, e, _) in enumerate(links)
            )
            stats["links_dropped_crosses_sentence_boundary"] += inside_kept
            stats["links_dropped_in_dropped_sentence"] += n_unused - inside_kept
    stats["sentences"] += len(sentences)
    return sentences, page_links


_WORKER: dict = {}


def init_worker(splitter_language: str, min_chars: int, namespaces: dict[str, int]) -> None:
    """Set up the splitter and options of this process (the pool's initialiser)."""
    _WORKER.update(splitter=SentenceSplitter(splitter_language), min_chars=min_chars, namespaces=namespaces)


def process_article(text: str):
    """One article's wikitext -> ``(sentences, page_links, stats)`` with this process's settings."""
    stats: Counter = Counter()
    sentences, page_links = page_sentences(
        text, _WORKER["splitter"], _WORKER["min_chars"], _WORKER["namespaces"], stats
    )
    return sentences, page_links, dict(stats)
