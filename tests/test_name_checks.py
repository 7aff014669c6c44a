"""Every name in a recipe or command is checked before the first training step (issue 39): evaluation tasks
and groups, panel columns, objective names of the per-objective settings, a pooler's Sentence Transformers
pooling mode, a torchjd aggregator. Each mistake is one line with a "did you mean"; nothing is loaded to
check it, and a checkpoint whose stored settings name an unknown task still loads for inference."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import yaml

from tests.conftest import run_cli
from unisent.data import DataSource, UnisentDataModule
from unisent.data.record_errors import DataConfigError
from unisent.evaluation.name_checks import check_evaluation_names
from unisent.io import import_object
from unisent.training_config import EvaluationConfig, ModelConfigError, check_weight_schedule

ROOT = Path(__file__).resolve().parents[1]
SAMPLE_DIR = ROOT / "samples"
RECIPES = sorted(p for p in (ROOT / "recipes").rglob("*.yaml") if not {"loggers", "sweeps"} & set(p.parts))

pytestmark = pytest.mark.usefixtures("one_thread")


def _one_line(err: BaseException) -> str:
    text = str(err)
    assert "\n" not in text, text
    return text


# ------------------------------------------------------------------------------- through `unisent fit`
@pytest.mark.integration
def test_a_misspelled_val_task_stops_fit_before_the_first_step(tiny_quickstart, tmp_path):
    """`unisent fit ... --model.evaluation.val_tasks=[stsb-dve]`: one line, status 1, before any data is
    tokenised or any step runs (either would be killed by the fault points: status -9), no run left."""
    command, env = tiny_quickstart(
        "--model.evaluation.val_tasks=[stsb-dve]", UNISENT_FAULT="cache_write@1=SIGKILL,train_step@1=SIGKILL"
    )
    done = run_cli(command, env=env, cwd=tmp_path)
    assert done.returncode == 1, (done.returncode, done.stderr[-3000:])
    err = done.stderr.strip()
    assert len(err.splitlines()) == 1, err
    assert err.startswith("unisent fit: error: model.evaluation.val_tasks: unknown task or group 'stsb-dve'"), err
    assert "did you mean 'stsb-dev'" in err and "unisent.evaluation.register_task" in err and "--import" in err
    assert "Epoch" not in done.stdout + done.stderr  # no training progress
    assert not list(tmp_path.rglob("metrics.csv")) and not list(tmp_path.rglob("*.ckpt"))


def test_a_pooling_mode_and_an_aggregator_are_one_line_in_fit(tiny_bert_dir, tmp_path, monkeypatch, capsys):
    from unisent.cli import main
    from unisent.encoders import POOLERS

    (tmp_path / "my_weighted_pooler.py").write_text(_WEIGHTED_POOLER, encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr("unisent.encoders.poolers.POOLERS", dict(POOLERS))
    base = [
        "fit",
        "-c",
        str(ROOT / "recipes/quickstart.yaml"),
        f"--model.encoder.model={tiny_bert_dir}",
        f"--trainer.logger.init_args.save_dir={tmp_path / 'runs'}",
    ]
    for extra, expected in (
        (
            ["--model.encoder.pooler=my_weighted_pooler.WeightedPooler"],
            "model.encoder.pooler 'weighted': unknown Sentence Transformers pooling mode 'weightedmean' "
            "(did you mean 'weightedmean_tokens'?); valid: cls_token, mean_tokens",
        ),
        (
            ["--model.balancer=unisent.balancers.JacobianAggregator", "--model.balancer.init_args.aggregator=UPgrad"],
            "model.balancer.init_args.aggregator: unknown torchjd aggregator 'UPgrad' (did you mean 'UPGrad'?)",
        ),
    ):
        with pytest.raises(SystemExit) as done:
            main(base + extra)
        assert done.value.code == 1
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and expected in err, err
    assert not (tmp_path / "runs").exists()


_WEIGHTED_POOLER = """
from unisent.encoders.poolers import Pooler, register_pooler, st_pooling


@register_pooler("weighted")
class WeightedPooler(Pooler):
    def forward(self, last_hidden, attention_mask, hidden_states=None):
        return last_hidden[:, 0]

    def sentence_transformers_modules(self, backbone_config):
        return [st_pooling(self.hidden_size, "weightedmean")]  # Sentence Transformers' short name: refused
"""


# ------------------------------------------------------------------------------- model.evaluation
@pytest.mark.parametrize(
    "settings, expected",
    [
        ({"val_tasks": ["stsb-dev", "nli-as-sts"]}, "model.evaluation.val_tasks: unknown task or group 'nli-as-sts'"),
        ({"test_tasks": ["stsb-tset"]}, "model.evaluation.test_tasks: unknown task or group 'stsb-tset' (did you mean"),
        ({"test_tasks": "stsb-test,transfre"}, "'transfre' (did you mean 'transfer'?)"),
        ({"panel": ["stsb-test", "sick-rr"]}, "model.evaluation.panel: unknown panel column 'sick-rr' (did you mean"),
        ({"panel_own": {"simcse": "stsb-tst"}}, "model.evaluation.panel_own.simcse: unknown panel column 'stsb-tst'"),
        (
            {"panel_own": {"simcs": "stsb-test"}},
            "model.evaluation.panel_own names 'simcs' (did you mean 'simcse'?), but the model's objectives are: simcse",
        ),
        ({"panel_targets": {"tatoeba-de": 80.0}}, "model.evaluation.panel_targets: unknown panel column 'tatoeba-de'"),
    ],
)
def test_every_evaluation_name_is_checked(settings, expected):
    with pytest.raises(ModelConfigError) as err:
        check_evaluation_names(EvaluationConfig(**settings), ["simcse", "ease"], "fit")
    assert expected in _one_line(err.value)
    if "_tasks" in expected:
        assert "unisent.evaluation.register_task" in str(err.value) and "unisent evaluate --list" in str(err.value)
    elif "panel column" in expected:
        assert "valid: stsb-test, sick-r" in str(err.value)


def test_each_command_checks_the_names_it_uses():
    config = EvaluationConfig(val_tasks=["stsb-dev"], test_tasks=["stsb-tset"], panel=["nope"])
    check_evaluation_names(config, ["simcse"], "validate")  # runs val_tasks only
    check_evaluation_names(config, ["simcse"], "predict")  # runs no task
    with pytest.raises(ModelConfigError, match="test_tasks"):
        check_evaluation_names(config, ["simcse"], "test")
    check_evaluation_names(EvaluationConfig(val_tasks=["sts", "all"], panel=["entity-top10"]), None, "fit")  # groups


def test_a_task_registered_by_a_plugin_passes(monkeypatch):
    from unisent.evaluation.tasks import builtin_tasks

    monkeypatch.setitem(builtin_tasks.TASKS, "my-task", builtin_tasks.TASKS["stsb-dev"])
    check_evaluation_names(EvaluationConfig(val_tasks=["my-task"]), ["simcse"], "fit")


def test_the_evaluation_callback_checks_when_the_trainer_sets_up(tiny_bert_dir):
    from unisent.encoders import EncoderConfig
    from unisent.evaluation import EvaluationCallback
    from unisent.lightning_module import UnisentModule

    module = UnisentModule(EncoderConfig(model=str(tiny_bert_dir)), evaluation=EvaluationConfig(val_tasks=["stsb-dve"]))
    with pytest.raises(ModelConfigError, match="did you mean 'stsb-dev'"):
        EvaluationCallback().setup(None, module, "fit")
    EvaluationCallback().setup(None, module, "test")  # test_tasks are fine


def test_a_checkpoint_naming_an_unknown_task_still_loads_for_inference(tiny_bert_dir, tmp_path):
    import unisent
    from unisent.encoders import EncoderConfig
    from unisent.lightning_module import UnisentModule

    config = EvaluationConfig(val_tasks=["my-plugin-task"], test_tasks=["my-plugin-task"])
    module = UnisentModule(EncoderConfig(model=str(tiny_bert_dir)), evaluation=config)  # no check: data only
    checkpoint = {"state_dict": module.state_dict(), "hyper_parameters": dict(module.hparams)}
    module.on_save_checkpoint(checkpoint)
    torch.save(checkpoint, tmp_path / "last.ckpt")
    loaded = UnisentModule.from_checkpoint(tmp_path / "last.ckpt")
    assert loaded.inference_model().encode(["a man plays a guitar ."]).shape[0] == 1
    assert unisent.load(str(tmp_path / "last.ckpt")).encode(["a dog runs ."]).shape[0] == 1


# ------------------------------------------------------------------------------- objectives, poolers, balancers
def test_weight_schedule_names_the_closest_objective():
    with pytest.raises(ModelConfigError) as err:
        check_weight_schedule({"bitex": [[0, 0.0]]}, ["cmlm", "bitext"])
    assert _one_line(err.value) == (
        "model.train.weight_schedule names 'bitex' (did you mean 'bitext'?), but the model's objectives are: "
        "cmlm, bitext"
    )


@pytest.mark.parametrize(
    "settings, expected",
    [
        ({"train": {"unsup": "S", "sup": "S", "supp": "S"}}, "data.train names 'supp' (did you mean 'sup'?)"),
        ({"batch_size": {"unsup": 8, "sup": 8, "usnup": 8}}, "data.batch_size names 'usnup' (did you mean 'unsup'?)"),
        ({"batch_size": {"unsup": 8}}, "data.batch_size has no entry for objective(s) 'sup'"),
        ({"length_grouped": {"supp": True}}, "data.length_grouped names 'supp' (did you mean 'sup'?)"),
    ],
)
def test_per_objective_data_settings_name_the_closest_objective(tiny_bert_dir, settings, expected):
    """Checked by ``prepare_data`` before anything is read or tokenised (the file does not exist)."""
    from unisent.encoders import EncoderConfig
    from unisent.lightning_module import UnisentModule
    from unisent.objectives import SimCSE

    module = UnisentModule(
        EncoderConfig(model=str(tiny_bert_dir)), objectives=[SimCSE(name="unsup"), SimCSE(name="sup", supervised=True)]
    )
    missing = str(SAMPLE_DIR / "no-such-file.txt")
    train = {k: DataSource(missing) for k in settings.get("train", {"unsup": 1, "sup": 1})}
    datamodule = UnisentDataModule(**{**settings, "train": train}).attach(module)
    with pytest.raises(DataConfigError) as err:
        datamodule.prepare_data()
    assert expected in _one_line(err.value)
    assert "but the model's objectives are: unsup, sup" in str(err.value) or "has no entry" in expected


def test_a_pooling_mode_the_export_would_refuse_fails_when_the_encoder_is_built(tiny_bert_dir, monkeypatch):
    from unisent.encoders import POOLERS, Encoder, EncoderConfig, PoolingModeError, register_pooler
    from unisent.encoders.poolers import MeanPooler, st_pooling

    monkeypatch.setattr("unisent.encoders.poolers.POOLERS", dict(POOLERS))

    @register_pooler("test-lasttoken")
    class LastToken(MeanPooler):
        mode = "lasttokens"

        def sentence_transformers_modules(self, backbone_config):
            return [st_pooling(self.hidden_size, self.mode)]

    with pytest.raises(PoolingModeError) as err:
        Encoder(EncoderConfig(model=str(tiny_bert_dir), pooler="test-lasttoken"))
    assert _one_line(err.value).startswith(
        "model.encoder.pooler 'test-lasttoken': unknown Sentence Transformers pooling mode 'lasttokens' "
        "(did you mean 'lasttoken'?); valid: cls_token, mean_tokens, max_tokens, mean_sqrt_len_tokens, "
        "weightedmean_tokens, lasttoken"
    )
    LastToken.mode = "lasttoken"
    Encoder(EncoderConfig(model=str(tiny_bert_dir), pooler="test-lasttoken"))  # a valid mode builds


def test_an_unknown_aggregator_is_a_model_config_error():
    from unisent.balancers import JacobianAggregator

    with pytest.raises(ModelConfigError) as err:
        JacobianAggregator("PCgrad")
    assert _one_line(err.value).startswith(
        "model.balancer.init_args.aggregator: unknown torchjd aggregator 'PCgrad' (did you mean 'PCGrad'?); valid: "
    )


# ------------------------------------------------------------------------------- every recipe passes
def _objective_names(model: dict) -> list[str]:
    return [import_object(o["class_path"]).name_in_recipe(o.get("init_args")) for o in model.get("objectives") or []]


@pytest.mark.parametrize("recipe", RECIPES, ids=lambda p: str(p.relative_to(ROOT / "recipes")))
def test_every_recipe_names_only_known_names(recipe):
    config = yaml.safe_load(recipe.read_text(encoding="utf-8")) or {}
    model, data = config.get("model") or {}, config.get("data") or {}
    names = _objective_names(model) or None  # an override file names no objectives
    evaluation = EvaluationConfig(**(model.get("evaluation") or {}))
    check_evaluation_names(evaluation, names, "fit")
    if names:
        check_weight_schedule((model.get("train") or {}).get("weight_schedule") or {}, names)
        for key in ("train", "batch_size", "length_grouped"):
            if isinstance(data.get(key), dict):
                assert set(data[key]) <= set(names), (key, data[key], names)
    balancer = model.get("balancer") or {}
    if isinstance(balancer, dict) and balancer.get("class_path", "").endswith("JacobianAggregator"):
        from unisent.balancers import JacobianAggregator

        JacobianAggregator(**(balancer.get("init_args") or {}))
