"""Benchmark suite results, per machine, engine build and model file (table bench_suites),
and what an automatic load and the hardware diagnosis take from them.

A result is `deskllm bench --suite --json`'s object (model, configs, chosen, ceiling_tps,
machine, engine_build); it is stored whole, keyed by the machine, the engine build and the
model file's name and size, so that a suite run on another computer, with another llama.cpp
build or on another file of the same name is never taken for this one.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sqlite_utils import Database

from deskllm.hardware.report import HardwareReport
from deskllm.planner.bench_choice import ConfigFigures

log = logging.getLogger("deskllm.planner")
TABLE = "bench_suites"


@dataclass(frozen=True)
class MachineKeys:
    """This computer (deskllm.hardware.keys.machine_key) and the engine build in use."""

    machine: str
    engine_build: str


def current_keys() -> MachineKeys:
    from deskllm.hardware.keys import machine_key
    from deskllm.hardware.memory import probe_memory
    from deskllm.llamacpp.build import build_id
    from deskllm.planner.calibration import this_cpu

    return MachineKeys(machine_key(this_cpu(), probe_memory()), build_id())


def _file_key(model_path: str) -> tuple[str, int]:
    path = Path(model_path)
    return path.name, path.stat().st_size


def save_suite(db: Database, result: dict[str, Any]) -> None:
    """Store a suite's result, replacing the earlier one for the same key."""
    name, size = _file_key(result["model"])
    row = dict(
        machine=result["machine"],
        engine_build=result["engine_build"],
        model_name=name,
        model_size=size,
        result=json.dumps(result),
        created_at=time.time(),
    )
    with db.atomic():
        db[TABLE].delete_where(
            "machine = ? and engine_build = ? and model_name = ? and model_size = ?",
            [row["machine"], row["engine_build"], name, size],
        )
        db[TABLE].insert(row)


def stored_suite(db: Database, keys: MachineKeys, model_path: str) -> dict[str, Any] | None:
    """The stored result for this model file on this machine and build, or None."""
    if TABLE not in db.table_names():
        return None
    try:
        name, size = _file_key(model_path)
    except OSError:
        return None
    rows = list(
        db[TABLE].rows_where(
            "machine = ? and engine_build = ? and model_name = ? and model_size = ?",
            [keys.machine, keys.engine_build, name, size],
            order_by="created_at desc",
            limit=1,
        )
    )
    return json.loads(rows[0]["result"]) if rows else None


def stored_suites(db: Database, keys: MachineKeys) -> list[dict[str, Any]]:
    """Every stored result on this machine and build, the newest first."""
    if TABLE not in db.table_names():
        return []
    rows = db[TABLE].rows_where(
        "machine = ? and engine_build = ?",
        [keys.machine, keys.engine_build],
        order_by="created_at desc",
    )
    return [json.loads(row["result"]) for row in rows]


def config_label(config: dict[str, Any]) -> str:
    """A configuration in words: "CPU 2 threads", "Vulkan0 llvmpipe, 31 layers"."""
    if config["backend"] == "CPU":
        threads = config["n_threads"]
        return f"CPU {threads} thread{'s' if threads != 1 else ''}"
    name = (config.get("description") or "").split(" (")[0]  # "llvmpipe (LLVM 15…)": llvmpipe
    return f"{config['device']} {name}".strip() + f", {config['n_gpu_layers']} layers"


def figures(result: dict[str, Any]) -> list[ConfigFigures]:
    return [
        ConfigFigures(
            c["id"], config_label(c), c.get("tg_tps"), c.get("pp_tps"), c.get("status", "measured")
        )
        for c in result["configs"]
    ]


def vulkan_devices_of(config: dict[str, Any]) -> str | None:
    """The physical Vulkan device index to name for a Vulkan configuration ("Vulkan0" -> "0"):
    named, ggml uses exactly that device, CPU-type ones included."""
    device = config.get("device") or ""
    if config.get("n_gpu_layers") and device.startswith("Vulkan") and device[6:].isdigit():
        return device[6:]
    return None


def cuda_devices_of(config: dict[str, Any]) -> str | None:
    """The CUDA device index to restrict the engine to for a CUDA configuration ("CUDA1" ->
    "1"): on a machine with several GPUs llama.cpp would otherwise split the layers across
    all of them, and the figures would not be that one device's."""
    device = config.get("device") or ""
    if config.get("n_gpu_layers") and device.startswith("CUDA") and device[4:].isdigit():
        return device[4:]
    return None


def measured_summary(result: dict[str, Any]) -> str:
    """One line that cites a suite: "measured: CPU 2 threads 147.0 tok/s, Vulkan0 llvmpipe, 31
    layers 1.6 tok/s (abandoned: 92× slower than cpu-2t)"."""
    parts = []
    ceiling = result.get("ceiling_tps")
    for c in result["configs"]:
        speed = f" {c['tg_tps']:.1f} tok/s" if c.get("tg_tps") else ""
        if c.get("status") == "abandoned":
            why = (c.get("abandoned") or "").removeprefix("abandoned: ")
            parts.append(f"{config_label(c)}{speed} (abandoned: {why})")
        elif speed and ceiling and c["id"] == (result.get("chosen") or {}).get("id"):
            share = f"{c['tg_tps'] / ceiling:.0%} of the {ceiling:.0f} tok/s ceiling"
            parts.append(f"{config_label(c)}{speed} ({share})")
        elif speed:
            parts.append(f"{config_label(c)}{speed}")
    return "measured: " + ", ".join(parts) if parts else "measured: no configuration finished"


def diagnosis_lines(db: Database, keys: MachineKeys) -> list[str]:
    """A sentence per model benchmarked on this machine and build (`deskllm hw`)."""
    lines = []
    for result in stored_suites(db, keys):
        chosen = result.get("chosen") or {}
        use = f"; the suite chose {chosen['id']}" if chosen.get("id") else ""
        figures = measured_summary(result).removeprefix("measured: ")
        lines.append(
            f"{Path(result['model']).name}, measured by deskllm bench --suite: {figures}{use}."
        )
    return lines


def cite_measurements(report: HardwareReport) -> HardwareReport:
    """`report` with diagnosis_lines added (`deskllm hw`, the Hardware panel); unchanged when
    the store cannot be read: the report must still show."""
    from deskllm.database.connection import open_database

    try:
        db = open_database()
        try:
            lines = diagnosis_lines(db, current_keys())
        finally:
            db.close()
    except Exception:
        log.warning("benchmark results unreadable; the diagnosis leaves them out", exc_info=True)
        return report
    return dataclasses.replace(report, diagnosis=report.diagnosis + tuple(lines))
