"""What the installed llama.cpp build can use: the ggml backend registry, through ctypes.

We load the libggml/libllama that llama-cpp-python ships (the same files
`llama_cpp._ggml.libggml` loads) without importing `llama_cpp`, whose import costs ~0.4 s.
Runs in a child process (see isolation.py): enumerating a GPU backend initialises its driver
(a CUDA context takes VRAM until the process ends) and a broken driver can crash it.
Returns plain data (see plain.py).
"""

from __future__ import annotations

import ctypes
import importlib.metadata
import importlib.util
import os
import re
import time
from ctypes import POINTER, c_char_p, c_int, c_void_p
from pathlib import Path

from deskllm.hardware import plain
from deskllm.hardware.timing import elapsed_ms
from deskllm.llamacpp.libraries import (
    describe,
    library_dir,
    load_dynamic_backends,
    load_libraries,
    loaded_libraries,
    text,
)

_LOG_CALLBACK = ctypes.CFUNCTYPE(None, c_int, c_char_p, c_void_p)


class _Feature(ctypes.Structure):
    _fields_ = [("name", c_char_p), ("value", c_char_p)]


VISIBLE_DEVICES_ENV = "GGML_VK_VISIBLE_DEVICES"


def unavailable(reason: str, wall_ms: float | None = None) -> plain.Plain:
    """A plain report.EngineProbe for an engine that cannot be used."""
    return {
        "status": plain.status("engine", False, reason, wall_ms=wall_ms),
        "engine": {"gpu_offload": False, "devices": [], "available": False, "reason": reason},
        "errors": [],
    }


def read_engine(lib_dir: Path | None = None) -> plain.Plain:
    """The ggml backend registry of the installed llama.cpp build, as a plain
    report.EngineProbe."""
    start = time.perf_counter()
    lib_dir = lib_dir or library_dir()
    if lib_dir is None:
        reason = "llama-cpp-python is not installed: there is no engine to run models"
        return unavailable(reason, elapsed_ms(start))
    _make_every_vulkan_device_visible(lib_dir)
    try:
        ggml, llama = load_libraries(lib_dir)
    except OSError as exc:
        reason = f"the llama.cpp libraries in {lib_dir} could not be loaded: {exc}"
        return unavailable(reason, elapsed_ms(start))
    _silence_logs(ggml)
    load_dynamic_backends(ggml, lib_dir)
    backends = [
        text(ggml.ggml_backend_reg_name(ggml.ggml_backend_reg_get(i)))
        for i in range(ggml.ggml_backend_reg_count())
    ]
    devices = [
        describe(ggml, ggml.ggml_backend_dev_get(i)) for i in range(ggml.ggml_backend_dev_count())
    ]
    if not devices:
        reason = f"no ggml backend could be loaded from {lib_dir} (not even the CPU one)"
        return unavailable(reason, elapsed_ms(start))
    llama.llama_supports_gpu_offload.restype = ctypes.c_bool
    cpu_file = _loaded_cpu_backend()
    engine = dict(
        gpu_offload=bool(llama.llama_supports_gpu_offload()),
        devices=devices,
        available=True,
        backends=backends,
        cpu_variant=cpu_variant_from_file(cpu_file),
        cpu_library=cpu_file,
        cpu_build_features=_cpu_build_features(ggml),
        library_dir=str(lib_dir),
    )
    status = plain.status("engine", True, None, str(lib_dir), _package_version(), elapsed_ms(start))
    return {"status": status, "engine": engine, "errors": []}


def _make_every_vulkan_device_visible(lib_dir: Path) -> None:
    """ggml's Vulkan backend hides CPU-type devices (Mesa llvmpipe) and, when a discrete GPU is
    present, integrated ones, unless GGML_VK_VISIBLE_DEVICES names them. The report is about
    what this build *can* use, so the probe (a child process) names every device; the engine
    names only the one the user or the planner chose (LoadParams.vulkan_devices)."""
    if VISIBLE_DEVICES_ENV in os.environ or not any(lib_dir.glob("*ggml-vulkan*")):
        return
    from deskllm.hardware.vulkan import read_vulkan

    count = len(read_vulkan().get("devices") or [])
    if count:
        os.environ[VISIBLE_DEVICES_ENV] = ",".join(str(i) for i in range(count))


def _package_version() -> str | None:
    try:
        return "llama-cpp-python " + importlib.metadata.version("llama_cpp_python")
    except importlib.metadata.PackageNotFoundError:
        return None


def cpu_variant_from_file(file_name: str | None) -> str | None:
    """The CPU variant a file name carries: libggml-cpu-haswell.so -> "haswell"; the single
    built-in libggml-cpu.so -> None."""
    if not file_name:
        return None
    match = re.search(r"ggml-cpu-([A-Za-z0-9_]+)", file_name)
    return match.group(1) if match else None


def _silence_logs(ggml: ctypes.CDLL) -> None:
    # ggml logs device setup to stderr; the probe's output is the report, not a log.
    global _log_sink
    _log_sink = _LOG_CALLBACK(lambda level, text, user: None)
    ggml.ggml_log_set.restype = None
    ggml.ggml_log_set.argtypes = [_LOG_CALLBACK, c_void_p]
    ggml.ggml_log_set(_log_sink, None)


_log_sink = None  # keeps the ctypes callback alive while the library may call it


def _cpu_build_features(ggml: ctypes.CDLL) -> list[str]:
    """Instruction sets the loaded CPU backend was compiled for (ggml's own names)."""
    reg = ggml.ggml_backend_reg_by_name(b"CPU")
    if not reg:
        return []
    address = ggml.ggml_backend_reg_get_proc_address(reg, b"ggml_backend_get_features")
    if not address:
        return []
    get_features = ctypes.CFUNCTYPE(POINTER(_Feature), c_void_p)(address)
    features = get_features(reg)
    names = []
    i = 0
    while features[i].name is not None:
        if features[i].value == b"1":
            names.append(features[i].name.decode())
        i += 1
    return names


def _loaded_cpu_backend() -> str | None:
    """File name of the CPU backend library mapped into this process."""
    for path in loaded_libraries():
        name = os.path.basename(path)
        if "ggml-cpu" in name:
            return name
    return None


