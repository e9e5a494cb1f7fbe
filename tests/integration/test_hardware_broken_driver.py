"""A buggy driver crashes or hangs inside the real loaders; the app gets an error entry.

The "drivers" are tiny shared libraries compiled here and registered the way real ones are
(a Vulkan ICD manifest, an OpenCL .icd file); the loaders load them into the probe's child.
"""

from __future__ import annotations

import ctypes.util
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from deskllm.hardware import probe_hardware

pytestmark = [
    pytest.mark.driver,
    pytest.mark.skipif(not sys.platform.startswith("linux"), reason="builds a Linux .so"),
]

DRIVER_C = r"""
#include <signal.h>
#include <unistd.h>
static void misbehave(void) {
#ifdef HANG
    for (;;) pause();
#else
    raise(SIGSEGV);
#endif
}
/* Vulkan ICD entry points the loader calls first. */
int vk_icdNegotiateLoaderICDInterfaceVersion(unsigned *version) { misbehave(); return 0; }
void *vk_icdGetInstanceProcAddr(void *instance, const char *name) { misbehave(); return 0; }
/* OpenCL ICD entry points ocl-icd looks up. */
void *clGetExtensionFunctionAddress(const char *name) { misbehave(); return 0; }
int clIcdGetPlatformIDsKHR(unsigned n, void **platforms, unsigned *count) {
    misbehave(); return 0;
}
"""


def build_driver(tmp_path: Path, hang: bool) -> Path:
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        pytest.skip("no C compiler to build the misbehaving driver")
    source = tmp_path / "driver.c"
    source.write_text(DRIVER_C)
    library = tmp_path / ("libhang_driver.so" if hang else "libcrash_driver.so")
    flags = ["-DHANG"] if hang else []
    subprocess.run([cc, "-shared", "-fPIC", *flags, "-o", str(library), str(source)], check=True)
    return library


def use_vulkan_driver(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, library: Path) -> None:
    if ctypes.util.find_library("vulkan") is None:
        pytest.skip("no Vulkan loader (Debian: libvulkan1)")
    manifest = tmp_path / "broken_icd.json"
    manifest.write_text(json.dumps({"file_format_version": "1.0.0",
                                    "ICD": {"library_path": str(library),
                                            "api_version": "1.3.0"}}))  # fmt: skip
    monkeypatch.setenv("VK_ICD_FILENAMES", str(manifest))
    monkeypatch.setenv("VK_DRIVER_FILES", str(manifest))


def use_opencl_driver(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, library: Path) -> None:
    if ctypes.util.find_library("OpenCL") is None:
        pytest.skip("no OpenCL ICD loader (Debian: ocl-icd-libopencl1)")
    vendors = tmp_path / "vendors"
    vendors.mkdir()
    (vendors / "broken.icd").write_text(f"{library}\n")
    monkeypatch.setenv("OCL_ICD_VENDORS", str(vendors))


def test_crashing_drivers_become_error_entries(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    library = build_driver(tmp_path, hang=False)
    use_vulkan_driver(monkeypatch, tmp_path, library)
    use_opencl_driver(monkeypatch, tmp_path, library)
    report = probe_hardware(bandwidth=False)
    errors = {e.api: e.message for e in report.errors}
    assert "the vulkan probe crashed" in errors["vulkan"] and "SIGSEGV" in errors["vulkan"]
    assert "the opencl probe crashed" in errors["opencl"] and "SIGSEGV" in errors["opencl"]
    # Everything else was still probed, in fresh children.
    assert report.engine.available
    assert {s.api for s in report.apis} == {"nvml", "vulkan", "opencl", "metal", "engine"}
    assert any("Vulkan check failed: the vulkan probe crashed" in d for d in report.diagnosis)


def test_a_hanging_driver_is_stopped_and_named(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from deskllm.hardware import isolation

    library = build_driver(tmp_path, hang=True)
    use_vulkan_driver(monkeypatch, tmp_path, library)
    monkeypatch.setattr(isolation, "DEFAULT_TIMEOUT_S", 2.0)  # the app waits 10 s
    report = probe_hardware(bandwidth=False)
    errors = {e.api: e.message for e in report.errors}
    assert "the vulkan probe gave no answer within 2 s" in errors["vulkan"]
    assert report.engine.available  # probed meanwhile in the other child
