"""How one physical device is recognised across APIs: canonical UUIDs, PCI ids, vendors."""

from __future__ import annotations

import re

# PCI vendor ids (and Khronos' ids for vendors without one) as Vulkan and OpenCL report them.
VENDORS = {
    0x10DE: "NVIDIA",
    0x1002: "AMD",
    0x1022: "AMD",
    0x8086: "Intel",
    0x106B: "Apple",
    0x13B5: "ARM",
    0x5143: "Qualcomm",
    0x1010: "Imagination",
    0x14E4: "Broadcom",
    0x1AF4: "Red Hat (virtio)",
    0x15AD: "VMware",
    0x1414: "Microsoft",
    0x10005: "Mesa",
}


def vendor_name(vendor_id: int | None) -> str | None:
    if vendor_id is None:
        return None
    return VENDORS.get(vendor_id)


def canonical_uuid(value: bytes | str | None) -> str | None:
    """16 raw bytes or any spelling ("GPU-6d65...", no dashes) -> "xxxxxxxx-xxxx-..."."""
    if value is None:
        return None
    if isinstance(value, (bytes, bytearray)):
        hexdigits = bytes(value).hex()
    else:
        text = value.strip().lower()
        for prefix in ("gpu-", "mig-"):
            if text.startswith(prefix):
                text = text[len(prefix) :]
        hexdigits = text.replace("-", "")
    if len(hexdigits) != 32 or not re.fullmatch(r"[0-9a-f]{32}", hexdigits):
        return None
    if int(hexdigits, 16) == 0:
        return None  # an all-zero UUID identifies nothing
    h = hexdigits
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


def canonical_pci_bus_id(value: str | None) -> str | None:
    """NVML's "00000000:01:00.0" or sysfs' "0000:01:00.0" -> "0000:01:00.0"."""
    if not value:
        return None
    match = re.fullmatch(
        r"(?:([0-9a-fA-F]+):)?([0-9a-fA-F]{1,2}):([0-9a-fA-F]{1,2})\.([0-7])", value.strip()
    )
    if not match:
        return None
    domain, bus, device, function = match.groups()
    return pci_bus_id(int(domain or "0", 16), int(bus, 16), int(device, 16), int(function))


def pci_bus_id(domain: int, bus: int, device: int, function: int) -> str:
    return f"{domain & 0xFFFF:04x}:{bus:02x}:{device:02x}.{function:x}"


def normalized_name(name: str) -> str:
    """Case- and space-insensitive key for matching device names across APIs."""
    return " ".join(name.lower().replace("(r)", "").replace("(tm)", "").split())
