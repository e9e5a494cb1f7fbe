"""Vulkan ctypes layouts, held to the sizes and offsets of the C headers.

The numbers come from compiling sizeof/offsetof against vulkan_core.h 1.3.239 (Debian's
libvulkan-dev) with gcc on x86-64; every 64-bit ABI Python runs on lays these out alike.
"""

from __future__ import annotations

import ctypes

import pytest

from deskllm.hardware import vulkan_structs as vk
from deskllm.hardware.vulkan import driver_version_text

if ctypes.sizeof(ctypes.c_void_p) != 8:
    pytest.skip("the recorded layouts are those of 64-bit ABIs", allow_module_level=True)


@pytest.mark.parametrize(
    ("struct", "size"),
    [
        (vk.VkApplicationInfo, 48),
        (vk.VkInstanceCreateInfo, 64),
        (vk.VkExtensionProperties, 260),
        (vk.VkPhysicalDeviceProperties, 824),
        (vk.VkPhysicalDeviceProperties2, 840),
        (vk.VkPhysicalDeviceIDProperties, 64),
        (vk.VkPhysicalDeviceDriverProperties, 536),
        (vk.VkPhysicalDevicePCIBusInfoPropertiesEXT, 32),
        (vk.VkPhysicalDeviceMemoryProperties, 520),
        (vk.VkPhysicalDeviceMemoryProperties2, 536),
        (vk.VkPhysicalDeviceMemoryBudgetPropertiesEXT, 272),
    ],
)
def test_struct_sizes_match_vulkan_core_h(struct: type, size: int) -> None:
    assert ctypes.sizeof(struct) == size


def test_offsets_match_vulkan_core_h() -> None:
    assert vk.VkPhysicalDeviceProperties.limits.offset == 296
    assert vk.VkPhysicalDeviceProperties.sparseProperties.offset == 800
    assert vk.VkPhysicalDeviceMemoryProperties.memoryHeaps.offset == 264


def test_driver_version_packing() -> None:
    # NVIDIA packs 10.8.8.6 bits: 566.36 is (566 << 22) | (36 << 14).
    assert driver_version_text(0x10DE, (566 << 22) | (36 << 14)) == "566.36.0.0"
    # Everyone else (Mesa, AMD, ...) uses VK_MAKE_API_VERSION: llvmpipe reports 0.0.1.
    assert driver_version_text(0x10005, 1) == "0.0.1"
    assert driver_version_text(0x1002, (2 << 22) | (0 << 12) | 301) == "2.0.301"
