"""Every command of docs/scaling.md is accepted by the real CLI, and keeps the paper's global batch (the
object-storage example, on the quickstart recipe, is checked apart: it parses, and names s3:// where it says)."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest
import yaml

from unisent.cli import main

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "scaling.md"
PRESETS = sorted((ROOT / "recipes" / "trainers").glob("*.yaml"))


def _bash_blocks(text: str) -> list[str]:
    return re.findall(r"```bash\n(.*?)```", text, flags=re.S)


def _commands(block: str) -> list[str]:
    """Shell commands of a block, continuation lines joined, comment lines dropped."""
    out, current = [], ""
    for line in block.splitlines():
        if not current and (not line.strip() or line.lstrip().startswith("#")):
            continue
        current += line.rstrip("\\").rstrip() + " " if line.endswith("\\") else line
        if not line.endswith("\\"):
            out.append(current.strip())
            current = ""
    return out


def _sbatch(block: str) -> dict[str, str]:
    return dict(re.findall(r"^#SBATCH --([\w-]+)=(\S+)", block, flags=re.M))


def _sections(text: str) -> tuple[str, str]:
    """The doc without its "Object storage" section, and that section."""
    start = text.index("### Object storage")
    end = re.compile(r"^#{2,3} ", flags=re.M).search(text, start + 1).start()
    return text[:start] + text[end:], text[start:end]


SCALING_TEXT, STORAGE_TEXT = _sections(DOC.read_text())


def _doc_commands() -> list[tuple[str, list[str], dict[str, int]]]:
    """(command line, `unisent` arguments, the launcher's process layout) for each command."""
    found = []
    for block in _bash_blocks(SCALING_TEXT):
        for line in _commands(block):
            words = shlex.split(line, comments=True)
            if words[0] == "unisent":
                found.append((line, words[1:], {}))
            elif words[0] == "torchrun":
                m = words.index("-m")
                assert words[m + 1] == "unisent.cli", line
                opts = dict(zip(words[1:m:2], words[2:m:2]))
                found.append(
                    (
                        line,
                        words[m + 2 :],
                        {"num_nodes": int(opts["--nnodes"]), "devices": int(opts["--nproc-per-node"])},
                    )
                )
            elif words[0] == "srun":
                assert words[1] == "unisent", line
                sbatch = _sbatch(block)
                found.append(
                    (line, words[2:], {"num_nodes": int(sbatch["nodes"]), "devices": int(sbatch["ntasks-per-node"])})
                )
    return found


COMMANDS = _doc_commands()


def test_the_doc_has_the_commands_for_one_gpu_eight_gpus_and_two_nodes():
    kinds = set()
    for line, args, _ in COMMANDS:
        preset = next(args[i + 1] for i, a in enumerate(args[:-1]) if a == "-c" and "trainers/" in args[i + 1])
        kinds.add((line.split()[0], Path(preset).name))
    assert {
        ("unisent", "1gpu.yaml"),
        ("unisent", "8xa100-ddp.yaml"),
        ("torchrun", "2x8xa100-ddp.yaml"),
        ("srun", "2x8xa100-ddp.yaml"),
        ("unisent", "8xa100-fsdp.yaml"),
    } <= kinds


@pytest.mark.integration
@pytest.mark.parametrize("line,args,launcher", COMMANDS, ids=[c[0][:80] for c in COMMANDS])
def test_doc_command_parses_and_keeps_the_papers_global_batch(line, args, launcher, capsys, monkeypatch):
    monkeypatch.chdir(ROOT)
    assert args[0] == "fit"
    with pytest.raises(SystemExit) as exit_:
        main(args + ["--print_config"])
    assert exit_.value.code in (0, None), capsys.readouterr().err[-2000:]
    config = yaml.safe_load(capsys.readouterr().out)
    trainer = config["trainer"]
    devices, nodes = int(trainer["devices"]), int(trainer["num_nodes"])
    for key, value in launcher.items():  # torchrun / srun start exactly the processes the preset expects
        assert {"num_nodes": nodes, "devices": devices}[key] == value, (key, line)
    recipe = ROOT / args[args.index("-c") + 1]
    paper_batch = yaml.safe_load(recipe.read_text())["data"]["batch_size"]
    assert config["data"]["batch_size"] * devices * nodes == paper_batch, line
    comment = re.search(r"#\s*(?:(\d+) x )?(\d+) x (\d+) = (\d+)", line)
    if comment:  # the doc's own arithmetic
        n, d, b, total = (int(x) if x else 1 for x in comment.groups())
        assert (n * d, b, total) == (nodes * devices, config["data"]["batch_size"], paper_batch), line
    assert trainer["precision"] == "bf16-mixed"


def test_the_batch_table_matches_the_recipes():
    rows = re.findall(r"^\| `(recipes/[^`]+)` \| (\d+) \| (\d+) \| (\d+) \| (\d+) \|$", DOC.read_text(), flags=re.M)
    assert len(rows) >= 6
    for recipe, paper, one, eight, sixteen in rows:
        assert yaml.safe_load((ROOT / recipe).read_text())["data"]["batch_size"] == int(paper), recipe
        assert int(one) == int(paper) == 8 * int(eight) == 16 * int(sixteen), recipe


def test_the_doc_shows_the_sbatch_script_verbatim():
    script = (ROOT / "recipes" / "trainers" / "slurm-2x8xa100.sbatch").read_text()
    assert script in [block for block in _bash_blocks(DOC.read_text())]
    sbatch = _sbatch(script)
    preset = yaml.safe_load((ROOT / "recipes/trainers/2x8xa100-ddp.yaml").read_text())["trainer"]
    assert (int(sbatch["nodes"]), int(sbatch["ntasks-per-node"]), int(sbatch["gpus-per-node"])) == (
        preset["num_nodes"],
        preset["devices"],
        preset["devices"],
    )


@pytest.mark.parametrize("preset", PRESETS, ids=lambda p: p.name)
def test_every_trainer_preset_composes_with_a_recipe(preset, capsys, monkeypatch):
    monkeypatch.chdir(ROOT)
    with pytest.raises(SystemExit) as exit_:
        main(["fit", "-c", "recipes/simcse/unsup-bert-base.yaml", "-c", str(preset), "--print_config"])
    assert exit_.value.code in (0, None)
    config = yaml.safe_load(capsys.readouterr().out)
    assert config["trainer"]["accelerator"] == "gpu" and config["trainer"]["precision"] == "bf16-mixed"


def test_the_fsdp_strategy_wraps_transformer_layers():
    from transformers.models.bert.modeling_bert import BertLayer

    from unisent.strategies import EncoderFSDP

    strategy = EncoderFSDP(activation_checkpointing=True)
    assert BertLayer in strategy.kwargs["auto_wrap_policy"]._module_classes
    assert BertLayer in strategy._activation_checkpointing_kwargs["auto_wrap_policy"]._module_classes
    assert strategy.sharding_strategy.name == "FULL_SHARD" and strategy._state_dict_type == "full"
    with pytest.raises(ValueError, match="cannot be imported"):
        EncoderFSDP(layer_classes=["transformers.models.nope.Layer"])


def test_the_object_storage_example_parses_with_its_runs_and_data_on_s3(capsys, monkeypatch):
    monkeypatch.chdir(ROOT)
    lines = [line for block in _bash_blocks(STORAGE_TEXT) for line in _commands(block)]
    fits = [shlex.split(line, comments=True)[1:] for line in lines if line.startswith("unisent fit")]
    assert len(fits) == 2 and fits[1] == [*fits[0], "--ckpt_path", "last"]  # the same command resumes
    with pytest.raises(SystemExit) as exit_:
        main(fits[0] + ["--print_config"])
    assert exit_.value.code in (0, None), capsys.readouterr().err[-2000:]
    config = yaml.safe_load(capsys.readouterr().out)
    assert config["trainer"]["logger"]["init_args"]["save_dir"] == "s3://my-bucket/runs"
    assert config["data"]["train"]["simcse"]["path"] == "s3://my-bucket/data/part-*.jsonl"
    assert config["data"]["train"]["simcse"]["streaming"] is True
    models = [line for line in lines if line.startswith(("unisent encode", "unisent evaluate", "unisent export"))]
    assert len(models) == 3 and all("s3://my-bucket/runs/quickstart/version_0/" in line for line in models)
