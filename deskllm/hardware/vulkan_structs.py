"""Vulkan C layouts (vulkan_core.h) for ctypes: the few structs and constants we use.

Sizes and offsets were checked with sizeof/offsetof against the Vulkan 1.3.239 headers on
x86-64 (VkPhysicalDeviceProperties: 824 bytes, `limits` at 296; VkPhysicalDeviceMemory-
Properties: 520 bytes, `memoryHeaps` at 264; ...). tests/unit/test_hardware_vulkan_structs.py
holds them to those numbers.
"""

from __future__ import annotations

import ctypes
from ctypes import POINTER, c_char, c_char_p, c_int32, c_uint8, c_uint32, c_uint64, c_void_p

VK_ERROR_INCOMPATIBLE_DRIVER = -9
VK_API_VERSION_1_1 = (1 << 22) | (1 << 12)
VK_API_VERSION_1_2 = (1 << 22) | (2 << 12)
VK_MEMORY_HEAP_DEVICE_LOCAL_BIT = 0x1
VK_INSTANCE_CREATE_ENUMERATE_PORTABILITY_BIT_KHR = 0x1
PORTABILITY_ENUMERATION = b"VK_KHR_portability_enumeration"

ST_APPLICATION_INFO = 0
ST_INSTANCE_CREATE_INFO = 1
ST_PHYSICAL_DEVICE_PROPERTIES_2 = 1000059001
ST_PHYSICAL_DEVICE_MEMORY_PROPERTIES_2 = 1000059006
ST_PHYSICAL_DEVICE_ID_PROPERTIES = 1000071004
ST_PHYSICAL_DEVICE_DRIVER_PROPERTIES = 1000196000
ST_PHYSICAL_DEVICE_PCI_BUS_INFO_PROPERTIES_EXT = 1000212000
ST_PHYSICAL_DEVICE_MEMORY_BUDGET_PROPERTIES_EXT = 1000237000


class VkApplicationInfo(ctypes.Structure):
    _fields_ = [
        ("sType", c_int32),
        ("pNext", c_void_p),
        ("pApplicationName", c_char_p),
        ("applicationVersion", c_uint32),
        ("pEngineName", c_char_p),
        ("engineVersion", c_uint32),
        ("apiVersion", c_uint32),
    ]


class VkInstanceCreateInfo(ctypes.Structure):
    _fields_ = [
        ("sType", c_int32),
        ("pNext", c_void_p),
        ("flags", c_uint32),
        ("pApplicationInfo", POINTER(VkApplicationInfo)),
        ("enabledLayerCount", c_uint32),
        ("ppEnabledLayerNames", POINTER(c_char_p)),
        ("enabledExtensionCount", c_uint32),
        ("ppEnabledExtensionNames", POINTER(c_char_p)),
    ]


class VkExtensionProperties(ctypes.Structure):
    _fields_ = [("extensionName", c_char * 256), ("specVersion", c_uint32)]


class VkPhysicalDeviceProperties(ctypes.Structure):
    # VkPhysicalDeviceLimits is 504 bytes with 8-byte alignment; we read none of it.
    _fields_ = [
        ("apiVersion", c_uint32),
        ("driverVersion", c_uint32),
        ("vendorID", c_uint32),
        ("deviceID", c_uint32),
        ("deviceType", c_int32),
        ("deviceName", c_char * 256),
        ("pipelineCacheUUID", c_uint8 * 16),
        ("limits", c_uint64 * 63),
        ("sparseProperties", c_uint32 * 5),
    ]


class VkPhysicalDeviceProperties2(ctypes.Structure):
    _fields_ = [("sType", c_int32), ("pNext", c_void_p), ("properties", VkPhysicalDeviceProperties)]


class VkPhysicalDeviceIDProperties(ctypes.Structure):
    _fields_ = [
        ("sType", c_int32),
        ("pNext", c_void_p),
        ("deviceUUID", c_uint8 * 16),
        ("driverUUID", c_uint8 * 16),
        ("deviceLUID", c_uint8 * 8),
        ("deviceNodeMask", c_uint32),
        ("deviceLUIDValid", c_uint32),
    ]


class VkPhysicalDeviceDriverProperties(ctypes.Structure):
    _fields_ = [
        ("sType", c_int32),
        ("pNext", c_void_p),
        ("driverID", c_int32),
        ("driverName", c_char * 256),
        ("driverInfo", c_char * 256),
        ("conformanceVersion", c_uint8 * 4),
    ]


class VkPhysicalDevicePCIBusInfoPropertiesEXT(ctypes.Structure):
    _fields_ = [
        ("sType", c_int32),
        ("pNext", c_void_p),
        ("pciDomain", c_uint32),
        ("pciBus", c_uint32),
        ("pciDevice", c_uint32),
        ("pciFunction", c_uint32),
    ]


class VkMemoryType(ctypes.Structure):
    _fields_ = [("propertyFlags", c_uint32), ("heapIndex", c_uint32)]


class VkMemoryHeap(ctypes.Structure):
    _fields_ = [("size", c_uint64), ("flags", c_uint32)]


class VkPhysicalDeviceMemoryProperties(ctypes.Structure):
    _fields_ = [
        ("memoryTypeCount", c_uint32),
        ("memoryTypes", VkMemoryType * 32),
        ("memoryHeapCount", c_uint32),
        ("memoryHeaps", VkMemoryHeap * 16),
    ]


class VkPhysicalDeviceMemoryProperties2(ctypes.Structure):
    _fields_ = [
        ("sType", c_int32),
        ("pNext", c_void_p),
        ("memoryProperties", VkPhysicalDeviceMemoryProperties),
    ]


class VkPhysicalDeviceMemoryBudgetPropertiesEXT(ctypes.Structure):
    _fields_ = [
        ("sType", c_int32),
        ("pNext", c_void_p),
        ("heapBudget", c_uint64 * 16),
        ("heapUsage", c_uint64 * 16),
    ]
