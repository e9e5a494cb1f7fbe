"""Vulkan physical devices through the Vulkan loader, with ctypes.

Runs in a child process (see isolation.py): a buggy ICD or implicit layer can crash or hang
inside vkCreateInstance. Returns plain data (see plain.py). The C layouts are in
vulkan_structs.py.
"""

from __future__ import annotations

import ctypes
import sys
import time
from collections.abc import Callable, Sequence
from ctypes import POINTER, byref, c_char_p, c_int32, c_uint32, c_void_p
from typing import Any

from deskllm.hardware import plain
from deskllm.hardware.identity import canonical_uuid, pci_bus_id, vendor_name
from deskllm.hardware.timing import elapsed_ms
from deskllm.hardware.vulkan_structs import (
    PORTABILITY_ENUMERATION,
    ST_APPLICATION_INFO,
    ST_INSTANCE_CREATE_INFO,
    ST_PHYSICAL_DEVICE_DRIVER_PROPERTIES,
    ST_PHYSICAL_DEVICE_ID_PROPERTIES,
    ST_PHYSICAL_DEVICE_MEMORY_BUDGET_PROPERTIES_EXT,
    ST_PHYSICAL_DEVICE_MEMORY_PROPERTIES_2,
    ST_PHYSICAL_DEVICE_PCI_BUS_INFO_PROPERTIES_EXT,
    ST_PHYSICAL_DEVICE_PROPERTIES_2,
    VK_API_VERSION_1_1,
    VK_API_VERSION_1_2,
    VK_ERROR_INCOMPATIBLE_DRIVER,
    VK_INSTANCE_CREATE_ENUMERATE_PORTABILITY_BIT_KHR,
    VK_MEMORY_HEAP_DEVICE_LOCAL_BIT,
    VkApplicationInfo,
    VkExtensionProperties,
    VkInstanceCreateInfo,
    VkPhysicalDeviceDriverProperties,
    VkPhysicalDeviceIDProperties,
    VkPhysicalDeviceMemoryBudgetPropertiesEXT,
    VkPhysicalDeviceMemoryProperties,
    VkPhysicalDeviceMemoryProperties2,
    VkPhysicalDevicePCIBusInfoPropertiesEXT,
    VkPhysicalDeviceProperties,
    VkPhysicalDeviceProperties2,
)

if sys.platform == "win32":
    LOADER_NAMES: tuple[str, ...] = ("vulkan-1.dll",)
elif sys.platform == "darwin":
    LOADER_NAMES = tuple(
        f"{prefix}{name}"
        for name in ("libvulkan.1.dylib", "libMoltenVK.dylib")
        for prefix in ("", "/usr/local/lib/", "/opt/homebrew/lib/")
    )
else:
    LOADER_NAMES = ("libvulkan.so.1", "libvulkan.so")

DEVICE_TYPES = {0: "other", 1: "integrated", 2: "discrete", 3: "virtual", 4: "cpu"}
VK_RESULTS = {
    -1: "VK_ERROR_OUT_OF_HOST_MEMORY",
    -2: "VK_ERROR_OUT_OF_DEVICE_MEMORY",
    -3: "VK_ERROR_INITIALIZATION_FAILED",
    -6: "VK_ERROR_LAYER_NOT_PRESENT",
    -7: "VK_ERROR_EXTENSION_NOT_PRESENT",
    -9: "VK_ERROR_INCOMPATIBLE_DRIVER",
}


def read_vulkan(library_names: Sequence[str] = LOADER_NAMES) -> plain.Plain:
    """Vulkan physical devices as a plain report.ApiProbe. No loader or no ICD -> not
    available, with the reason."""
    start = time.perf_counter()
    lib, loaded = _load_loader(library_names)
    if lib is None:
        reason = (
            f"no Vulkan loader ({', '.join(library_names[:2])} not found): install the GPU "
            "driver's Vulkan support (Linux: libvulkan1 plus mesa-vulkan-drivers or the "
            "vendor driver)"
        )
        return plain.api_probe(plain.status("vulkan", False, reason, wall_ms=elapsed_ms(start)))
    loader = _Loader(lib)
    version = loader.instance_version()
    created = loader.create_instance(version)
    if isinstance(created, str):
        status = plain.status(
            "vulkan", False, created, loaded, _version_text(version), elapsed_ms(start)
        )
        return plain.api_probe(status)
    instance, api_version = created
    devices: list[plain.Plain] = []
    errors: list[plain.Plain] = []
    try:
        for index, handle in enumerate(loader.physical_devices(instance)):
            try:
                devices.append(_describe(loader, instance, api_version, handle, index))
            except Exception as exc:  # one broken device must not hide the others
                errors.append(plain.error("vulkan", f"device {index}: {exc}"))
    finally:
        loader.destroy_instance(instance)
    reason = None if devices else "the Vulkan loader works but no Vulkan device was found"
    status = plain.status(
        "vulkan", bool(devices), reason, loaded, _version_text(version), elapsed_ms(start)
    )
    return plain.api_probe(status, devices, errors)


def _load_loader(names: Sequence[str]) -> tuple[ctypes.CDLL | None, str | None]:
    for name in names:
        try:
            return ctypes.CDLL(name), name
        except OSError:
            continue
    return None, None


class _Loader:
    """Typed entry points, each fetched through vkGetInstanceProcAddr."""

    def __init__(self, lib: ctypes.CDLL) -> None:
        self._gipa = lib.vkGetInstanceProcAddr
        self._gipa.restype = c_void_p
        self._gipa.argtypes = [c_void_p, c_char_p]

    def fn(self, instance: int | None, name: str, *argtypes: Any) -> Any:
        address = self._gipa(instance, name.encode())
        if not address:
            return None
        return ctypes.CFUNCTYPE(c_int32, *argtypes)(address)

    def instance_version(self) -> int:
        enumerate_version = self.fn(None, "vkEnumerateInstanceVersion", POINTER(c_uint32))
        if enumerate_version is None:
            return 1 << 22  # a Vulkan 1.0 loader has no vkEnumerateInstanceVersion
        version = c_uint32(0)
        enumerate_version(byref(version))
        return version.value

    def instance_extensions(self) -> set[bytes]:
        fn = self.fn(
            None,
            "vkEnumerateInstanceExtensionProperties",
            c_char_p,
            POINTER(c_uint32),
            POINTER(VkExtensionProperties),
        )
        return _extension_names(lambda *args: fn(None, *args))

    def create_instance(self, loader_version: int) -> tuple[int, int] | str:
        """(instance, its API version), or why no instance could be created."""
        create = self.fn(
            None, "vkCreateInstance", POINTER(VkInstanceCreateInfo), c_void_p, POINTER(c_void_p)
        )
        api_version = VK_API_VERSION_1_1 if loader_version >= VK_API_VERSION_1_1 else 1 << 22
        app = VkApplicationInfo(
            ST_APPLICATION_INFO, None, b"deskllm", 1, b"deskllm", 1, api_version
        )
        names: list[bytes] = []
        flags = 0
        # MoltenVK is a "portability" driver: hidden unless the app asks for such drivers.
        if PORTABILITY_ENUMERATION in self.instance_extensions():
            names.append(PORTABILITY_ENUMERATION)
            flags |= VK_INSTANCE_CREATE_ENUMERATE_PORTABILITY_BIT_KHR
        ext_array = (c_char_p * max(1, len(names)))(*names)
        info = VkInstanceCreateInfo(
            ST_INSTANCE_CREATE_INFO,
            None,
            flags,
            ctypes.pointer(app),
            0,
            None,
            len(names),
            ext_array,
        )
        instance = c_void_p()
        result = create(byref(info), None, byref(instance))
        if result == VK_ERROR_INCOMPATIBLE_DRIVER:
            return (
                "the Vulkan loader is installed but no Vulkan driver (ICD) is: install the GPU "
                "driver (Linux: mesa-vulkan-drivers or the vendor's Vulkan driver)"
            )
        if result != 0 or not instance.value:
            return f"vkCreateInstance failed: {VK_RESULTS.get(result, result)}"
        return instance.value, api_version

    def physical_devices(self, instance: int) -> list[int]:
        fn = self.fn(
            instance, "vkEnumeratePhysicalDevices", c_void_p, POINTER(c_uint32), POINTER(c_void_p)
        )
        count = c_uint32(0)
        if fn(instance, byref(count), None) < 0 or count.value == 0:
            return []
        handles = (c_void_p * count.value)()
        if fn(instance, byref(count), handles) < 0:
            return []
        return [h for h in handles[: count.value] if h]

    def destroy_instance(self, instance: int) -> None:
        address = self._gipa(instance, b"vkDestroyInstance")
        if address:
            ctypes.CFUNCTYPE(None, c_void_p, c_void_p)(address)(instance, None)


def _extension_names(enumerate_fn: Callable[..., int]) -> set[bytes]:
    count = c_uint32(0)
    if enumerate_fn(byref(count), None) < 0 or count.value == 0:
        return set()
    props = (VkExtensionProperties * count.value)()
    if enumerate_fn(byref(count), props) < 0:
        return set()
    return {p.extensionName for p in props[: count.value]}


def _describe(
    loader: _Loader, instance: int, instance_api: int, handle: int, index: int
) -> plain.Plain:
    props = VkPhysicalDeviceProperties()
    get_props = loader.fn(
        instance, "vkGetPhysicalDeviceProperties", c_void_p, POINTER(VkPhysicalDeviceProperties)
    )
    get_props(handle, byref(props))
    dev_ext_fn = loader.fn(
        instance,
        "vkEnumerateDeviceExtensionProperties",
        c_void_p,
        c_char_p,
        POINTER(c_uint32),
        POINTER(VkExtensionProperties),
    )
    extensions = _extension_names(lambda *args: dev_ext_fn(handle, None, *args))
    use_core_1_1 = instance_api >= VK_API_VERSION_1_1 and props.apiVersion >= VK_API_VERSION_1_1
    uuid = bus_id = driver_info = None
    if use_core_1_1:
        uuid, bus_id, driver_info = _extended_properties(
            loader, instance, handle, props, extensions
        )
    budget_supported = use_core_1_1 and b"VK_EXT_memory_budget" in extensions
    total, free = _device_local_memory(loader, instance, handle, budget_supported)
    return dict(
        api="vulkan",
        index=index,
        name=props.deviceName.decode(errors="replace"),
        type=DEVICE_TYPES.get(props.deviceType, "other"),
        memory_total_bytes=total,
        memory_free_bytes=free,
        vendor=vendor_name(props.vendorID),
        vendor_id=props.vendorID,
        uuid=uuid,
        pci_bus_id=bus_id,
        api_version=_version_text(props.apiVersion),
        driver_version=driver_version_text(props.vendorID, props.driverVersion),
        driver_info=driver_info,
        memory_budget_supported=budget_supported,
    )


def _extended_properties(
    loader: _Loader,
    instance: int,
    handle: int,
    props: VkPhysicalDeviceProperties,
    extensions: set[bytes],
) -> tuple[str | None, str | None, str | None]:
    """(UUID, PCI bus id, driver name and info) via vkGetPhysicalDeviceProperties2."""
    id_props = VkPhysicalDeviceIDProperties(sType=ST_PHYSICAL_DEVICE_ID_PROPERTIES)
    chain: list[ctypes.Structure] = [id_props]
    driver = pci = None
    if props.apiVersion >= VK_API_VERSION_1_2 or b"VK_KHR_driver_properties" in extensions:
        driver = VkPhysicalDeviceDriverProperties(sType=ST_PHYSICAL_DEVICE_DRIVER_PROPERTIES)
        chain.append(driver)
    if b"VK_EXT_pci_bus_info" in extensions:
        pci = VkPhysicalDevicePCIBusInfoPropertiesEXT(
            sType=ST_PHYSICAL_DEVICE_PCI_BUS_INFO_PROPERTIES_EXT
        )
        chain.append(pci)
    for prev, nxt in zip(chain, chain[1:], strict=False):
        prev.pNext = ctypes.addressof(nxt)
    props2 = VkPhysicalDeviceProperties2(
        sType=ST_PHYSICAL_DEVICE_PROPERTIES_2, pNext=ctypes.addressof(chain[0])
    )
    get_props2 = loader.fn(
        instance, "vkGetPhysicalDeviceProperties2", c_void_p, POINTER(VkPhysicalDeviceProperties2)
    )
    get_props2(handle, byref(props2))
    uuid = canonical_uuid(bytes(id_props.deviceUUID))
    bus_id = pci_bus_id(pci.pciDomain, pci.pciBus, pci.pciDevice, pci.pciFunction) if pci else None
    driver_info = None
    if driver is not None:
        parts = [
            driver.driverName.decode(errors="replace"),
            driver.driverInfo.decode("utf-8", "replace"),
        ]
        driver_info = ": ".join(p for p in parts if p) or None
    return uuid, bus_id, driver_info


def _device_local_memory(
    loader: _Loader, instance: int, handle: int, with_budget: bool
) -> tuple[int | None, int | None]:
    """(size of the largest device-local heap, its budget minus usage or None), bytes."""
    budget = VkPhysicalDeviceMemoryBudgetPropertiesEXT(
        sType=ST_PHYSICAL_DEVICE_MEMORY_BUDGET_PROPERTIES_EXT
    )
    if with_budget:
        mem2 = VkPhysicalDeviceMemoryProperties2(
            sType=ST_PHYSICAL_DEVICE_MEMORY_PROPERTIES_2, pNext=ctypes.addressof(budget)
        )
        get_mem2 = loader.fn(
            instance,
            "vkGetPhysicalDeviceMemoryProperties2",
            c_void_p,
            POINTER(VkPhysicalDeviceMemoryProperties2),
        )
        get_mem2(handle, byref(mem2))
        memory = mem2.memoryProperties
    else:
        memory = VkPhysicalDeviceMemoryProperties()
        get_mem = loader.fn(
            instance,
            "vkGetPhysicalDeviceMemoryProperties",
            c_void_p,
            POINTER(VkPhysicalDeviceMemoryProperties),
        )
        get_mem(handle, byref(memory))
    heaps = [
        (memory.memoryHeaps[i].size, i)
        for i in range(min(memory.memoryHeapCount, 16))
        if memory.memoryHeaps[i].flags & VK_MEMORY_HEAP_DEVICE_LOCAL_BIT
    ]
    if not heaps:
        return None, None
    size, i = max(heaps)
    free = max(0, budget.heapBudget[i] - budget.heapUsage[i]) if with_budget else None
    return int(size), free


def _version_text(version: int) -> str:
    return f"{version >> 22 & 0x7F}.{version >> 12 & 0x3FF}.{version & 0xFFF}"


def driver_version_text(vendor_id: int, version: int) -> str:
    """Vendor-specific packing of VkPhysicalDeviceProperties.driverVersion."""
    if vendor_id == 0x10DE:  # NVIDIA: 10.8.8.6 bits
        return (
            f"{version >> 22 & 0x3FF}.{version >> 14 & 0xFF}.{version >> 6 & 0xFF}.{version & 0x3F}"
        )
    if vendor_id == 0x8086 and sys.platform == "win32":  # Intel on Windows: 18.14 bits
        return f"{version >> 14}.{version & 0x3FFF}"
    return _version_text(version)
