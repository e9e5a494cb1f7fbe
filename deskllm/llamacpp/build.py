"""Which llama.cpp build the engine uses.

The default is the llama-cpp-python installed with deskllm. `DESKLLM_ENGINE_DIR` names another
copy installed with `pip install --target` (for example the release build made by
packaging/build_release_engine.sh: CPU variants and GPU backends loaded at run time); every
process that loads llama.cpp calls `activate()` before importing it, so the worker, the probes
and the hardware report all see the same build.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import sys
from pathlib import Path

ENGINE_DIR_ENV = "DESKLLM_ENGINE_DIR"


def engine_dir() -> Path | None:
    value = os.environ.get(ENGINE_DIR_ENV)
    return Path(value).resolve() if value else None


def activate() -> None:
    """Put the chosen build first on sys.path (before `import llama_cpp`)."""
    chosen = engine_dir()
    if chosen is None:
        return
    if not (chosen / "llama_cpp").is_dir():
        raise RuntimeError(f"{ENGINE_DIR_ENV}={chosen} holds no llama_cpp package")
    if str(chosen) not in sys.path:
        sys.path.insert(0, str(chosen))
        importlib.invalidate_caches()


def library_dir() -> Path | None:
    """The folder of the build's native libraries, found without loading them (and without
    touching this process's sys.path)."""
    chosen = engine_dir()
    if chosen is not None:
        path = chosen / "llama_cpp" / "lib"
        return path if path.is_dir() else None
    spec = importlib.util.find_spec("llama_cpp")
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(next(iter(spec.submodule_search_locations))) / "lib"
    return path if path.is_dir() else None


def build_id() -> str:
    """A short identity of the build: its native libraries' names, sizes and times."""
    lib_dir = library_dir()
    if lib_dir is None:
        return "none"
    parts = [str(lib_dir)]
    for path in sorted(lib_dir.iterdir()):
        if path.is_file():
            st = path.stat()
            parts.append(f"{path.name}:{st.st_size}:{st.st_mtime_ns}")
    return hashlib.sha256("|".join(parts).encode()).hexdigest()[:16]
