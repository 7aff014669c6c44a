"""The one resolver of names read from files (:mod:`unisent.io.registry`): a name is found in a closed table or
refused in one line naming the file and the field, and nothing it names is ever imported."""

from __future__ import annotations

import sys

import pytest

from unisent.io.registry import RegistryError, fixed_names, resolve, subclasses


class Base:
    pass


class Child(Base):
    pass


class GrandChild(Child):
    pass


def test_subclasses_are_found_by_qualified_name_and_package_alias_only():
    table = subclasses(Base)
    here = __name__
    assert table[f"{here}.Child"] is Child and table[f"{here}.GrandChild"] is GrandChild
    assert f"{here}.Base" not in table  # the base itself only with include_base
    assert subclasses(Base, include_base=True)[f"{here}.Base"] is Base
    if "." in here:  # tests.test_registry.Child is also tests.Child (a package that would re-export it)
        assert table[f"{here.split('.')[0]}.Child"] is Child


def test_a_name_outside_the_table_is_refused_in_one_line_and_never_imported(tmp_path, monkeypatch):
    marker = tmp_path / "IMPORTED"
    (tmp_path / "evil_registry_mod.py").write_text(f"open({str(marker)!r}, 'w').close()\nclass Child: pass\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    for name in ("evil_registry_mod.Child", "os.system", "subprocess.Popen", 42, None, ["os.system"], "a..b"):
        with pytest.raises(RegistryError) as err:
            resolve(name, subclasses(Base), source="model/unisent_model.json", field="class_path", what="model type")
        message = str(err.value)
        assert "\n" not in message
        assert message.startswith(f"model/unisent_model.json: class_path {name!r} is not a registered model type (")
        assert ".Child, " in message  # what is registered is listed
    assert not marker.exists() and "evil_registry_mod" not in sys.modules


def test_fixed_names_match_the_short_name_under_the_prefix_without_importing_the_module_part():
    table = fixed_names("sentence_transformers.", [Child])
    assert resolve("sentence_transformers.models.Child", table, source="f", field="t", what="m") is Child
    assert resolve("sentence_transformers.a.b.c.Child", table, source="f", field="t", what="m") is Child
    for name in ("evil.Child", "sentence_transformers.models.Other", "sentence_transformers.x-y.Child", "Child"):
        with pytest.raises(RegistryError, match=r"f: t .* is not a registered m \(sentence_transformers\.\*\.Child\)"):
            resolve(name, table, source="f", field="t", what="m")


def test_the_sentence_transformers_and_activation_registries_hold_what_saved_models_name():
    from sentence_transformers.models import Dense, Pooling

    from unisent.encoders.st_files import activation_classes, module_classes

    assert module_classes()["sentence_transformers.models.Pooling"] is Pooling
    assert module_classes()["sentence_transformers.models.Dense"] is Dense
    import torch

    assert activation_classes()["torch.nn.modules.activation.Tanh"] is torch.nn.Tanh
    assert activation_classes()["torch.nn.modules.linear.Identity"] is torch.nn.Identity
    with pytest.raises(KeyError):
        activation_classes()["torch.nn.modules.linear.Linear"]  # a module, not an activation
