"""Readers for bitext retrieval and mining: Tatoeba (LASER layout) and BUCC 2018."""

from __future__ import annotations

from pathlib import Path

from .benchmark_records import BuccCorpus, DataFormatError, ParallelSentences, read_lines

__all__ = ["read_bucc_files", "read_parallel", "read_tatoeba"]


def read_tatoeba(directory: str | Path, lang: str) -> ParallelSentences:
    """Read one Tatoeba test set from the LASER files ``tatoeba.{lang}-eng.{lang}`` (``source``) and
    ``tatoeba.{lang}-eng.eng`` (``target``); ``lang``: ISO 639-3 as in the file names (``deu``, ``cmn``)."""
    directory = Path(directory)
    return read_parallel(directory / f"tatoeba.{lang}-eng.{lang}", directory / f"tatoeba.{lang}-eng.eng")


def read_parallel(source_path: str | Path, target_path: str | Path) -> ParallelSentences:
    """Read two line-aligned files of translations (one sentence per line)."""
    source = read_lines(source_path)
    target = read_lines(target_path)
    if len(source) != len(target):
        raise DataFormatError(
            target_path, 0, f"has {len(target)} lines but {source_path} has {len(source)}: not aligned"
        )
    return ParallelSentences([s.strip() for s in source], [t.strip() for t in target])


def _read_id_sentences(path: Path) -> tuple[list[str], list[str]]:
    ids: list[str] = []
    sentences: list[str] = []
    for line, text in enumerate(read_lines(path), start=1):
        sentence_id, sep, sentence = text.partition("\t")
        if not sep or not sentence_id:
            raise DataFormatError(path, line, "expected 'id<TAB>sentence'; the id field is missing")
        ids.append(sentence_id)
        sentences.append(sentence.strip())
    return ids, sentences


def read_bucc_files(source_path: str | Path, target_path: str | Path, gold_path: str | Path) -> BuccCorpus:
    """Read the three files of a BUCC 2018 corpus (``lang``: ``de``, ``fr``, ``ru`` or ``zh``), as in the
    ``{lang}-en`` folder of the release: ``{lang}-en.{split}.{lang}`` and ``{lang}-en.{split}.en``
    (``id<TAB>sentence`` lines) and ``.gold`` (``source_id<TAB>english_id``, public for the ``sample`` and
    ``training`` splits only)."""
    source_ids, source = _read_id_sentences(Path(source_path))
    target_ids, target = _read_id_sentences(Path(target_path))
    gold: list[tuple[str, str]] = []
    for line, text in enumerate(read_lines(gold_path), start=1):
        fields = text.split("\t")
        if len(fields) != 2 or not all(fields):
            raise DataFormatError(gold_path, line, "expected 'source_id<TAB>english_id'")
        gold.append((fields[0], fields[1]))
    return BuccCorpus(source_ids, source, target_ids, target, gold)
