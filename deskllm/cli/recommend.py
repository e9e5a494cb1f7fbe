"""`deskllm recommend`: which curated model and quantization to take on this machine (or a
saved profile's), offline: from the curated catalog shipped with the app."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from deskllm import settings as settings_mod
from deskllm.planner.fit import gib


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "recommend",
        help="the curated models planned for this machine, and the one to take",
        description="Plan every model of the curated catalog (popular instruct GGUF repos, "
        "shipped with the app, so it works offline) for this machine: per repo the quant the "
        "recommendation rule picks (the best quality that fits and reaches a usable decode "
        "speed, else the fastest that fits), and across repos the biggest model that runs at "
        "a good quality and a usable speed, entirely on the GPU where there is one.",
    )
    parser.add_argument(
        "--hardware",
        metavar="PROFILE.json",
        default=None,
        help="plan for the machine a saved `deskllm hw --json` describes",
    )
    parser.add_argument("--ctx", type=int, default=0, help="context length in tokens (default: "
                        "the setting, capped by each model's training context)")  # fmt: skip
    parser.add_argument("--kv", choices=settings_mod.choices("kv_type"), default=None,
                        help="KV cache type (default: the setting)")  # fmt: skip
    parser.add_argument(
        "--usable-tps",
        type=float,
        default=None,
        metavar="N",
        help="decode speed in tokens/s a recommendation should reach (default: the setting)",
    )
    parser.add_argument(
        "--refresh",
        action="store_true",
        help="first read the real file sizes and sha256 from the Hub (HF_ENDPOINT honoured)",
    )
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.set_defaults(func=run_recommend)


def run_recommend(args: argparse.Namespace) -> int:
    from deskllm.catalog.cache import CatalogCache
    from deskllm.catalog.curated import CuratedError, load_curated, refresh_curated
    from deskllm.catalog.hub import HubCatalog, hub_offline
    from deskllm.cli.plan import _corrections, _hardware
    from deskllm.planner.catalog_plan import plan_catalog
    from deskllm.store.decode_speeds import measured_decode_speeds

    report, where = _hardware(args)
    user = settings_mod.load()
    cache = CatalogCache()
    try:
        catalog = load_curated(cache=cache)
    except CuratedError as exc:
        print(f"deskllm: {exc}", file=sys.stderr)
        return 1
    offline = hub_offline()
    if args.refresh and not offline:
        result = refresh_curated(catalog, HubCatalog(cache))
        catalog = result.catalog
        offline = not result.refreshed and bool(result.errors)
        for repo_id, message in result.errors:
            print(f"deskllm: {repo_id}: {message}", file=sys.stderr)
    this_machine = args.hardware is None
    planned = plan_catalog(
        catalog,
        report,
        n_ctx=args.ctx or user.n_ctx,
        kv_type=args.kv or user.kv_type,
        usable_tps=float(args.usable_tps or user.usable_tps),
        corrections=_corrections(report, this_machine),
        # Speeds measured in chats here, never for a profile of another machine.
        measured_tps=measured_decode_speeds(cache.db) if this_machine else None,
    )
    result = recommend_json(catalog, planned, offline, where)
    if args.json:
        json.dump(result, sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        print(format_recommendations(result))
    return 0


def recommend_json(catalog, planned, offline: bool, where: str) -> dict[str, Any]:
    """The `deskllm recommend --json` object (keys documented in the README)."""
    rows = []
    for row in planned.rows:
        p = row.chosen
        f = next(f for f in row.model.files if f.file == p.file)
        rows.append(
            {
                "repo_id": row.model.repo_id,
                "file": p.file,
                "quant": p.quant,
                "params": row.model.params,
                "size_bytes": p.size_bytes,
                "fit": p.plan.fit,
                "n_gpu_layers": p.plan.n_gpu_layers,
                "tps_ceiling": round(p.plan.tps_ceiling, 1) if p.plan.tps_ceiling else None,
                "tps_measured": row.measured_tps.get(p.file),
                "quality_tier": row.quality_tier,
                "license": row.model.license,
                "size_estimated": f.size_estimated,
                "n_ctx": row.n_ctx,
                "reason": row.recommendation.reason if row.recommendation else p.plan.reason,
            }
        )
    best, quant = planned.recommended, planned.recommended_quant
    return {
        "catalog_date": catalog.catalog_date,
        "offline": offline,
        "refreshed_at": catalog.refreshed_at,
        "hardware": where,
        "usable_tps": planned.usable_tps,
        "rows": rows,
        "recommended": None
        if best is None or quant is None
        else {
            "repo_id": best.model.repo_id,
            "file": quant.file,
            "quant": quant.quant,
            "reason": planned.reason,
        },
    }


def format_recommendations(result: dict[str, Any]) -> str:
    head = (f"{'model':<48} {'params':>7} {'quant':<7} {'size':>10} {'fit':<8} {'GPU':>4} "
            f"{'tok/s':>6}  {'quality':<13} license")  # fmt: skip
    lines = [
        f"Curated catalog of {result['catalog_date']} planned for {result['hardware']} "
        f"(usable speed {result['usable_tps']:.10g} tok/s)",
        "",
        head,
    ]
    for r in result["rows"]:
        size = ("~" if r["size_estimated"] else "") + gib(r["size_bytes"])
        tps = f"{r['tps_ceiling']:.0f}" if r["tps_ceiling"] else "-"
        lines.append(
            f"{r['repo_id']:<48} {r['params'] / 1e9:>6.1f}B {r['quant']:<7} {size:>10} "
            f"{r['fit']:<8} {r['n_gpu_layers']:>4} {tps:>6}  {r['quality_tier']:<13} "
            f"{r['license']}"
        )
    lines.append("")
    lines.append("~ size estimated from the model's shape; tok/s: the decode-speed ceiling")
    best = result["recommended"]
    if best is None:
        lines.append("Nothing in the catalog fits this machine.")
    else:
        lines.append(f"Recommended: {best['repo_id']} {best['file']}")
        lines.append(f"  {best['reason']}")
        lines.append(f"  deskllm download {best['repo_id']} {best['quant']}")
    return "\n".join(lines)
