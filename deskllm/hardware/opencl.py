"""OpenCL platforms and devices through the ICD loader, with ctypes.

Runs in a child process (see isolation.py): vendor ICDs are loaded into the caller and can
crash it. Returns plain data (see plain.py). Constants are those of CL/cl.h and CL/cl_ext.h
(OpenCL 3.0 headers).
"""

from __future__ import annotations

import ctypes
import sys
import time
from collections.abc import Callable, Sequence
from ctypes import POINTER, byref, c_int32, c_size_t, c_uint32, c_uint64, c_void_p
from typing import Any

from deskllm.hardware import plain
from deskllm.hardware.identity import canonical_uuid, pci_bus_id, vendor_name
from deskllm.hardware.timing import elapsed_ms

if sys.platform == "win32":
    LOADER_NAMES: tuple[str, ...] = ("OpenCL.dll",)
elif sys.platform == "darwin":
    LOADER_NAMES = ("/System/Library/Frameworks/OpenCL.framework/OpenCL",)
else:
    LOADER_NAMES = ("libOpenCL.so.1", "libOpenCL.so")

CL_SUCCESS = 0
CL_DEVICE_NOT_FOUND = -1
CL_PLATFORM_NOT_FOUND_KHR = -1001
CL_PLATFORM_VERSION = 0x0901
CL_PLATFORM_NAME = 0x0902
CL_PLATFORM_VENDOR = 0x0903
CL_DEVICE_TYPE_ALL = 0xFFFFFFFF
CL_DEVICE_TYPE_CPU = 1 << 1
CL_DEVICE_TYPE_GPU = 1 << 2
CL_DEVICE_TYPE_ACCELERATOR = 1 << 3
CL_DEVICE_TYPE = 0x1000
CL_DEVICE_VENDOR_ID = 0x1001
CL_DEVICE_MAX_COMPUTE_UNITS = 0x1002
CL_DEVICE_GLOBAL_MEM_SIZE = 0x101F
CL_DEVICE_NAME = 0x102B
CL_DEVICE_VENDOR = 0x102C
CL_DRIVER_VERSION = 0x102D
CL_DEVICE_VERSION = 0x102F
CL_DEVICE_EXTENSIONS = 0x1030
CL_DEVICE_HOST_UNIFIED_MEMORY = 0x1035
CL_DEVICE_UUID_KHR = 0x106A  # cl_khr_device_uuid
CL_DEVICE_PCI_BUS_INFO_KHR = 0x410F  # cl_khr_pci_bus_info


class ClDevicePciBusInfoKhr(ctypes.Structure):
    _fields_ = [
        ("pci_domain", c_uint32),
        ("pci_bus", c_uint32),
        ("pci_device", c_uint32),
        ("pci_function", c_uint32),
    ]


def read_opencl(library_names: Sequence[str] = LOADER_NAMES) -> plain.Plain:
    """OpenCL devices of every platform as a plain report.ApiProbe. No loader or no ICD ->
    not available, with the reason."""
    start = time.perf_counter()
    lib, loaded = None, None
    for name in library_names:
        try:
            lib, loaded = ctypes.CDLL(name), name
            break
        except OSError:
            continue
    if lib is None:
        reason = f"no OpenCL loader ({', '.join(library_names[:2])} not found)"
        return plain.api_probe(plain.status("opencl", False, reason, wall_ms=elapsed_ms(start)))
    cl = _OpenCL(lib)
    count = c_uint32(0)
    result = cl.get_platform_ids(0, None, byref(count))
    if result == CL_PLATFORM_NOT_FOUND_KHR or (result == CL_SUCCESS and count.value == 0):
        reason = "the OpenCL loader is installed but no OpenCL driver (ICD) is"
        status = plain.status("opencl", False, reason, loaded, wall_ms=elapsed_ms(start))
        return plain.api_probe(status)
    if result != CL_SUCCESS:
        reason = f"clGetPlatformIDs failed with error {result}"
        status = plain.status("opencl", False, reason, loaded, wall_ms=elapsed_ms(start))
        return plain.api_probe(status)
    platforms = (c_void_p * count.value)()
    cl.get_platform_ids(count.value, platforms, None)
    devices: list[plain.Plain] = []
    errors: list[plain.Plain] = []
    versions = []
    for platform in platforms:
        try:
            platform_name = cl.platform_text(platform, CL_PLATFORM_NAME)
            versions.append(cl.platform_text(platform, CL_PLATFORM_VERSION))
            for handle in cl.devices(platform):
                devices.append(_describe(cl, handle, platform_name, len(devices)))
        except (OSError, ValueError) as exc:
            errors.append(plain.error("opencl", f"platform {len(versions)}: {exc}"))
    reason = None if devices else "OpenCL drivers are installed but report no device"
    status = plain.status(
        "opencl", bool(devices), reason, loaded, "; ".join(versions) or None, elapsed_ms(start)
    )
    return plain.api_probe(status, devices, errors)


class _OpenCL:
    def __init__(self, lib: ctypes.CDLL) -> None:
        self.get_platform_ids = lib.clGetPlatformIDs
        self.get_platform_ids.restype = c_int32
        self.get_platform_ids.argtypes = [c_uint32, POINTER(c_void_p), POINTER(c_uint32)]
        self._platform_info = lib.clGetPlatformInfo
        self._platform_info.restype = c_int32
        self._platform_info.argtypes = [c_void_p, c_uint32, c_size_t, c_void_p, POINTER(c_size_t)]
        self._device_ids = lib.clGetDeviceIDs
        self._device_ids.restype = c_int32
        self._device_ids.argtypes = [
            c_void_p,
            c_uint64,
            c_uint32,
            POINTER(c_void_p),
            POINTER(c_uint32),
        ]
        self._device_info = lib.clGetDeviceInfo
        self._device_info.restype = c_int32
        self._device_info.argtypes = [c_void_p, c_uint32, c_size_t, c_void_p, POINTER(c_size_t)]

    def platform_text(self, platform: int, param: int) -> str:
        return _text(self._platform_info, platform, param)

    def devices(self, platform: int) -> list[int]:
        count = c_uint32(0)
        result = self._device_ids(platform, CL_DEVICE_TYPE_ALL, 0, None, byref(count))
        if result == CL_DEVICE_NOT_FOUND or count.value == 0:
            return []
        if result != CL_SUCCESS:
            raise OSError(f"clGetDeviceIDs failed with error {result}")
        handles = (c_void_p * count.value)()
        self._device_ids(platform, CL_DEVICE_TYPE_ALL, count.value, handles, None)
        return [h for h in handles if h]

    def device_text(self, device: int, param: int) -> str:
        return _text(self._device_info, device, param)

    def device_value(self, device: int, param: int, ctype: type) -> Any:
        """A fixed-size value, or None where the device does not answer this query."""
        value = ctype()
        result = self._device_info(device, param, ctypes.sizeof(value), byref(value), None)
        return value if result == CL_SUCCESS else None


def _text(info_fn: Callable[..., int], handle: int, param: int) -> str:
    size = c_size_t(0)
    result = info_fn(handle, param, 0, None, byref(size))
    if result != CL_SUCCESS:
        raise OSError(f"query {param:#x} failed with error {result}")
    buf = ctypes.create_string_buffer(size.value)
    info_fn(handle, param, size.value, buf, None)
    return buf.value.decode(errors="replace").strip()


def _describe(cl: _OpenCL, handle: int, platform: str, index: int) -> plain.Plain:
    dev_type = cl.device_value(handle, CL_DEVICE_TYPE, c_uint64)
    unified = cl.device_value(handle, CL_DEVICE_HOST_UNIFIED_MEMORY, c_uint32)
    memory = cl.device_value(handle, CL_DEVICE_GLOBAL_MEM_SIZE, c_uint64)
    units = cl.device_value(handle, CL_DEVICE_MAX_COMPUTE_UNITS, c_uint32)
    vendor_id = cl.device_value(handle, CL_DEVICE_VENDOR_ID, c_uint32)
    extensions = set(cl.device_text(handle, CL_DEVICE_EXTENSIONS).split())
    uuid = bus_id = None
    if "cl_khr_device_uuid" in extensions:
        raw = cl.device_value(handle, CL_DEVICE_UUID_KHR, ctypes.c_uint8 * 16)
        uuid = canonical_uuid(bytes(raw)) if raw is not None else None
    if "cl_khr_pci_bus_info" in extensions:
        pci = cl.device_value(handle, CL_DEVICE_PCI_BUS_INFO_KHR, ClDevicePciBusInfoKhr)
        if pci is not None:
            bus_id = pci_bus_id(pci.pci_domain, pci.pci_bus, pci.pci_device, pci.pci_function)
    vid = vendor_id.value if vendor_id is not None else None
    return dict(
        api="opencl",
        index=index,
        name=cl.device_text(handle, CL_DEVICE_NAME),
        type=device_type_name(
            dev_type.value if dev_type is not None else 0,
            bool(unified.value) if unified is not None else False,
        ),
        memory_total_bytes=memory.value if memory is not None else None,
        memory_free_bytes=None,  # OpenCL has no portable free-memory query
        vendor=vendor_name(vid) or cl.device_text(handle, CL_DEVICE_VENDOR),
        vendor_id=vid,
        uuid=uuid,
        pci_bus_id=bus_id,
        api_version=cl.device_text(handle, CL_DEVICE_VERSION),
        driver_version=cl.device_text(handle, CL_DRIVER_VERSION),
        platform=platform,
        compute_units=units.value if units is not None else None,
    )


def device_type_name(cl_type: int, host_unified_memory: bool) -> str:
    """CL_DEVICE_TYPE bits -> our type. A GPU sharing host memory is an integrated one."""
    if cl_type & CL_DEVICE_TYPE_CPU:
        return "cpu"
    if cl_type & CL_DEVICE_TYPE_GPU:
        return "integrated" if host_unified_memory else "discrete"
    return "other"
