"""Display-class PCI devices from Linux sysfs: GPUs the OS sees even when no GPU API does.

This is what lets the diagnosis say "there is a GPU, but no driver for it". Other OSes
return an empty tuple (their GPUs without a driver show up as a basic display adapter).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from deskllm.hardware.identity import canonical_pci_bus_id, vendor_name
from deskllm.hardware.report import PciDisplay

SYSFS_PCI = Path("/sys/bus/pci/devices")
_DISPLAY_CLASS = 0x03  # PCI base class 03h: display controller (VGA, 3D, other)


def probe_pci_displays(root: Path = SYSFS_PCI) -> tuple[PciDisplay, ...]:
    """Every display controller under `root` (a sysfs devices dir), with its bound driver."""
    if not sys.platform.startswith("linux") or not root.is_dir():
        return ()
    found = []
    for entry in sorted(root.iterdir()):
        try:
            pci_class = int((entry / "class").read_text().strip(), 16)
            if pci_class >> 16 != _DISPLAY_CLASS:
                continue
            vendor_id = int((entry / "vendor").read_text().strip(), 16)
            device_id = int((entry / "device").read_text().strip(), 16)
        except (OSError, ValueError):
            continue  # devices can vanish (hot-unplug) or be unreadable in a container
        driver_link = entry / "driver"
        driver = os.path.basename(os.readlink(driver_link)) if driver_link.is_symlink() else None
        found.append(
            PciDisplay(
                pci_bus_id=canonical_pci_bus_id(entry.name) or entry.name,
                vendor_id=vendor_id,
                device_id=device_id,
                vendor=vendor_name(vendor_id),
                driver=driver,
            )
        )
    return tuple(found)
