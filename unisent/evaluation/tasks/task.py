"""The task interface: a named benchmark that reads files under a data directory and scores a model."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from ...data.benchmark_readers import DataFormatError

if TYPE_CHECKING:  # torch is imported when a task runs, not when the registry is built (`evaluate --list`)
    from ..encoding import Embedder, SentenceModel
    from ..metrics.similarity import Similarity

__all__ = ["DataFormatError", "LoadedData", "Source", "Task", "use_loaded"]

#: what ``Source.load`` returns instead of reading again, while ``use_loaded`` is active
LoadedData = dict[tuple["Source", Path], Any]
_LOADED: ContextVar[LoadedData | None] = ContextVar("unisent_evaluation_loaded", default=None)


@contextmanager
def use_loaded(loaded: LoadedData) -> Iterator[LoadedData]:
    """Make [`Source.load`][unisent.evaluation.Source.load] return ``loaded[(source, data_dir)]``, data already read
    (and checked).

    The runner reads every file of the selected tasks before encoding anything, then runs them in this
    context, so each file is read once per run. Tasks must not modify the data they are given.
    """
    token = _LOADED.set(loaded)
    try:
        yield loaded
    finally:
        _LOADED.reset(token)


@dataclass(frozen=True)
class Source:
    """Where a task's data lives and how to read it.

    Attributes:
        files: paths relative to the data directory, passed in this order to ``reader``.
        reader: absolute paths -> a record object (``unisent.data.benchmark_readers``); raises
            ``FileNotFoundError`` or ``DataFormatError`` (file, line and field).
    """

    files: tuple[str, ...]
    reader: Callable[..., Any]

    def read(self, data_dir: str | Path) -> Any:
        """Read (and so check every row of) the data of this source under ``data_dir``."""
        data_dir = Path(data_dir)
        return self.reader(*(data_dir / name for name in self.files))

    def load(self, data_dir: str | Path) -> Any:
        """The data of this source under ``data_dir``: read now, or taken from ``use_loaded``."""
        loaded = _LOADED.get()
        if loaded is not None:
            key = (self, Path(data_dir))
            if key in loaded:
                return loaded[key]
        return self.read(data_dir)


@dataclass(frozen=True, kw_only=True)
class Task(ABC):
    """A benchmark task. Subclasses set ``main_metric`` (the headline key of the result dict) and implement
    [`evaluate`][unisent.evaluation.Task.evaluate] (and [`sources`][unisent.evaluation.Task.sources] when their data is
    not in [`Source`][unisent.evaluation.Source] fields).

    Attributes:
        group: the family shown as one table (``sts``, ``stc``, ``transfer``, ``xnli``...).
        description: one line for ``list_tasks``.
        optional: when reached through a group, skip the task if its files are absent (data not
            redistributed with the rest, such as STS12-16); named explicitly it still raises.
        gaussian_similarity: the similarity the task is scored with on a model with a Gaussian head
            (``encode_gaussian``) when the run names none; ``None``: cosine, as every other task. A task
            that a symmetric similarity cannot score (entailment direction) sets ``"kl"``.
    """

    main_metric: ClassVar[str] = "score"
    gaussian_similarity: ClassVar[str | None] = None

    name: str
    group: str
    description: str
    optional: bool = False

    def sources(self) -> tuple[Source, ...]:
        """Every data source the task reads: by default its fields that hold a [`Source`][unisent.evaluation.Source], in
        their order."""
        return tuple(value for f in fields(self) if isinstance(value := getattr(self, f.name), Source))

    @abstractmethod
    def evaluate(self, embedder: Embedder, data_dir: Path) -> dict[str, float]:
        """Score the embedder's model; ``data_dir`` is already checked to hold every file. Read the data
        with ``source.load(data_dir)``: in a run it returns what was read before anything was encoded."""

    def own_similarity(self, model: SentenceModel) -> Similarity | None:
        """The similarity this task is scored with on ``model`` when the run names none: its
        ``gaussian_similarity`` on a model with ``encode_gaussian``, else ``None`` (cosine)."""
        if not self.gaussian_similarity or not callable(getattr(model, "encode_gaussian", None)):
            return None
        from ..similarities import get_similarity

        return get_similarity(self.gaussian_similarity)

    def files(self) -> tuple[str, ...]:
        """Every file the task reads, relative to the data directory."""
        return tuple(name for source in self.sources() for name in source.files)

    def missing_files(self, data_dir: str | Path) -> list[Path]:
        """The absolute paths of the task's files that do not exist under ``data_dir``.

        Raises:
            OSError: a file that exists but is no regular file (a FIFO, a device, a broken link), not
                taken for missing (and replaced by a bundled copy).
        """
        from ...data.file_checks import not_a_regular_file

        data_dir = Path(data_dir)
        for name in self.files():
            special = not_a_regular_file(data_dir / name, f"task {self.name!r}: data file")
            if special is not None:
                raise special
        return [data_dir / name for name in self.files() if not (data_dir / name).is_file()]

    def check_files(self, data_dir: str | Path) -> None:
        """Raise ``FileNotFoundError`` naming the first missing file of the task."""
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
        """Evaluate ``model`` (``encode(sentences, batch_size)``) on this task: metric name -> value, with
        ``main_metric`` always present. ``embedder``: a shared [`Embedder`][unisent.evaluation.Embedder], used instead
        of ``model`` and ``batch_size``; without one, the task's ``gaussian_similarity`` on a model with a Gaussian
        head."""
        data_dir = Path(data_dir)
        self.check_files(data_dir)
        # every row checked before anything is encoded; a source the task reads twice, once
        loaded: LoadedData = {(source, data_dir): source.read(data_dir) for source in dict.fromkeys(self.sources())}
        if embedder is None:
            from ..encoding import Embedder

            embedder = Embedder(model, batch_size, similarity=self.own_similarity(model))
        with use_loaded(loaded):
            return self.evaluate(embedder, data_dir)
