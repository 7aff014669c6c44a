"""The package's layers, as docs/architecture.md draws them, hold in the code.

Every top-level package (or module) of ``unisent`` belongs to exactly one layer, so a module's layer is
read from its path. The import graph counts every import the interpreter can execute: module level,
inside functions and methods, ``importlib.import_module("unisent....")`` string literals, and the lazy
export tables (``_LAZY = {name: submodule}``) of packages that import on first use; imports under
``if TYPE_CHECKING:`` never run and are not counted. The tests fail on a module in no layer, on any
import of a higher layer, and on any cycle between modules (a strongly connected component), naming
each import as ``file:line``.

``python tests/test_layers.py`` prints the layers, their modules and the cycles (0).
"""

from __future__ import annotations

import ast
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "unisent"

#: bottom first: (layer name, the top-level packages or modules of unisent in it)
LAYERS: list[tuple[str, tuple[str, ...]]] = [
    ("foundation", ("_version", "io", "losses", "optim", "testing", "resources", "hardware")),
    ("data", ("data",)),
    ("contracts", ("inference", "amr")),
    ("encoders", ("encoders",)),
    ("models", ("models",)),
    ("objectives", ("objectives",)),
    ("training", ("module", "balancers", "trainer", "callbacks", "resume", "strategies", "sweep_metrics")),
    ("tools", ("evaluation", "export", "builders", "integrations")),
    ("commands", ("commands", "cli", "")),  # "": the package root (unisent.load)
]


@dataclass(frozen=True)
class Import:
    source: str  # importing module
    target: str  # imported module of unisent
    file: str  # the importing file, relative to the package's parent (unisent/...)
    line: int

    def __str__(self) -> str:
        return f"{self.file}:{self.line} {self.source} imports {self.target}"


def layer_of(module: str) -> int:
    """The layer index of a module name, from its top-level package."""
    parts = module.split(".")
    if parts[0] != "unisent":
        raise ValueError(f"{module} is not a module of unisent")
    top = parts[1] if len(parts) > 1 else ""
    for level, (_, tops) in enumerate(LAYERS):
        if top in tops:
            return level
    raise AssertionError(f"{module} is in no layer: add unisent.{top} to LAYERS and docs/architecture.md")


def find_modules(package: Path = PACKAGE) -> dict[str, Path]:
    found = {}
    for path in sorted(package.rglob("*.py")):
        parts = list(path.relative_to(package.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        found[".".join(parts)] = path
    return found


def _type_checking_nodes(tree: ast.AST) -> set[int]:
    skipped = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            for child in node.body:
                skipped.update(id(n) for n in ast.walk(child))
    return skipped


def _named(module: str, modules: dict[str, Path]) -> str | None:
    """The module of ``unisent`` a dotted name refers to (a name inside a module: that module)."""
    while module and module not in modules:
        module = module.rpartition(".")[0]
    return module or None


def imports_of(module: str, path: Path, modules: dict[str, Path], root: Path = PACKAGE.parent) -> list[Import]:
    """Every import of a module of unisent that ``module`` can execute (``root``: the package's parent)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    skipped = _type_checking_nodes(tree)
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    names: list[tuple[str, int]] = []
    for node in ast.walk(tree):
        if id(node) in skipped:
            continue
        if isinstance(node, ast.Import):
            names += [(alias.name, node.lineno) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(anchor + ([base] if base else []))
            for alias in node.names:
                # `from pkg import sub` imports the submodule; `from pkg import name`, pkg itself
                full = f"{base}.{alias.name}"
                names.append((full if full in modules else base, node.lineno))
        elif (
            isinstance(node, ast.Call)
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and isinstance(node.args[0].value, str)
            and getattr(node.func, "attr", getattr(node.func, "id", None)) == "import_module"
        ):
            names.append((node.args[0].value, node.lineno))
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            target = node.targets[0] if isinstance(node, ast.Assign) else node.target
            if isinstance(target, ast.Name) and target.id == "_LAZY":
                table = ast.literal_eval(node.value)  # a lazy table must be a literal: the test reads it
                names += [(f"{package}.{sub}", node.lineno) for sub in table.values()]
    found = []
    for name, line in names:
        if name != "unisent" and not name.startswith("unisent."):
            continue
        target = _named(name, modules)
        if target is not None and target != module:
            found.append(Import(module, target, str(path.relative_to(root)), line))
    return found


def import_graph(package: Path = PACKAGE) -> tuple[dict[str, Path], list[Import]]:
    modules = find_modules(package)
    return modules, [
        imp for module, path in modules.items() for imp in imports_of(module, path, modules, package.parent)
    ]


def cycles(modules: dict[str, Path], edges: list[Import]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    graph: dict[str, list[str]] = {m: [] for m in modules}
    for edge in edges:
        graph[edge.source].append(edge.target)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components = []
    counter = 0
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(graph[root]))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(graph[child])))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    components.append(sorted(component))
    return components


def upward_imports(edges: list[Import]) -> list[Import]:
    return [e for e in edges if layer_of(e.target) > layer_of(e.source)]


def cycle_report(components: list[list[str]], edges: list[Import]) -> str:
    lines = []
    for component in components:
        members = set(component)
        lines.append(f"cycle of {len(component)} modules: {', '.join(component)}")
        lines += [f"  {e}" for e in edges if e.source in members and e.target in members]
    return "\n".join(lines)


# ------------------------------------------------------------------------------------------- tests
def test_every_module_is_in_a_layer():
    for module in find_modules():
        layer_of(module)  # raises for a module in no layer
    with pytest.raises(AssertionError, match="in no layer"):
        layer_of("unisent.nowhere.module")


def test_every_import_goes_down_or_sideways():
    _, edges = import_graph()
    upward = upward_imports(edges)
    assert not upward, "upward imports:\n" + "\n".join(
        f"  {e} (layer {LAYERS[layer_of(e.source)][0]} -> {LAYERS[layer_of(e.target)][0]})" for e in upward
    )


def test_no_import_cycles_between_modules():
    modules, edges = import_graph()
    found = cycles(modules, edges)
    assert not found, cycle_report(found, edges)


def test_the_checks_see_function_level_string_and_lazy_imports(tmp_path):
    """The graph on a made-up package: a function-level upward import, an import_module string and a
    lazy table are each found with their line, and the cycle they close is reported."""
    pkg = tmp_path / "unisent"
    (pkg / "io").mkdir(parents=True)
    (pkg / "models").mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "io" / "__init__.py").write_text('_LAZY = {"thing": "files"}\n')
    (pkg / "io" / "files.py").write_text("def f():\n    from ..models import heads\n")
    (pkg / "models" / "__init__.py").write_text("")
    (pkg / "models" / "heads.py").write_text("import importlib\n\nimportlib.import_module('unisent.io.files')\n")
    modules, edges = import_graph(pkg)
    assert {(e.source, e.target, e.line) for e in edges} == {
        ("unisent.io", "unisent.io.files", 1),
        ("unisent.io.files", "unisent.models.heads", 2),
        ("unisent.models.heads", "unisent.io.files", 3),
    }
    assert [str(e).split(" ")[0] for e in upward_imports(edges)] == ["unisent/io/files.py:2"]
    assert cycles(modules, edges) == [["unisent.io.files", "unisent.models.heads"]]


def test_type_checking_imports_are_not_counted(tmp_path):
    pkg = tmp_path / "unisent"
    (pkg / "io").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "io" / "__init__.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from unisent.models import x\n"
    )
    (pkg / "models.py").write_text("")
    assert import_graph(pkg)[1] == []


def _module_getattr(tree: ast.Module) -> ast.FunctionDef | None:
    return next((n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "__getattr__"), None)


def test_no_module_forwards_a_moved_name():
    """A module-level ``__getattr__`` exists only in a package's ``__init__`` and only resolves the
    package's own lazy table (names of its own submodules), never a name that lives elsewhere."""
    offenders = []
    modules = find_modules()
    for module, path in modules.items():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        getter = _module_getattr(tree)
        if getter is None:
            continue
        where = f"{path.relative_to(PACKAGE.parent)}:{getter.lineno}"
        if path.name != "__init__.py":
            offenders.append(f"{where}: __getattr__ in a module that is not a package's __init__")
            continue
        source = ast.unparse(getter)
        lazy = next(
            (
                ast.literal_eval(n.value)
                for n in tree.body
                if isinstance(n, (ast.Assign, ast.AnnAssign))
                and "_LAZY" in ast.unparse(n.targets[0] if isinstance(n, ast.Assign) else n.target)
            ),
            None,
        )
        if module == "unisent":  # the root's Encoder/EncoderConfig: lazy so that `unisent --help` needs no torch
            if "from . import encoders" not in source:
                offenders.append(f"{where}: the root's __getattr__ resolves something other than unisent.encoders")
            continue
        if lazy is None or "_LAZY" not in source:
            offenders.append(f"{where}: __getattr__ without a literal _LAZY table of the package's submodules")
            continue
        for name, sub in lazy.items():
            if f"{module}.{sub}" not in modules:
                offenders.append(f"{where}: {name!r} -> {sub!r} is not a submodule of {module}")
    assert not offenders, "\n".join(offenders)


def test_no_file_only_forwards_to_another():
    """Every module other than a package's ``__init__`` defines something: none consists of imports
    and ``__all__`` alone (a moved-name shim)."""
    forwarding = []
    for path in find_modules().values():
        if path.name == "__init__.py":
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        body = [n for n in tree.body if not (isinstance(n, ast.Expr) and isinstance(n.value, ast.Constant))]
        if body and all(
            isinstance(n, (ast.Import, ast.ImportFrom))
            or (isinstance(n, ast.Assign) and ast.unparse(n.targets[0]) == "__all__")
            for n in body
        ):
            forwarding.append(str(path.relative_to(PACKAGE.parent)))
    assert not forwarding, f"modules that only re-export: {forwarding}"


def test_the_training_module_does_not_reach_evaluation_or_data():
    modules, edges = import_graph()
    reached = {e.target for e in edges if e.source == "unisent.module"}
    assert not {t for t in reached if t.startswith(("unisent.evaluation", "unisent.data"))}


def main() -> int:
    modules, edges = import_graph()
    for level, (name, tops) in enumerate(LAYERS):
        members = [m for m in modules if layer_of(m) == level]
        shown = ", ".join(f"unisent.{t}" if t else "unisent (root)" for t in tops)
        print(f"{level}  {name:<11} {shown}  ({len(members)} modules)")
    upward = upward_imports(edges)
    found = cycles(modules, edges)
    print(
        f"{len(modules)} modules, {len(edges)} imports between them (module level, function level, "
        f"import_module strings, lazy tables); {len(upward)} upward; {len(found)} cycles across modules"
    )
    for e in upward:
        print(f"  upward: {e}")
    if found:
        print(cycle_report(found, edges))
    return 1 if upward or found else 0


if __name__ == "__main__":
    sys.exit(main())
