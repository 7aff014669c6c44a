"""An import checker independent of ``tests/test_layers.py``: 0 cycles among unisent's files and 0 imports
from a lower layer up to a higher one, with the layers read from the diagram of docs/architecture.md.

It shares no code and no method with ``tests/test_layers.py`` (which parses the source with :mod:`ast`
and keeps its own table of layers), so that a blind spot of one is not a blind spot of both:

- the modules are found by the interpreter's own path finder (:class:`importlib.machinery.PathFinder`,
  :func:`pkgutil.iter_modules`), without executing any package;
- the imports are read from the **compiled bytecode** of every file (:mod:`dis`): each ``IMPORT_NAME``
  with its level and from-list, in the module's code and in every function, method, class body and
  comprehension nested in it; an import under ``if TYPE_CHECKING:`` is compiled like any other (the
  name is not a constant), and is counted and labelled by the jump that guards it;
- relative names are resolved by :func:`importlib.util.resolve_name`, and ``from package import name``
  is an import of the submodule when the finder finds one, else of the package;
- the lazy export tables are read from the packages themselves (``package._LAZY`` after importing
  the package, whose import is cheap by design);
- the layers are the numbered lines of the diagram in docs/architecture.md (the names outside
  parentheses on each line and its continuation lines), so the drawing and the code are checked
  against each other.

``python tests/test_import_graph.py`` prints the counts.
"""

from __future__ import annotations

import dis
import importlib
import importlib.machinery
import importlib.util
import pkgutil
import re
import sys
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from types import CodeType

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = "unisent"
ARCHITECTURE = ROOT / "docs" / "architecture.md"


@dataclass(frozen=True)
class Edge:
    source: str
    target: str
    line: int
    kind: str  # "module level", "function level", "TYPE_CHECKING", "lazy table"

    def __str__(self) -> str:
        return f"{self.source} -> {self.target} (line {self.line}, {self.kind})"


# ------------------------------------------------------------------------------------------- modules
def _spec(name: str, root: Path = ROOT) -> importlib.machinery.ModuleSpec | None:
    """The spec of a dotted name, found level by level with the path finder (no package is executed)."""
    path = [str(root)]
    spec = None
    parts = name.split(".")
    for i in range(len(parts)):
        spec = importlib.machinery.PathFinder.find_spec(".".join(parts[: i + 1]), path)
        if spec is None:
            return None
        path = spec.submodule_search_locations or []
        if i < len(parts) - 1 and not path:
            return None
    return spec


def package_modules(root: Path = ROOT, package: str = PACKAGE) -> dict[str, importlib.machinery.ModuleSpec]:
    """Every module and package under ``package``, by name."""
    found = {}
    todo = [package]
    while todo:
        name = todo.pop()
        spec = _spec(name, root)
        if spec is None:
            raise ValueError(f"{name} not found under {root}")
        found[name] = spec
        for info in pkgutil.iter_modules(spec.submodule_search_locations or []):
            sub = f"{name}.{info.name}"
            if info.ispkg:
                todo.append(sub)
            else:
                found[sub] = _spec(sub, root)
    return found


# ------------------------------------------------------------------------------------------- imports
def _code_objects(code: CodeType, depth: int = 0):
    yield code, depth
    for const in code.co_consts:
        if isinstance(const, CodeType):
            yield from _code_objects(const, depth + 1)


def _guarded(instructions: list[dis.Instruction]) -> list[tuple[int, int]]:
    """Offset ranges of ``if TYPE_CHECKING:`` bodies: from the jump after loading the flag to its target."""
    ranges = []
    for before, jump in zip(instructions, instructions[1:]):
        if before.argval == "TYPE_CHECKING" and before.opname.startswith("LOAD") and "IF_FALSE" in jump.opname:
            ranges.append((jump.offset, jump.argval))
    return ranges


def raw_imports(code: CodeType) -> list[tuple[str, int, tuple[str, ...] | None, int, str]]:
    """``(name, level, fromlist, line, kind)`` of every ``IMPORT_NAME`` in ``code`` and its nested code."""
    out = []
    for obj, depth in _code_objects(code):
        instructions = list(dis.get_instructions(obj))
        guarded = _guarded(instructions)
        for i, ins in enumerate(instructions):
            if ins.opname != "IMPORT_NAME":
                continue
            line = ins.positions.lineno if ins.positions and ins.positions.lineno else obj.co_firstlineno
            level, fromlist = instructions[i - 2].argval, instructions[i - 1].argval  # the two operands pushed
            kind = (
                "TYPE_CHECKING"
                if any(a <= ins.offset < b for a, b in guarded)
                else ("module level" if depth == 0 else "function level")
            )
            out.append((ins.argval, int(level or 0), fromlist, line, kind))
    return out


def edges_of(name: str, spec: importlib.machinery.ModuleSpec, modules: dict) -> list[Edge]:
    source = Path(spec.origin).read_text(encoding="utf-8")
    code = compile(source, spec.origin, "exec", dont_inherit=True)
    package = name if spec.submodule_search_locations is not None else name.rpartition(".")[0]
    edges = []
    for imported, level, fromlist, line, kind in raw_imports(code):
        full = importlib.util.resolve_name("." * level + imported, package) if level else imported
        if full != PACKAGE and not full.startswith(PACKAGE + "."):
            continue
        targets = []
        for item in fromlist or ():
            if item != "*" and f"{full}.{item}" in modules:
                targets.append(f"{full}.{item}")
            else:
                targets.append(full)
        if not fromlist:
            targets.append(full)
        for target in targets:
            while target not in modules:  # a name inside a module: that module
                target = target.rpartition(".")[0]
            if target != name:
                edges.append(Edge(name, target, line, kind))
    if re.search(r"^_LAZY\b", source, re.M):  # a package that imports on first use: its table, from itself
        table = importlib.import_module(name)._LAZY
        edges += [Edge(name, f"{name}.{sub}", 0, "lazy table") for sub in set(table.values())]
    return edges


def import_graph() -> tuple[list[str], list[Edge]]:
    modules = package_modules()
    return sorted(modules), [e for name, spec in sorted(modules.items()) for e in edges_of(name, spec, modules)]


# -------------------------------------------------------------------------------------------- layers
def drawn_layers(text: str | None = None) -> dict[str, int]:
    """``{top-level name: layer number}`` from the diagram in docs/architecture.md: a line that starts
    with its number and name, then ``unisent.<name>`` entries (``unisent`` alone: the package root),
    continued on indented lines; text in parentheses describes and is skipped."""
    text = ARCHITECTURE.read_text(encoding="utf-8") if text is None else text
    block = text.split("```", 2)[1]  # the first code block of the page is the diagram
    layers: dict[str, int] = {}
    level = None
    for line in block.splitlines():
        start = re.match(r"\s*(\d+)\s+[a-z]+\s", line)
        if start:
            level = int(start.group(1))
            line = line[start.end() :]
        elif level is None or not line.strip():
            continue
        depth, outside = 0, []
        for ch in line:
            depth += ch == "("
            outside.append(ch if depth == 0 else " ")
            depth -= ch == ")"
        for match in re.finditer(r"(?<![\w.])unisent(?:\.(\w+))?(?![\w.])", "".join(outside)):
            top = match.group(1) or ""
            if layers.get(top, level) != level:
                raise ValueError(f"unisent.{top} is drawn in layers {layers[top]} and {level}")
            layers[top] = level
    return layers


def layer(module: str, layers: dict[str, int]) -> int:
    parts = module.split(".")
    top = parts[1] if len(parts) > 1 else ""
    if top not in layers:
        raise KeyError(f"{module}: unisent.{top} is in no layer of the diagram in docs/architecture.md")
    return layers[top]


def strongly_connected(nodes: list[str], edges: list[Edge]) -> list[list[str]]:
    """Components of more than one module: Kosaraju's two passes (iterative)."""
    forward: dict[str, set[str]] = {n: set() for n in nodes}
    backward: dict[str, set[str]] = {n: set() for n in nodes}
    for e in edges:
        forward[e.source].add(e.target)
        backward[e.target].add(e.source)
    order, seen = [], set()
    for start in nodes:
        if start in seen:
            continue
        seen.add(start)
        stack = [(start, iter(sorted(forward[start])))]
        while stack:
            node, rest = stack[-1]
            nxt = next((n for n in rest if n not in seen), None)
            if nxt is None:
                order.append(node)
                stack.pop()
            else:
                seen.add(nxt)
                stack.append((nxt, iter(sorted(forward[nxt]))))
    components, assigned = [], set()
    for start in reversed(order):
        if start in assigned:
            continue
        component, todo = [], [start]
        assigned.add(start)
        while todo:
            node = todo.pop()
            component.append(node)
            for prev in backward[node] - assigned:
                assigned.add(prev)
                todo.append(prev)
        if len(component) > 1:
            components.append(sorted(component))
    return components


def report() -> tuple[str, int, int]:
    modules, edges = import_graph()
    layers = drawn_layers()
    upward = [e for e in edges if layer(e.target, layers) > layer(e.source, layers)]
    components = strongly_connected(modules, edges)
    kinds = Counter(e.kind for e in edges)
    lines = [
        f"{len(modules)} modules of {PACKAGE} in {len(set(layers.values()))} layers (docs/architecture.md); "
        f"{len(edges)} imports between them: "
        + ", ".join(f"{kinds[k]} {k}" for k in ("module level", "function level", "TYPE_CHECKING", "lazy table")),
        f"{len(upward)} imports from a lower layer up to a higher one; {len(components)} cycles among the files",
    ]
    lines += [f"  upward: {e}" for e in upward]
    lines += [f"  cycle: {' <-> '.join(c)}" for c in components]
    return "\n".join(lines), len(upward), len(components)


# --------------------------------------------------------------------------------------------- tests
def test_no_cycle_and_no_upward_import_by_the_bytecode():
    text, upward, components = report()
    assert upward == 0 and components == 0, text


def test_every_module_is_in_a_drawn_layer():
    layers = drawn_layers()
    for module in package_modules():
        layer(module, layers)


def test_the_checker_sees_every_kind_of_import(tmp_path):
    """A made-up package: a module-level, a function-level and a ``TYPE_CHECKING`` import, relative and
    absolute, each found with its kind; the cycle they close is found; an upward one is found."""
    pkg = tmp_path / "unisent"
    (pkg / "low").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "low" / "__init__.py").write_text("")
    (pkg / "low" / "a.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from ..high import b\n"
        "def f():\n    from unisent.high.b import thing\n"
    )
    (pkg / "high").mkdir()
    (pkg / "high" / "__init__.py").write_text("")
    (pkg / "high" / "b.py").write_text("from ..low import a\nthing = 1\n")
    modules = package_modules(tmp_path)
    edges = [e for name, spec in sorted(modules.items()) for e in edges_of(name, spec, modules)]
    assert {(e.source, e.target, e.kind) for e in edges} == {
        ("unisent.low.a", "unisent.high.b", "TYPE_CHECKING"),
        ("unisent.low.a", "unisent.high.b", "function level"),
        ("unisent.high.b", "unisent.low.a", "module level"),
    }
    assert strongly_connected(sorted(modules), edges) == [["unisent.high.b", "unisent.low.a"]]
    layers = drawn_layers("```\n 1  high  unisent.high (above)\n 0  low   unisent.low   unisent (root)\n```")
    assert layers == {"high": 1, "low": 0, "": 0}
    assert [e.kind for e in edges if layer(e.target, layers) > layer(e.source, layers)] == [
        "TYPE_CHECKING",
        "function level",
    ]


def main() -> int:
    text, upward, components = report()
    print(text)
    return 1 if upward or components else 0


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    sys.exit(main())
