"""`deskllm bench`: engine speed figures as one JSON object (see deskllm.measure.engine_bench)."""

from __future__ import annotations

import argparse
import json

from deskllm.cli.chat import resolve_model
from deskllm.engine.protocol import LoadParams
from deskllm.store import ModelLibrary, open_database


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("bench", help="measure engine speed and prompt caching")
    p.add_argument(
        "--model", default=None, help="a .gguf path or installed name (default: starter)"
    )
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--ctx", type=int, default=4096)
    p.add_argument("--rounds", type=int, default=3, help="decode rounds; medians are reported")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=cmd_bench)


def cmd_bench(args: argparse.Namespace) -> int:
    from deskllm.measure.engine_bench import run_bench

    model_path = resolve_model(ModelLibrary(open_database()), args.model)
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
