"""Three behaviours no other test pinned, each written so that a known bug ("mutant") fails it:

(a) the int8 ONNX export's STS-B gate: a Spearman drop beyond ``INT8_MAX_STSB_DROP`` is refused, a small
    drop or a gain passes (the cosine half of the gate is tested in tests/test_onnx.py);
(b) ``precision: auto`` on CPUs with AVX-512 but without AVX512-BF16 or AMX (Skylake-SP, Cascade Lake, Ice
    Lake) is fp32; Cooper Lake, Sapphire Rapids and Zen 4 are bf16;
(c) Distill's frozen teacher stays in eval mode (dropout off) and gives the same vectors for the same input
    across steps, after ``module.train()`` (Lightning, each epoch) and after its own module was switched to
    train mode between calls.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch

from unisent import hardware

# ----------------------------------------------------------------------------------------------------------
# (b) Catches: a CPU with AVX-512 but no AVX512-BF16/AMX taken for a bf16 CPU (e.g. "avx512f" or
# "avx512_vnni" added to BF16_CPU_FLAGS, or any "avx512*" flag matched as bf16). The flags below are the
# `flags` lines of /proc/cpuinfo (lscpu) of each machine, shortened to the SIMD and matrix extensions.
_BASE = (
    "fpu vme de pse tsc msr pae mce cx8 apic sep mtrr pge mca cmov pat pse36 clflush mmx fxsr sse sse2 ss ht "
    "syscall nx pdpe1gb rdtscp lm constant_tsc rep_good nopl xtopology cpuid pni pclmulqdq ssse3 fma cx16 pcid "
    "sse4_1 sse4_2 x2apic movbe popcnt aes xsave avx f16c rdrand hypervisor lahf_lm abm 3dnowprefetch fsgsbase "
    "bmi1 avx2 smep bmi2 erms invpcid"
)
SKYLAKE_SP = f"{_BASE} mpx avx512f avx512dq rdseed adx smap clflushopt clwb avx512cd avx512bw avx512vl xsaveopt"
CASCADE_LAKE = f"{SKYLAKE_SP} xsavec xgetbv1 xsaves ida arat pku ospke avx512_vnni md_clear arch_capabilities"
ICE_LAKE = (
    f"{_BASE} avx512f avx512dq rdseed adx smap avx512ifma clflushopt clwb avx512cd sha_ni avx512bw avx512vl "
    "xsaveopt xsavec xgetbv1 xsaves wbnoinvd ida arat avx512vbmi pku ospke avx512_vbmi2 gfni vaes vpclmulqdq "
    "avx512_vnni avx512_bitalg tme avx512_vpopcntdq rdpid md_clear flush_l1d arch_capabilities"
)
COOPER_LAKE = f"{CASCADE_LAKE} avx512_bf16"
SAPPHIRE_RAPIDS = (
    f"{ICE_LAKE} avx_vnni avx512_bf16 la57 cldemote movdiri movdir64b serialize tsxldtrk amx_bf16 avx512_fp16 "
    "amx_tile amx_int8"
)
ZEN4 = (
    f"{_BASE} avx512f avx512dq rdseed adx smap avx512ifma clflushopt clwb avx512cd sha_ni avx512bw avx512vl "
    "xsaveopt xsavec xgetbv1 xsaves clzero avx512_bf16 wbnoinvd avx512vbmi umip pku ospke avx512_vbmi2 gfni vaes "
    "vpclmulqdq avx512_vnni avx512_bitalg avx512_vpopcntdq rdpid fsrm"
)


@pytest.mark.parametrize(
    ("flags", "bf16"),
    [
        pytest.param(SKYLAKE_SP, False, id="skylake-sp"),
        pytest.param(CASCADE_LAKE, False, id="cascade-lake"),
        pytest.param(ICE_LAKE, False, id="ice-lake"),
        pytest.param(COOPER_LAKE, True, id="cooper-lake"),
        pytest.param(SAPPHIRE_RAPIDS, True, id="sapphire-rapids"),
        pytest.param(ZEN4, True, id="zen4"),
    ],
)
def test_auto_is_bf16_only_on_cpus_with_avx512_bf16_or_amx(flags, bf16, monkeypatch, tmp_path):
    info = tmp_path / "cpuinfo"  # read as /proc/cpuinfo is: the flags of the first processor
    info.write_text(f"processor\t: 0\nmodel name\t: test CPU\nflags\t\t: {flags}\n\nprocessor\t: 1\n")
    read = frozenset(hardware.cpu_info.__wrapped__(str(info))["flags"].split())
    assert read == frozenset(flags.split()) and ("avx512f" in read) and ("avx512_bf16" in read) == bf16
    monkeypatch.setattr(hardware, "cpu_flags", lambda: read)
    assert hardware.choose_precision("cpu").bf16 is bf16
    assert hardware.choose_precision("cpu", read).precision == ("bf16-mixed" if bf16 else "32-true")
    assert hardware.resolve_precision("auto")[0] == ("bf16-mixed" if bf16 else "32-true")
    assert hardware.inference_precision("auto")[0] is bf16
    if not bf16:
        assert "no AVX512-BF16 or AMX" in hardware.choose_precision("cpu").reason


# ----------------------------------------------------------------------------------------------------------
# (a) Catches: the STS-B half of the int8 gate with its sign flipped (``drop = int8 - fp32``, or the
# comparison reversed): a drop of more than INT8_MAX_STSB_DROP points passes and/or a small drop or a gain
# is refused. The fp32 export and the int8 quantisation are real; only the STS-B/cosine numbers of
# ``int8_quality`` are given, so that the gate's own comparison decides.
@pytest.fixture(scope="module")
def fp32_export(tiny_bert_dir, tmp_path_factory) -> Path:
    pytest.importorskip("onnxruntime")
    from unisent.encoders import Encoder, EncoderConfig
    from unisent.export import export_model

    encoder = tmp_path_factory.mktemp("encoder")
    Encoder(EncoderConfig(model=str(tiny_bert_dir), pooler="mean", max_length=32, normalize=True)).save_pretrained(
        encoder
    )
    out = tmp_path_factory.mktemp("exports") / "onnx"
    export_model(str(encoder), out, "onnx")
    return out


def _gate(fp32_export: Path, tmp_path: Path, monkeypatch, stsb_fp32: float, stsb_int8: float, force=False):
    """Quantise a copy of the export to int8 as ``unisent export --quantize int8`` does (``OnnxExporter``'s
    int8 step), with ``int8_quality`` reporting the given STS-B test Spearman of each file."""
    from unisent.export import onnx as onnx_export

    out = Path(shutil.copytree(fp32_export, tmp_path / "export"))
    quality = {"stsb_fp32": stsb_fp32, "stsb_int8": stsb_int8, "min_cosine": 0.999, "sentences": 3}
    monkeypatch.setattr(onnx_export, "int8_quality", lambda directory, batch_size=32: dict(quality))
    exporter = onnx_export.OnnxExporter()
    exporter.configure(quantize="int8", force=force, arch="avx2")
    exporter.record = json.loads((out / "onnx" / "unisent_onnx.json").read_text())
    exporter._write_int8(out)
    assert (out / "onnx" / "model_qint8_avx2.onnx").is_file()
    return exporter


@pytest.mark.parametrize(
    ("stsb_int8", "refused"), [(79.0, True), (79.45, True), (79.6, False), (80.0, False), (83.0, False)]
)
def test_the_int8_gate_refuses_an_stsb_drop_beyond_its_margin(fp32_export, tmp_path, monkeypatch, stsb_int8, refused):
    from unisent.export import ExportCheckError
    from unisent.export.onnx import INT8_MAX_STSB_DROP

    assert INT8_MAX_STSB_DROP == 0.5  # the cases below sit on both sides of it
    if refused:
        with pytest.raises(ExportCheckError, match=rf"STS-B drops by {80.0 - stsb_int8:.2f} \(> 0.5\).*--force"):
            _gate(fp32_export, tmp_path, monkeypatch, 80.0, stsb_int8)
        forced = _gate(fp32_export, tmp_path / "forced", monkeypatch, 80.0, stsb_int8, force=True)
        assert "kept with --force despite STS-B drops by" in forced.notes[-1]
    else:  # a small drop, none, or a gain: kept, and no failure named
        exporter = _gate(fp32_export, tmp_path, monkeypatch, 80.0, stsb_int8)
        assert exporter.notes[-1].startswith("int8 (model_qint8_avx2.onnx") and "--force" not in exporter.notes[-1]
        assert exporter.record["checks"]["int8"]["stsb_int8"] == stsb_int8


# ----------------------------------------------------------------------------------------------------------
# (c) Catches: the teacher run in train mode (dropout on) after something switched it back: Frozen's call
# without its ``self.module.eval()``, Distill calling ``self._teacher.module(...)`` around the guard, or the
# teacher held as a child module so that ``module.train()`` reaches it.
def test_the_distill_teacher_stays_in_eval_mode_across_steps_and_train_calls(tiny_bert_dir):
    from unisent.encoders import EncoderConfig
    from unisent.lightning_module import UnisentModule
    from unisent.objectives import Distill, SimCSE
    from unisent.optim import AdamW
    from unisent.training_config import EvaluationConfig

    torch.manual_seed(0)
    module = UnisentModule(
        encoder=EncoderConfig(model=str(tiny_bert_dir)),
        objectives=[SimCSE(), Distill()],
        optimizer=lambda params: AdamW(params, lr=1e-2),
        evaluation=EvaluationConfig(val_tasks=[]),
    )
    distill = module.objectives[1]
    teacher = distill._teacher.module
    assert teacher.backbone.config.hidden_dropout_prob > 0  # dropout that train mode would switch on
    sentences = ["A man is playing a guitar.", "Two dogs run on the beach in the evening sun.", "Rain."]
    ids = module.encoder.tokenizer(sentences, padding=True, return_tensors="pt")
    batch = {"text": {"input_ids": ids["input_ids"], "attention_mask": ids["attention_mask"]}}
    seen: list[bool] = []
    teacher.register_forward_pre_hook(lambda mod, args: seen.append(mod.training))

    first = distill.targets(ids["input_ids"], ids["attention_mask"])
    optimizer = torch.optim.SGD(module.encoder.parameters(), lr=0.1)
    for step in range(3):
        module.train()  # Lightning, at the start of each epoch and after each validation
        if step == 2:
            teacher.train()  # whoever switched the teacher itself back to train mode between calls
        loss = distill(module.encoder, batch)["mse"]
        assert loss.requires_grad and loss.item() >= 0
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        again = distill.targets(ids["input_ids"], ids["attention_mask"])
        assert torch.equal(again, first), f"the teacher's vectors changed at step {step}"
        assert not teacher.training
    assert seen and not any(seen), f"the teacher ran in train mode: {seen}"
    assert all(not p.requires_grad for p in teacher.parameters())
