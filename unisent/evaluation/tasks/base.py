"""The task interface: a named benchmark that reads files under a data directory and scores a model."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from ..encoding import Embedder, SentenceModel

__all__ = ["Source", "Task"]


@dataclass(frozen=True)
class Source:
    """Where a task's data lives and how to read it.

    Attributes:
        files: paths relative to the data directory, passed in this order to ``reader``.
        reader: a function of the absolute paths returning a record object (see ``readers``).
    """

    files: tuple[str, ...]
    reader: Callable[..., Any]

    def load(self, data_dir: Path) -> Any:
        """Read the data of this source under ``data_dir``."""
        return self.reader(*(data_dir / name for name in self.files))


@dataclass(frozen=True, kw_only=True)
class Task(ABC):
    """A benchmark task.

    Subclasses set ``main_metric`` (the key of the headline number in the result dict) and implement
    :meth:`sources` and :meth:`evaluate`.

    Attributes:
        name: registry name (``stsb-test``).
        group: the family shown as one table (``sts``, ``stc``, ``transfer``, ``xnli``...).
        description: one line for ``list_tasks``.
        optional: when reached through a group, skip the task if its files are absent (tasks whose data
            is not redistributed with the others, such as STS12-16); named explicitly it still raises.
    """

    main_metric: ClassVar[str] = "score"

    name: str
    group: str
    description: str
    optional: bool = False

    @abstractmethod
    def sources(self) -> tuple[Source, ...]:
        """Every data source the task reads."""

    @abstractmethod
    def evaluate(self, embedder: Embedder, data_dir: Path) -> dict[str, float]:
        """Score the embedder's model; ``data_dir`` is already checked to hold every file."""

    def files(self) -> tuple[str, ...]:
        """Every file the task reads, relative to the data directory."""
        return tuple(name for source in self.sources() for name in source.files)

    def missing_files(self, data_dir: str | Path) -> list[Path]:
        """The absolute paths of the task's files that do not exist under ``data_dir``."""
        data_dir = Path(data_dir)
        return [data_dir / name for name in self.files() if not (data_dir / name).is_file()]

    def check_files(self, data_dir: str | Path) -> None:
        """Raise :class:`FileNotFoundError` naming the first missing file of the task."""
        missing = self.missing_files(data_dir)
        if missing:
            more = f" (and {len(missing) - 1} more)" if len(missing) > 1 else ""
            raise FileNotFoundError(f"task {self.name!r}: missing data file {missing[0]}{more}")

    def run(
        self,
        model: SentenceModel,
        data_dir: str | Path,
        batch_size: int = 64,
        *,
        embedder: Embedder | None = None,
    ) -> dict[str, float]:
        """Evaluate ``model`` on this task.

        Args:
            model: object with ``encode(sentences, batch_size)``.
            data_dir: root of the data layout (see docs/evaluation.md).
            batch_size: encoding batch size.
            embedder: a shared :class:`Embedder` (its model and batch size are used instead).

        Returns:
            Metric name -> value; ``main_metric`` is always present.
        """
        data_dir = Path(data_dir)
        self.check_files(data_dir)
        embedder = embedder or Embedder(model, batch_size)
        return self.evaluate(embedder, data_dir)
