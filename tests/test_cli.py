"""Every recipe is accepted by the real CLI; bad config keys fail clearly; a CLI fit runs end to end."""

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

from unisent.cli import main
from unisent.resources import EVALUATION_DATA_DIR  # noqa: E402

from .conftest import recipe_files

#: the repository's training, benchmark and test samples (not in the wheel)
SAMPLE_DIR = Path(__file__).resolve().parents[1] / "samples"

ROOT = Path(__file__).resolve().parents[1]
RECIPES = recipe_files()


@pytest.mark.integration
@pytest.mark.parametrize("recipe", RECIPES, ids=lambda p: str(p.relative_to(ROOT / "recipes")))
def test_recipe_is_accepted_by_the_cli(recipe, capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["fit", "-c", str(recipe), "--print_config"])
    assert exit_.value.code in (0, None)
    config = yaml.safe_load(capsys.readouterr().out)
    assert config["model"]["objectives"], recipe
    assert config["data"]["train"], recipe


def test_logger_presets_compose_with_a_recipe(capsys):
    for logger in ("wandb", "tensorboard"):
        with pytest.raises(SystemExit):
            main(
                [
                    "fit",
                    "-c",
                    str(ROOT / "recipes/quickstart.yaml"),
                    "-c",
                    str(ROOT / f"recipes/loggers/{logger}.yaml"),
                    "--print_config",
                ]
            )
        assert logger.replace("tensorboard", "TensorBoard").lower() in capsys.readouterr().out.lower()


def test_unknown_config_key_is_named(tmp_path, capsys):
    bad = tmp_path / "bad.yaml"
    bad.write_text("model:\n  encoder:\n    modle: minilm-l6\n")
    with pytest.raises(SystemExit) as exit_:
        main(["fit", "-c", str(bad), "--print_config"])
    assert exit_.value.code != 0
    assert "modle" in capsys.readouterr().err


def test_unknown_pooler_lists_choices(tmp_path, tiny_bert_dir, capsys):
    with pytest.raises(SystemExit):
        main(
            ["fit", "-c", str(ROOT / "recipes/quickstart.yaml"), "--model.encoder.pooler", "average", "--print_config"]
        )
    err = capsys.readouterr().err
    assert "average" in err and "cls_mlp_train_only" in err and "avg_first_last" in err


def _fit_args(tmp_path, model_dir, recipe="recipes/quickstart.yaml"):
    return [
        "fit",
        "-c",
        str(ROOT / recipe),
        "--model.encoder.model",
        str(model_dir),
        "--trainer.max_steps",
        "3",
        "--trainer.max_epochs",
        "1",
        "--trainer.logger.init_args.save_dir",
        str(tmp_path / "runs"),
        "--trainer.default_root_dir",
        str(tmp_path),
        "--trainer.enable_progress_bar",
        "false",
        "--trainer.log_every_n_steps",
        "1",
        "--data.batch_size",
        "8",
    ]


@pytest.mark.integration
def test_fit_selects_by_stsb_dev_and_test_uses_the_best_checkpoint(tmp_path, tiny_bert_dir, capsys):
    main(_fit_args(tmp_path, tiny_bert_dir) + ["--trainer.val_check_interval", "2", "--trainer.max_steps", "4"])
    run = next((tmp_path / "runs").rglob("metrics.csv")).parent
    metrics = pd.read_csv(run / "metrics.csv")
    assert metrics["train/simcse/contrastive"].notna().any()
    dev = metrics["val/stsb-dev"].dropna()
    assert len(dev) == 2 and dev.between(-100, 100).all()  # evaluated at steps 2 and 4
    assert (metrics["val/stsb-dev/spearman"].dropna().to_numpy() == dev.to_numpy()).all()
    assert metrics["val/stsb-dev/pearson"].notna().sum() == 2
    assert (run / "config.yaml").is_file() and (run / "encoder" / "config.json").is_file()
    best = run / "checkpoints" / "best.ckpt"
    assert best.is_file() and (run / "checkpoints" / "last.ckpt").is_file()
    capsys.readouterr()
    main(["test", "-c", str(run / "config.yaml"), "--ckpt_path", str(best), "--trainer.logger", "false"])
    out = capsys.readouterr().out
    assert "test/stsb-test" in out


def test_evaluate_command_errors_name_the_problem(tmp_path, capsys):
    from unisent.commands.evaluate import main as evaluate_main

    with pytest.raises(SystemExit, match="(?s)unknown task.*stsb-test"):
        evaluate_main(["--model", "minilm-l6", "--tasks", "stsb-tset", "--quiet"])
    with pytest.raises(SystemExit, match=str(tmp_path / "nowhere")):
        evaluate_main(
            ["--model", "minilm-l6", "--tasks", "stsb-dev", "--data-dir", str(tmp_path / "nowhere"), "--quiet"]
        )
    evaluate_main(["--list"])
    assert "stsb-test" in capsys.readouterr().out


def test_evaluate_command_on_a_saved_encoder_writes_json(tmp_path, tiny_bert_dir, capsys):
    import json

    from unisent.commands.evaluate import main as evaluate_main

    out = tmp_path / "res.json"
    evaluate_main(["--model", str(tiny_bert_dir), "--tasks", "stsb-dev", "--output", str(out), "--quiet"])
    assert "| stsb-dev |" in capsys.readouterr().out
    result = json.loads(out.read_text())["tasks"]["stsb-dev"]
    assert result["main_metric"] == "spearman" and -100 <= result["score"] <= 100


@pytest.mark.slow
@pytest.mark.parametrize("recipe", RECIPES, ids=lambda p: str(p.relative_to(ROOT / "recipes")))
def test_recipe_runs_a_few_steps_on_a_tiny_model(recipe, tmp_path, tiny_bert_dir, tiny_recipe):
    """Every recipe (AMR and NLI included) on the tiny BERT, each objective on a bundled sample or a file
    derived from one (tests/conftest.py: ``tiny_recipe_config``), with the recipe's own objective settings."""

    config = tiny_recipe(recipe, swap_all=True)
    args = _fit_args(tmp_path, tiny_bert_dir, str(config)) + ["--trainer.precision", "32-true"]
    args += [
        "--trainer.logger",
        "lightning.pytorch.loggers.CSVLogger",
        "--trainer.logger.init_args.save_dir",
        str(tmp_path / "runs"),
        f"--model.evaluation.data_dir={EVALUATION_DATA_DIR}",
        "--checkpoint.monitor=val/score",
        "--trainer.val_check_interval=2",
        "--trainer.check_val_every_n_epoch=null",
        "--trainer.accumulate_grad_batches=1",
        "--trainer.limit_val_batches=1.0",
    ]
    main(args)
    metrics = pd.read_csv(next((tmp_path / "runs").rglob("metrics.csv")))
    assert metrics["train/loss"].notna().sum() == 3 and np.isfinite(metrics["train/loss"].dropna()).all()
    assert metrics["val/stsb-dev"].notna().any()
    assert list((tmp_path / "runs").rglob("encoder/unisent_encoder.json"))


# ------------------------------------------------------------------- one CLI system (jsonargparse)
def test_help_lists_every_command_without_importing_torch():
    import subprocess
    import sys

    code = (
        "import sys; from unisent.cli import main; main(['--help']); "
        "print('HEAVY', sorted(m for m in ('torch', 'lightning', 'transformers') if m in sys.modules))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    listed = [line.split()[0] for line in done.stdout.split("commands:\n")[1].split("\n\n")[0].splitlines()]
    assert listed == [
        "fit",
        "validate",
        "test",
        "predict",
        "evaluate",
        "export",
        "encode",
        "data",
        "sweep",
        "retrofit",
        "ablate",
        "convert-checkpoint",
        "merge",
    ]
    assert "HEAVY []" in done.stdout


def test_fit_help_is_short_and_imports_no_torch():
    """``unisent fit --help`` answers from a curated list without importing torch, Lightning or transformers
    (under 2 s: issue 37); ``--help-all`` is Lightning's full tree."""
    import subprocess
    import sys

    code = (
        "import sys; from unisent.cli import main; main(['fit', '-c', 'recipe.yaml', '--help']); "
        "print('HEAVY', sorted(m for m in ('torch', 'lightning', 'transformers') if m in sys.modules))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.startswith("usage: unisent fit [-c RECIPE.yaml]") and "HEAVY []" in done.stdout
    assert "--trainer.max_steps N" in done.stdout and "--help-all" in done.stdout
    assert len(done.stdout.splitlines()) < 70


def test_every_option_of_the_short_help_is_accepted_by_the_real_parser(capsys):
    """Each option that ``unisent fit|predict --help`` lists, given its example value, is parsed by Lightning's
    parser into that key of the config (so the short help cannot name an option that does not exist)."""
    from unisent.cli import FULL_HELP, NAME, OPTIONS, short_help

    args, expected = ["--ckpt_path=last"], {"ckpt_path": "last"}
    for _, options in OPTIONS:
        for option, _, example, _ in options:
            if example is not None:
                key = option[2:].replace(NAME, "simcse")  # the quickstart recipe's source
                args.append(f"--{key}={example}")
                expected[key] = yaml.safe_load(example)
    for command in ("fit", "predict"):
        listed = short_help(command)
        assert all(f"--{key.replace('simcse', NAME)} " in listed for key in expected), command
        with pytest.raises(SystemExit) as exit_:
            main([command, "-c", str(ROOT / "recipes/quickstart.yaml"), *args, "--print_config"])
        assert exit_.value.code in (0, None), capsys.readouterr().err
        config = yaml.safe_load(capsys.readouterr().out)
        for key, value in expected.items():
            got = config
            for part in key.split("."):
                got = got[part]
            got = got["class_path"] if isinstance(got, dict) else got
            assert got == value or str(got) == str(value), key  # (trainer.devices keeps the string '1')
    # the options that are no config key: -c/--config and --print_config (above), --help-all, --verbose
    with pytest.raises(SystemExit) as exit_:
        main(["fit", "--verbose", FULL_HELP])
    assert exit_.value.code in (0, None)
    full = capsys.readouterr().out
    assert "--trainer.max_steps MAX_STEPS" in full and "--checkpoint.every_n_train_steps" in full
    assert all(option in full for option in ("--config", "--print_config", "--ckpt_path", "--seed_everything"))
    assert all(f"  {option}" in full for option in ("--import MODULE", "--verbose", FULL_HELP))  # unisent's own


def test_version_and_unknown_command(capsys):
    from importlib.metadata import version

    main(["--version"])
    assert capsys.readouterr().out.strip() == f"unisent {version('unisent')}"
    with pytest.raises(SystemExit) as exit_:
        main(["encdoe"])
    assert exit_.value.code == 2
    assert "unknown command 'encdoe'" in capsys.readouterr().err


def test_encode_print_config_and_config_round_trip(tmp_path, capsys, monkeypatch):
    from unisent.commands import function_commands as _cli

    with pytest.raises(SystemExit) as exit_:
        main(
            [
                "encode",
                "--model",
                "m",
                "--input",
                "in.txt",
                "--output",
                "o.npy",
                "--batch-size",
                "8",
                "--on-empty",
                "zero",
                "--normalize",
                "--print_config",
            ]
        )
    assert exit_.value.code in (0, None)
    config = yaml.safe_load(capsys.readouterr().out)
    assert config == {
        "model": "m",
        "input": "in.txt",
        "output": "o.npy",
        "column": "text",
        "batch_size": 8,
        "chunk_size": 8192,
        "normalize": True,
        "precision": "auto",
        "on_empty": "zero",
        "encoding": "utf-8",
        "device": None,
        "max_length": None,
        "overwrite": False,
        "quiet": False,
        "backend": "torch",
        "onnx_file": None,
        "truncate_dim": None,
    }
    saved = tmp_path / "encode.yaml"
    saved.write_text(yaml.safe_dump(config))
    seen = {}  # the values that reach the command function; the command line overrides the file
    monkeypatch.setattr(_cli, "call", lambda function, values, prog: seen.update(values, prog=prog))
    main(["encode", "--config", str(saved), "--batch_size=16", "--no-normalize"])
    assert seen == {**config, "batch_size": 16, "normalize": False, "prog": "unisent encode"}


def test_config_errors_are_one_line_with_the_key_and_file(tmp_path, capsys):
    bad = tmp_path / "bad.yaml"
    bad.write_text("model: m\ninput: i\noutput: o\nbatch_sise: 3\n")
    with pytest.raises(SystemExit) as exit_:
        main(["encode", "--config", str(bad)])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "batch_sise" in err and str(bad) in err
    assert err.startswith("unisent encode: error:") and "usage:" not in err
    with pytest.raises(SystemExit) as exit_:
        main(["export", "src", "--format", "tflite", "--out", str(tmp_path / "x")])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "format" in err and "tflite" in err
    with pytest.raises(SystemExit) as exit_:
        main(["data", "nli-triples", "--input", "x", "--output", "y"])  # --format is required
    assert exit_.value.code == 2 and "format" in capsys.readouterr().err


def test_export_positional_lists_and_negated_flags(tmp_path, capsys):
    with pytest.raises(SystemExit):
        main(
            [
                "export",
                "runs/x/best.ckpt",
                "--format",
                "huggingface",
                "--out",
                "o",
                "--training-data",
                "a",
                "--training-data",
                "b",
                "c",
                "--no-verify",
                "--overwrite",
                "--print_config",
            ]
        )
    config = yaml.safe_load(capsys.readouterr().out)
    assert config["source"] == "runs/x/best.ckpt" and config["training_data"] == ["a", "b", "c"]
    assert config["verify"] is False and config["overwrite"] is True
    with pytest.raises(SystemExit):
        main(
            [
                "data",
                "amr-linearize",
                "--input",
                "a.txt",
                "b.txt",
                "--output",
                "o.jsonl",
                "--no-parentheses",
                "--keep-wiki",
                "--print_config",
            ]
        )
    config = yaml.safe_load(capsys.readouterr().out)
    assert config["input"] == ["a.txt", "b.txt"] and config["parentheses"] is False and config["keep_wiki"] is True


def test_every_command_has_help_and_print_config(capsys):
    from unisent.commands.data import builders

    for words in (["evaluate"], ["export"], ["encode"], ["data"], *(["data", name] for name in builders())):
        with pytest.raises(SystemExit) as exit_:
            main([*words, "--help"])
        assert exit_.value.code in (0, None), words
        out = capsys.readouterr().out
        assert out.startswith(f"usage: unisent {' '.join(words)}"), words
        if words != ["data"]:
            assert "--config" in out and "--print_config" in out, words


# ------------------------------------------------------------------ typos, abbreviations, a quiet fit
def _parse_error(capsys, *args: str) -> str:
    with pytest.raises(SystemExit) as exit_:
        main(["fit", "-c", str(ROOT / "recipes/quickstart.yaml"), *args, "--print_config"])
    assert exit_.value.code == 2
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(err) == 1, err
    return err[0]


def test_a_mistyped_key_gets_did_you_mean(tmp_path, capsys):
    line = _parse_error(capsys, "--model.objectives.0.init_args.temprature=0.05")
    assert (
        "model.objectives.0.init_args.temprature: unisent.objectives.SimCSE has no argument 'temprature' "
        "(did you mean 'temperature'?)"
    ) in line and len(line) < 400
    typo = tmp_path / "typo.yaml"
    typo.write_text("trainer:\n  max_stepz: 3\n")
    line = _parse_error(capsys, "-c", str(typo))
    assert "--trainer.max_stepz: did you mean --trainer.max_steps" in line and str(typo) in line


def test_an_abbreviated_option_is_an_error_with_a_suggestion(capsys):
    # argparse would take --trainer.max_step as --trainer.max_steps (a unique prefix)
    line = _parse_error(capsys, "--trainer.max_step=2")
    assert line.startswith("unisent fit: error: unrecognized arguments: --trainer.max_step=2")
    assert "did you mean --trainer.max_steps" in line


@pytest.mark.slow  # 45 s: two fits of the quickstart; only `encode`'s quiet output stays in the default run
def test_a_plain_fit_is_quiet_and_verbose_restores_the_rest(tmp_path, tiny_quickstart):
    """`unisent fit -c recipes/quickstart.yaml --trainer.max_steps=2` (on the tiny model): the progress bar
    and at most a few lines (issue 29: it printed 30); --verbose brings back the model summary and the rest."""
    import subprocess

    command, env = tiny_quickstart(COLUMNS="100")
    quiet = subprocess.run(command, env=env, cwd=ROOT, capture_output=True, text=True)
    assert quiet.returncode == 0, quiet.stderr[-3000:]
    # the progress bar redraws with \r (TQDM) or cursor moves (rich); its lines mention the epoch
    lines = [
        line
        for line in (quiet.stdout + quiet.stderr).replace("\r", "\n").splitlines()
        if line.strip() and not line.lstrip().startswith(("Epoch", "train/loss"))
    ]
    assert len(lines) <= 12, lines
    assert any(line.startswith("unisent: trained encoder saved to") for line in lines), lines
    for noise in (
        "Loading weights",
        "Writing model shards",
        "LeafSpec",
        "litlogger",
        "Total params",
        "v_num",
        "could not find the monitored key",
        "GPU available",
    ):
        assert noise not in quiet.stdout + quiet.stderr, noise
    verbose = subprocess.run([*command, "--verbose"], env=env, cwd=ROOT, capture_output=True, text=True)
    assert verbose.returncode == 0, verbose.stderr[-3000:]
    assert "Total params" in verbose.stdout + verbose.stderr and "GPU available" in verbose.stdout + verbose.stderr


def test_an_option_that_is_a_choice_of_another_is_pointed_to_it(capsys):
    """`--bf16` (the flag before --precision): one line naming --precision bf16; an unrelated word gets no hint."""
    for words in (["encode", "--model", "m", "--input", "i", "--output", "o"], ["evaluate", "--model", "m"]):
        with pytest.raises(SystemExit) as exit_:
            main([*words, "--bf16"])
        assert exit_.value.code == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and "(--bf16: did you mean --precision bf16?)" in err
    with pytest.raises(SystemExit):
        main(["encode", "--model", "m", "--input", "i", "--output", "o", "--zero"])  # a choice of --on-empty
    assert "did you mean --on-empty zero?" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["encode", "--model", "m", "--input", "i", "--output", "o", "--foo"])
    assert "did you mean" not in capsys.readouterr().err
