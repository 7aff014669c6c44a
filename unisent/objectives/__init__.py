"""Pluggable training objectives; each returns named loss terms."""

from ..data.schema import BatchSchema
from .amr import AMRSimCSE
from .bitext import BitextRetrieval
from .cmlm import CMLM, ProjectionEncoder
from .distill import Distill
from .ease import EASE
from .frozen import Frozen
from .gausscse import GaussCSE, GaussianEncoder, GaussianHead
from .matryoshka import Matryoshka
from .nli_classifier import NLIClassifier
from .objective import Objective, ObjectiveOutput, encode_views, objective_class, objective_from_record
from .simcse import SimCSE

__all__ = [
    "AMRSimCSE",
    "BatchSchema",
    "BitextRetrieval",
    "CMLM",
    "Distill",
    "EASE",
    "Frozen",
    "GaussCSE",
    "GaussianEncoder",
    "GaussianHead",
    "Matryoshka",
    "NLIClassifier",
    "Objective",
    "ObjectiveOutput",
    "ProjectionEncoder",
    "SimCSE",
    "encode_views",
    "objective_class",
    "objective_from_record",
]
