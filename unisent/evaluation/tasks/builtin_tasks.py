"""The built-in tasks, their groups, and lookup by name; built once, at import, from the tables below.

Paths are relative to a data directory laid out like the project's ``shared/data`` (docs/evaluation.md).
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import partial
from typing import Any

from ...data.benchmark_readers import (
    NLI_LABELS,
    PAWSX_LABELS,
    read_aligned_nli,
    read_binary_files,
    read_bucc_files,
    read_labeled_jsonl,
    read_labeled_tsv,
    read_mrpc,
    read_pair_tsv,
    read_parallel,
    read_senteval_sts,
    read_sick_entailment,
    read_sick_relatedness,
    read_sst,
    read_sts17,
    read_stsb_multi,
    read_stsb_multi_cross,
    read_stsbenchmark,
    read_text_and_labels,
    read_trec,
)
from .clustering_tasks import BuccTask, ClusteringTask, TatoebaTask
from .nli_tasks import EntailmentDirectionTask, NLIThresholdTask
from .sts_tasks import AlignUniformTask, STSSubsetsTask, STSTask
from .task import Source, Task
from .transfer_tasks import CrossValidatedProbeTask, SplitProbeTask, ZeroShotProbeTask

__all__ = ["GROUPS", "TASKS", "get_task", "register_task", "resolve_tasks", "task_names_summary"]

STSB = "sts/stsbenchmark"
SICK = "sts/sick"
SENTEVAL = "senteval"
#: the bundled SNLI test sample (the default data directory, unisent/resources, holds it)
SNLI_SAMPLE = "snli_test_entailment.tsv"

# SentEval's STS12-16 subsets (STS13 without the licensed SMT subset), folder sts/STS1x-en-test/.
STS_YEARS: dict[str, tuple[str, ...]] = {
    "sts12": ("MSRpar", "MSRvid", "SMTeuroparl", "surprise.OnWN", "surprise.SMTnews"),
    "sts13": ("FNWN", "headlines", "OnWN"),
    "sts14": ("deft-forum", "deft-news", "headlines", "images", "OnWN", "tweet-news"),
    "sts15": ("answers-forums", "answers-students", "belief", "headlines", "images"),
    "sts16": ("answer-answer", "headlines", "plagiarism", "postediting", "question-question"),
}
# STS17 (extended release, as in sentence-transformers and MSE-AMR): pair -> file in sts/STS17-test/.
STS17_FILES: dict[str, str] = {
    "ar-ar": "STS.input.track1.ar-ar.txt",
    "ar-en": "STS.input.track2.ar-en.txt",
    "es-es": "STS.input.track3.es-es.txt",
    "es-en": "STS.input.track4a.es-en.txt",
    "en-en": "STS.input.track5.en-en.txt",
    "tr-en": "STS.input.track6.tr-en.txt",
    "de-en": "STS.input.extended.de-en.txt",
    "fr-en": "STS.input.extended.fr-en.txt",
    "it-en": "STS.input.extended.it-en.txt",
    "nl-en": "STS.input.extended.nl-en.txt",
}
STSB_MULTI_LANGS = ("de", "en", "es", "fr", "it", "ja", "nl", "pl", "pt", "ru", "zh")
# Cross-lingual STS-B (Reimers & Gurevych 2020): English sentence 1, sentence 2 in one of these.
STSB_CROSS_LANGS = ("de", "es")
# The eight short-text clustering sets of the EASE paper, laid out and read as in EASE's
# downstreams/text-clustering/data/monolingual_benchmark/: name -> (reader, files under clustering/stc/,
# optional). GoogleNews-* are optional: the shared data bundle does not carry them.
STC_SETS = {
    "agnews": ("agnews", read_labeled_tsv, ("agnews.txt",), False),
    "searchsnippets": (
        "searchsnippets",
        read_text_and_labels,
        ("searchsnippets.txt", "searchsnippets_label.txt"),
        False,
    ),
    "stackoverflow": ("stackoverflow", read_text_and_labels, ("stackoverflow.txt", "stackoverflow_label.txt"), False),
    "biomedical": ("biomedical", read_text_and_labels, ("biomedical.txt", "biomedical_label.txt"), False),
    "tweet": ("tweet", read_labeled_jsonl, ("tweet.txt",), False),
    "googlenews-s": ("GoogleNews-S (snippet)", read_labeled_tsv, ("s.txt",), True),
    "googlenews-t": ("GoogleNews-T (title)", read_labeled_tsv, ("t.txt",), True),
    "googlenews-ts": ("GoogleNews-TS (title and snippet)", read_labeled_tsv, ("ts.txt",), True),
}
MEWSC16_LANGS = ("ar", "ca", "cs", "de", "en", "eo", "es", "fa", "fr", "ja", "ko", "pl", "pt", "ru", "sv", "tr")
# The 112 languages of the LASER Tatoeba test sets (ISO 639-3, as in the file names).
TATOEBA_LANGS = tuple(
    """afr amh ang ara arq arz ast awa aze bel ben ber bos bre bul cat cbk ceb ces cha cmn cor csb cym dan
    deu dsb dtp ell epo est eus fao fin fra fry gla gle glg gsw heb hin hrv hsb hun hye ido ile ina ind isl
    ita jav jpn kab kat kaz khm kor kur kzj lat lfn lit lvs mal mar max mhr mkd mon nds nld nno nob nov oci
    orv pam pes pms pol por ron rus slk slv spa sqi srp swe swg swh tam tat tel tgl tha tuk tur tzl uig ukr
    urd uzb vie war wuu xho yid yue zsm""".split()
)
BUCC_LANGS = ("de", "fr", "ru", "zh")
XNLI_LANGS = ("ar", "bg", "de", "el", "en", "es", "fr", "hi", "ru", "sw", "th", "tr", "ur", "vi", "zh")
PAWSX_LANGS = ("de", "en", "es", "fr", "ja", "ko", "zh")
#: the groups whose tasks are also in the group ``multilingual``
MULTILINGUAL = ("stsb-multi", "stsb-multi-cross", "sts17", "mewsc16", "tatoeba", "bucc", "xnli", "pawsx")

TASKS: dict[str, Task] = {}
GROUPS: dict[str, tuple[str, ...]] = {}


def register_task(task: Task, groups: tuple[str, ...] | None = None) -> Task:
    """Add a task to the registry under ``task.name``, to ``groups`` (default: ``(task.group,)``) and to ``all``.

    Raises:
        ValueError: the name is taken by another task or a group, or a group name is a task name.
    """
    if task.name in TASKS or task.name in GROUPS:
        raise ValueError(f"task name {task.name!r} is already registered")
    groups = (task.group,) if groups is None else groups
    for group in (*groups, "all"):
        if group in TASKS:
            raise ValueError(f"group name {group!r} is already a task name")
    TASKS[task.name] = task
    for group in (*groups, "all"):
        GROUPS[group] = (*GROUPS.get(group, ()), task.name)
    return task


def _add(kind: type[Task], name: str, group: str, description: str, *, held_out: bool = False, **fields: Any) -> None:
    """Register ``kind(name=..., group=..., description=..., **fields)`` in ``group`` (and in ``multilingual`` when
    ``group`` is in ``MULTILINGUAL``); ``held_out``, a set for choosing settings: in no group but ``all``."""
    groups = () if held_out else (group, "multilingual") if group in MULTILINGUAL else (group,)
    register_task(kind(name=name, group=group, description=description, **fields), groups)


def _sts_tasks() -> None:
    for name, subsets in STS_YEARS.items():
        folder = f"sts/{name.upper()}-en-test"
        files = [(f"{folder}/STS.input.{s}.txt", f"{folder}/STS.gs.{s}.txt") for s in subsets]
        description = f"{name.upper()} ({len(subsets)} SentEval subsets), Spearman x100 of all pairs"
        sources = tuple((s, Source(pair, read_senteval_sts)) for s, pair in zip(subsets, files))
        _add(STSSubsetsTask, name, "sts", description, optional=True, subsets=sources)
    # the dev set is for model selection: the "sts" group (SimCSE's STS average) leaves it out
    for split in ("dev", "test"):
        source = Source((f"{STSB}/sts-{split}.csv",), read_stsbenchmark)
        description = f"STS Benchmark {split} (SentEval csv), Spearman x100"
        _add(STSTask, f"stsb-{split}", "sts", description, source=source, held_out=split == "dev")
    # like stsb-dev: the trial set is for model selection, out of the "sts" average
    sick = {"sick-r": ("test_annotated", "test set"), "sick-r-dev": ("trial", "trial set (500 pairs)")}
    for name, (file, what) in sick.items():
        source = Source((f"{SICK}/SICK_{file}.txt",), read_sick_relatedness)
        description = f"SICK relatedness, {what}, Spearman x100"
        _add(STSTask, name, "sts", description, source=source, held_out=file == "trial")
    source = Source((f"{STSB}/sts-dev.csv",), read_stsbenchmark)
    description = "alignment (pairs scored >= 4) and uniformity on STS-B dev (Wang & Isola 2020)"
    _add(AlignUniformTask, "stsb-align-uniform", "analysis", description, source=source)
    for lang in STSB_MULTI_LANGS:
        source = Source((f"sts/stsb-multi-mt/stsb-{lang}-test.csv",), read_stsb_multi)
        description = f"stsb-multi-mt {lang} test (machine-translated STS-B), Spearman x100"
        _add(STSTask, f"stsb-multi-{lang}", "stsb-multi", description, source=source)
    for lang in STSB_CROSS_LANGS:
        for split in ("dev", "test"):
            files = tuple(f"sts/stsb-multi-mt/stsb-{x}-{split}.csv" for x in ("en", lang))
            source = Source(files, read_stsb_multi_cross)
            description = f"stsb-multi-mt {split}, English sentence 1 vs {lang} sentence 2, Spearman x100"
            name = f"stsb-multi-en-{lang}" + ("-dev" if split == "dev" else "")
            # like stsb-dev: the dev sets are for model selection, in no group but "all"
            _add(STSTask, name, "stsb-multi-cross", description, source=source, held_out=split == "dev")
    for pair, filename in STS17_FILES.items():
        source = Source((f"sts/STS17-test/{filename}",), read_sts17)
        description = f"STS17 {pair} (extended release), Spearman x100"
        _add(STSTask, f"sts17-{pair}", "sts17", description, source=source, optional=True)


def _clustering_and_retrieval_tasks() -> None:
    for name, (title, reader, files, optional) in STC_SETS.items():
        source = Source(tuple(f"clustering/stc/{f}" for f in files), reader)
        description = f"{title} short-text clustering, K-means accuracy x100 (mean of 3 seeds)"
        _add(ClusteringTask, f"stc-{name}", "stc", description, source=source, optional=optional)
    drop_empty = partial(read_text_and_labels, drop_empty=True)
    for lang in MEWSC16_LANGS:  # empty sentences (a sentence-splitter artefact) dropped with their category, as EASE
        files = (f"clustering/mewsc16/{lang}_sentences.txt", f"clustering/mewsc16/{lang}_categories.txt")
        description = f"MewsC-16 {lang} news clustering, K-means accuracy x100 (mean of 3 seeds)"
        _add(ClusteringTask, f"mewsc16-{lang}", "mewsc16", description, source=Source(files, drop_empty))
    for lang in TATOEBA_LANGS:
        stem = f"retrieval/tatoeba/tatoeba.{lang}-eng"
        description = f"Tatoeba {lang}<->eng retrieval, accuracy x100 (mean of both directions)"
        source = Source((f"{stem}.{lang}", f"{stem}.eng"), read_parallel)
        _add(TatoebaTask, f"tatoeba-{lang}", "tatoeba", description, source=source)
    for lang in BUCC_LANGS:
        stem = f"retrieval/bucc2018/{lang}-en/{lang}-en.training"
        source = Source((f"{stem}.{lang}", f"{stem}.en", f"{stem}.gold"), read_bucc_files)
        description = f"BUCC 2018 {lang}-en mining (training split), margin kNN k=4, F1 x100"
        _add(BuccTask, f"bucc-{lang}", "bucc", description, source=source, optional=True)


def _transfer_tasks() -> None:
    latin1 = partial(read_binary_files, encoding="latin-1")
    binary = {
        "mr": ("MR movie review polarity", latin1, ("rt-polarity.pos", "rt-polarity.neg")),
        "cr": ("CR product review polarity", read_binary_files, ("custrev.pos", "custrev.neg")),
        "subj": ("SUBJ subjectivity", latin1, ("subj.subjective", "subj.objective")),
        "mpqa": ("MPQA opinion polarity", read_binary_files, ("mpqa.pos", "mpqa.neg")),
    }
    for name, (title, reader, files) in binary.items():
        source = Source(tuple(f"{SENTEVAL}/{f}" for f in files), reader)
        description = f"{title}, logistic regression, 10-fold CV accuracy x100"
        _add(CrossValidatedProbeTask, name, "transfer", description, source=source)
    sst = [Source((f"{SENTEVAL}/sst2/sentiment-{split}",), read_sst) for split in ("train", "dev", "test")]
    description = "SST-2 binary sentiment, logistic regression (C on dev), test accuracy x100"
    _add(SplitProbeTask, "sst2", "transfer", description, train=sst[0], dev=sst[1], test=sst[2])
    trec = [Source((f"{SENTEVAL}/TREC.{split}",), read_trec) for split in ("train", "test")]
    description = "TREC 6-way question type, logistic regression (C by CV), test accuracy x100"
    _add(SplitProbeTask, "trec", "transfer", description, train=trec[0], test=trec[1])
    mrpc = [Source((f"{SENTEVAL}/mrpc/msr_paraphrase_{split}.txt",), read_mrpc) for split in ("train", "test")]
    description = "MRPC paraphrase, [u,v,|u-v|,u*v] logistic regression, test accuracy (and F1) x100"
    _add(SplitProbeTask, "mrpc", "transfer", description, train=mrpc[0], test=mrpc[1], positive_label="1")
    sick = [Source((f"{SICK}/SICK_{s}.txt",), read_sick_entailment) for s in ("train", "trial", "test_annotated")]
    description = "SICK entailment 3-way, [u,v,|u-v|,u*v] logistic regression (C on trial), accuracy"
    _add(SplitProbeTask, "sick-e", "transfer", description, train=sick[0], dev=sick[1], test=sick[2])


def _nli_tasks() -> None:
    snli = {
        s: Source(tuple(f"nli/snli/{f}.{s}" for f in ("s1", "s2", "labels")), read_aligned_nli) for s in ("dev", "test")
    }
    sick_test = Source((f"{SICK}/SICK_test_annotated.txt",), read_sick_entailment)
    for name, test in (("snli", snli["test"]), ("sick", sick_test)):
        description = f"{name.upper()} test 2-way (entailment vs rest) by sim(hyp||pre), threshold from SNLI dev"
        _add(NLIThresholdTask, f"{name}-nli", "nli", description, dev=snli["dev"], test=test)
    for name, source in (("snli", snli["test"]), ("sick", sick_test)):
        description = f"{name.upper()} test entailment pairs: which sentence entails (sim, variance)"
        _add(EntailmentDirectionTask, f"{name}-direction", "nli", description, source=source)
    # Held-out direction sets for choosing settings, in no group but `all` (like stsb-dev). Not SNLI dev: the
    # unified recipes train GaussCSE on SNLI dev's triples. SICK's trial split is the split of sick-r-dev; its
    # train split (669 pairs with the hypothesis at least as long in MiniLM's tokens) is nine times the size, and
    # no unisent recipe trains on it (unisent.evaluation.BestOnDev reads it during a run)
    for name, split, description in (
        ("sick-direction-dev", "trial", "SICK trial entailment pairs (144)"),
        ("sick-direction-train", "train", "SICK train entailment pairs (1,299), held out"),
    ):
        source = Source((f"{SICK}/SICK_{split}.txt",), read_sick_entailment)
        description = f"{description}: which sentence entails; for choosing settings"
        _add(EntailmentDirectionTask, name, "nli", description, source=source, held_out=True)
    # The quickstart's held-out test, bundled in unisent/resources (the default --data-dir; LICENSE.md
    # there): in no group but `all`, and optional there.
    sample = Source((SNLI_SAMPLE,), partial(read_pair_tsv, labels=NLI_LABELS))
    description = f"SNLI test, 1,000 entailment pairs bundled in {SNLI_SAMPLE}: which sentence entails"
    _add(
        EntailmentDirectionTask,
        "snli-direction-sample",
        "nli",
        description,
        held_out=True,
        optional=True,
        source=sample,
    )
    for family, langs, labels in (("xnli", XNLI_LANGS, NLI_LABELS), ("pawsx", PAWSX_LANGS, PAWSX_LABELS)):
        reader = partial(read_pair_tsv, labels=labels)
        english = Source((f"nli/{family}/dev-en.tsv",), reader)
        title = "XNLI 3-way" if family == "xnli" else "PAWS-X paraphrase"
        for lang in langs:
            test = Source((f"nli/{family}/test-{lang}.tsv",), reader)
            description = f"{title} zero-shot: probe on English dev, accuracy x100 on test-{lang}"
            _add(ZeroShotProbeTask, f"{family}-{lang}", family, description, train=english, test=test)


_sts_tasks()
_clustering_and_retrieval_tasks()
_transfer_tasks()
_nli_tasks()


def get_task(name: str) -> Task:
    """The registered task called ``name``; ``ValueError`` listing the valid names if there is none."""
    if name not in TASKS:
        raise ValueError(_unknown(name))
    return TASKS[name]


def task_names_summary() -> str:
    """Every task name, compacted per family (``tatoeba-{afr,amh,...}``), one family per line."""
    families: dict[str, list[str]] = {}
    for task in TASKS.values():
        families.setdefault(task.group, []).append(task.name)
    lines = []
    for family, names in families.items():
        prefix = f"{family}-"
        if len(names) > 3 and all(name.startswith(prefix) for name in names):
            names = [prefix + "{" + ",".join(name[len(prefix) :] for name in names) + "}"]
        lines.append(f"  {family}: {', '.join(names)}")
    return "\n".join(lines)


def _unknown(name: str) -> str:
    return f"unknown task or group {name!r}.\nGroups: {', '.join(sorted(GROUPS))}.\nTasks:\n{task_names_summary()}"


def resolve_tasks(names: Sequence[str] | str) -> list[tuple[Task, bool]]:
    """Expand task and group names (or a comma-separated string) into ``(task, named_explicitly)`` pairs,
    in order, without duplicates; a task reached only through a group has ``False``.

    Raises:
        ValueError: an unknown name (the message lists the valid tasks and groups) or no name at all.
    """
    if isinstance(names, str):
        names = names.split(",")
    names = [n.strip() for n in names if n.strip()]
    if not names:
        raise ValueError(_unknown(""))
    chosen: dict[str, bool] = {}
    for name in names:
        if name in TASKS:
            chosen[name] = True
        elif name in GROUPS:
            for member in GROUPS[name]:
                chosen.setdefault(member, False)
        else:
            raise ValueError(_unknown(name))
    return [(TASKS[name], explicit) for name, explicit in chosen.items()]
