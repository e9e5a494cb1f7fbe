"""Typed user settings with defaults, stored as JSON in the per-user home."""

from __future__ import annotations

import dataclasses
import json
import logging
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from deskllm import paths

if TYPE_CHECKING:
    from deskllm.engine.protocol import LoadParams

log = logging.getLogger("deskllm.settings")

KvType = Literal["f16", "q8_0", "q4_0"]
KV_TYPES: tuple[str, ...] = ("f16", "q8_0", "q4_0")
GPU_OFFLOAD_MODES: tuple[str, ...] = ("auto", "manual", "off")
SEND_KEYS: tuple[str, ...] = ("enter", "ctrl+enter")
THEMES: tuple[str, ...] = ("system", "light", "dark")


@dataclass
class Settings:
    """User-facing settings. Units are in the names (mb = mebibytes)."""

    models_dir: str = ""  # empty: the default under the per-user home
    n_threads: int = 0  # 0: physical cores
    n_ctx: int = 4096  # default context; capped by the model's training context
    kv_type: str = "f16"
    flash_attn: bool = False
    gpu_offload: str = "auto"  # auto | manual (n_gpu_layers) | off
    n_gpu_layers: int = 0  # layers on the GPU when gpu_offload is "manual"; -1: all layers
    kv_ram_budget_mb: int = 512
    kv_disk_budget_mb: int = 2048
    send_key: str = "enter"  # "enter" or "ctrl+enter"
    theme: str = "system"  # system | light | dark
    extra: dict = field(default_factory=dict)

    def validate(self) -> list[str]:
        """Return a list of problems in plain words (empty when valid)."""
        problems = []
        if self.kv_type not in KV_TYPES:
            problems.append(f"KV cache type must be one of {', '.join(KV_TYPES)}")
        if self.n_ctx < 256:
            problems.append("context length must be at least 256 tokens")
        if self.n_threads < 0:
            problems.append("CPU threads must be 0 (automatic) or more")
        if self.kv_ram_budget_mb < 0 or self.kv_disk_budget_mb < 0:
            problems.append("cache budgets cannot be negative")
        if self.kv_type != "f16" and not self.flash_attn:
            problems.append("a quantized KV cache needs flash attention turned on")
        if self.gpu_offload not in GPU_OFFLOAD_MODES:
            problems.append(f"GPU offload must be one of {', '.join(GPU_OFFLOAD_MODES)}")
        elif self.gpu_offload == "manual" and self.n_gpu_layers == 0:
            problems.append("manual GPU offload needs at least 1 layer (or -1 for all)")
        if self.n_gpu_layers < -1:
            problems.append("GPU layers must be -1 (all) or more")
        if self.send_key not in SEND_KEYS:
            problems.append(f"send key must be one of {', '.join(SEND_KEYS)}")
        if self.theme not in THEMES:
            problems.append(f"theme must be one of {', '.join(THEMES)}")
        if self.models_dir and Path(self.models_dir).expanduser().is_file():
            problems.append(f"the models folder {self.models_dir} is a file, not a folder")
        return problems

    def gpu_layers(self) -> int:
        """Layers to offload: "manual" takes n_gpu_layers; "off" and "auto" give 0 here, and
        with "auto" the engine client asks the planner for the most layers that fit this
        machine's GPU (LoadParams.gpu_auto)."""
        return self.n_gpu_layers if self.gpu_offload == "manual" else 0

    def load_params(self, model_path: str, **overrides) -> LoadParams:
        """How to load `model_path` with these settings; `overrides` win (CLI flags)."""
        from deskllm.engine.protocol import LoadParams

        base = dict(
            model_path=model_path,
            n_ctx=self.n_ctx,
            n_threads=self.n_threads,
            n_gpu_layers=self.gpu_layers(),
            gpu_auto=self.gpu_offload == "auto",
            kv_type=self.kv_type,
            flash_attn=self.flash_attn,
            kv_ram_budget_mb=self.kv_ram_budget_mb,
            kv_disk_budget_mb=self.kv_disk_budget_mb,
        )
        return LoadParams(**(base | {k: v for k, v in overrides.items() if v is not None}))

    def models_path(self) -> Path:
        return Path(self.models_dir).expanduser() if self.models_dir else paths.models_dir()

    def threads(self) -> int:
        if self.n_threads > 0:
            return self.n_threads
        import psutil

        return psutil.cpu_count(logical=False) or os.cpu_count() or 1


def load(path: Path | None = None) -> Settings:
    """Read settings; unknown keys are ignored and a broken file falls back to defaults."""
    path = path or paths.settings_path()
    if not path.exists():
        return Settings()
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        log.warning("settings file %s is unreadable (%s); using defaults", path, exc)
        return Settings()
    known = {f.name for f in dataclasses.fields(Settings)}
    if "gpu_offload" not in raw and raw.get("n_gpu_layers"):
        raw["gpu_offload"] = "manual"  # written before the mode existed: keep its layers
    return Settings(**{k: v for k, v in raw.items() if k in known})


def save(settings: Settings, path: Path | None = None) -> None:
    """Write atomically so a crash never leaves half a settings file."""
    path = path or paths.settings_path()
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(dataclasses.asdict(settings), indent=2), encoding="utf-8")
    os.replace(tmp, path)
