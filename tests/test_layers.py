"""The package's layers, as docs/architecture.md draws them, hold in the code.

Every top-level package (or module) of ``unisent`` belongs to exactly one layer, so a module's layer is
read from its path. The import graph counts every import a reader of the code must know about: module
level, inside functions and methods, under ``if TYPE_CHECKING:`` (an annotation couples the files as
much as a call), ``importlib.import_module("unisent....")`` string literals, the lazy export tables
(``_LAZY = {name: submodule}``) of packages that import on first use, and dotted ``"unisent.x.Y"`` string
literals inside the package (class paths handed to ``import_object``/``instantiate``, module names of a
command table). The tests fail on a module in no layer, on any import of a higher layer, on any cycle
between modules (a strongly connected component), naming each import as ``file:line``; on a dotted
string of unisent that is not in :data:`ALLOWED_STRING_PATHS`, an ``import_module``/``__import__`` of a
computed name outside :data:`ALLOWED_DYNAMIC_IMPORTS`, and any use of ``sys.modules`` on a name that is
not a literal third-party module.

``python tests/test_layers.py`` prints the layers, their modules and the cycles (0).
``tests/test_import_graph.py`` checks the same two properties by another method (the interpreter's own
import machinery resolving each name), so that a blind spot of this parser is not a blind spot of both.
"""

from __future__ import annotations

import ast
import re
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "unisent"

#: bottom first: (layer name, the top-level packages or modules of unisent in it)
LAYERS: list[tuple[str, tuple[str, ...]]] = [
    ("foundation", ("_version", "io", "losses", "optim", "testing", "resources", "hardware", "plugins")),
    ("data", ("data",)),
    ("contracts", ("inference", "amr")),
    ("encoders", ("encoders",)),
    ("models", ("models",)),
    ("objectives", ("objectives",)),
    (
        "training",
        (
            "lightning_module",
            "balancers",
            "training_config",
            "checkpoint_record",
            "trainer",
            "callbacks",
            "resume",
            "run_progress",
            "strategies",
            "sweep_metrics",
            "merging",
            "loggers",
            "lightning_compat",
        ),
    ),
    ("tools", ("evaluation", "export", "builders", "integrations", "_loader")),
    ("commands", ("commands", "cli", "")),  # "": the package root (unisent.load)
]


#: Dotted strings of unisent that may stand in the package's code, each for a reason a reader can check.
#: Recipes' class paths are for users and are not listed: these are the package's own. Each is an edge of
#: the graph like an import (the two historical names excepted: no module holds them any more).
ALLOWED_STRING_PATHS: dict[str, str] = {
    # the entry-point group of installed plugins (unisent/plugins.py): a name in pyproject files, not a module
    "unisent.plugins": "the entry-point group name ENTRY_POINT_GROUP",
    # names under which checkpoints of earlier releases pickled these classes (torch safe globals,
    # unisent/checkpoint_record.py): read from old files, never imported
    "unisent.encoders.encoder.EncoderConfig": "old checkpoints' pickled EncoderConfig",
    "unisent.module.EvaluationConfig": "old checkpoints' pickled EvaluationConfig",
    # class paths written into files users keep and edit (recipes given to `unisent fit`, retrofit.json)
    "unisent.balancers.Static": "ablate's balancer table: a recipe's model.balancer",
    "unisent.balancers.Uncertainty": "ablate's balancer table",
    "unisent.balancers.DWA": "ablate's balancer table",
    "unisent.balancers.PCGrad": "ablate's balancer table, PCGrad.config(), an example in `unisent fit --help`",
    "unisent.balancers.JacobianAggregator": "ablate's balancer table",
    "unisent.balancers.Anchored": "ablate's balancer table, Anchored.config(), the anchor-less runs' rule",
    "unisent.amr.parsing.AmrlibParser": "`unisent retrofit --amrlib`: the parser spec saved in retrofit.json",
    "unisent.amr.parsing.PreParsedAMR": "RetrofittedEncoder.save_config: the lookup's spec in retrofit.json",
    # `unisent`'s command table (each command imported when it runs, so `unisent --help` needs no torch)
    # and the program of a subprocess (`python -m unisent.cli`: ablate's --jobs, sweep's trials; no import)
    "unisent.cli": "ablate's and sweep's subprocess runs",
    "unisent.commands.evaluate": "the command table",
    "unisent.commands.data": "the command table",
    "unisent.commands.export": "the command table",
    "unisent.commands.encode": "the command table",
    "unisent.commands.sweep": "the command table",
    "unisent.commands.retrofit": "the command table",
    "unisent.commands.ablate": "the command table",
    "unisent.commands.convert": "the command table",
    "unisent.commands.merge": "the command table",
}
#: the allowed names that no module of the package holds
HISTORICAL_NAMES = {"unisent.encoders.encoder.EncoderConfig", "unisent.module.EvaluationConfig"}

#: Files that import a module named at run time (``import_module(variable)``, ``__import__(variable)``):
#: a hidden edge unless the name comes from outside the package or from a table the graph reads.
ALLOWED_DYNAMIC_IMPORTS: dict[str, str] = {
    "unisent/io/imports.py": "import_object: the class paths a user's recipe names (saved records: io.registry)",
    "unisent/data/__init__.py": "the lazy table _LAZY (its entries are edges)",
    "unisent/evaluation/__init__.py": "the lazy table _LAZY (its entries are edges)",
    "unisent/evaluation/metrics/__init__.py": "the lazy table _LAZY (its entries are edges)",
    "unisent/cli.py": "the command table (its module names are edges: ALLOWED_STRING_PATHS)",
    "unisent/commands/resume_discovery.py": "the logger class a user's config names",
    "unisent/commands/function_commands.py": "the module of a class path a user mistyped, for a suggestion",
    "unisent/encoders/presets.py": "a preset's model package (package:NAME, third-party)",
    "unisent/models/onnx_encoder.py": "whether onnx/onnxruntime are installed",
    "unisent/builders/ease/_extra.py": "the EASE builders' optional dependencies",
    "unisent/testing.py": "the function a spawned test process runs, named by its parent",
    "unisent/plugins.py": "the modules a user names with --import (or UNISENT_IMPORT)",
}


@dataclass(frozen=True)
class Import:
    source: str  # importing module
    target: str  # imported module of unisent
    file: str  # the importing file, relative to the package's parent (unisent/...)
    line: int
    #: how: "import" (module or function level), "type" (under TYPE_CHECKING), "string" (a dotted literal),
    #: "lazy" (a _LAZY table entry), "import_module" (a literal argument)
    kind: str = "import"

    def __str__(self) -> str:
        how = "" if self.kind == "import" else f" ({self.kind})"
        return f"{self.file}:{self.line} {self.source} imports {self.target}{how}"


@dataclass(frozen=True)
class Finding:
    """Something the graph cannot follow: a dynamic import, a ``sys.modules`` use, an unlisted string."""

    file: str
    line: int
    what: str

    def __str__(self) -> str:
        return f"{self.file}:{self.line} {self.what}"


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
    """The nodes under ``if TYPE_CHECKING:`` (counted, and marked as type-level)."""
    marked = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            for child in node.body:
                marked.update(id(n) for n in ast.walk(child))
    return marked


def _named(module: str, modules: dict[str, Path]) -> str | None:
    """The module of ``unisent`` a dotted name refers to (a name inside a module: that module; a name of
    no module, such as a historical one: ``None``, or the package root when only it matches)."""
    while module and module not in modules:
        module = module.rpartition(".")[0]
    return module or None


DOTTED = re.compile(r"unisent(?:\.[A-Za-z_]\w*)+")


def _call_name(node: ast.Call) -> str | None:
    return getattr(node.func, "attr", getattr(node.func, "id", None))


def _is_sys_modules(node: ast.AST) -> bool:
    return isinstance(node, ast.Attribute) and node.attr == "modules" and ast.unparse(node.value) == "sys"


def _not_imports(tree: ast.AST) -> tuple[set[int], set[int]]:
    """The string constants that name no import: docstrings (not even a finding), and a subprocess's program
    (``[sys.executable, "-m", "unisent.cli", ...]``: a finding, not an edge)."""
    docstrings = {
        id(n.body[0].value)
        for n in ast.walk(tree)
        if isinstance(n, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
        and n.body
        and isinstance(n.body[0], ast.Expr)
        and isinstance(n.body[0].value, ast.Constant)
    }
    programs = {
        id(b)
        for n in ast.walk(tree)
        if isinstance(n, (ast.List, ast.Tuple))
        for a, b in zip(n.elts, n.elts[1:])
        if isinstance(a, ast.Constant) and a.value == "-m"
    }
    return docstrings, programs


def _import_names(node: ast.AST, kind: str, package: str, modules: dict[str, Path]) -> list[tuple[str, int, str]]:
    """The modules an ``import`` / ``from ... import`` statement names."""
    if isinstance(node, ast.Import):
        return [(alias.name, node.lineno, kind) for alias in node.names]
    base = node.module or ""
    if node.level:
        anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
        base = ".".join(anchor + ([base] if base else []))
    # `from pkg import sub` imports the submodule; `from pkg import name`, pkg itself
    return [(f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base, node.lineno, kind) for a in node.names]


def _other_names(node: ast.AST, file: str, package: str, skip: tuple[set[int], set[int]]) -> tuple[list, list[Finding]]:
    """Names and findings of a node that is not an import statement: ``import_module``, ``_LAZY``, dotted strings."""
    names: list[tuple[str, int, str]] = []
    findings: list[Finding] = []
    if isinstance(node, ast.Call) and _call_name(node) in ("import_module", "__import__") and node.args:
        first = node.args[0]
        if isinstance(first, ast.Constant) and isinstance(first.value, str):
            names.append((first.value, node.lineno, "import_module"))
        else:
            findings.append(Finding(file, node.lineno, f"dynamic import: {ast.unparse(node)[:80]}"))
    elif isinstance(node, (ast.Assign, ast.AnnAssign)):
        target = node.targets[0] if isinstance(node, ast.Assign) else node.target
        if isinstance(target, ast.Name) and target.id == "_LAZY":
            table = ast.literal_eval(node.value)  # a lazy table must be a literal: the test reads it
            names += [(f"{package}.{sub}", node.lineno, "lazy") for sub in table.values()]
    elif isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in skip[0]:
        if DOTTED.fullmatch(node.value):
            findings.append(Finding(file, node.lineno, f"string {node.value}"))
            if id(node) not in skip[1]:
                names.append((node.value, node.lineno, "string"))
    return names, findings


def _sys_modules_findings(node: ast.AST, file: str) -> list[Finding]:
    if isinstance(node, ast.Subscript) and _is_sys_modules(node.value):
        return [Finding(file, node.lineno, f"sys.modules lookup: {ast.unparse(node)[:80]}")]
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and _is_sys_modules(node.func.value):
        key = node.args[0] if node.args else None
        third_party = isinstance(key, ast.Constant) and isinstance(key.value, str)
        if not third_party or key.value.split(".")[0] == "unisent":
            return [Finding(file, node.lineno, f"sys.modules lookup: {ast.unparse(node)[:80]}")]
    return []


def scan(
    module: str, path: Path, modules: dict[str, Path], root: Path = PACKAGE.parent
) -> tuple[list[Import], list[Finding]]:
    """Every import of a module of unisent in ``module``'s file (``root``: the package's parent), and
    what the graph cannot follow there (:class:`Finding`: dynamic imports, ``sys.modules``, dotted
    strings; the tests decide which are allowed)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    typed = _type_checking_nodes(tree)
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    file = str(path.relative_to(root))
    skip = _not_imports(tree)
    names: list[tuple[str, int, str]] = []
    findings: list[Finding] = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            names += _import_names(node, "type" if id(node) in typed else "import", package, modules)
        else:
            more, found = _other_names(node, file, package, skip)
            names, findings = names + more, findings + found
        findings += _sys_modules_findings(node, file)
    found = []
    for name, line, kind in names:
        if name != "unisent" and not name.startswith("unisent."):
            continue
        target = _named(name, modules)
        if kind == "string" and target == "unisent" and name != "unisent":
            continue  # a name no module holds (a historical one): no edge; the string check names it
        if kind == "string" and target is not None and module.startswith(target + "."):
            continue  # a class's path through its own package's public name (PCGrad.config()): no edge
        if target is not None and target != module:
            found.append(Import(module, target, file, line, kind))
    return found, sorted(findings, key=lambda f: (f.line, f.what))


def imports_of(module: str, path: Path, modules: dict[str, Path], root: Path = PACKAGE.parent) -> list[Import]:
    """Every import of a module of unisent that ``module`` makes (see :func:`scan`)."""
    return scan(module, path, modules, root)[0]


def findings_of(package: Path = PACKAGE) -> list[Finding]:
    modules = find_modules(package)
    return [f for module, path in modules.items() for f in scan(module, path, modules, package.parent)[1]]


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


@pytest.mark.integration
def test_every_import_goes_down_or_sideways():
    _, edges = import_graph()
    upward = upward_imports(edges)
    assert not upward, "upward imports:\n" + "\n".join(
        f"  {e} (layer {LAYERS[layer_of(e.source)][0]} -> {LAYERS[layer_of(e.target)][0]})" for e in upward
    )


@pytest.mark.integration
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


def test_type_checking_imports_are_counted(tmp_path):
    """An import under ``if TYPE_CHECKING:`` couples two files as much as one that runs: it is an edge,
    and it closes a cycle like any other."""
    pkg = tmp_path / "unisent"
    (pkg / "io").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "io" / "__init__.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from unisent.models import x\n"
    )
    (pkg / "models.py").write_text("from .io import y\n")
    modules, edges = import_graph(pkg)
    assert {(e.source, e.target, e.kind) for e in edges} == {
        ("unisent.io", "unisent.models", "type"),
        ("unisent.models", "unisent.io", "import"),
    }
    assert cycles(modules, edges) == [["unisent.io", "unisent.models"]]
    assert [e.file for e in upward_imports(edges)] == ["unisent/io/__init__.py"]


def test_the_checks_see_dotted_strings_dynamic_imports_and_sys_modules(tmp_path):
    """On a made-up package: a dotted class path in a string is an edge (and a finding, for the list of
    allowed ones; a subprocess's ``-m`` program is only a finding), ``import_module`` of a variable and
    ``sys.modules`` lookups are findings; a docstring that names a module and a third-party
    ``sys.modules.get("literal")`` are neither."""
    pkg = tmp_path / "unisent"
    (pkg / "io").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "models.py").write_text("class Head: ...\n")
    (pkg / "io" / "__init__.py").write_text(
        '"""unisent.models.Head is named here."""\n'
        "import importlib, sys\n"
        'SPEC = {"class_path": "unisent.models.Head"}\n'
        "def f(name):\n"
        "    importlib.import_module(name)\n"
        '    sys.modules["unisent.models"]\n'
        '    sys.modules.get("sentence_transformers")\n'
        "    sys.modules.get(name)\n"
        'RUN = [sys.executable, "-m", "unisent.models"]\n'
    )
    modules, edges = import_graph(pkg)
    assert {(e.source, e.target, e.line, e.kind) for e in edges} == {
        ("unisent.io", "unisent.models", 3, "string"),
        ("unisent.io", "unisent.models", 6, "string"),
    }
    assert [str(f) for f in findings_of(pkg)] == [
        "unisent/io/__init__.py:3 string unisent.models.Head",
        "unisent/io/__init__.py:5 dynamic import: importlib.import_module(name)",
        "unisent/io/__init__.py:6 string unisent.models",
        "unisent/io/__init__.py:6 sys.modules lookup: sys.modules['unisent.models']",
        "unisent/io/__init__.py:8 sys.modules lookup: sys.modules.get(name)",
        "unisent/io/__init__.py:9 string unisent.models",  # a subprocess's program: listed, not an edge
    ]


@pytest.mark.integration
def test_dotted_strings_of_unisent_are_only_the_listed_ones():
    """A ``"unisent.x.Y"`` string in the package is a coupling the imports do not show; each one there is
    in :data:`ALLOWED_STRING_PATHS` with its reason, names a module that exists (or is one of the
    historical names of old checkpoints), and every listed one is still used (the list stays short)."""
    modules = find_modules()
    strings = [f for f in findings_of() if f.what.startswith("string ")]
    used = {f.what.removeprefix("string ") for f in strings}
    unlisted = [str(f) for f in strings if f.what.removeprefix("string ") not in ALLOWED_STRING_PATHS]
    assert not unlisted, "dotted strings of unisent not in ALLOWED_STRING_PATHS:\n" + "\n".join(unlisted)
    assert not set(ALLOWED_STRING_PATHS) - used, f"listed but no longer used: {set(ALLOWED_STRING_PATHS) - used}"
    for name in used - HISTORICAL_NAMES:
        assert _named(name, modules) not in (None, "unisent") or name == "unisent", f"{name} names no module"


@pytest.mark.integration
def test_no_module_is_imported_by_a_name_computed_at_run_time_outside_the_named_list():
    dynamic = [f for f in findings_of() if f.what.startswith("dynamic import")]
    unlisted = [str(f) for f in dynamic if f.file not in ALLOWED_DYNAMIC_IMPORTS]
    assert not unlisted, "imports of computed names not in ALLOWED_DYNAMIC_IMPORTS:\n" + "\n".join(unlisted)
    stale = set(ALLOWED_DYNAMIC_IMPORTS) - {f.file for f in dynamic}
    assert not stale, f"listed but no longer importing a computed name: {stale}"


@pytest.mark.integration
def test_no_module_looks_into_sys_modules():
    """No module reads another's globals through ``sys.modules`` (interrupt state, a module's table):
    state is passed or returned. Only ``sys.modules.get("a_third_party_module")`` (is it imported?)."""
    found = [str(f) for f in findings_of() if f.what.startswith("sys.modules")]
    assert not found, "sys.modules lookups:\n" + "\n".join(found)


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


def test_every_file_name_in_the_package_is_unique():
    """A file name says what the file holds and points at one file (a traceback, a search, the docs):
    no two files of the package share a name, ``__init__.py`` apart."""
    by_name: dict[str, list[str]] = {}
    for path in find_modules().values():
        if path.name != "__init__.py":
            by_name.setdefault(path.name, []).append(str(path.relative_to(PACKAGE.parent)))
    shared = {name: paths for name, paths in by_name.items() if len(paths) > 1}
    assert not shared, f"file names used twice: {shared}"


def test_every_file_of_the_package_is_under_500_lines():
    """A file past 500 lines holds more than one idea: split it by idea (docs/architecture.md)."""
    long = {
        str(path.relative_to(PACKAGE.parent)): n
        for path in find_modules().values()
        if (n := len(path.read_text(encoding="utf-8").splitlines())) >= 500
    }
    assert not long, f"files of 500 lines or more: {long}"


@pytest.mark.integration
def test_the_training_module_does_not_reach_evaluation_or_data():
    modules, edges = import_graph()
    reached = {e.target for e in edges if e.source == "unisent.lightning_module"}
    assert not {t for t in reached if t.startswith(("unisent.evaluation", "unisent.data"))}


def main() -> int:
    modules, edges = import_graph()
    for level, (name, tops) in enumerate(LAYERS):
        members = [m for m in modules if layer_of(m) == level]
        shown = ", ".join(f"unisent.{t}" if t else "unisent (root)" for t in tops)
        print(f"{level}  {name:<11} {shown}  ({len(members)} modules)")
    upward = upward_imports(edges)
    found = cycles(modules, edges)
    kinds = {kind: sum(e.kind == kind for e in edges) for kind in ("import", "type", "import_module", "lazy", "string")}
    print(
        f"{len(modules)} modules, {len(edges)} imports between them ({kinds['import']} module or function level, "
        f"{kinds['type']} under TYPE_CHECKING, {kinds['import_module']} import_module strings, {kinds['lazy']} "
        f"lazy-table entries, {kinds['string']} dotted strings); {len(upward)} upward; "
        f"{len(found)} cycles across modules"
    )
    findings = findings_of()
    strings = [f for f in findings if f.what.startswith("string ")]
    dynamic = [f for f in findings if f.what.startswith("dynamic import")]
    lookups = [f for f in findings if f.what.startswith("sys.modules")]
    print(
        f"{len(strings)} dotted strings ({len({f.what for f in strings})} distinct, all listed: "
        f"{all(f.what.removeprefix('string ') in ALLOWED_STRING_PATHS for f in strings)}); "
        f"{len(dynamic)} imports of computed names in {len({f.file for f in dynamic})} listed files; "
        f"{len(lookups)} sys.modules lookups"
    )
    for e in upward:
        print(f"  upward: {e}")
    if found:
        print(cycle_report(found, edges))
    return 1 if upward or found or lookups else 0


if __name__ == "__main__":
    sys.exit(main())
