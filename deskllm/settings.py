"""Typed user settings, declared once, stored as JSON in the per-user home.

Each field of `Settings` carries its `SettingSpec` (label, allowed values with their labels,
range, when a change applies). The settings dialog builds its widgets from the specs and the
CLI takes its flag choices from them, so a value is never listed in two places. Core code is
handed a `Settings` (or plain values); only the app's entry points call `load()`.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from deskllm import paths

log = logging.getLogger("deskllm.settings")

Applies = Literal["now", "next_load"]

MAX_SERVER_SLOTS = 64
AUTO_SERVER_SLOTS = 4  # "automatic" serves at most this many at once: what llama-server does


@dataclass(frozen=True)
class SettingSpec:
    """How a setting is shown and checked. `choices`: value → label (empty: free value);
    `minimum` / `maximum` bound numbers; `special`: the label of a value with a special
    meaning (0 = automatic, -1 = all); `enabled_when`: (field, value) that makes it apply."""

    label: str
    applies: Applies = "next_load"
    choices: dict[str, str] = field(default_factory=dict)
    minimum: int | None = None
    maximum: int | None = None
    suffix: str = ""
    special: tuple[int, str] | None = None
    enabled_when: tuple[str, str] | None = None
    kind: Literal["value", "folder", "model_file"] = "value"
    help: str = ""


def setting(default: Any, spec: SettingSpec) -> Any:
    return field(default=default, metadata={"spec": spec})


@dataclass
class Settings:
    """User-facing settings. Units are in the names (mb = mebibytes)."""

    models_dir: str = setting(
        "", SettingSpec("Models folder", "now", kind="folder", help="empty: the default folder")
    )
    n_threads: int = setting(
        0,
        SettingSpec("CPU threads", minimum=0, maximum=1024,
                    special=(0, "Automatic (fewer while other programs are busy)")),
    )  # fmt: skip
    n_ctx: int = setting(
        4096, SettingSpec("Default context length", minimum=256, maximum=1 << 20, suffix=" tokens")
    )
    kv_type: str = setting(
        "f16",
        SettingSpec("KV cache type", choices={
            "f16": "f16 (full precision)",
            "q8_0": "q8_0 (half the memory, needs flash attention)",
            "q4_0": "q4_0 (a quarter, needs flash attention)",
        }),
    )  # fmt: skip
    flash_attn: bool = setting(False, SettingSpec(
        "Flash attention",
        help="Needed for a quantized KV cache. A reply then no longer depends on where its "
             "cells sit in the shared pool: a restored conversation, or one answered beside "
             "others, answers as it would alone. Slower on a CPU for small models.",
    ))  # fmt: skip
    speculation: str = setting(
        "auto",
        SettingSpec("Speculative decoding", choices={
            "off": "Off",
            "auto": "Automatic (what the benchmark measured to pay; before it, n-gram drafts "
                    "while they pay)",
            "ngram": "N-gram drafts (from the conversation itself)",
            "draft": "Draft model (a smaller model of the same family proposes)"},
            help="drafts several tokens from what the conversation already holds (or with a "
                 "small draft model) and checks them in one pass: faster where a reply copies "
                 "its input (code edits, quotes); a greedy reply may differ from one without "
                 "it only where two tokens nearly tie"),
    )  # fmt: skip
    draft_model: str = setting(
        "",
        SettingSpec("Draft model", enabled_when=("speculation", "draft"), kind="model_file",
                    help="the .gguf file of a smaller model with the same vocabulary (a "
                         "model of another family is refused, with the reason)"),
    )  # fmt: skip
    gpu_offload: str = setting(
        "auto",
        SettingSpec("GPU offload", choices={
            "auto": "Automatic", "manual": "Manual: a number of layers", "off": "Off"}),
    )  # fmt: skip
    n_gpu_layers: int = setting(
        0,
        SettingSpec("GPU layers", minimum=-1, maximum=999, suffix=" layers",
                    special=(-1, "all layers"), enabled_when=("gpu_offload", "manual")),
    )  # fmt: skip
    auto_config_metric: str = setting(
        "decode",
        SettingSpec("Automatic configuration", choices={
            "decode": "Fastest measured decode (replies)",
            "prompt": "Fastest measured prompt reading (long inputs)"},
            enabled_when=("gpu_offload", "auto"),
            help="after deskllm bench --suite, an automatic load takes the fastest measured "
                 "configuration that fits by this speed"),
    )  # fmt: skip
    usable_tps: int = setting(
        5,
        SettingSpec("Usable decode speed", "now", minimum=1, maximum=1000, suffix=" tok/s",
                    help="the quantization recommended is the best one reaching this speed"),
    )  # fmt: skip
    kv_ram_budget_mb: int = setting(
        512, SettingSpec("Prompt cache in RAM", minimum=0, maximum=1 << 20, suffix=" MiB")
    )
    kv_disk_budget_mb: int = setting(
        2048, SettingSpec("Prompt cache on disk", minimum=0, maximum=1 << 24, suffix=" MiB")
    )
    send_key: str = setting(
        "enter",
        SettingSpec("Send key", "now", choices={
            "enter": "Enter sends, Shift+Enter new line",
            "ctrl+enter": "Ctrl+Enter sends, Enter new line"}),
    )  # fmt: skip
    theme: str = setting(
        "system",
        SettingSpec("Theme", "now",
                    choices={"system": "Follow the system", "light": "Light", "dark": "Dark"}),
    )  # fmt: skip
    energy_watts: int = setting(
        0,
        SettingSpec("Estimated power draw", minimum=0, maximum=100_000, suffix=" W",
                    special=(0, "None (measured counters only)"),
                    help="where the machine has no readable energy counter, joules per reply "
                         "are this figure times the seconds, labelled estimated"),
    )  # fmt: skip
    electricity_price_per_kwh: float = setting(
        0.0,
        SettingSpec("Electricity price per kWh", "now", special=(0, "Not set"),
                    help="0: unknown. The cost per million tokens needs it and a known energy "
                         "per token; it is never guessed"),
    )  # fmt: skip
    hardware_cost: float = setting(
        0.0,
        SettingSpec("Hardware price", "now", special=(0, "Not set"),
                    help="0: left out. What the machine cost, spread over its hours of use: a "
                         "local reply's cost adds its share for the reply's seconds"),
    )  # fmt: skip
    hardware_hours: int = setting(
        0,
        SettingSpec("Hardware hours of use", "now", minimum=0, maximum=100_000, suffix=" h",
                    special=(0, "Not set"),
                    help="the hours of use the hardware price is spread over (e.g. 3 years "
                         "of 8 hours a day: 8760)"),
    )  # fmt: skip
    router_escalate: str = setting(
        "off",
        SettingSpec("Auto: unsure replies", "now", choices={
            "off": "Stay local (remote only when too long, failed or asked)",
            "0.1": "The least sure 10% go to the remote model",
            "0.25": "The least sure 25% go to the remote model",
            "0.5": "The least sure 50% go to the remote model"},
            help="Auto (local first), with an endpoint that allows routing: a local reply "
                 "whose first 16 tokens are less sure than this share of a fixed set of 24 "
                 "prompts is written by the remote model instead (measured once per local "
                 "model and chat sampling, before the first such reply)"),
    )  # fmt: skip
    tool_steps: int = setting(
        8,
        SettingSpec("Tool steps per turn", "now", minimum=1, maximum=100, suffix=" replies",
                    help="a chat with tools: the model's replies in one turn (each may call "
                         "tools) before the turn is stopped"),
    )  # fmt: skip
    tool_timeout_s: int = setting(
        30,
        SettingSpec("Tool call timeout", "now", minimum=1, maximum=3600, suffix=" s",
                    help="a tool that takes longer is abandoned and the model is told"),
    )  # fmt: skip
    server_slots: int = setting(
        0,
        SettingSpec("Server slots", minimum=0, maximum=MAX_SERVER_SLOTS, suffix=" slots",
                    special=(0, "Automatic (as many as fit, up to 4)"),
                    help="requests the local API server answers at once, each with a context "
                         "of its own (the planner counts every slot's KV cache)"),
    )  # fmt: skip
    server_host: str = setting(
        "127.0.0.1",
        SettingSpec("Server address", "now", choices={
            "127.0.0.1": "This computer only (127.0.0.1)",
            "0.0.0.0": "Every network this computer is on (API key required)"}),
    )  # fmt: skip
    server_port: int = setting(8383, SettingSpec("Server port", "now", minimum=1, maximum=65535))
    extra: dict = field(default_factory=dict)  # keys of newer versions, kept when saving

    def validate(self) -> list[str]:
        """Return a list of problems in plain words (empty when valid)."""
        problems = []
        for name, spec in specs().items():
            value = getattr(self, name)
            if spec.choices and value not in spec.choices:
                problems.append(f"{spec.label} must be one of {', '.join(spec.choices)}")
            elif isinstance(value, bool) or not isinstance(value, int):
                continue
            elif spec.minimum is not None and value < spec.minimum:
                problems.append(_too_small(name, spec))
            elif spec.maximum is not None and value > spec.maximum:
                problems.append(f"{spec.label} can be at most {spec.maximum}{spec.suffix}")
        if self.kv_type != "f16" and not self.flash_attn:
            problems.append("a quantized KV cache needs flash attention turned on")
        if self.gpu_offload == "manual" and self.n_gpu_layers == 0:
            problems.append("manual GPU offload needs at least 1 layer (or -1 for all)")
        if not 0 <= self.electricity_price_per_kwh < float("inf"):
            problems.append("the electricity price must be 0 (unknown) or more")
        if not 0 <= self.hardware_cost < float("inf"):
            problems.append("the hardware price must be 0 (left out) or more")
        if self.models_dir and Path(self.models_dir).expanduser().is_file():
            problems.append(f"the models folder {self.models_dir} is a file, not a folder")
        if self.speculation == "draft" and not self.draft_model:
            problems.append("speculative decoding with a draft model needs the draft model's "
                            "file (Draft model)")  # fmt: skip
        elif self.draft_model and not Path(self.draft_model).expanduser().is_file():
            problems.append(f"the draft model {self.draft_model} is not a file: choose its "
                            ".gguf file again")  # fmt: skip
        return problems

    def models_path(self) -> Path:
        return Path(self.models_dir).expanduser() if self.models_dir else paths.models_dir()


def _too_small(name: str, spec: SettingSpec) -> str:
    if name == "n_ctx":
        return f"context length must be at least {spec.minimum} tokens"
    if spec.special and spec.special[0] == spec.minimum:
        meaning = spec.special[1].split(" (")[0].lower()
        return f"{spec.label} must be {spec.minimum} ({meaning}) or more"
    return f"{spec.label} cannot be below {spec.minimum}"


def specs() -> dict[str, SettingSpec]:
    """Every user-visible setting's spec, in declaration order."""
    fields = dataclasses.fields(Settings)
    return {f.name: f.metadata["spec"] for f in fields if "spec" in f.metadata}


def choices(name: str) -> tuple[str, ...]:
    """The allowed values of a setting (CLI `choices=`)."""
    return tuple(specs()[name].choices)


def changed_fields(old: Settings, new: Settings) -> dict[str, Applies]:
    """Names of the settings that differ, with when each change applies."""
    return {
        name: spec.applies
        for name, spec in specs().items()
        if getattr(old, name) != getattr(new, name)
    }


def load(path: Path | None = None) -> Settings:
    """Read settings; a value of the wrong type, unknown keys and a broken file fall back to
    the defaults (the file is the user's: it may have been edited by hand)."""
    path = path or paths.settings_path()
    if not path.exists():
        return Settings()
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        log.warning("settings file %s is unreadable (%s); using defaults", path, exc)
        return Settings()
    if not isinstance(raw, dict):
        log.warning("settings file %s holds no settings object; using defaults", path)
        return Settings()
    if "gpu_offload" not in raw and raw.get("n_gpu_layers"):
        raw["gpu_offload"] = "manual"  # written before the mode existed: keep its layers
    defaults = Settings()
    values: dict[str, Any] = {}
    for f in dataclasses.fields(Settings):
        if f.name not in raw:
            continue
        value, default = raw[f.name], getattr(defaults, f.name)
        if isinstance(default, float) and type(value) is int and abs(value) < 2**53:
            value = float(value)  # a price written by hand as "1"
        if type(value) is not type(default):
            log.warning("settings file %s: %s=%r is not a %s; using %r",
                        path, f.name, value, type(default).__name__, default)  # fmt: skip
            continue
        values[f.name] = value
    return Settings(**values)


def save(settings: Settings, path: Path | None = None) -> None:
    """Write atomically so a crash never leaves half a settings file."""
    path = path or paths.settings_path()
    tmp = path.with_suffix(".tmp")
    paths.write_private_text(tmp, json.dumps(dataclasses.asdict(settings), indent=2))
    os.replace(tmp, path)
