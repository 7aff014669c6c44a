"""``unisent sweep``: hyperparameter sweeps in W&B's sweep format, on W&B or here on Optuna (``--local``:
trials are subprocesses that write their metric file, ``unisent.sweep_metrics``)."""

from __future__ import annotations

import json
import math
import os
import shlex
import socket
import subprocess
import sys
import time
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml

from ..io import atomic_write
from .function_commands import CommandFailed, UsageError, call, command_parser, parse

__all__ = ["build_command", "load_sweep", "main", "make_sampler", "run_local", "run_online", "search_space"]

METHODS = ("grid", "random", "bayes")
LOCAL_DISTRIBUTIONS = ("constant", "categorical", "int_uniform", "uniform", "q_uniform", "log_uniform_values")
METRIC_CALLBACK = "--trainer.callbacks+=unisent.sweep_metrics.MetricFile"


def load_sweep(path: str | Path, local: bool = False) -> dict[str, Any]:
    """Read and check a sweep file (W&B's format; ``local``: also the metric and parameters for Optuna)."""
    try:
        with open(path, encoding="utf-8") as f:
            config = yaml.safe_load(f)
        if not isinstance(config, dict) or config.get("method") not in METHODS:
            raise ValueError("a sweep file is a mapping with method (grid|random|bayes), metric, parameters, command")
        if not isinstance(config.get("parameters"), dict) or not config["parameters"]:
            raise ValueError("needs parameters: {name: {values: [...]} | {min: .., max: ..}}")
        if not isinstance(config.get("command"), list) or not config["command"]:
            raise ValueError("needs command: [${env}, unisent, fit, -c, RECIPE, ${args}]")
        metric = config.get("metric")
        if (metric is not None or local) and (
            not isinstance(metric, dict)
            or "name" not in metric
            or metric.get("goal", "minimize") not in ("minimize", "maximize")
        ):
            raise ValueError(f"needs metric: {{name: ..., goal: minimize|maximize}}, got {metric!r}")
        if local:
            search_space(config)
    except (ValueError, yaml.YAMLError) as err:
        raise ValueError(f"{path}: {err}") from None
    return config


def _distribution(name: str, spec: Any, method: str):
    """One W&B parameter as an Optuna distribution (grid: always categorical, a ``value`` is one choice)."""
    from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution

    if not isinstance(spec, dict) or "parameters" in spec or "probabilities" in spec:
        raise ValueError(
            f"parameter {name!r}: --local supports {{value}}, {{values}} or {{min, max, distribution}} "
            f"(no nested parameters, no probabilities), got {spec!r}"
        )
    ints = all(type(spec.get(k)) is int for k in ("min", "max"))
    dist = spec.get("distribution") or (
        "constant" if "value" in spec else "categorical" if "values" in spec else "int_uniform" if ints else "uniform"
    )
    if dist not in LOCAL_DISTRIBUTIONS:
        raise ValueError(
            f"parameter {name!r}: distribution {dist!r} is not supported by --local ({', '.join(LOCAL_DISTRIBUTIONS)})"
        )
    try:
        if dist in ("constant", "categorical"):
            values = [spec["value"]] if dist == "constant" else spec["values"]
            if not isinstance(values, list) or not all(isinstance(v, (str, int, float, bool)) for v in values):
                raise ValueError(f"values must be a list of numbers, strings or booleans, got {values!r}")
            return CategoricalDistribution(values)
        low, high = spec["min"], spec["max"]
        if dist == "int_uniform":
            return (
                CategoricalDistribution(list(range(int(low), int(high) + 1)))
                if method == "grid"
                else IntDistribution(int(low), int(high))
            )
        if method == "grid":
            raise ValueError(f"grid search needs values (or int_uniform) for every parameter, got {dist}")
        return FloatDistribution(
            float(low),
            float(high),
            log=dist == "log_uniform_values",
            step=spec.get("q", 1.0) if dist == "q_uniform" else None,
        )
    except (KeyError, TypeError, ValueError) as err:
        raise ValueError(f"parameter {name!r}: {f'{dist} needs {err}' if isinstance(err, KeyError) else err}") from None


def search_space(config: dict[str, Any]) -> dict[str, Any]:
    """The Optuna distributions of a sweep's parameters, by name (errors name the parameter)."""
    return {name: _distribution(name, spec, config["method"]) for name, spec in config["parameters"].items()}


def make_sampler(method: str, space: dict[str, Any], seed: int = 0):
    """Optuna's sampler for a W&B method: grid -> GridSampler, random -> RandomSampler, bayes -> TPE."""
    import optuna

    if method == "grid":  # no study.stop() after the last point: it raises outside optimize (optuna#5141)
        sampler = optuna.samplers.GridSampler({name: list(d.choices) for name, d in space.items()}, seed=seed)
        sampler.after_trial = lambda *args, **kwargs: None
        return sampler
    return (optuna.samplers.RandomSampler if method == "random" else optuna.samplers.TPESampler)(seed=seed)


def build_command(command: Sequence[str], parameters: dict[str, Any], program: str | None = None) -> list[str]:
    """A trial's command with W&B's macros expanded as its agent does (``${env}`` is dropped,
    ``${interpreter}`` is this Python); a leading ``unisent`` runs through this Python."""
    macros = {
        "args": [f"--{k}={v}" for k, v in parameters.items()],
        "args_no_hyphens": [f"{k}={v}" for k, v in parameters.items()],
        "args_no_boolean_flags": [
            f"--{k}" if v is True else f"--{k}={v}" for k, v in parameters.items() if v is not False
        ],
        "args_json": [json.dumps(parameters)],
        "env": [],
        "interpreter": [sys.executable],
        "program": [program] if program else [],
    }
    out: list[str] = []
    for word in map(str, command):
        macro = word[2:-1] if word.startswith("${") and word.endswith("}") else None
        if macro is not None and macro.startswith("envvar:"):
            macros[macro] = [os.environ.get(macro[len("envvar:") :], "")]
        if macro is not None and macro not in macros:
            raise ValueError(f"unknown macro {word} in the sweep's command")
        out.extend([word] if macro is None else macros[macro])
    return [sys.executable, "-m", "unisent.cli", *out[1:]] if out[:1] == ["unisent"] else out


def _recover(study) -> None:
    """Trials that a killed sweep on this machine left running: failed, and their parameters queued again."""
    from optuna.trial import TrialState

    for t in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
        if t.user_attrs.get("host") != socket.gethostname() or not isinstance(pid := t.user_attrs.get("pid"), int):
            continue  # a trial of another machine (or not started by unisent sweep)
        try:
            os.kill(pid, 0)  # signal 0: only checks that the sweep process that ran it is still there
        except ProcessLookupError:
            study.tell(t.number, state=TrialState.FAIL)  # its status stays "running": reported as interrupted
            study.enqueue_trial(t.params, user_attrs={"retry_of": t.number})
        except PermissionError:
            pass  # alive, another user's


def run_local(
    config: dict[str, Any],
    output: str | Path,
    count: int | None = None,
    seed: int = 0,
    storage: str | None = None,
    study_name: str | None = None,
    extra_args: Sequence[str] = (),
) -> dict:
    """Run (or resume) a sweep as an Optuna study until it holds ``count`` finished trials (default: the grid),
    each a subprocess in ``output/trial-NNN``; returns trials and best."""
    import optuna
    from optuna.trial import TrialState

    from ..sweep_metrics import METRIC_FILE_ENV, read_metric  # here: Lightning takes seconds to import

    name, goal = config["metric"]["name"], config["metric"].get("goal", "minimize")
    space = search_space(config)
    if config["method"] == "grid":
        count = int(min(count or math.inf, math.prod(len(d.choices) for d in space.values())))
    elif count is None:
        raise ValueError(f"{config['method']} search needs --count")
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(
        storage=storage,
        sampler=make_sampler(config["method"], space, seed),
        study_name=study_name,
        direction=goal,
        load_if_exists=True,
    )
    _recover(study)
    # no W&B server: log offline unless told; each trial starts its own W&B service (not a notebook's)
    env = {"WANDB_MODE": "offline", "WANDB_RUN_GROUP": study.study_name, **os.environ}
    env.pop("WANDB_SERVICE", None)
    while sum(t.state.is_finished() and t.user_attrs.get("status") != "running" for t in study.trials) < count:
        trial = study.ask(space)
        run_dir = (Path(output) / f"trial-{trial.number:03d}").resolve()
        cmd = build_command(config["command"], trial.params, config.get("program"))
        fit = cmd[:4] == [sys.executable, "-m", "unisent.cli", "fit"]
        if fit:  # each trial logs and checkpoints in its own directory and writes its metric file
            cmd += [f"--trainer.logger.init_args.save_dir={run_dir}", f"--trainer.default_root_dir={run_dir}"]
        cmd += [*extra_args, *([METRIC_CALLBACK] if fit else [])]
        for key, value in {
            "status": "running",
            "host": socket.gethostname(),
            "pid": os.getpid(),
            "run_dir": str(run_dir),
            "command": shlex.join(cmd),
        }.items():
            trial.set_user_attr(key, value)
        print(f"[sweep] trial {trial.number}: {' '.join(f'{k}={v}' for k, v in trial.params.items())}", flush=True)
        run_dir.mkdir(parents=True, exist_ok=True)
        metric_file, start = run_dir / "metrics.json", time.monotonic()
        metric_file.unlink(missing_ok=True)
        with open(run_dir / "output.log", "w") as log:
            code = subprocess.run(
                cmd,
                stdout=log,
                stderr=subprocess.STDOUT,
                env={
                    **env,
                    "UNISENT_SWEEP_TRIAL_DIR": str(run_dir),
                    "WANDB_DIR": str(run_dir),
                    METRIC_FILE_ENV: str(metric_file),
                },
            ).returncode
        last, best = read_metric(metric_file, name, goal)
        why = f"exit {code}" if code else None if last is not None else f"no {name} in {metric_file.name}"
        status = f"{'complete' if last is not None else 'failed'}{f' ({why})' if why else ''}"
        for key, value in {"status": status, "best": best, "seconds": round(time.monotonic() - start, 1)}.items():
            trial.set_user_attr(key, value)
        if last is None:
            warnings.warn(f"unisent sweep: trial {trial.number} failed ({why}); see {run_dir}/output.log", stacklevel=2)
        study.tell(trial, last, state=TrialState.COMPLETE if last is not None else TrialState.FAIL)
        print(f"[sweep] trial {trial.number}: {name}={last} ({status})", flush=True)
    trials = [
        {
            "trial": t.number,
            "parameters": {n: t.params.get(n) for n in config["parameters"]},
            "metric": t.value,
            **{k: t.user_attrs.get(k) for k in ("best", "status", "seconds", "run_dir", "command")},
            **({"status": "interrupted"} if t.state.is_finished() and t.user_attrs.get("status") == "running" else {}),
        }
        for t in study.trials
    ]
    scored = [t for t in trials if t["metric"] is not None]
    results = {
        "sweep": config,
        "metric": config["metric"],
        "study": study.study_name,
        "trials": trials,
        "best": (max if goal == "maximize" else min)(scored, key=lambda t: t["metric"]) if scored else None,
    }
    with atomic_write(Path(output) / "results.json") as f:
        f.write(json.dumps(results, indent=2, default=str) + "\n")
    return results


def format_table(results: dict[str, Any]) -> str:
    """A markdown table: trial, parameters, last and best value of the metric, status."""
    names, fmt = list(results["sweep"]["parameters"]), lambda v: "" if v is None else f"{v:.4f}"
    rows = [["trial", *names, results["metric"]["name"], "best", "status"]]
    rows += [["---"] * len(rows[0])] + [
        [
            str(t["trial"]),
            *(str(t["parameters"].get(n)) for n in names),
            fmt(t["metric"]),
            fmt(t["best"]),
            str(t["status"]),
        ]
        for t in results["trials"]
    ]
    return "".join("| " + " | ".join(r) + " |\n" for r in rows)


def run_online(config: dict[str, Any], project: str | None, entity: str | None, count: int | None) -> str:
    """Register the sweep with W&B (``wandb.sweep``) and run an agent here (``wandb.agent``)."""
    try:
        import wandb
    except ImportError:
        raise SystemExit("unisent sweep: needs wandb (pip install 'unisent[wandb]'), or use --local") from None
    project = project or config.get("project") or "unisent"
    entity = entity or config.get("entity")  # the sweep file's entity, for the sweep and its agent alike
    sweep_id = wandb.sweep(config, project=project, entity=entity)
    print(
        f"unisent sweep: registered sweep {sweep_id}; more agents: wandb agent {entity + '/' if entity else ''}"
        f"{project}/{sweep_id}",
        flush=True,
    )
    wandb.agent(sweep_id, project=project, entity=entity, count=count)
    return sweep_id


def sweep(
    sweep: str,
    *,
    count: int | None = None,
    local: bool = False,
    output: str | None = None,
    storage: str | None = None,
    study_name: str | None = None,
    seed: int = 0,
    project: str | None = None,
    entity: str | None = None,
    trial_args: list[str] | None = None,
) -> None:
    """A hyperparameter sweep from a W&B sweep file: on W&B (registered, with an agent here) or here on Optuna.

    Args:
        sweep: a sweep file in W&B's format (see recipes/sweeps/)
        count: trials (--local: finished trials the study should hold; default: the whole grid)
        local: run the search here on Optuna (grid, random, TPE for bayes), without a W&B server
        output: --local: directory of the trials and results.json (default: runs/sweeps/NAME[-TIME])
        storage: --local: Optuna storage, e.g. sqlite:///sweep.db; the same command resumes the study
        study_name: --local: the study's name (default: the file's name, else its stem)
        seed: --local: seed of the sampler
        project: W&B project (default: the file's project, else unisent)
        entity: W&B entity (user or team)
        trial_args: --local: arguments for every trial (on the command line after --: -- --trainer.max_steps=5)
    """
    config = load_sweep(sweep, local=local)
    if not local:
        if trial_args:
            raise UsageError("trial arguments need --local (online, put them in the file's command)")
        run_online(config, project, entity, count)
        return
    name = study_name or config.get("name") or Path(sweep).stem
    output = output or str(Path("runs", "sweeps", name + ("" if storage else time.strftime("-%Y%m%d-%H%M%S"))))
    results = run_local(config, output, count, seed, storage, name, extra_args=trial_args or ())
    sys.stdout.write(format_table(results) + f"results written to {Path(output) / 'results.json'}\n")
    if (best := results["best"]) is None:
        raise CommandFailed(
            f"every trial failed (none wrote {config['metric']['name']}); see output.log in the trials under {output}"
        )
    print(
        f"best: trial {best['trial']} ({results['metric']['name']} = {best['metric']:.4f}): "
        + " ".join(f"--{k}={v}" for k, v in best["parameters"].items())
    )


def main(argv: Sequence[str]) -> None:
    cut = list(argv).index("--") if "--" in argv else len(argv)
    values = parse(command_parser(sweep, "unisent sweep"), list(argv[:cut]))
    values["trial_args"] = [*(values.get("trial_args") or []), *argv[cut + 1 :]]
    call(sweep, values, "unisent sweep")
