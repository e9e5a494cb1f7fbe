"""`deskllm usage [--since DATE] [--json]`: tokens and cost per day, engine and model."""

from __future__ import annotations

import argparse
import datetime
import json
import sys

from deskllm.database import open_database
from deskllm.store.usage import usage


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("usage", help="tokens and cost per day, engine and model")
    p.add_argument("--since", default=None, metavar="DATE",
                   help="count replies from this day on (YYYY-MM-DD, local time)")  # fmt: skip
    p.add_argument("--json", action="store_true", help="a JSON object on stdout")
    p.set_defaults(func=cmd_usage)


def cmd_usage(args: argparse.Namespace) -> int:
    if args.since is not None:
        try:
            datetime.date.fromisoformat(args.since)
        except ValueError:
            print(f"deskllm: --since {args.since!r} is not a date (YYYY-MM-DD)", file=sys.stderr)
            return 2
    report = usage(open_database(), args.since)
    if args.json:
        print(json.dumps(report.as_json(), indent=2))
        return 0
    if not report.rows:
        print("no replies stored" + (f" since {args.since}" if args.since else ""))
        return 0
    header = ("day", "engine", "model", "requests", "prompt", "completion", "cost", "source")
    lines = [header] + [
        (r.day, r.engine, r.model, str(r.requests), str(r.prompt_tokens),
         str(r.completion_tokens), "-" if r.cost is None else f"{r.cost:.4f}", r.cost_source)
        for r in report.rows
    ]  # fmt: skip
    widths = [max(len(line[i]) for line in lines) for i in range(len(header))]
    numeric = {3, 4, 5, 6}
    for line in lines:
        cells = [c.rjust(w) if i in numeric else c.ljust(w)
                 for i, (c, w) in enumerate(zip(line, widths, strict=True))]  # fmt: skip
        print("  ".join(cells).rstrip())
    share = report.local_share
    if share is not None:
        print(f"kept local by the router: {share:.0%} of its replies")
    print("local cost: not measured (no energy figure yet)")
    return 0
