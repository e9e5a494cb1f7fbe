"""Requantize a GGUF file with llama.cpp's own llama_model_quantize (Q8_0, Q6_K, ...): the
copies tests and benchmarks use as other models of one family."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

# Run in a child: llama.cpp logs to fd 2 and aborts the process on a bad file.
_QUANTIZE = """
import ctypes, sys
import llama_cpp
src, threads = sys.argv[1], int(sys.argv[2])
for pair in sys.argv[3:]:
    name, dst = pair.split("=", 1)
    p = llama_cpp.llama_model_quantize_default_params()
    p.ftype = getattr(llama_cpp, "LLAMA_FTYPE_MOSTLY_" + name)
    p.allow_requantize = True
    p.nthread = threads
    if llama_cpp.llama_model_quantize(src.encode(), dst.encode(), ctypes.byref(p)) != 0:
        sys.exit(f"quantizing to {name} failed")
"""


def requantize(src: Path, targets: dict[str, Path], threads: int = 2,
               timeout_s: float = 600) -> None:  # fmt: skip
    """Write `src` requantized to each of `targets` ({"Q8_0": path, ...}: llama.cpp's
    LLAMA_FTYPE_MOSTLY_ names), in one child process. Raises CalledProcessError (its stderr
    says why)."""
    subprocess.run(
        [sys.executable, "-c", _QUANTIZE, str(src), str(threads)]
        + [f"{label}={path}" for label, path in targets.items()],
        check=True, capture_output=True, timeout=timeout_s,
    )  # fmt: skip
