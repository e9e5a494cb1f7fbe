"""`deskllm plan MODEL`: will it fit, how, and which quantization to take."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from deskllm import settings as settings_mod
from deskllm.catalog.quants import kl_divergence
from deskllm.hardware.report import HardwareReport
from deskllm.planner.fit import FitPlanner, QuantPlan, Recommendation, gib


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "plan",
        help="memory needed per quantization, what fits this machine, what to take",
        description="Estimate RAM and VRAM for each quantization of a model (a .gguf file, a "
        "folder of them, or a Hugging Face repo id), classify the fit (gpu, partial, cpu, "
        "too_big) and recommend the best quality that reaches a usable decode speed (else "
        "the fastest that fits).",
    )
    parser.add_argument("model", help="a .gguf file, a folder of .gguf files, or owner/repo")
    parser.add_argument(
        "--ctx",
        type=int,
        default=0,
        help="context length in tokens (default: the setting, capped by the "
        "model's training context)",
    )
    parser.add_argument("--kv", choices=settings_mod.choices("kv_type"), default=None,
                        help="KV cache type (default: the setting)")  # fmt: skip
    parser.add_argument(
        "--hardware",
        metavar="PROFILE.json",
        default=None,
        help="plan for the machine a saved `deskllm hw --json` describes",
    )
    parser.add_argument(
        "--gpu",
        default=None,
        help="offload to this device (name or engine device such as Vulkan0), "
        "also a CPU-type one the planner would not pick by itself",
    )
    parser.add_argument(
        "--usable-tps",
        type=float,
        default=None,
        metavar="N",
        help="decode speed in tokens/s the recommendation should reach (default: the setting)",
    )
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.set_defaults(func=run_plan)


def _hardware(args: argparse.Namespace) -> tuple[HardwareReport, str]:
    from deskllm.hardware import probe_hardware, report_from_dict

    if args.hardware is None:
        return probe_hardware(), "this machine"
    try:
        data = json.loads(Path(args.hardware).read_text(encoding="utf-8"))
        return report_from_dict(data), args.hardware
    except (OSError, ValueError) as exc:
        raise SystemExit(
            f"deskllm: cannot read the hardware profile {args.hardware}: {exc}"
        ) from None


def _corrections(report: HardwareReport, this_machine: bool):
    """Calibration applies to this machine only, never to a profile of another one."""
    if not this_machine:
        return None
    from deskllm.planner.calibration import corrections_for, machine_id
    from deskllm.store import open_database

    db = open_database()
    machine = machine_id(report.cpu, report.memory)
    return lambda architecture: corrections_for(db, machine, architecture)


def _measured(this_machine: bool) -> dict[str, float] | None:
    """Decode speeds measured in chats here (by file name); never for another machine."""
    if not this_machine:
        return None
    from deskllm.store import open_database
    from deskllm.store.decode_speeds import measured_decode_speeds

    return measured_decode_speeds(open_database())


def run_plan(args: argparse.Namespace) -> int:
    from deskllm.planner.plan_model import plan_model
    from deskllm.planner.sources import SourceError

    report, where = _hardware(args)
    user = settings_mod.load()
    try:
        planned = plan_model(
            args.model,
            report,
            n_ctx=args.ctx or user.n_ctx,
            kv_type=args.kv or user.kv_type,
            gpu=args.gpu,
            corrections=_corrections(report, args.hardware is None),
            usable_tps=args.usable_tps or user.usable_tps,
            measured_tps=_measured(args.hardware is None),
        )
    except (SourceError, ValueError) as exc:
        print(f"deskllm: {exc}", file=sys.stderr)
        return 2
    except Exception as exc:  # the catalog's errors say what to do in plain words
        print(f"deskllm: {exc}", file=sys.stderr)
        return 1
    if not planned.plans:
        for e in planned.errors:
            print(f"deskllm: {e.file}: {e.message}", file=sys.stderr)
        print(f"deskllm: no readable model file in {args.model}", file=sys.stderr)
        return 1
    result = plan_json(
        args.model,
        planned.n_ctx,
        planned.kv_type,
        planned.planner,
        where,
        list(planned.plans),
        planned.recommended,
        list(planned.errors),
    )
    if args.json:
        json.dump(result, sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        print(format_plans(result))
    return 0


def plan_json(
    model: str,
    n_ctx: int,
    kv: str,
    planner: FitPlanner,
    where: str,
    plans: list[QuantPlan],
    best: Recommendation | None,
    errors,
) -> dict[str, Any]:
    """The `deskllm plan --json` object (keys documented in the README)."""
    gpu = planner.gpu
    return {
        "model": model,
        "n_ctx": n_ctx,
        "kv_type": kv,
        "hardware": {
            "source": where,
            "ram_available_bytes": planner.hardware.memory.available_bytes,
            "ram_budget_bytes": planner.ram_budget,
            "gpu": None
            if gpu is None
            else {
                "name": gpu.name,
                "engine_device": gpu.engine_device,
                "free_bytes": gpu.free_bytes,
                "budget_bytes": planner.vram_budget,
            },
            "bandwidth_gbps": planner.hardware.bandwidth_gbps,
        },
        "quants": [
            {
                "file": p.file,
                "quant": p.quant,
                "size_bytes": p.size_bytes,
                "memory_bytes": {
                    "ram": p.plan.estimate.ram_bytes,
                    "vram": p.plan.estimate.vram_bytes,
                },
                "fit": p.plan.fit,
                "n_gpu_layers": p.plan.n_gpu_layers,
                "layer_slots": p.plan.layer_slots,
                "tps_ceiling": round(p.plan.tps_ceiling, 1) if p.plan.tps_ceiling else None,
                "kl_divergence": kl_divergence(p.quant),
                "reason": p.plan.reason,
                "parts": [
                    {"name": part.name, "device": part.device, "bytes": part.bytes}
                    for part in p.plan.estimate.parts
                ],
            }
            for p in plans
        ],
        "recommended": None
        if best is None
        else {
            "file": best.file,
            "quant": best.quant,
            "reason": best.reason,
            "load": {
                "n_ctx": best.plan.load.n_ctx,
                "n_gpu_layers": best.plan.load.n_gpu_layers,
                "kv_type": best.plan.load.kv_type,
                "flash_attn": best.plan.load.flash_attn,
            },
        },
        "errors": [{"file": e.file, "message": e.message} for e in errors],
    }


def format_plans(result: dict[str, Any]) -> str:
    hw = result["hardware"]
    gpu = hw["gpu"]
    lines = [
        f"{result['model']}: context {result['n_ctx']} tokens, KV cache {result['kv_type']}",
        f"machine ({hw['source']}): {gib(hw['ram_available_bytes'])} RAM available"
        + (f", {gpu['name']} {gib(gpu['free_bytes'] or 0)} free" if gpu else ", no GPU offload"),
        "",
        f"{'quant':<10} {'file size':>10} {'RAM':>10} {'VRAM':>10}  {'fit':<8} {'GPU layers':>10}"
        f" {'tok/s max':>9}",
    ]
    for q in result["quants"]:
        tps = f"{q['tps_ceiling']:.0f}" if q["tps_ceiling"] else "-"
        layers = f"{q['n_gpu_layers']}/{q['layer_slots']}"
        lines.append(
            f"{q['quant']:<10} {gib(q['size_bytes']):>10} {gib(q['memory_bytes']['ram']):>10} "
            f"{gib(q['memory_bytes']['vram']):>10}  {q['fit']:<8} {layers:>10} {tps:>9}"
        )
    for e in result["errors"]:
        lines.append(f"unreadable: {e['file']}: {e['message']}")
    best = result["recommended"]
    lines.append("")
    if best is None:
        smallest = min(result["quants"], key=lambda q: q["size_bytes"])
        lines.append(
            f"Nothing fits this machine. The smallest, {smallest['quant']}, is "
            + smallest["reason"]
        )
    else:
        load = best["load"]
        lines.append(f"Recommended: {best['file']} — {best['reason']}")
        lines.append(
            f"  load with n_ctx={load['n_ctx']} n_gpu_layers={load['n_gpu_layers']} "
            f"kv_type={load['kv_type']} flash_attn={str(load['flash_attn']).lower()}"
        )
    return "\n".join(lines)
