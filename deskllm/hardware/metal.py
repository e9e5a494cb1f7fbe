"""Metal on macOS: the default GPU and how much memory it may use, via the Objective-C runtime.

On Apple silicon the GPU shares system RAM; Metal's `recommendedMaxWorkingSetSize` is the
share macOS lets the GPU keep resident, which is what llama.cpp's Metal backend treats as
the device's memory. Where that property is missing we estimate the share macOS allows.
"""

from __future__ import annotations

import ctypes
import sys
import time
from ctypes import c_bool, c_char_p, c_uint64, c_void_p
from typing import Any

import psutil

from deskllm.hardware.report import ApiProbe, ApiStatus, Device
from deskllm.hardware.timing import elapsed_ms

_OBJC = "/usr/lib/libobjc.A.dylib"
_METAL = "/System/Library/Frameworks/Metal.framework/Metal"
_GIB = 1 << 30


def unified_memory_share(total_ram_bytes: int) -> int:
    """The GPU's default wired-memory limit on Apple silicon: ~2/3 of RAM up to 36 GiB,
    ~3/4 above (bytes). An estimate, used only when Metal does not say."""
    fraction = 2 / 3 if total_ram_bytes <= 36 * _GIB else 3 / 4
    return int(total_ram_bytes * fraction)


def probe_metal() -> ApiProbe:
    """The system default Metal device, or why there is none."""
    start = time.perf_counter()
    if sys.platform != "darwin":
        return ApiProbe(
            ApiStatus("metal", False, "Metal exists only on macOS", wall_ms=elapsed_ms(start))
        )
    try:
        objc = ctypes.CDLL(_OBJC)
        metal = ctypes.CDLL(_METAL)
    except OSError as exc:
        return ApiProbe(
            ApiStatus(
                "metal", False, f"the Metal framework is missing: {exc}", wall_ms=elapsed_ms(start)
            )
        )
    metal.MTLCreateSystemDefaultDevice.restype = c_void_p
    device = metal.MTLCreateSystemDefaultDevice()
    if not device:
        return ApiProbe(
            ApiStatus(
                "metal",
                False,
                "this Mac has no Metal-capable GPU",
                "Metal",
                wall_ms=elapsed_ms(start),
            )
        )
    runtime = _ObjC(objc)
    try:
        name = runtime.send(runtime.send(device, "name", c_void_p), "UTF8String", c_char_p)
        unified = bool(runtime.maybe_send(device, "hasUnifiedMemory", c_bool))
        working_set = runtime.maybe_send(device, "recommendedMaxWorkingSetSize", c_uint64)
        allocated = runtime.maybe_send(device, "currentAllocatedSize", c_uint64) or 0
    finally:
        runtime.send(device, "release", None)
    ram = psutil.virtual_memory().total
    total = int(working_set) if working_set else (unified_memory_share(ram) if unified else None)
    text = name.decode(errors="replace") if name else "Apple GPU"
    gpu = Device(
        api="metal",
        name=text,
        type="integrated" if unified else "discrete",
        memory_total_bytes=total,
        memory_free_bytes=max(0, total - int(allocated)) if total else None,
        vendor=next((v for v in ("Apple", "AMD", "Intel") if v in text), None),
    )
    return ApiProbe(ApiStatus("metal", True, None, "Metal", wall_ms=elapsed_ms(start)), (gpu,))


class _ObjC:
    """objc_msgSend with an explicit prototype per call (required on arm64)."""

    def __init__(self, objc: ctypes.CDLL) -> None:
        objc.sel_registerName.restype = c_void_p
        objc.sel_registerName.argtypes = [c_char_p]
        self._sel = objc.sel_registerName
        self._send = ctypes.cast(objc.objc_msgSend, c_void_p).value

    def send(self, obj: int, selector: str, restype: Any) -> Any:
        fn = ctypes.CFUNCTYPE(restype, c_void_p, c_void_p)(self._send)
        return fn(obj, self._sel(selector.encode()))

    def maybe_send(self, obj: int, selector: str, restype: Any) -> Any:
        """Send only if the object answers the selector (older macOS lacks some)."""
        responds = ctypes.CFUNCTYPE(c_bool, c_void_p, c_void_p, c_void_p)(self._send)
        if not responds(obj, self._sel(b"respondsToSelector:"), self._sel(selector.encode())):
            return None
        return self.send(obj, selector, restype)
