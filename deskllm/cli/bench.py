"""`deskllm bench`: engine speed figures as one JSON object (see deskllm.measure.engine_bench)."""

from __future__ import annotations

import argparse
import json
import sys

from deskllm.backends import Resolver
from deskllm.cli.chat import resolve_model
from deskllm.engine.domain import LoadParams
from deskllm.store import open_database


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("bench", help="measure engine speed and prompt caching")
    p.add_argument(
        "--model", default=None, help="a .gguf path or installed name (default: starter)"
    )
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--ctx", type=int, default=4096)
    p.add_argument("--rounds", type=int, default=3, help="decode rounds; medians are reported")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument(
        "--suite",
        action="store_true",
        help="measure every configuration (CPU threads, devices, offload levels), choose the "
        "fastest, then measure it with speculative decoding (off, n-gram drafts, each "
        "installed draft model), and store the result for automatic loads",
    )
    p.add_argument(
        "--quick", action="store_true", help="--suite with every shape 8x smaller (seconds)"
    )
    p.add_argument(
        "--allow-cpu-devices",
        action="store_true",
        help="--suite: measure CPU-type devices too (Mesa llvmpipe through Vulkan)",
    )
    p.add_argument(
        "--metric",
        choices=("decode", "prompt"),
        default=None,
        help="--suite: what fastest means (default: the automatic configuration setting)",
    )
    p.set_defaults(func=cmd_bench)


def cmd_bench(args: argparse.Namespace) -> int:
    if args.suite:
        return cmd_suite(args)
    from deskllm.measure.engine_bench import run_bench

    model_path = resolve_model(Resolver(open_database()), args.model)
    params = LoadParams(model_path=model_path, n_ctx=args.ctx, n_threads=args.threads)
    result = run_bench(params, rounds=args.rounds)
    if args.json:
        print(json.dumps(result, indent=2))
        return 0
    r = result["ratios"]
    print(f"model            {result['model']}")
    print(
        f"decode           app {result['tg_tps']:.1f}  raw {result['raw_tg_tps']:.1f}  "
        f"native {result['native_tg_tps']:.1f} tok/s"
    )
    print(f"  app/raw        {r['tg_over_raw']:.3f}   app/native {r['tg_over_native']:.3f}")
    print(f"prompt eval      {result['pp_tps']:.0f} tok/s over {result['history_tokens']} tokens")
    print(
        f"TTFT             cold {result['ttft_s']:.3f} s  cached {result['cached_ttft_s']:.3f} s "
        f"(ratio {r['cached_ttft_over_ttft']:.3f})"
    )
    print(
        f"switch back      restore {result['restore_s']:.3f} s  re-evaluate "
        f"{result['reeval_s']:.3f} s (ratio {r['restore_over_reeval']:.3f})"
    )
    print(
        f"stop             decode {result['stop_decode_s'] * 1000:.0f} ms  prompt "
        f"{result['stop_prefill_s'] * 1000:.0f} ms"
    )
    print(f"after kill -9    next reply's first text in {result['crash_recover_s']:.2f} s")
    return 0


def cmd_suite(args: argparse.Namespace) -> int:
    """`deskllm bench --suite`: progress on stderr, the result on stdout, stored for the
    automatic load. Ctrl+C stops the engine and stores nothing."""
    from deskllm import settings as user_settings
    from deskllm.loader.params import cost_rates_from_settings
    from deskllm.measure.suite import BenchSuite, SuiteCancelled
    from deskllm.planner.measured_configs import save_suite

    db = open_database()
    model_path = resolve_model(Resolver(db), args.model)
    settings = user_settings.load()
    metric = args.metric or settings.auto_config_metric
    suite = BenchSuite(
        model_path,
        quick=args.quick,
        allow_cpu_devices=args.allow_cpu_devices,
        metric=metric,
        db=db,
        on_progress=lambda line: print(line, file=sys.stderr, flush=True),
        cost_rates=cost_rates_from_settings(settings),
    )
    try:
        result = suite.run()
    except (KeyboardInterrupt, SuiteCancelled):
        print("deskllm: benchmark cancelled; nothing was stored", file=sys.stderr)
        return 130
    save_suite(db, result)
    if args.json:
        print(json.dumps(result, indent=2, ensure_ascii=False))
        return 0
    print(format_suite(result))
    return 0


def format_suite(result: dict) -> str:
    """The suite as a table, the choice and its reason."""
    from deskllm.planner.measured_configs import config_label

    def num(value: float | None, digits: int = 1) -> str:
        return "-" if value is None else f"{value:.{digits}f}"

    lines = [
        f"model    {result['model']}",
        f"{'config':<14}{'what':<34}{'prompt':>8}{'decode':>8}{'TTFT s':>8}{'score':>8}"
        f"{'ceiling':>9}  status",
    ]
    for c in result["configs"]:
        share = f"{c['ceiling_share']:.0%}" if c.get("ceiling_share") else "-"
        status = c["abandoned"] or c["error"] or c["status"]
        lines.append(
            f"{c['id']:<14}{config_label(c)[:33]:<34}{num(c['pp_tps']):>8}{num(c['tg_tps']):>8}"
            f"{num(c['ttft_s'], 2):>8}{num(c['score']):>8}{share:>9}  {status}"
        )
    for c in result["configs"]:
        if c.get("cost_per_mtok") is not None:
            lines.append(f"{c['id']:<14}{c['cost_per_mtok']:.4f} per million tokens "
                         f"({c['cost_source']}, at your electricity tariff)")  # fmt: skip
    ceiling = result["ceiling_tps"]
    if result.get("depth_tps"):
        points = ", ".join(f"{p['depth']}: {num(p['tg_tps'])}" for p in result["depth_tps"])
        lines.append(f"depth    decode tok/s at tokens in context: {points}")
    lines.append(f"chosen   {result['chosen']['id'] or 'none'}: {result['chosen']['reason']}")
    speculation = result.get("speculation")
    if speculation:
        for row in speculation["measured"]:
            lines.append(f"drafts   {row['label']}: " + (
                f"failed: {row['error']}" if row.get("error") else
                f"quoting {num(row['copy_tps'])} tok/s ({row['copy_over_off']:.2f}× off), "
                f"free text {num(row['free_tps'])} tok/s ({row['free_over_off']:.2f}× off)"))
        chosen = speculation["chosen"]
        lines.append(f"automatic speculation  {chosen['label']}: {chosen['reason']}")
    if ceiling:
        lines.append(f"ceiling  {ceiling:.0f} tok/s decode (memory bandwidth / bytes per token)")
    return "\n".join(lines)
