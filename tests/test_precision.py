"""``precision: auto``: bf16 where the CPU has AVX512-BF16 or AMX, fp32 on an AVX2-only CPU; explicit wins.

The CPU flags are faked both ways, so every test holds on any machine."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import yaml

import unisent
from unisent import hardware
from unisent.cli import main
from unisent.encoders import Encoder, EncoderConfig

ROOT = Path(__file__).resolve().parents[1]

#: flags of the two machines of docs/benchmarks.md and of an Intel Sapphire Rapids
AVX2_ONLY = frozenset("fpu sse sse2 ssse3 fma avx avx2 f16c bmi2".split())
ZEN4 = AVX2_ONLY | {"avx512f", "avx512bw", "avx512_bf16"}
SAPPHIRE_RAPIDS = AVX2_ONLY | {"avx512f", "avx512_bf16", "amx_tile", "amx_bf16", "amx_int8"}


@pytest.fixture
def cpu(monkeypatch):
    """``cpu(flags)``: make this machine's CPU report ``flags``."""

    def fake(flags: frozenset[str]) -> None:
        monkeypatch.setattr(hardware, "cpu_flags", lambda: flags)

    return fake


def test_auto_picks_fp32_on_an_avx2_only_cpu_and_bf16_with_avx512_bf16_or_amx(cpu):
    assert hardware.choose_precision("cpu", AVX2_ONLY).precision == "32-true"
    assert hardware.choose_precision("cpu", frozenset()).precision == "32-true"  # flags unreadable
    assert hardware.choose_precision("cpu", ZEN4).precision == "bf16-mixed"
    assert hardware.choose_precision("cpu", SAPPHIRE_RAPIDS).precision == "bf16-mixed"
    assert "avx512_bf16" in hardware.choose_precision("cpu", ZEN4).line()
    assert hardware.choose_precision("mps", ZEN4).precision == "32-true"  # no bf16 rule for other devices

    cpu(AVX2_ONLY)
    assert hardware.resolve_precision("auto") == (
        "32-true",
        "precision auto: 32-true (the CPU has no AVX512-BF16 or AMX: bf16 would be ~50x slower)",
    )
    cpu(SAPPHIRE_RAPIDS)
    assert hardware.resolve_precision("AUTO") == ("bf16-mixed", "precision auto: bf16-mixed (the CPU has amx_bf16)")
    for explicit in ("32-true", "bf16-mixed", 32, "16-mixed", None):  # an explicit precision always wins
        assert hardware.resolve_precision(explicit) == (explicit, None)


def test_the_flags_are_read_from_proc_cpuinfo(tmp_path):
    info = tmp_path / "cpuinfo"
    info.write_text(
        "processor\t: 0\ncpu family\t: 25\nmodel\t\t: 17\nmodel name\t: AMD EPYC 9B14\n"
        "flags\t\t: fpu avx2 avx512f avx512_bf16\n\n"
        "processor\t: 1\ncpu family\t: 25\nmodel\t\t: 17\nmodel name\t: AMD EPYC 9B14\nflags\t\t: fpu sse\n"
    )
    fields = hardware.cpu_info.__wrapped__(str(info))
    assert fields["model name"] == "AMD EPYC 9B14" and (fields["cpu family"], fields["model"]) == ("25", "17")
    assert set(fields["flags"].split()) == {"fpu", "avx2", "avx512f", "avx512_bf16"}
    assert hardware.cpu_info.__wrapped__(str(tmp_path / "absent")) == {}


@pytest.mark.parametrize(("flags", "expected"), [(AVX2_ONLY, "32-true"), (ZEN4, "bf16-mixed")])
def test_the_trainer_resolves_auto_and_says_so(cpu, flags, expected, capsys):
    from unisent.trainer import UnisentTrainer

    cpu(flags)
    trainer = UnisentTrainer(precision="auto", accelerator="cpu", logger=False, enable_checkpointing=False)
    assert trainer.precision == expected and trainer.precision_choice == expected
    assert f"unisent: precision auto: {expected}" in capsys.readouterr().err
    explicit = UnisentTrainer(precision="32-true", accelerator="cpu", logger=False, enable_checkpointing=False)
    assert explicit.precision == "32-true" and "precision auto" not in capsys.readouterr().err


def test_a_cpu_recipe_says_auto_and_fit_trains_in_what_it_picks(cpu, tmp_path, tiny_bert_dir, capsys):
    recipe = ROOT / "recipes" / "quickstart.yaml"
    assert yaml.safe_load(recipe.read_text())["trainer"]["precision"] == "auto"
    cpu(AVX2_ONLY)
    args = [
        "fit",
        "-c",
        str(recipe),
        f"--model.encoder.model={tiny_bert_dir}",
        "--trainer.max_steps=2",
        f"--trainer.logger.init_args.save_dir={tmp_path / 'runs'}",
        f"--trainer.default_root_dir={tmp_path}",
        "--trainer.enable_progress_bar=false",
        "--trainer.enable_checkpointing=false",
        "--data.batch_size=4",
    ]
    main(args)
    err = capsys.readouterr().err
    assert "unisent: precision auto: 32-true (the CPU has no AVX512-BF16 or AMX" in err
    saved = yaml.safe_load(next((tmp_path / "runs").rglob("config.yaml")).read_text())
    assert saved["trainer"]["precision"] == "auto"  # the recipe as written; the choice is per machine

    with pytest.raises(SystemExit):  # a mistyped precision is refused in one line with the closest choice
        main([*args, "--trainer.precision=atuo"])
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "trainer.precision: 'atuo' is not one of" in err
    assert "did you mean 'auto'?" in err and "Union" not in err


@pytest.fixture(scope="module")
def model_dir(tiny_bert_dir, tmp_path_factory) -> Path:
    directory = tmp_path_factory.mktemp("encoder")
    Encoder(EncoderConfig(model=str(tiny_bert_dir), pooler="mean", max_length=32)).save_pretrained(directory)
    return directory


def test_encode_auto_is_exact_fp32_on_avx2_and_bf16_where_the_cpu_has_it(cpu, model_dir, tmp_path, capsys):
    sentences = ["a man plays a guitar .", "two dogs run in the park .", "the sun sets over the sea ."] * 3
    source = tmp_path / "in.txt"
    source.write_text("\n".join(sentences) + "\n")
    fp32 = unisent.load(str(model_dir)).encode(sentences).numpy()

    def run(name: str, *extra: str) -> tuple[np.ndarray, str]:
        out = tmp_path / f"{name}.npy"
        main(["encode", "--model", str(model_dir), "--input", str(source), "--output", str(out), "--quiet", *extra])
        return np.load(out), capsys.readouterr().out

    cpu(AVX2_ONLY)
    got, said = run("avx2")
    assert "precision auto: fp32, the CPU has no AVX512-BF16 or AMX" in said
    np.testing.assert_allclose(got, fp32, atol=1e-6, rtol=0)
    cpu(ZEN4)
    got, said = run("zen4")
    assert "precision auto: bf16, the CPU has avx512_bf16" in said
    assert got.dtype == np.float32 and np.abs(got - fp32).max() > 1e-5  # bf16: 10x past fp32 noise (1e-6 above)
    cosine = (got * fp32).sum(1) / np.linalg.norm(got, axis=1) / np.linalg.norm(fp32, axis=1)
    assert cosine.min() > 0.99
    got, said = run("explicit", "--precision", "fp32")  # explicit wins over the flags
    assert said.rstrip().endswith("fp32)")
    np.testing.assert_allclose(got, fp32, atol=1e-6, rtol=0)


@pytest.mark.integration
def test_evaluate_keeps_fp32_unless_asked(cpu, model_dir, tmp_path, capsys):
    import json

    from unisent.commands.evaluate import main as evaluate_main

    cpu(ZEN4)
    scores = {}
    for precision in ("fp32", "auto", "bf16"):
        out = tmp_path / f"{precision}.json"
        extra = [] if precision == "fp32" else ["--precision", precision]  # fp32 is the default
        evaluate_main(["--model", str(model_dir), "--tasks", "stsb-dev", "--output", str(out), "--quiet", *extra])
        result = json.loads(out.read_text())
        scores[precision] = (result["config"]["precision"], result["tasks"]["stsb-dev"]["score"])
    assert "precision auto: bf16, the CPU has avx512_bf16" in capsys.readouterr().err
    assert scores["fp32"][0] == "fp32" and scores["auto"][0] == scores["bf16"][0] == "bf16"
    assert scores["auto"] == scores["bf16"] and scores["bf16"][1] != scores["fp32"][1]


@pytest.mark.parametrize(("flags", "bf16"), [(AVX2_ONLY, False), (ZEN4, True)])
def test_one_rule_for_the_python_api_the_cli_and_training(cpu, flags, bf16, model_dir, tmp_path, capsys):
    """Issue 41: ``model.encode`` with no precision named, ``unisent encode`` at its default and a Trainer
    (or recipe) that names no precision all resolve ``auto`` the same way on the same CPU."""
    from unisent.trainer import UnisentTrainer

    cpu(flags)
    sentences = ["a man plays a guitar .", "two dogs run in the park .", "the sun sets over the sea ."] * 3
    model = unisent.load(str(model_dir))
    api = model.encode(sentences).numpy()  # the Python API's default: auto
    explicit = model.encode(sentences, precision="bf16" if bf16 else "fp32").numpy()
    np.testing.assert_array_equal(api, explicit)
    assert hardware.inference_precision("auto")[0] is bf16 and hardware.inference_precision("fp32")[0] is False

    source, out = tmp_path / "in.txt", tmp_path / "out.npy"
    source.write_text("\n".join(sentences) + "\n")
    main(["encode", "--model", str(model_dir), "--input", str(source), "--output", str(out), "--quiet"])
    assert f"precision auto: {'bf16' if bf16 else 'fp32'}" in capsys.readouterr().out
    np.testing.assert_allclose(np.load(out), api, atol=1e-6, rtol=0)

    trainer = UnisentTrainer(accelerator="cpu", logger=False, enable_checkpointing=False)  # no precision
    assert trainer.precision == ("bf16-mixed" if bf16 else "32-true")
    assert "unisent: precision auto:" in capsys.readouterr().err


def test_a_recipe_without_precision_trains_by_the_same_rule(cpu, tmp_path, tiny_bert_dir, capsys):
    recipe = yaml.safe_load((ROOT / "recipes" / "quickstart.yaml").read_text())
    del recipe["trainer"]["precision"]
    path = tmp_path / "recipe.yaml"
    path.write_text(yaml.safe_dump(recipe))
    cpu(ZEN4)
    main(
        [
            "fit",
            "-c",
            str(path),
            f"--model.encoder.model={tiny_bert_dir}",
            "--trainer.max_steps=1",
            f"--trainer.logger.init_args.save_dir={tmp_path / 'runs'}",
            f"--trainer.default_root_dir={tmp_path}",
            "--trainer.enable_progress_bar=false",
            "--trainer.enable_checkpointing=false",
            "--data.batch_size=4",
        ]
    )
    assert "unisent: precision auto: bf16-mixed (the CPU has avx512_bf16)" in capsys.readouterr().err
    saved = yaml.safe_load(next((tmp_path / "runs").rglob("config.yaml")).read_text())
    assert saved["trainer"]["precision"] == "auto"  # the default the recipe left out


def test_the_precision_names_are_lightnings():
    """``LIGHTNING_PRECISIONS`` (what ``unisent ablate --precision`` accepts beside auto/fp32/bf16) is Lightning's
    own list, so a Lightning release that adds or drops a name fails here rather than in a study's runs."""
    from typing import get_args

    from lightning.fabric.connector import _PRECISION_INPUT_STR, _PRECISION_INPUT_STR_ALIAS

    from unisent.hardware import LIGHTNING_PRECISIONS

    assert set(LIGHTNING_PRECISIONS) == set(get_args(_PRECISION_INPUT_STR)) | set(get_args(_PRECISION_INPUT_STR_ALIAS))
