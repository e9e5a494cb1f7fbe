"""Loading the llama.cpp build's native libraries through ctypes, in one place below both the
engine (which runs models with them) and the hardware probe (which reads what they offer).

The ggml/llama libraries are the files llama-cpp-python ships (of the build `build` selects);
`load_libraries` finds the copy already in memory rather than opening a second one, and
`load_dynamic_backends` registers the backends of builds that load them at run time.
"""

from __future__ import annotations

import ctypes
import os
import re
import sys
from ctypes import POINTER, byref, c_char_p, c_int, c_size_t, c_void_p
from pathlib import Path

from deskllm.llamacpp import build

# enum ggml_backend_dev_type
ENGINE_TYPES = {0: "cpu", 1: "gpu", 2: "igpu", 3: "accel"}


def library_dir() -> Path | None:
    """The native libraries of the build the engine uses, found without importing
    llama_cpp (whose import costs ~0.4 s)."""
    return build.library_dir()


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
    mapped = loaded_libraries()
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
    declare(ggml)
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


def declare(ggml: ctypes.CDLL) -> None:
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


def device_descriptions() -> dict[str, str]:
    """ggml device name -> description ("Vulkan0" -> "llvmpipe (...)") of the devices the
    llama.cpp build in this process registered, as it registered them (nothing re-probed)."""
    lib_dir = library_dir()
    if lib_dir is None:
        return {}
    ggml, _llama = load_libraries(lib_dir)
    declare(ggml)
    count = ggml.ggml_backend_dev_count()
    devices = (describe(ggml, ggml.ggml_backend_dev_get(i)) for i in range(count))
    return {d["name"]: d["description"] or d["name"] for d in devices}


def describe(ggml: ctypes.CDLL, dev: int) -> dict[str, object]:
    """A device as plain data (the fields of hardware.report.EngineDevice)."""
    free, total = c_size_t(0), c_size_t(0)
    ggml.ggml_backend_dev_memory(dev, byref(free), byref(total))
    reg = ggml.ggml_backend_dev_backend_reg(dev)
    dev_type = ggml.ggml_backend_dev_type(dev)
    return dict(
        name=text(ggml.ggml_backend_dev_name(dev)),
        description=text(ggml.ggml_backend_dev_description(dev)),
        type=ENGINE_TYPES.get(dev_type, f"unknown-{dev_type}"),
        memory_total_bytes=total.value or None,
        memory_free_bytes=free.value if total.value else None,
        backend=text(ggml.ggml_backend_reg_name(reg)) if reg else None,
    )


def loaded_libraries() -> list[str]:
    if sys.platform.startswith("linux"):
        with open("/proc/self/maps", encoding="utf-8", errors="replace") as maps:
            return [line.split(None, 5)[5].strip() for line in maps if len(line.split()) >= 6]
    if sys.platform == "darwin":
        libc = ctypes.CDLL(None)
        libc._dyld_get_image_name.restype = c_char_p
        libc._dyld_get_image_name.argtypes = [ctypes.c_uint32]
        count = libc._dyld_image_count()
        return [text(libc._dyld_get_image_name(i)) for i in range(count)]
    import psutil

    return [m.path for m in psutil.Process().memory_maps()]


def text(value: bytes | None) -> str:
    return value.decode(errors="replace") if value else ""
