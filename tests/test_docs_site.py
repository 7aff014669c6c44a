"""The docs site (mkdocs.yml) and its API reference (docs/api/, one page per public package, rendered from the
docstrings by mkdocstrings). Fast: no Sphinx role is left in a docstring, and every cross-reference
(``[`Name`][unisent.pkg.Name]``, in docstrings and in docs/) names an object the API reference renders, so a
reference to a name that moved is caught without building. Integration: ``mkdocs build --strict`` passes, and
fails on a docstring reference whose target does not exist (a copy of the package with one planted)."""

from __future__ import annotations

import ast
import os
import re
import shutil
import subprocess
import sys
from importlib import import_module
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
XREF = re.compile(r"\]\[(unisent(?:\.\w+)*)\]")
CODE_EXAMPLE = re.compile(r"`[^`]*\]\[[^`]*`")  # `[Name][unisent.pkg.Name]` written as code: an example
SPHINX_ROLE = re.compile(r":(?:class|func|mod|meth|attr|data|exc|obj|const):`")
DIRECTIVE = re.compile(r"^::: (unisent[\w.]*)\n((?:    .*\n)*)", re.MULTILINE)
MKDOCS_ENV = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}


def _all(module: str) -> list[str]:
    """The literal ``__all__`` of a module of the package (read from its file)."""
    path = ROOT.joinpath(*module.split("."))
    path = path / "__init__.py" if path.is_dir() else path.with_suffix(".py")
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "__all__" for t in node.targets):
            return list(ast.literal_eval(node.value))
    return []


def rendered_members() -> dict[str, list[str]]:
    """``{module: names}`` of the API reference's ``::: module`` directives: the page's ``members:`` list when it
    gives one, else the module's ``__all__`` (what mkdocstrings renders)."""
    pages: dict[str, list[str]] = {}
    for page in sorted((ROOT / "docs" / "api").glob("*.md")):
        for match in DIRECTIVE.finditer(page.read_text(encoding="utf-8")):
            listed = re.search(r"members: \[([^\]]*)\]", match.group(2))
            names = [n.strip() for n in listed.group(1).split(",")] if listed else _all(match.group(1))
            pages[match.group(1)] = names
    return pages


def is_rendered(identifier: str, pages: dict[str, list[str]]) -> bool:
    """Whether the API reference renders ``identifier``: a documented module, one of the names its page lists, or
    a public attribute of one (a method, a field)."""
    if identifier in pages:
        return True
    module = max((m for m in pages if identifier.startswith(m + ".")), key=len, default=None)
    if module is None:
        return False
    name, *rest = identifier[len(module) + 1 :].split(".")
    if name not in pages[module] or any(part.startswith("_") for part in rest):
        return False
    obj = import_module(module)
    for part in [name, *rest]:
        if not hasattr(obj, part):
            annotations = getattr(obj, "__annotations__", {}) if isinstance(obj, type) else {}
            fields = getattr(obj, "__dataclass_fields__", {})
            return part == rest[-1] and (part in annotations or part in fields) if rest else False
        obj = getattr(obj, part)
    return True


def _sources() -> list[Path]:
    return sorted([*(ROOT / "unisent").rglob("*.py"), *(ROOT / "docs").rglob("*.md"), ROOT / "README.md"])


def test_no_sphinx_role_is_left_in_the_docstrings():
    found = [
        f"{path.relative_to(ROOT)}:{number}: {line.strip()}"
        for path in sorted((ROOT / "unisent").rglob("*.py"))
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if SPHINX_ROLE.search(line)
    ]
    assert not found, "Sphinx roles (write [`Name`][unisent.pkg.Name] or ``name``):\n" + "\n".join(found)


def test_every_cross_reference_names_an_object_the_api_reference_renders():
    pages = rendered_members()
    assert {"unisent", "unisent.objectives", "unisent.balancers", "unisent.encoders"} <= set(pages)
    seen, broken = 0, []
    for path in _sources():
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            for identifier in XREF.findall(CODE_EXAMPLE.sub("", line)):
                seen += 1
                if not is_rendered(identifier, pages):
                    broken.append(f"{path.relative_to(ROOT)}:{number}: {identifier}")
    assert seen > 200
    assert not broken, "cross-references to no rendered object (moved? private? use ``name``):\n" + "\n".join(broken)


def test_the_check_refuses_moved_private_and_unrendered_names():
    pages = rendered_members()
    assert is_rendered("unisent.encoders.Encoder.encode", pages)
    assert is_rendered("unisent.objectives.Objective.schema", pages)
    assert is_rendered("unisent.load", pages)
    assert not is_rendered("unisent.models.EncoderModel", pages)  # moved to unisent.encoders.export_declarations
    assert not is_rendered("unisent.balancers.surrogate", pages)  # an internal, not in __all__
    assert not is_rendered("unisent.io.model_files.check_fits", pages)  # exists, not rendered
    assert not is_rendered("unisent.encoders.Encoder._no_such", pages)


def _mkdocs(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "mkdocs", "build", "--strict", *args]
    return subprocess.run(command, cwd=cwd, env=MKDOCS_ENV, capture_output=True, text=True, timeout=600)


@pytest.mark.integration
def test_the_site_builds_strictly_with_a_page_per_public_package(tmp_path):
    result = _mkdocs("--site-dir", str(tmp_path / "site"))
    assert result.returncode == 0, result.stderr[-4000:]
    for page in (ROOT / "docs" / "api").glob("*.md"):
        assert (tmp_path / "site" / "api" / page.stem / "index.html").is_file() or page.stem == "index"
    html = (tmp_path / "site" / "api" / "balancers" / "index.html").read_text(encoding="utf-8")
    assert 'id="unisent.balancers.PCGrad"' in html and 'id="unisent.balancers.surrogate"' not in html


@pytest.mark.integration
def test_a_docstring_reference_to_a_missing_object_fails_the_build(tmp_path):
    """One package's page over a copy of unisent: it builds; with a reference to a name that does not exist
    planted in a docstring, the strict build fails and names it."""
    shutil.copytree(ROOT / "unisent", tmp_path / "unisent", ignore=shutil.ignore_patterns("__pycache__"))
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "index.md").write_text("# merging\n\n::: unisent.merging\n", encoding="utf-8")
    plugins = "[autorefs, {mkdocstrings: {handlers: {python: {paths: [.], options: {show_source: false}}}}}]"
    (tmp_path / "mkdocs.yml").write_text(f"site_name: t\nplugins: {plugins}\n", encoding="utf-8")
    assert _mkdocs(cwd=tmp_path).returncode == 0
    init = tmp_path / "unisent" / "merging" / "__init__.py"
    source = init.read_text(encoding="utf-8")
    init.write_text(source.replace('"""', '"""See [`gone`][unisent.merging.gone_name]. ', 1), encoding="utf-8")
    result = _mkdocs(cwd=tmp_path)
    assert result.returncode != 0 and "unisent.merging.gone_name" in result.stderr
