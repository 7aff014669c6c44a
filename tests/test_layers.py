"""The package's layers, as docs/architecture.md draws them, hold in the code: a module imports only
from its own layer or lower ones (at module level and inside functions alike)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "unisent"

#: lowest first; a module belongs to the longest prefix that matches it
LAYERS: list[tuple[str, ...]] = [
    # foundation: files, dotted paths, tensors-only losses, optimisers, the command-line helper
    ("unisent._version", "unisent.io", "unisent.losses", "unisent.optim", "unisent.testing", "unisent.commands._cli"),
    # backbones and poolers; the contract every inference model implements (saving, loading,
    # export declarations) and the registry that loads them (a plain Encoder is its fallback)
    ("unisent.encoders", "unisent.models.base", "unisent.models.encoder", "unisent.models.registry",
     "unisent.amr.linearize", "unisent.amr.vocab", "unisent.amr.parsing"),
    # trained models: heads on an encoder, post-processors
    ("unisent.models", "unisent.postprocess"),
    # training: objectives and their data
    ("unisent.objectives", "unisent.data"),
    # the LightningModule and what plugs into the Trainer
    ("unisent.module", "unisent.evaluation", "unisent.resume", "unisent.strategies", "unisent.sweep_metrics"),
    # tools over trained models and public data layouts
    ("unisent.export", "unisent.data.builders", "unisent.amr.retrofit", "unisent.amr", "unisent.integrations"),
    # the command line and the package root (unisent.load)
    ("unisent.commands", "unisent.cli", "unisent"),
]

#: the only upward imports, each inside a function and for the stated reason
ALLOWED_UPWARD = {
    # old import paths of EncoderWrapper (moved to unisent.models), resolved lazily by __getattr__
    ("unisent.encoders", "unisent.models.wrapper"),
    ("unisent.encoders.encoder", "unisent.models.wrapper"),
    # a checkpoint names its objectives: only the training module can rebuild their inference heads
    ("unisent.models.registry", "unisent.module"),
}


def _layer(module: str) -> int:
    best, best_len = None, -1
    for level, prefixes in enumerate(LAYERS):
        for prefix in prefixes:
            if (module == prefix or module.startswith(prefix + ".")) and len(prefix) > best_len:
                best, best_len = level, len(prefix)
    assert best is not None, f"{module} is in no layer: add it to LAYERS and docs/architecture.md"
    return best


def _modules() -> dict[str, Path]:
    found = {}
    for path in PACKAGE.rglob("*.py"):
        parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        found[".".join(parts)] = path
    return found


def _imports(module: str, path: Path) -> list[tuple[str, int]]:
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    out = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            out += [(alias.name, node.lineno) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(anchor + ([base] if base else []))
            out.append((base, node.lineno))
            out += [(f"{base}.{alias.name}", node.lineno) for alias in node.names]
    return [(name, line) for name, line in out if name == "unisent" or name.startswith("unisent.")]


def _target(name: str, modules: dict[str, Path]) -> str | None:
    while name and name not in modules:
        name = name.rpartition(".")[0]
    return name or None


def test_every_import_goes_down_or_sideways():
    modules = _modules()
    upward = []
    for module, path in sorted(modules.items()):
        level = _layer(module)
        for name, line in _imports(module, path):
            target = _target(name, modules)
            if target is None or target == "unisent" and name != "unisent":
                continue  # `from unisent import x` is resolved through x's own module
            if _layer(target) > level and (module, target) not in ALLOWED_UPWARD:
                upward.append(f"{path.relative_to(PACKAGE.parent)}:{line} imports {name} ({target})")
    assert not upward, "upward imports:\n" + "\n".join(upward)


def test_only_the_top_layer_uses_unisent_load():
    offenders = []
    for module, path in _modules().items():
        if _layer(module) == len(LAYERS) - 1:
            continue
        for name, line in _imports(module, path):
            if name in {"unisent.load"}:
                offenders.append(f"{path.relative_to(PACKAGE.parent)}:{line}")
    assert not offenders, offenders


@pytest.mark.parametrize("module", ["unisent.module"])
def test_the_training_module_does_not_reach_evaluation_or_data(module):
    path = _modules()[module]
    names = {name for name, _ in _imports(module, path)}
    assert not {n for n in names if n.startswith(("unisent.evaluation", "unisent.data"))}
