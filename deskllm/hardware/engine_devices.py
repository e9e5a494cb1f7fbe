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
import sys
import time
from ctypes import POINTER, byref, c_char_p, c_int, c_size_t, c_void_p
from pathlib import Path

from deskllm.hardware import plain
from deskllm.hardware.timing import elapsed_ms

# enum ggml_backend_dev_type
ENGINE_TYPES = {0: "cpu", 1: "gpu", 2: "igpu", 3: "accel"}

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


def library_dir() -> Path | None:
    """llama-cpp-python's bundled native libraries (of the build the engine uses), found
    without importing the package."""
    from deskllm.engine import build

    return build.library_dir()


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
        _str(ggml.ggml_backend_reg_name(ggml.ggml_backend_reg_get(i)))
        for i in range(ggml.ggml_backend_reg_count())
    ]
    devices = [
        _describe(ggml, ggml.ggml_backend_dev_get(i)) for i in range(ggml.ggml_backend_dev_count())
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


def device_descriptions() -> dict[str, str]:
    """ggml device name -> description ("Vulkan0" -> "llvmpipe (...)") of the devices the
    llama.cpp build in this process registered, as it registered them (nothing re-probed)."""
    lib_dir = library_dir()
    if lib_dir is None:
        return {}
    ggml, _llama = load_libraries(lib_dir)
    _declare(ggml)
    count = ggml.ggml_backend_dev_count()
    devices = (_describe(ggml, ggml.ggml_backend_dev_get(i)) for i in range(count))
    return {d["name"]: d["description"] or d["name"] for d in devices}


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


def _library_names(stem: str) -> list[str]:
    if sys.platform == "win32":
        return [f"{stem}.dll", f"lib{stem}.dll"]
    if sys.platform == "darwin":
        return [f"lib{stem}.dylib", f"lib{stem}.so"]
    return [f"lib{stem}.so"]


def load_libraries(lib_dir: Path) -> tuple[ctypes.CDLL, ctypes.CDLL]:
    if sys.platform == "win32":
        os.add_dll_directory(str(lib_dir))
        for var in ("CUDA_PATH", "HIP_PATH"):
            for sub in ("bin", "lib"):
                folder = Path(os.environ.get(var, "")) / sub
                if os.environ.get(var) and folder.is_dir():
                    os.add_dll_directory(str(folder))
    loaded = []
    mapped = _loaded_libraries()
    for stem in ("ggml", "llama"):
        candidates = [lib_dir / n for n in _library_names(stem) if (lib_dir / n).exists()]
        if not candidates:
            raise OSError(f"no {stem} library")
        # A wheel installs libggml.so and libggml.so.0 as two files, not a link. Once
        # llama_cpp has loaded libllama (which needs libggml.so.0), opening libggml.so by path
        # would load a second ggml with its own, empty backend registry: use the one in memory.
        in_memory = _mapped_copy(mapped, lib_dir, stem)
        loaded.append(ctypes.CDLL(in_memory or str(candidates[0])))
    return loaded[0], loaded[1]


def load_dynamic_backends(ggml: ctypes.CDLL, lib_dir: Path) -> None:
    """Builds with GGML_BACKEND_DL=ON register no backend until they are loaded from the
    library folder, and llama.cpp then refuses every model: the engine and the probe both
    load them here. A missing GPU driver only makes that backend's library fail to load,
    which ggml skips."""
    _declare(ggml)
    if ggml.ggml_backend_reg_count() == 0 and hasattr(ggml, "ggml_backend_load_all_from_path"):
        ggml.ggml_backend_load_all_from_path(str(lib_dir).encode())


def _mapped_copy(mapped: list[str], lib_dir: Path, stem: str) -> str | None:
    """The path of `stem`'s library already mapped into this process, if any: preferably from
    lib_dir, else from anywhere (a frozen app's loader may have found it in the bundle's
    top folder)."""
    # libggml.so, libggml.so.0, libggml.0.dylib, ggml.dll; not libggml-base.so.
    name = re.compile(rf"^(lib)?{re.escape(stem)}(\.\d+)*\.(so|dylib|dll)(\.\d+)*$")
    folders = {lib_dir, lib_dir.resolve()}
    matches = list(dict.fromkeys(p for p in mapped if name.match(Path(p).name)))
    for path in matches:
        if Path(path).parent in folders:
            return path
    return matches[0] if matches else None


def _declare(ggml: ctypes.CDLL) -> None:
    signatures = {
        "ggml_backend_reg_count": (c_size_t, []),
        "ggml_backend_reg_get": (c_void_p, [c_size_t]),
        "ggml_backend_reg_name": (c_char_p, [c_void_p]),
        "ggml_backend_reg_by_name": (c_void_p, [c_char_p]),
        "ggml_backend_reg_get_proc_address": (c_void_p, [c_void_p, c_char_p]),
        "ggml_backend_dev_count": (c_size_t, []),
        "ggml_backend_dev_get": (c_void_p, [c_size_t]),
        "ggml_backend_dev_name": (c_char_p, [c_void_p]),
        "ggml_backend_dev_description": (c_char_p, [c_void_p]),
        "ggml_backend_dev_type": (c_int, [c_void_p]),
        "ggml_backend_dev_memory": (None, [c_void_p, POINTER(c_size_t), POINTER(c_size_t)]),
        "ggml_backend_dev_backend_reg": (c_void_p, [c_void_p]),
    }
    for name, (restype, argtypes) in signatures.items():
        fn = getattr(ggml, name)
        fn.restype, fn.argtypes = restype, argtypes
    if hasattr(ggml, "ggml_backend_load_all_from_path"):
        ggml.ggml_backend_load_all_from_path.restype = None
        ggml.ggml_backend_load_all_from_path.argtypes = [c_char_p]


def _silence_logs(ggml: ctypes.CDLL) -> None:
    # ggml logs device setup to stderr; the probe's output is the report, not a log.
    global _log_sink
    _log_sink = _LOG_CALLBACK(lambda level, text, user: None)
    ggml.ggml_log_set.restype = None
    ggml.ggml_log_set.argtypes = [_LOG_CALLBACK, c_void_p]
    ggml.ggml_log_set(_log_sink, None)


_log_sink = None  # keeps the ctypes callback alive while the library may call it


def _describe(ggml: ctypes.CDLL, dev: int) -> plain.Plain:
    """A plain report.EngineDevice."""
    free, total = c_size_t(0), c_size_t(0)
    ggml.ggml_backend_dev_memory(dev, byref(free), byref(total))
    reg = ggml.ggml_backend_dev_backend_reg(dev)
    dev_type = ggml.ggml_backend_dev_type(dev)
    return dict(
        name=_str(ggml.ggml_backend_dev_name(dev)),
        description=_str(ggml.ggml_backend_dev_description(dev)),
        type=ENGINE_TYPES.get(dev_type, f"unknown-{dev_type}"),
        memory_total_bytes=total.value or None,
        memory_free_bytes=free.value if total.value else None,
        backend=_str(ggml.ggml_backend_reg_name(reg)) if reg else None,
    )


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
    for path in _loaded_libraries():
        name = os.path.basename(path)
        if "ggml-cpu" in name:
            return name
    return None


def _loaded_libraries() -> list[str]:
    if sys.platform.startswith("linux"):
        with open("/proc/self/maps", encoding="utf-8", errors="replace") as maps:
            return [line.split(None, 5)[5].strip() for line in maps if len(line.split()) >= 6]
    if sys.platform == "darwin":
        libc = ctypes.CDLL(None)
        libc._dyld_get_image_name.restype = c_char_p
        libc._dyld_get_image_name.argtypes = [ctypes.c_uint32]
        count = libc._dyld_image_count()
        return [_str(libc._dyld_get_image_name(i)) for i in range(count)]
    import psutil

    return [m.path for m in psutil.Process().memory_maps()]


def _str(value: bytes | None) -> str:
    return value.decode(errors="replace") if value else ""
