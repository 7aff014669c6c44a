"""``unisent sweep``: hyperparameter sweeps in Weights & Biases' sweep format, online or offline.

A sweep file is a W&B sweep configuration (``method``, ``metric``, ``parameters``, ``command``) whose
parameters are ``unisent fit`` arguments and whose command runs a recipe::

    method: grid
    metric: {name: val/score, goal: maximize}
    parameters:
      data.batch_size: {values: [64, 128]}
      model.optimizer.init_args.lr: {values: [3.0e-5, 5.0e-5]}
    command: [${env}, unisent, fit, -c, recipes/ease/bert-base.yaml, -c, recipes/loggers/wandb.yaml, ${args}]

``unisent sweep FILE`` registers it with W&B and runs an agent (the agent runs the command with the
trial's arguments, ``--data.batch_size=64 --model.optimizer.init_args.lr=3e-05``, which LightningCLI
accepts). ``unisent sweep FILE --local`` runs the same search without a W&B server: each trial runs
the command as a subprocess in its own directory, its metric (``metric.name``, the last logged value
as in W&B's run summary) is read back from the run's W&B summary or CSV log and fed to the search
(bayes uses it), and a results table is printed and written as JSON.

The search engine of ``--local`` is W&B's open-source ``sweeps`` package when it is importable
(``--engine sweeps``); it pins ``numpy<2``, which conflicts with unisent's environment, so it is
not a dependency. Without it (``--engine builtin``), grid and random search follow W&B's parameter
semantics here, and bayes is a Gaussian process with expected improvement over random candidates
(as W&B's). ``early_terminate`` is applied by W&B's server only.
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import os
import re
import shlex
import subprocess
import sys
import time
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import yaml

__all__ = ["BuiltinEngine", "SweepsEngine", "build_command", "format_table", "load_sweep", "main", "make_engine",
           "read_metric", "read_wandb_run", "run_local"]

METHODS = ("grid", "random", "bayes")
_DISTRIBUTIONS = ("constant", "categorical", "int_uniform", "uniform", "q_uniform", "log_uniform",
                  "log_uniform_values", "q_log_uniform_values", "inv_log_uniform_values", "normal",
                  "q_normal", "log_normal", "q_log_normal")


# --------------------------------------------------------------------------------------- sweep file
def load_sweep(path: str | Path) -> dict[str, Any]:
    """Read and check a sweep file (W&B's format)."""
    config = yaml.safe_load(Path(path).read_text(encoding="utf-8"))
    where = str(path)
    if not isinstance(config, dict):
        raise ValueError(f"{where}: a sweep file is a mapping (method, metric, parameters, command)")
    if config.get("method") not in METHODS:
        raise ValueError(f"{where}: method must be one of {', '.join(METHODS)}, got {config.get('method')!r}")
    params = config.get("parameters")
    if not isinstance(params, dict) or not params:
        raise ValueError(f"{where}: needs parameters: {{name: {{values: [...]}} | {{min: .., max: ..}} | ...}}")
    for name, spec in params.items():
        _distribution(name, spec, where)
    metric = config.get("metric")
    if metric is not None and (not isinstance(metric, dict) or "name" not in metric
                               or metric.get("goal", "minimize") not in ("minimize", "maximize")):
        raise ValueError(f"{where}: metric must be {{name: ..., goal: minimize|maximize}}, got {metric!r}")
    if config["method"] == "bayes" and metric is None:
        raise ValueError(f"{where}: bayes search needs a metric")
    command = config.get("command")
    if not isinstance(command, list) or not command:
        raise ValueError(f"{where}: needs command: [${{env}}, unisent, fit, -c, RECIPE, ${{args}}]")
    return config


def _distribution(name: str, spec: Any, where: str = "") -> str:
    if not isinstance(spec, dict):
        raise ValueError(f"{where}: parameter {name!r} must be a mapping, got {spec!r}")
    if "parameters" in spec:
        raise ValueError(f"{where}: nested parameters ({name!r}) are not supported; name each argument "
                         "in full, e.g. model.optimizer.init_args.lr")
    dist = spec.get("distribution")
    if dist is None:
        if "value" in spec:
            dist = "constant"
        elif "values" in spec:
            dist = "categorical"
        elif "min" in spec and "max" in spec:
            ints = isinstance(spec["min"], int) and isinstance(spec["max"], int)
            dist = "int_uniform" if ints else "uniform"
        else:
            raise ValueError(f"{where}: parameter {name!r} needs value, values, or min and max")
    if dist not in _DISTRIBUTIONS:
        raise ValueError(f"{where}: parameter {name!r}: unknown distribution {dist!r} ({', '.join(_DISTRIBUTIONS)})")
    if dist == "categorical" and not spec.get("values"):
        raise ValueError(f"{where}: parameter {name!r}: categorical needs values")
    return dist


# --------------------------------------------------------------------------------------- search
class BuiltinEngine:
    """Grid, random and bayes search with W&B's parameter semantics (no ``sweeps`` package needed).

    Args:
        config: the sweep configuration.
        seed: seed of random and bayes search.
        candidates: bayes: random candidates scored by expected improvement per trial.
        initial: bayes: random trials before the Gaussian process is used.
    """

    def __init__(self, config: dict[str, Any], seed: int = 0, candidates: int = 1000, initial: int = 2) -> None:
        self.config = config
        self.params = config["parameters"]
        self.rng = np.random.default_rng(seed)
        self.candidates = candidates
        self.initial = initial
        self._grid = None
        if config["method"] == "grid":
            axes = []
            for name, spec in self.params.items():
                dist = _distribution(name, spec)
                if dist == "constant":
                    axes.append([spec["value"]])
                elif dist == "categorical":
                    axes.append(list(spec["values"]))
                elif dist == "int_uniform":
                    axes.append(list(range(int(spec["min"]), int(spec["max"]) + 1)))
                else:
                    raise ValueError(f"grid search needs values for every parameter; {name!r} is {dist}")
            self._grid = [dict(zip(self.params, point)) for point in itertools.product(*axes)]

    @property
    def size(self) -> int | None:
        """Number of trials of a grid (``None``: unbounded)."""
        return len(self._grid) if self._grid is not None else None

    def next(self, history: list[dict[str, Any]]) -> dict[str, Any] | None:
        """Parameters of the next trial given the finished ones (``{"parameters", "metric"}``), or
        ``None`` when a grid is exhausted."""
        if self._grid is not None:
            return self._grid[len(history)] if len(history) < len(self._grid) else None
        if self.config["method"] == "random":
            return self.sample()
        scored = [h for h in history if h.get("metric") is not None and math.isfinite(h["metric"])]
        if len(scored) < self.initial:
            return self.sample()
        return self._bayes(scored)

    # ------------------------------------------------------------- random
    def sample(self) -> dict[str, Any]:
        return {name: self._sample(name, spec) for name, spec in self.params.items()}

    def _sample(self, name: str, spec: dict[str, Any]) -> Any:
        dist, r = _distribution(name, spec), self.rng
        if dist == "constant":
            return spec["value"]
        if dist == "categorical":
            values = spec["values"]
            return values[int(r.choice(len(values), p=spec.get("probabilities")))]
        if dist == "int_uniform":
            return int(r.integers(int(spec["min"]), int(spec["max"]) + 1))
        if dist in ("uniform", "q_uniform"):
            x = float(r.uniform(spec["min"], spec["max"]))
        elif dist == "log_uniform":  # min and max are exponents (natural log)
            x = float(math.exp(r.uniform(spec["min"], spec["max"])))
        elif dist in ("log_uniform_values", "q_log_uniform_values"):
            x = float(math.exp(r.uniform(math.log(spec["min"]), math.log(spec["max"]))))
        elif dist == "inv_log_uniform_values":
            x = float(1.0 / math.exp(r.uniform(math.log(1.0 / spec["max"]), math.log(1.0 / spec["min"]))))
        elif dist in ("normal", "q_normal"):
            x = float(r.normal(spec.get("mu", 0.0), spec.get("sigma", 1.0)))
        else:  # log_normal, q_log_normal
            x = float(math.exp(r.normal(spec.get("mu", 0.0), spec.get("sigma", 1.0))))
        if dist.startswith("q_"):
            q = spec.get("q", 1.0)
            x = round(x / q) * q
            return int(x) if isinstance(q, int) else x
        return x

    # ------------------------------------------------------------- bayes
    def _encode(self, name: str, value: Any) -> float:
        """A parameter value on [0, 1] (roughly: normal distributions on mu +- 3 sigma)."""
        spec = self.params[name]
        dist = _distribution(name, spec)
        if dist == "constant":
            return 0.0
        if dist == "categorical":
            values = spec["values"]
            return values.index(value) / max(len(values) - 1, 1) if value in values else 0.0
        if dist in ("log_uniform_values", "q_log_uniform_values", "inv_log_uniform_values"):
            lo, hi, x = math.log(spec["min"]), math.log(spec["max"]), math.log(max(value, 1e-300))
        elif dist == "log_uniform":
            lo, hi, x = spec["min"], spec["max"], math.log(max(value, 1e-300))
        elif dist in ("normal", "q_normal", "log_normal", "q_log_normal"):
            mu, sigma = spec.get("mu", 0.0), spec.get("sigma", 1.0)
            x = math.log(max(value, 1e-300)) if "log" in dist else value
            lo, hi = mu - 3 * sigma, mu + 3 * sigma
        else:
            lo, hi, x = spec["min"], spec["max"], value
        return float(min(max((x - lo) / (hi - lo), 0.0), 1.0)) if hi > lo else 0.0

    def _bayes(self, scored: list[dict[str, Any]]) -> dict[str, Any]:
        from scipy.stats import norm
        from sklearn.gaussian_process import GaussianProcessRegressor
        from sklearn.gaussian_process.kernels import Matern, WhiteKernel

        names = list(self.params)
        sign = 1.0 if self.config["metric"].get("goal", "minimize") == "maximize" else -1.0
        x = np.array([[self._encode(n, h["parameters"][n]) for n in names] for h in scored])
        y = sign * np.array([h["metric"] for h in scored], dtype=float)
        gp = GaussianProcessRegressor(Matern(nu=2.5) + WhiteKernel(1e-5), normalize_y=True,
                                      random_state=int(self.rng.integers(2**31)))
        with warnings.catch_warnings():  # few noisy points: kernel bounds are often hit, harmlessly
            warnings.simplefilter("ignore")
            gp.fit(x, y)
        pool = [self.sample() for _ in range(self.candidates)]
        cx = np.array([[self._encode(n, p[n]) for n in names] for p in pool])
        mean, std = gp.predict(cx, return_std=True)
        improvement = mean - y.max()
        z = improvement / np.maximum(std, 1e-12)
        expected = improvement * norm.cdf(z) + std * norm.pdf(z)
        return pool[int(np.argmax(expected))]


class SweepsEngine:
    """W&B's own search engine (the ``sweeps`` package), fed with the metrics of finished trials."""

    def __init__(self, config: dict[str, Any]) -> None:
        import sweeps

        self.sweeps = sweeps
        self.config = config
        self.size = None
        if config["method"] == "grid":
            self.size = len(BuiltinEngine(config)._grid)

    def next(self, history: list[dict[str, Any]]) -> dict[str, Any] | None:
        s = self.sweeps
        name = (self.config.get("metric") or {}).get("name")
        runs = []
        for h in history:
            metrics = {name: h["metric"]} if name and h.get("metric") is not None else {}
            state = s.RunState.finished if h.get("status") == "finished" else s.RunState.failed
            runs.append(s.SweepRun(name=f"trial-{h['trial']}", config={k: {"value": v} for k, v in h["parameters"].items()},
                                   summary_metrics=metrics, state=state))
        run = s.next_run(self.config, runs, validate=True)
        if run is None:
            return None
        return {k: _plain(v["value"]) for k, v in run.config.items()}


def _plain(value: Any) -> Any:
    return value.item() if isinstance(value, np.generic) else value


def make_engine(config: dict[str, Any], engine: str = "auto", seed: int = 0):
    if engine in ("auto", "sweeps"):
        try:
            return SweepsEngine(config)
        except ImportError:
            if engine == "sweeps":
                raise SystemExit("unisent sweep: --engine sweeps needs W&B's `sweeps` package "
                                 "(pip install --no-deps sweeps jsonref jsonschema; it pins numpy<2 but runs "
                                 "with numpy 2), or use --engine builtin") from None
    return BuiltinEngine(config, seed=seed)


# --------------------------------------------------------------------------------------- trials
def _args(parameters: dict[str, Any]) -> dict[str, list[str]]:
    """The argument forms W&B's agent substitutes in a command."""
    flags = [f"--{k}={v}" for k, v in parameters.items()]
    return {
        "args": flags,
        "args_no_hyphens": [f"{k}={v}" for k, v in parameters.items()],
        "args_no_boolean_flags": [f"--{k}" if v is True else f"--{k}={v}" for k, v in parameters.items() if v is not False],
        "args_json": [json.dumps(parameters)],
    }


def build_command(command: Sequence[str], parameters: dict[str, Any], program: str | None = None) -> list[str]:
    """The command of one trial, with W&B's macros expanded as its agent does (``${env}`` is dropped,
    ``${interpreter}`` is this Python) and a leading ``unisent`` run through this Python."""
    macros = {**_args(parameters), "env": [], "interpreter": [sys.executable], "program": [program] if program else []}
    out: list[str] = []
    for word in command:
        word = str(word)
        if word.startswith("${") and word.endswith("}"):
            name = word[2:-1]
            if name.startswith("envvar:"):
                out.append(os.environ.get(name[len("envvar:"):], ""))
            elif name in macros:
                out.extend(macros[name])
            else:
                raise ValueError(f"unknown macro {word} in the sweep's command")
        else:
            out.append(word)
    if out and out[0] == "unisent":
        out[:1] = [sys.executable, "-m", "unisent.cli"]
    return out


def _is_unisent_fit(cmd: list[str]) -> bool:
    return cmd[:4] == [sys.executable, "-m", "unisent.cli", "fit"]


def _wandb_records(path: Path):
    """The raw records of a W&B run file (``run-<id>.wandb``: a ``:W&B`` header, then LevelDB's log
    format: 32 KiB blocks of checksummed chunks that are whole, first, middle or last pieces)."""
    data = path.read_bytes()
    if data[:4] != b":W&B":
        raise ValueError(f"{path} is not a W&B run file")
    pos, block, pending = 7, 32768, b""
    while pos + 7 <= len(data):
        left = block - pos % block
        if left < 7:  # block trailer
            pos += left
            continue
        length, kind = int.from_bytes(data[pos + 4 : pos + 6], "little"), data[pos + 6]
        chunk = data[pos + 7 : pos + 7 + length]
        pos += 7 + length
        if len(chunk) < length:  # cut off (a killed run)
            return
        if kind == 1:
            yield chunk
        elif kind == 2:
            pending = chunk
        elif kind == 3:
            pending += chunk
        elif kind == 4:
            yield pending + chunk
            pending = b""


def read_wandb_run(run_dir: str | Path) -> dict[str, Any]:
    """Config, summary and history of a W&B run directory (``wandb/offline-run-...``, as written
    offline): ``{"config": {key: value}, "summary": {key: last value}, "history": [{key: value}]}``."""
    from wandb.proto import wandb_internal_pb2

    out: dict[str, Any] = {"config": {}, "summary": {}, "history": []}
    files = sorted(Path(run_dir).glob("*.wandb"))
    if not files:
        return out
    for raw in _wandb_records(files[0]):
        record = wandb_internal_pb2.Record()
        try:
            record.ParseFromString(raw)
        except Exception:  # a damaged record: keep what was read
            break
        kind = record.WhichOneof("record_type")
        items = {"config": lambda r: r.config.update, "summary": lambda r: r.summary.update,
                 "history": lambda r: r.history.item}.get(kind)
        if items is None:
            continue
        values = {(i.key or "/".join(i.nested_key)): json.loads(i.value_json) for i in items(record)}
        if kind == "history":
            out["history"].append(values)
        else:
            out[kind].update(values)
    return out


def read_metric(run_dir: str | Path, name: str, goal: str = "maximize") -> tuple[float | None, float | None]:
    """``(last, best)`` of metric ``name`` logged under ``run_dir``: from the newest W&B run (its
    summary, i.e. the last value, which is what W&B's sweeps use; ``wandb-summary.json`` or the
    offline run file), else the newest CSV log (``metrics.csv``); ``best`` is the max or min by
    ``goal`` over the logged history."""
    import pandas as pd

    def number(value: Any) -> float | None:
        return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None

    def pick(values: list[float]) -> float | None:
        return (max(values) if goal == "maximize" else min(values)) if values else None

    run_dir = Path(run_dir)
    newest = lambda files: sorted(files, key=lambda p: p.stat().st_mtime, reverse=True)  # noqa: E731
    for run in newest(run_dir.rglob("*run-*")):  # wandb/run-<time>-<id> (online) or offline-run-<time>-<id>
        if not run.is_dir() or not re.match(r"(offline-)?run-\d{8}_\d{6}-", run.name):
            continue
        summary_file = run / "files" / "wandb-summary.json"
        summary = json.loads(summary_file.read_text() or "{}") if summary_file.is_file() else {}
        try:
            record = read_wandb_run(run)
        except (ImportError, OSError, ValueError):
            record = {"summary": {}, "history": []}
        last = number(summary.get(name, record["summary"].get(name)))
        if last is not None:
            return last, pick([v for row in record["history"] if (v := number(row.get(name))) is not None])
    for csv in newest(run_dir.rglob("metrics.csv")):
        frame = pd.read_csv(csv)
        if name in frame and frame[name].notna().any():
            column = frame[name].dropna().astype(float)
            return float(column.iloc[-1]), pick(column.tolist())
    return None, None


def run_local(
    config: dict[str, Any],
    output: str | Path,
    count: int | None = None,
    engine: str = "auto",
    seed: int = 0,
    extra_args: Sequence[str] = (),
    quiet: bool = False,
) -> dict[str, Any]:
    """Run a sweep offline; returns (and writes to ``output/results.json``) the trials and the best."""
    search = make_engine(config, engine, seed)
    if count is None:
        if search.size is None:
            raise SystemExit(f"unisent sweep: {config['method']} search needs --count")
        count = search.size
    metric = config.get("metric") or {}
    name, goal = metric.get("name"), metric.get("goal", "minimize")
    output = Path(output)
    output.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "WANDB_RUN_GROUP": os.environ.get("WANDB_RUN_GROUP", config.get("name") or output.name),
           "WANDB_MODE": os.environ.get("WANDB_MODE", "offline")}  # no W&B server: log offline unless told
    history: list[dict[str, Any]] = []
    for trial in range(count):
        parameters = search.next(history)
        if parameters is None:
            break
        run_dir = (output / f"trial-{trial:03d}").resolve()
        cmd = build_command(config["command"], parameters, config.get("program"))
        if _is_unisent_fit(cmd):  # each trial logs and checkpoints in its own directory
            cmd += [f"--trainer.logger.init_args.save_dir={run_dir}", f"--trainer.default_root_dir={run_dir}"]
        cmd += list(extra_args)
        run_dir.mkdir(parents=True, exist_ok=True)
        if not quiet:
            print(f"[sweep] trial {trial}: {' '.join(f'{k}={v}' for k, v in parameters.items())}", flush=True)
        start = time.monotonic()
        with open(run_dir / "output.log", "w") as log:
            # a W&B run of this process (e.g. in a notebook) leaves WANDB_SERVICE behind: a trial must start
            # its own service, and write its run into its own directory
            trial_env = {**{k: v for k, v in env.items() if k != "WANDB_SERVICE"},
                         "UNISENT_SWEEP_TRIAL_DIR": str(run_dir), "WANDB_DIR": str(run_dir)}
            code = subprocess.run(cmd, stdout=log, stderr=subprocess.STDOUT, env=trial_env).returncode
        last, best = read_metric(run_dir, name, goal) if name else (None, None)
        record = {"trial": trial, "parameters": parameters, "metric": last, "best": best,
                  "status": "finished" if code == 0 else f"failed (exit {code})", "seconds": round(time.monotonic() - start, 1),
                  "run_dir": str(run_dir), "command": shlex.join(cmd)}
        history.append(record)
        if not quiet:
            print(f"[sweep] trial {trial}: {name}={last} ({record['status']}, log: {run_dir / 'output.log'})", flush=True)
    scored = [h for h in history if h["metric"] is not None]
    pick = max if goal == "maximize" else min
    results = {"sweep": config, "metric": metric, "trials": history,
               "best": pick(scored, key=lambda h: h["metric"]) if scored else None}
    (output / "results.json").write_text(json.dumps(results, indent=2, default=str) + "\n")
    return results


def format_table(results: dict[str, Any]) -> str:
    """A markdown table: trial, parameters, metric (and the best value when a CSV log had it)."""
    trials = results["trials"]
    names = list(results["sweep"]["parameters"])
    metric = (results.get("metric") or {}).get("name", "metric")
    head = ["trial", *names, metric, "best", "status"]
    rows = [[str(t["trial"]), *(str(t["parameters"].get(n, "")) for n in names),
             "" if t["metric"] is None else f"{t['metric']:.4f}", "" if t["best"] is None else f"{t['best']:.4f}",
             t["status"]] for t in trials]
    lines = ["| " + " | ".join(head) + " |", "|" + "|".join("---" for _ in head) + "|"]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines) + "\n"


# --------------------------------------------------------------------------------------- online
def run_online(config: dict[str, Any], project: str | None, entity: str | None, count: int | None) -> str:
    try:
        import wandb
    except ImportError:
        raise SystemExit("unisent sweep: needs wandb (pip install 'unisent[wandb]'), or use --local") from None
    project = project or config.get("project") or "unisent"
    sweep_id = wandb.sweep(config, project=project, entity=entity or config.get("entity"))
    print(f"unisent sweep: registered sweep {sweep_id} in project {project}; more agents: "
          f"wandb agent {(entity + '/') if entity else ''}{project}/{sweep_id}", flush=True)
    wandb.agent(sweep_id, project=project, entity=entity, count=count)
    return sweep_id


# --------------------------------------------------------------------------------------- CLI
def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="unisent sweep", description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("sweep", help="a sweep file in W&B's format (see recipes/sweeps/)")
    p.add_argument("--count", type=int, help="number of trials (default: the whole grid; needed for random/bayes --local)")
    p.add_argument("--project", help="W&B project (default: the file's `project`, else unisent)")
    p.add_argument("--entity", help="W&B entity (user or team)")
    p.add_argument("--local", action="store_true", help="run the search here, without a W&B server")
    p.add_argument("--output", help="--local: directory of the trials and results.json (default runs/sweeps/<name>-<time>)")
    p.add_argument("--engine", choices=("auto", "sweeps", "builtin"), default="auto",
                   help="--local search engine: W&B's `sweeps` package if importable (auto), or the built-in one")
    p.add_argument("--seed", type=int, default=0, help="--local: seed of the built-in random and bayes search")
    p.epilog = ("Arguments after `--` are appended to every trial's command (--local), e.g.\n"
                "  unisent sweep recipes/sweeps/quickstart-grid.yaml --local -- --trainer.max_steps=20")
    return p


def main(argv: list[str]) -> None:
    argv = list(argv)
    extra = argv[argv.index("--") + 1 :] if "--" in argv else []
    args = _parser().parse_args(argv[: argv.index("--")] if "--" in argv else argv)
    try:
        config = load_sweep(args.sweep)
    except (OSError, ValueError, yaml.YAMLError) as err:
        sys.exit(f"unisent sweep: error: {err}")
    if not args.local:
        if extra:
            sys.exit("unisent sweep: extra trial arguments need --local (online, put them in the file's command)")
        run_online(config, args.project, args.entity, args.count)
        return
    name = config.get("name") or Path(args.sweep).stem
    output = args.output or str(Path("runs") / "sweeps" / f"{name}-{time.strftime('%Y%m%d-%H%M%S')}")
    results = run_local(config, output, count=args.count, engine=args.engine, seed=args.seed, extra_args=extra)
    sys.stdout.write(format_table(results))
    best = results["best"]
    if best is not None:
        print(f"best: trial {best['trial']} ({results['metric']['name']} = {best['metric']:.4f}): "
              + " ".join(f"--{k}={v}" for k, v in best["parameters"].items()))
    print(f"results written to {Path(output) / 'results.json'}")
