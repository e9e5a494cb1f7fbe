"""A HardwareReport as readable text (what `deskllm hw` prints)."""

from __future__ import annotations

import textwrap

from deskllm.hardware.report import HardwareReport, OffloadTarget

_GIB = 1 << 30


def gib(value: int | None) -> str:
    return "?" if value is None else f"{value / _GIB:.1f} GiB"


def format_summary(report: HardwareReport) -> str:
    """Several short sections; every line fits 100 columns except long device names."""
    cpu, mem = report.cpu, report.memory
    probe = f"{report.probe_ms:.0f} ms" if report.probe_ms is not None else "?"
    lines = [f"deskllm hardware report (probe {probe}, bandwidth test excluded)", ""]
    cores = f"{cpu.cores_physical or '?'} cores / {cpu.cores_logical or '?'} threads"
    lines.append(f"CPU        {cpu.name} - {cores}, {cpu.arch}")
    lines += _wrapped(
        "features", " ".join(cpu.features) or "none detected", f"(from {cpu.features_source})"
    )
    swap = gib(mem.swap_total_bytes) if mem.swap_total_bytes else "none"
    lines.append(
        f"Memory     {gib(mem.total_bytes)} total, {gib(mem.available_bytes)} available; "
        f"swap {swap}"
    )
    lines.append(f"Bandwidth  {_bandwidth(report)}")
    lines += ["", "GPU APIs"]
    for status in report.apis:
        if status.api == "engine":
            continue
        timing = f" ({status.wall_ms:.0f} ms)" if status.wall_ms is not None else ""
        if status.available:
            found = [d for d in report.devices if d.api == status.api]
            version = (status.version or "").split(",")[0]  # PoCL appends its build options
            what = f"{len(found)} device(s) via {status.library or '?'} {version}"
            lines.append(f"  {status.api:<8}{what.strip()}{timing}")
        else:
            lines.append(f"  {status.api:<8}not available: {status.reason}{timing}")
    for d in report.devices:
        free = f", {gib(d.memory_free_bytes)} free" if d.memory_free_bytes is not None else ""
        lines.append(f"  - {d.api}: {d.name} [{d.type}] {gib(d.memory_total_bytes)}{free}")
    lines += ["", _engine_header(report)]
    for e in report.engine.devices:
        free = f", {gib(e.memory_free_bytes)} free" if e.memory_free_bytes is not None else ""
        lines.append(
            f"  - {e.name} ({e.backend or '?'}, {e.type}): {e.description}, "
            f"{gib(e.memory_total_bytes)}{free}"
        )
    lines += ["", "Offload targets"]
    lines += [f"  - {_target(t)}" for t in report.offload_targets] or ["  none"]
    lines += ["", "Diagnosis"]
    for text in report.diagnosis or ("Nothing to report.",):
        lines += textwrap.wrap(text, 96, initial_indent="  - ", subsequent_indent="    ")
    return "\n".join(lines)


def _wrapped(label: str, text: str, suffix: str) -> list[str]:
    return textwrap.wrap(
        f"{text} {suffix}", 96, initial_indent=f"{'':11}{label}: ", subsequent_indent=" " * 11
    )


def _bandwidth(report: HardwareReport) -> str:
    m = report.bandwidth
    if m is None:
        return "not measured"
    how = f"cached from {m.measured_at}" if m.cached else "measured now"
    return f"{m.gbps:.1f} GB/s read ({how}, {m.threads} threads; --refresh-bandwidth re-measures)"


def _engine_header(report: HardwareReport) -> str:
    engine = report.engine
    status = next((s for s in report.apis if s.api == "engine"), None)
    if not engine.available:
        return f"Engine     not available: {engine.reason}"
    name = status.version if status and status.version else "llama.cpp"
    variant = f", CPU variant {engine.cpu_variant}" if engine.cpu_variant else ""
    offload = "yes" if engine.gpu_offload else "no"
    backends = ", ".join(engine.backends) or "none"
    return f"Engine     {name}: backends {backends}; GPU offload {offload}{variant}"


def _target(t: OffloadTarget) -> str:
    use = "automatic" if t.automatic else "CPU-type, only by explicit choice"
    engine = f"engine device {t.engine_device}" if t.engine_device else "no engine backend"
    free = f", {gib(t.memory_free_bytes)} free" if t.memory_free_bytes is not None else ""
    return (
        f"{t.name} [{t.type}; {'+'.join(t.apis)}] {gib(t.memory_total_bytes)}{free}; "
        f"{use}; {engine}"
    )
