"""CPU probe: /proc/cpuinfo parsing, and our CPUID decoder checked against the kernel's view."""

from __future__ import annotations

import dataclasses
import os
import sys
from pathlib import Path

import psutil
import pytest

from deskllm.hardware import cpuid
from deskllm.hardware.cpu import parse_proc_cpuinfo, probe_cpu

LINUX = sys.platform.startswith("linux")
# Features lines as real ARM kernels print them in /proc/cpuinfo.
PI5_CORTEX_A76 = (
    "fp asimd evtstrm aes pmull sha1 sha2 crc32 atomics fphp asimdhp cpuid asimdrdm lrcpc "
    "dcpop asimddp"
)
NEOVERSE_N2 = (
    "fp asimd evtstrm aes pmull sha1 sha2 crc32 atomics fphp asimdhp cpuid asimdrdm jscvt fcma "
    "lrcpc dcpop sha3 sm3 sm4 asimddp sha512 sve asimdfhm dit uscat ilrcpc flagm ssbs sb dcpodp "
    "sve2 sveaes svepmull svebitperm svesha3 svesm4 flagm2 frint svei8mm svebf16 i8mm bf16 dgh"
)


def _cpuinfo(features: str, part: str) -> str:
    block = (
        f"processor\t: {{n}}\nBogoMIPS\t: 100.00\nFeatures\t: {features}\n"
        f"CPU implementer\t: 0x41\nCPU architecture: 8\nCPU part\t: {part}\n\n"
    )
    return block.format(n=0) + block.format(n=1)


@pytest.mark.parametrize(
    ("features", "part", "expected"),
    [
        (PI5_CORTEX_A76, "0xd0b", ("NEON", "FP16", "DOTPROD")),
        (NEOVERSE_N2, "0xd49", ("NEON", "FP16", "DOTPROD", "I8MM", "SVE", "SVE2")),
    ],
)
def test_arm_flags_map_to_llama_cpp_features(features: str, part: str, expected: tuple) -> None:
    name, found = parse_proc_cpuinfo(_cpuinfo(features, part), "arm64")
    assert found == expected
    assert name == ""  # ARM kernels print no model name


def test_x86_flags_need_the_kernel_names() -> None:
    text = "processor\t: 0\nmodel name\t: Some CPU\nflags\t\t: fpu pni ssse3 avx avx2 fma\n"
    assert parse_proc_cpuinfo(text, "x86_64") == (
        "Some CPU",
        ("SSE3", "SSSE3", "AVX", "FMA", "AVX2"),
    )


@pytest.mark.skipif(not LINUX, reason="/proc/cpuinfo exists on Linux only")
def test_probe_reads_this_machine() -> None:
    cpu = probe_cpu()
    assert cpu.features_source == "/proc/cpuinfo"
    assert cpu.cores_logical == os.cpu_count()
    assert cpu.cores_physical == psutil.cpu_count(logical=False)
    text = Path("/proc/cpuinfo").read_text()
    if cpu.arch == "x86_64":
        model = next(line for line in text.splitlines() if line.startswith("model name"))
        assert cpu.name == model.split(":", 1)[1].strip()
        flags = next(line for line in text.splitlines() if line.startswith("flags")).split()
        assert ("AVX2" in cpu.features) == ("avx2" in flags)
        assert ("SSE3" in cpu.features) == ("pni" in flags)  # the kernel calls SSE3 "pni"


x86_linux = pytest.mark.skipif(
    not (LINUX and cpuid.is_x86_64()), reason="compares CPUID with Linux's /proc/cpuinfo"
)


@x86_linux
def test_cpuid_decoder_agrees_with_the_kernel() -> None:
    # The Windows path executes these same bytes; here the kernel's flags are the reference.
    leaves = cpuid.read_cpuid()
    _, kernel = parse_proc_cpuinfo(Path("/proc/cpuinfo").read_text(), "x86_64")
    assert cpuid.features_from_cpuid(leaves) == kernel
    assert leaves.brand  # every x86-64 CPU has a brand string


@x86_linux
def test_cpuid_hides_avx_when_the_os_does_not_save_its_registers() -> None:
    leaves = dataclasses.replace(cpuid.read_cpuid(), xcr0=0b11)  # x87 + SSE state only
    features = cpuid.features_from_cpuid(leaves)
    assert "SSE3" in features
    assert not {"AVX", "AVX2", "FMA", "AVX512F", "AMX_INT8"} & set(features)


def test_cpuid_without_feature_bits_decodes_to_nothing() -> None:
    zero = (0, 0, 0, 0)
    assert cpuid.features_from_cpuid(cpuid.CpuidLeaves(zero, zero, zero, 0, "")) == ()
