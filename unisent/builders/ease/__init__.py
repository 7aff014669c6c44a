"""EASE training data: (sentence, hyperlinked entity, hard-negative entity) records, from a Wikipedia
dump (``steps``) or FewRel (``fewrel``); step files and formats: docs/methods/ease-data.md.

Record (one per sentence and linked entity, as in the paper)::

    {"text": "...", "entity": "Q42", "hard_negative": "Q1" | null, "language": "en", "page": "..." | null}
"""

from .fewrel import build_ease_fewrel
from .steps import ease_wikipedia

__all__ = ["COMMANDS"]

#: ``unisent data <name>`` commands of this package (see ``unisent.commands.data``)
COMMANDS = {"ease-wikipedia": ease_wikipedia, "ease-fewrel": build_ease_fewrel}
