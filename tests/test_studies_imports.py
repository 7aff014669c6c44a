"""studies/ and benchmarks/ use unisent as any user does: every ``from unisent.x import Name`` names a module that
exists and a name that module exports (its ``__all__``), or a submodule; every ``import unisent.x`` a module that
exists. And the package never reaches back: no module of unisent imports ``studies`` or ``benchmarks``. Read from
the files (``ast``), nothing imported."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "unisent"
SCRIPTS = sorted([*(ROOT / "studies").rglob("*.py"), *(ROOT / "benchmarks").rglob("*.py")])


def _module_file(module: str) -> Path | None:
    """The file of ``unisent.a.b`` (a module or a package's ``__init__``), ``None`` when there is none."""
    path = ROOT.joinpath(*module.split("."))
    for candidate in (path.with_suffix(".py"), path / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def _exports(path: Path) -> set[str] | None:
    """The names of a module's literal ``__all__`` (``None`` when it has none)."""
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        targets = (
            node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(node, ast.AnnAssign) else []
        )
        if any(isinstance(t, ast.Name) and t.id == "__all__" for t in targets) and node.value is not None:
            return set(ast.literal_eval(node.value))
    return None


def _unisent_imports(path: Path):
    """``(line, module, names)`` of every import of unisent in ``path`` (``names`` empty for ``import unisent.x``)."""
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").split(".")[0] == "unisent":
            yield node.lineno, node.module, [alias.name for alias in node.names]
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] == "unisent":
                    yield node.lineno, alias.name, []


def test_the_scripts_import_only_what_unisent_exports():
    assert any(p.parent.name == "studies" for p in SCRIPTS) and any(p.parent.name == "benchmarks" for p in SCRIPTS)
    problems = []
    for path in SCRIPTS:
        where = path.relative_to(ROOT)
        for line, module, names in _unisent_imports(path):
            found = _module_file(module)
            if found is None:
                problems.append(f"{where}:{line}: no module {module}")
                continue
            exported = _exports(found)
            for name in names:
                if _module_file(f"{module}.{name}") is not None:  # a submodule: from unisent import evaluation
                    continue
                if exported is None or name not in exported:
                    problems.append(f"{where}:{line}: {module}.{name} is not in {module}.__all__")
    assert not problems, "imports of names unisent does not export:\n" + "\n".join(problems)


def test_the_checks_see_a_private_name_and_a_missing_module(tmp_path):
    """The check above on a made-up script: a name outside ``__all__``, a module that is not there."""
    script = tmp_path / "s.py"
    script.write_text(
        "import unisent.nowhere\nfrom unisent.commands.ablate.summarise import _precisions, table\n"
        "def f():\n    from unisent import evaluation, load\n",
        encoding="utf-8",
    )
    found = list(_unisent_imports(script))
    assert found == [
        (1, "unisent.nowhere", []),
        (2, "unisent.commands.ablate.summarise", ["_precisions", "table"]),
        (4, "unisent", ["evaluation", "load"]),
    ]
    assert _module_file("unisent.nowhere") is None and _module_file("unisent.evaluation") is not None
    exported = _exports(_module_file("unisent.commands.ablate.summarise"))
    assert "table" in exported and "_precisions" not in exported
    assert "load" in _exports(_module_file("unisent"))


def test_the_package_never_imports_studies_or_benchmarks():
    offenders = []
    for path in sorted(PACKAGE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0:
                names = [node.module or ""]
            else:
                continue
            if any(name.split(".")[0] in ("studies", "benchmarks") for name in names):
                offenders.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert not offenders, f"unisent imports studies/ or benchmarks/: {offenders}"
