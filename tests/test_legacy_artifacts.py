"""Models written before the architecture change (issue 15) still load and embed as they did.

The fixtures were written by ``tests/fixtures/legacy/make_legacy.py`` at commit 069356c: a
checkpoint (GaussCSE + unsupervised SimCSE on a tiny BERT), the saved inference model
(``GaussianEncoder``) and its sentence-transformers export, with the vectors they gave then.
"""

from __future__ import annotations

import json
import zipfile
from pathlib import Path

import pytest
import torch

import unisent

ROOT = Path(__file__).resolve().parents[1]
LEGACY = ROOT / "tests" / "fixtures" / "legacy"
EXPECTED = json.loads((LEGACY / "expected.json").read_text())


@pytest.fixture(autouse=True)
def _at_root(monkeypatch):
    monkeypatch.chdir(ROOT)  # the checkpoint names its backbone by a path relative to the repository


@pytest.mark.parametrize("artifact", ["legacy.ckpt", "encoder", "st"])
def test_legacy_artifact_loads_and_embeds_as_before(artifact):
    model = unisent.load(str(LEGACY / artifact))
    sentences = EXPECTED["sentences"]
    mean, variance = model.encode_gaussian(sentences)
    torch.testing.assert_close(mean, torch.tensor(EXPECTED["mean"]), atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(variance, torch.tensor(EXPECTED["variance"]), atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(
        torch.as_tensor(model.encode(sentences)), torch.tensor(EXPECTED["encode"]), atol=1e-5, rtol=1e-5
    )


def test_legacy_export_loads_in_sentence_transformers():
    from sentence_transformers import SentenceTransformer

    st = SentenceTransformer(str(LEGACY / "st"), device="cpu")
    got = st.encode(EXPECTED["sentences"], convert_to_tensor=True)
    torch.testing.assert_close(got, torch.tensor(EXPECTED["mean"]), atol=1e-5, rtol=1e-5)


def test_a_checkpoint_holding_the_evaluation_settings_as_an_object_still_loads_as_data(tmp_path):
    """Checkpoints written before the hyperparameters became plain dicts hold ``EvaluationConfig`` as an
    object, named by the module it lived in then (``unisent.module.EvaluationConfig``; that module is
    ``unisent.lightning_module`` now, and the class is in ``unisent.training_config``): they still load
    with ``weights_only=True`` (as Lightning resumes them) and through ``unisent.load``, because
    ``unisent.checkpoint_record`` registers the class as safe under its old name too."""
    import sys
    import types

    from unisent.training_config import EvaluationConfig

    ckpt = torch.load(LEGACY / "legacy.ckpt", map_location="cpu", weights_only=True)
    settings = EvaluationConfig(val_tasks=[], batch_size=7)
    ckpt["hyper_parameters"]["evaluation"] = settings
    old = tmp_path / "old.ckpt"
    then_module = types.ModuleType("unisent.module")  # the module as it was: only for pickling the old name
    then_module.EvaluationConfig = EvaluationConfig
    with pytest.MonkeyPatch.context() as then:  # pickled as the class was named before it moved
        then.setattr(EvaluationConfig, "__module__", "unisent.module")
        then.setitem(sys.modules, "unisent.module", then_module)
        torch.save(ckpt, old)
    assert "unisent.module" not in sys.modules
    with zipfile.ZipFile(old) as archive:
        pickled = archive.read(next(n for n in archive.namelist() if n.endswith("data.pkl")))
    assert b"unisent.module\nEvaluationConfig" in pickled
    assert torch.load(old, map_location="cpu", weights_only=True)["hyper_parameters"]["evaluation"] == settings
    sentences = EXPECTED["sentences"]
    torch.testing.assert_close(
        torch.as_tensor(unisent.load(str(old)).encode(sentences)),
        torch.tensor(EXPECTED["encode"]),
        atol=1e-5,
        rtol=1e-5,
    )


# ------------------------------------------------------------------------------- one loader, no preconditions
@pytest.mark.integration
@pytest.mark.parametrize(
    "program",
    [
        "import unisent; model = unisent.load('tests/fixtures/legacy/legacy.ckpt')",
        pytest.param(
            "from unisent import load; model = load('tests/fixtures/legacy/legacy.ckpt')", marks=pytest.mark.slow
        ),
    ],
)
def test_a_checkpoint_loads_first_thing_in_a_fresh_interpreter(program):
    """``unisent.load(<a .ckpt>)`` needs nothing imported before it (the training module, the model
    types): the loader imports what it reads with. The vectors are the legacy ones."""
    import subprocess
    import sys

    # fp32: the subprocess has not conftest's fake CPU flags, and `auto` is bf16 on a CPU with AMX
    check = "import json; print(json.dumps(model.encode(json.loads(input()), precision='fp32').tolist()))"
    done = subprocess.run(
        [sys.executable, "-c", f"{program}; {check}"],
        input=json.dumps(EXPECTED["sentences"]),
        cwd=ROOT,  # the checkpoint names its backbone relative to the repository
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    got = torch.tensor(json.loads(done.stdout.strip().splitlines()[-1]))
    torch.testing.assert_close(got, torch.tensor(EXPECTED["encode"]), atol=1e-5, rtol=1e-5)


@pytest.mark.integration
@pytest.mark.parametrize("kind", ["preset", "plain directory", "sentence-transformers directory"])
def test_every_kind_loads_first_thing_in_a_fresh_interpreter(kind, tiny_bert_dir, tmp_path):
    """A preset, a plain Hugging Face directory and a Sentence Transformers directory load as the plain
    encoder with nothing imported before ``unisent.load`` (the default type registers with the
    encoders package, which the loader imports itself: a fresh ``unisent.load("minilm-l6")`` once failed
    with "no model type 'encoder' is registered")."""
    import subprocess
    import sys

    if kind == "preset":
        spec = "minilm-l6"
    elif kind == "plain directory":
        spec = str(tiny_bert_dir)
    else:
        from sentence_transformers import SentenceTransformer
        from sentence_transformers.models import Pooling, Transformer

        transformer = Transformer(str(tiny_bert_dir), max_seq_length=32)
        pooling = Pooling(transformer.get_embedding_dimension(), pooling_mode="mean")
        spec = str(tmp_path / "st")
        SentenceTransformer(modules=[transformer, pooling], device="cpu").save(spec)
    program = (
        f"import unisent; model = unisent.load({spec!r}); "
        "print(type(model).__name__, tuple(model.encode(['a sentence'], precision='fp32').shape))"
    )
    done = subprocess.run([sys.executable, "-c", program], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip().splitlines()[-1].startswith("Encoder (1, ")


@pytest.mark.integration
def test_the_inference_layer_has_no_loader_that_needs_an_import_first():
    """``unisent.inference`` no longer loads (its ``load`` read a ``.ckpt`` only after ``unisent.module``
    had been imported); what the model layer uses of it, ``model_types.load_saved``, reads the registered
    types only and refuses a checkpoint by name, pointing at ``unisent.load``."""
    import subprocess
    import sys

    program = (
        "import unisent.inference as inference\n"
        "for name in ('load', 'load_pretrained', 'register_checkpoint_loader'):\n"
        "    assert not hasattr(inference, name), name\n"
        "from unisent.inference.model_types import load_saved\n"
        "try:\n"
        "    load_saved('tests/fixtures/legacy/legacy.ckpt')\n"
        "except ValueError as err:\n"
        "    print(err)\n"
    )
    done = subprocess.run([sys.executable, "-c", program], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "unisent.load('tests/fixtures/legacy/legacy.ckpt')" in done.stdout


def test_a_saved_directory_loads_by_its_type_name_whatever_module_its_class_lived_in(tmp_path):
    """A saved directory records its type name and its class's path (``unisent_model.json``); loading
    dispatches on the name, so a directory saved while the class lived in a module that has since been
    renamed (``unisent.models.retrofit`` -> ``unisent.models.retrofitted_encoder``) still loads."""
    import shutil

    from unisent.models import GaussianEncoder

    saved = Path(shutil.copytree(LEGACY / "encoder", tmp_path / "encoder"))
    record = {"type": "gaussian", "class_path": "unisent.models.a_module_renamed_since.GaussianEncoder"}
    (saved / "unisent_model.json").write_text(json.dumps(record))
    model = unisent.load(str(saved))
    assert isinstance(model, GaussianEncoder)
    torch.testing.assert_close(
        torch.as_tensor(model.encode(EXPECTED["sentences"])), torch.tensor(EXPECTED["encode"]), atol=1e-5, rtol=1e-5
    )


# ------------------------------------------------------------------------------- flat training keys (issue 66)
def test_a_checkpoint_with_the_flat_training_keys_of_before_loads_them_grouped(tiny_bert_dir, tmp_path):
    """Checkpoints written before ``model.train`` hold ``warmup_steps``, ``head_lr``, ... flat in their
    ``hyper_parameters`` (Lightning's ``save_hyperparameters``), which Lightning would drop as unknown
    arguments: ``UnisentModule.load_from_checkpoint`` gives them back in their groups."""
    import lightning as L

    from unisent.encoders import EncoderConfig
    from unisent.lightning_module import UnisentModule
    from unisent.training_config import HeadsConfig, ScheduleConfig, TrainConfig

    train = TrainConfig(
        schedule=ScheduleConfig(warmup_steps=3, warmup_ratio=0.2, decay="constant"),
        heads=HeadsConfig(lr=1e-2, only_ratio=0.5),
        weight_schedule={"simcse": [(0, 0.0), (2, 1.0)]},
        conflict_every=4,
        cache_chunk=2,
        save_encoder=False,
    )
    module = UnisentModule(encoder=EncoderConfig(model=str(tiny_bert_dir), max_length=24), train=train)
    trainer = L.Trainer(default_root_dir=tmp_path, logger=False, accelerator="cpu")
    trainer.strategy.connect(module)
    new, old = tmp_path / "new.ckpt", tmp_path / "old.ckpt"
    trainer.save_checkpoint(new)
    ckpt = torch.load(new, map_location="cpu", weights_only=True)
    assert ckpt["hyper_parameters"]["train"]["heads"] == {"lr": 1e-2, "only_steps": 0, "only_ratio": 0.5}
    del ckpt["hyper_parameters"]["train"]
    ckpt["hyper_parameters"].update(  # as UnisentModule's 15 flat arguments were saved
        warmup_steps=3,
        warmup_ratio=0.2,
        schedule="constant",
        save_encoder=False,
        weight_schedule={"simcse": [[0, 0.0], [2, 1.0]]},
        conflict_every=4,
        head_lr=1e-2,
        head_only_steps=0,
        head_only_ratio=0.5,
        cache_chunk=2,
    )
    torch.save(ckpt, old)
    for path in (new, old):
        loaded = UnisentModule.load_from_checkpoint(path)
        assert loaded.hparams["train"] == train, path
        assert (loaded.schedule, loaded.heads, loaded.save_encoder) == (train.schedule, train.heads, False)
        assert (loaded.weight_schedule, loaded.conflict_every, loaded.cache_chunk) == (train.weight_schedule, 4, 2)
        for (name, a), b in zip(module.state_dict().items(), loaded.state_dict().values()):
            torch.testing.assert_close(a, b, msg=name)


def test_a_gaussian_heads_file_names_only_the_later_options_it_uses():
    """``gaussian_head.json`` keeps the four settings of the first heads, and a later option only when it is
    set, as the head's sparse dict did: a head that uses none reads where those options are unknown, and a
    file without them (``tests/fixtures/legacy/encoder``) loads with their defaults, the behaviour of then."""
    from unisent.models import GaussianHead

    first = {"hidden_size": 8, "variance": "exp", "mean_activation": "none", "var_floor": 1e-6}
    assert GaussianHead(8).settings == first
    used = GaussianHead(8, point="pooled", length_input=True)
    assert used.settings == first | {"point": "pooled", "length_input": True}
    assert GaussianHead(**used.settings).config == used.config
    saved = json.loads((LEGACY / "encoder" / "gaussian_head.json").read_text())
    config = GaussianHead(**saved).config
    assert (config.point, config.length_input, config.pooler, config.own_layers) == ("mean", False, None, 0)
