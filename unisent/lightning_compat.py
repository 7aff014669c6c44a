"""Every private name of Lightning that unisent reads, in one place, each behind a small function.

Lightning's public API does not expose a few things unisent needs (the backend and timeout a DDP strategy was
given, whether the fit loop is mid-way through an accumulated step, the fit loop's data fetcher, W&B's init
arguments and the logger's prefix, the type of the ``precision`` argument). They are read here and nowhere else
in the package. A private name can change in any release: a missing one raises ``LightningCompatError``,
one line naming the installed Lightning version, the attribute, and the range of versions unisent is tested
with (``TESTED``), instead of an ``AttributeError`` deep inside a training step.
"""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, requires, version
from typing import Any

from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.version import InvalidVersion, Version

__all__ = [
    "INSTALLED",
    "IN_TESTED_RANGE",
    "TESTED",
    "LightningCompatError",
    "PrecisionInput",
    "cluster_environment",
    "data_fetcher",
    "default_process_group_backend",
    "logger_prefix",
    "process_group_timeout",
    "set_process_group_backend",
    "should_accumulate",
    "wandb_init_settings",
]


class LightningCompatError(RuntimeError):
    """A private attribute of Lightning that unisent reads is not there (a Lightning release renamed it)."""


def _tested_range() -> SpecifierSet:
    """The ``lightning`` requirement of the installed unisent distribution (pyproject.toml's, as
    ``importlib.metadata`` reads it). Only where that metadata is missing (a source tree never installed) does
    it fall back to the bound written here, which may then be stale."""
    try:
        declared = [Requirement(line) for line in requires("unisent") or []]
    except PackageNotFoundError:
        declared = []
    found = [req.specifier for req in declared if req.name == "lightning" and req.marker is None]
    return found[0] if found else SpecifierSet(">=2.5.5,<2.7")


def _installed_version() -> str:
    try:
        return version("lightning")
    except PackageNotFoundError:  # the standalone ``pytorch-lightning`` distribution is not what unisent imports
        import lightning

        return getattr(lightning, "__version__", "unknown")


def _in_range(installed: str) -> bool:
    """Whether Lightning ``installed`` (a version string) is inside ``TESTED``, pre-releases included."""
    try:
        return TESTED.contains(Version(installed), prereleases=True)
    except InvalidVersion:  # "unknown"
        return False


#: the versions of Lightning unisent's tests run with: the installed unisent's ``lightning`` requirement
TESTED = _tested_range()
#: the installed Lightning's version
INSTALLED = _installed_version()
#: whether it is inside ``TESTED`` (checked once, at import; reported by ``LightningCompatError``)
IN_TESTED_RANGE = _in_range(INSTALLED)


def _missing(attribute: str) -> LightningCompatError:
    where = "within" if _in_range(INSTALLED) else "outside"
    return LightningCompatError(
        f"unisent reads Lightning's private {attribute}, which lightning {INSTALLED} does not have "
        f"({where} the range unisent is tested with: lightning{TESTED})"
    )


def _private(obj: Any, name: str, owner: str) -> Any:
    """``obj.<name>``, or ``LightningCompatError`` naming ``owner.name`` when it is not there."""
    try:
        return getattr(obj, name)
    except AttributeError:
        raise _missing(f"{owner}.{name}") from None


try:
    # the type of Trainer's ``precision`` argument: LightningCLI (jsonargparse) reads the annotation of
    # UnisentTrainer.__init__ to parse ``trainer.precision``, so it must be Lightning's own
    from lightning.fabric.plugins.precision.precision import _PRECISION_INPUT as PrecisionInput
except ImportError:
    raise _missing("lightning.fabric.plugins.precision.precision._PRECISION_INPUT") from None


def default_process_group_backend(strategy: Any, device: Any) -> str:
    """The process-group backend a DDP ``strategy`` will use on ``device``: the one it was given
    (``DDPStrategy._process_group_backend``), else Lightning's default for the device
    (``lightning.fabric.utilities.distributed._get_default_process_group_backend_for_device``): what
    ``unisent.strategies.join_elastic_group`` initialises the group with, as Lightning would."""
    given = _private(strategy, "_process_group_backend", type(strategy).__name__)
    if given:
        return given
    try:
        from lightning.fabric.utilities.distributed import _get_default_process_group_backend_for_device
    except ImportError:
        raise _missing("lightning.fabric.utilities.distributed._get_default_process_group_backend_for_device") from None
    return _get_default_process_group_backend_for_device(device)


def set_process_group_backend(strategy: Any, backend: str) -> None:
    """Record ``backend`` as the DDP ``strategy``'s (``DDPStrategy._process_group_backend``, which its
    ``process_group_backend`` property returns) after unisent initialised the process group itself."""
    _private(strategy, "_process_group_backend", type(strategy).__name__)
    strategy._process_group_backend = backend


def process_group_timeout(strategy: Any) -> Any:
    """The timeout (a ``timedelta``, or ``None``) the DDP ``strategy`` was given for collectives
    (``DDPStrategy._timeout``: no public accessor), for a process group unisent initialises itself."""
    return _private(strategy, "_timeout", type(strategy).__name__)


def should_accumulate(trainer: Any) -> bool:
    """Whether the current training step only accumulates gradients (the optimiser does not step after it):
    ``trainer.fit_loop._should_accumulate()`` (which asks the epoch loop). Read by the balancers (the last
    micro-batch) and by the interrupt handling (save only at an optimiser step's boundary)."""
    return _private(trainer.fit_loop, "_should_accumulate", type(trainer.fit_loop).__name__)()


def cluster_environment(trainer: Any) -> Any:
    """The trainer's cluster environment (``SLURMEnvironment``, ``LightningEnvironment`` ...):
    ``trainer._accelerator_connector.cluster_environment`` (a strategy without one, such as single-device,
    has no public accessor). The checkpoint callback turns off SLURM's own requeue on it; ``None`` where the
    connector has no such property."""
    connector = _private(trainer, "_accelerator_connector", type(trainer).__name__)
    return getattr(connector, "cluster_environment", None)


def data_fetcher(trainer: Any) -> Any:
    """The fit loop's data fetcher (``trainer.fit_loop._data_fetcher``): exact resume calls ``iter()`` on it
    again when the DataModule's position was restored after Lightning made the iterator."""
    return _private(trainer.fit_loop, "_data_fetcher", type(trainer.fit_loop).__name__)


def wandb_init_settings(logger: Any) -> dict[str, Any]:
    """The arguments Lightning's ``WandbLogger`` passes to ``wandb.init`` (``WandbLogger._wandb_init``): the
    step logger asks it for ``sync_tensorboard`` (then W&B numbers the rows itself)."""
    return _private(logger, "_wandb_init", type(logger).__name__)


def logger_prefix(logger: Any) -> str:
    """The prefix Lightning's ``WandbLogger`` puts before every metric's name (``WandbLogger._prefix``; its
    ``log_metrics`` adds it, and the step logger logs without calling that)."""
    return _private(logger, "_prefix", type(logger).__name__)
