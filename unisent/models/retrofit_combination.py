"""How a retrofitted model combines the text embedding ``s`` with the AMR embedding ``h`` (Cai et al.,
2022, Sec. 4.2): ``combine`` in torch, and ``retrofit_usage_code``, the same combination as
Sentence Transformers code for the model card of an export (``retrofitted_encoder``).
"""

from __future__ import annotations

from typing import Literal

import torch
import torch.nn.functional as F

__all__ = ["COMBINATIONS", "FORMULA", "Combination", "check_sizes", "combine", "retrofit_usage_code"]

Combination = Literal["concat", "sum", "norm_concat", "norm_sum"]
COMBINATIONS: tuple[str, ...] = ("concat", "sum", "norm_concat", "norm_sum")
FORMULA = {"concat": "s ⊕ h", "sum": "s + h", "norm_concat": "s/|s| ⊕ h/|h|", "norm_sum": "s/|s| + h/|h|"}


def combine(s: torch.Tensor, h: torch.Tensor, combination: str = "norm_concat") -> torch.Tensor:
    """Combine text embeddings ``s`` (n, d_s) and AMR embeddings ``h`` (n, d_h) (Sec. 4.2).

    ``concat``: ``s ⊕ h``; ``sum``: ``s + h``; ``norm_concat``: ``s/|s| ⊕ h/|h|``; ``norm_sum``:
    ``s/|s| + h/|h|`` (``|.|`` the L2 norm, as ``torch.nn.functional.normalize``).

    Raises:
        ValueError: an unknown combination, different row counts, or a sum of different sizes.
    """
    if combination not in COMBINATIONS:
        raise ValueError(f"unknown combination {combination!r}; valid: {', '.join(COMBINATIONS)}")
    if s.shape[0] != h.shape[0]:
        raise ValueError(f"{s.shape[0]} text embeddings but {h.shape[0]} AMR embeddings")
    check_sizes(combination, s.shape[-1], h.shape[-1])
    if combination.startswith("norm_"):
        s, h = F.normalize(s, dim=-1), F.normalize(h, dim=-1)
    return s + h if combination.endswith("sum") else torch.cat([s, h], dim=-1)


def check_sizes(combination: str, ds: int | None, dh: int | None) -> None:
    """``ValueError`` for a sum of a text embedding of size ``ds`` and an AMR embedding of size ``dh`` that differ
    (a size unknown yet, None, is not checked)."""
    if combination.endswith("sum") and ds is not None and dh is not None and ds != dh:
        raise ValueError(
            f"combination {combination!r} adds the text embedding (size {ds}) and the AMR embedding "
            f"(size {dh}): the sizes must be equal; use 'concat' or 'norm_concat' instead"
        )


def retrofit_usage_code(combination: str, text_dir: str = "text", amr_dir: str = "amr") -> str:
    """Runnable Sentence Transformers code that reproduces ``RetrofittedEncoder.encode`` given graphs.

    It loads ``model_dir = "."`` (the exported directory as the working directory) and defines
    ``embed(sentences, graphs) -> torch.Tensor``.
    """
    s, h = ("F.normalize(s, dim=-1)", "F.normalize(h, dim=-1)") if combination.startswith("norm_") else ("s", "h")
    op = f"torch.cat([{s}, {h}], dim=-1)" if combination.endswith("concat") else f"{s} + {h}"
    lines = [
        "import torch",
        "import torch.nn.functional as F",
        "from sentence_transformers import SentenceTransformer",
        "",
        'model_dir = "."  # this directory',
        f'text_model = SentenceTransformer(f"{{model_dir}}/{text_dir}", device="cpu")  # sentences -> s',
        f'amr_model = SentenceTransformer(f"{{model_dir}}/{amr_dir}", device="cpu")  # linearised AMR graphs -> h',
        "",
        "",
        "def embed(sentences: list[str], graphs: list[str]) -> torch.Tensor:",
        '    """graphs[i]: the linearised AMR graph of sentences[i] (unisent.amr.linearize of its PENMAN)."""',
        "    s = text_model.encode(sentences, convert_to_tensor=True).float().cpu()",
        "    h = amr_model.encode(graphs, convert_to_tensor=True).float().cpu()",
        f"    return {op}  # {combination}: {FORMULA[combination]}",
        "",
        "",
        'embeddings = embed(["The boy wants to go."], ["( want-01 :ARG0 ( boy ) :ARG1 ( go-02 :ARG0 boy ) )"])',
    ]
    return "\n".join(lines) + "\n"
