"""Per-user locations. `DESKLLM_HOME` overrides the platform app-data dir (tests set it)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

APP_NAME = "deskllm"


def home() -> Path:
    """The per-user data dir, created on first use."""
    override = os.environ.get("DESKLLM_HOME")
    if override:
        base = Path(override)
    elif sys.platform == "win32":
        base = Path(os.environ.get("APPDATA") or Path.home() / "AppData" / "Roaming") / APP_NAME
    elif sys.platform == "darwin":
        base = Path.home() / "Library" / "Application Support" / APP_NAME
    else:
        xdg = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
        base = Path(xdg) / APP_NAME
    base.mkdir(parents=True, exist_ok=True)
    return base


def _subdir(name: str) -> Path:
    path = home() / name
    path.mkdir(parents=True, exist_ok=True)
    return path


def database_path() -> Path:
    return home() / "deskllm.sqlite3"


def settings_path() -> Path:
    return home() / "settings.json"


def models_dir() -> Path:
    return _subdir("models")


def kv_cache_dir() -> Path:
    return _subdir("kv-cache")


def probe_cache_dir() -> Path:
    """Results of machine probes (crash-safe engine probe, memory bandwidth), per build."""
    return _subdir("probes")


def logs_dir() -> Path:
    return _subdir("logs")


def resources_dir() -> Path:
    """Bundled resources: next to the package in a checkout, inside the bundle when frozen."""
    frozen_root = getattr(sys, "_MEIPASS", None)
    if frozen_root:
        return Path(frozen_root) / "resources"
    return Path(__file__).resolve().parent.parent / "resources"
