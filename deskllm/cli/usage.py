"""`deskllm usage [--since DATE] [--tariff PRICE] [--watts W] [--json]`: tokens and cost per day,
engine and model."""

from __future__ import annotations

import argparse
import datetime
import json
import sys

from deskllm import settings as settings_mod
from deskllm.database import open_database
from deskllm.hardware.energy_cost import LocalCostRates
from deskllm.loader.params import cost_rates_from_settings
from deskllm.store.usage import usage


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("usage", help="tokens and cost per day, engine and model")
    p.add_argument("--since", default=None, metavar="DATE",
                   help="count replies from this day on (YYYY-MM-DD, local time)")  # fmt: skip
    p.add_argument("--tariff", type=float, default=None, metavar="PRICE",
                   help="electricity price per kWh for local replies (default: the setting "
                        "electricity_price_per_kwh)")  # fmt: skip
    p.add_argument("--watts", type=float, default=None, metavar="W",
                   help="estimated power draw for local replies without measured joules "
                        "(default: the setting energy_watts; 0: none)")  # fmt: skip
    p.add_argument("--json", action="store_true", help="a JSON object on stdout")
    p.set_defaults(func=cmd_usage)


def cmd_usage(args: argparse.Namespace) -> int:
    if args.since is not None:
        try:
            datetime.date.fromisoformat(args.since)
        except ValueError:
            print(f"deskllm: --since {args.since!r} is not a date (YYYY-MM-DD)", file=sys.stderr)
            return 2
    for flag, value in (("--tariff", args.tariff), ("--watts", args.watts)):
        if value is not None and not 0 <= value < float("inf"):
            print(f"deskllm: {flag} must be 0 or more, not {value}", file=sys.stderr)
            return 2
    rates = cost_rates_from_settings(settings_mod.load(), tariff_per_kwh=args.tariff,
                                     estimated_watts=args.watts)  # fmt: skip
    report = usage(open_database(), args.since, rates)
    if args.json:
        print(json.dumps(report.as_json(), indent=2))
        return 0
    if not report.rows:
        print("no replies stored" + (f" since {args.since}" if args.since else ""))
        return 0
    header = ("day", "engine", "model", "requests", "prompt", "completion", "cost", "per Mtok",
              "source")  # fmt: skip
    lines = [header] + [
        (r.day, r.engine, r.model, str(r.requests), str(r.prompt_tokens),
         str(r.completion_tokens), _money(r.cost), _money(r.cost_per_mtok), r.cost_source)
        for r in report.rows
    ]  # fmt: skip
    widths = [max(len(line[i]) for line in lines) for i in range(len(header))]
    numeric = {3, 4, 5, 6, 7}
    for line in lines:
        cells = [c.rjust(w) if i in numeric else c.ljust(w)
                 for i, (c, w) in enumerate(zip(line, widths, strict=True))]  # fmt: skip
        print("  ".join(cells).rstrip())
    share = report.local_share
    if share is not None:
        print(f"kept local by the router: {share:.0%} of its replies")
    note = local_cost_note(rates)
    if note and any(r.local and r.cost_source == "none" for r in report.rows):
        print(note)
    return 0


def _money(value: float | None) -> str:
    """4 decimals, 6 below a cent (one local reply's electricity is a few millionths)."""
    if value is None:
        return "-"
    return f"{value:.4f}" if value == 0 or value >= 0.01 else f"{value:.6f}"


def local_cost_note(rates: LocalCostRates) -> str | None:
    """Why local replies have no cost, when the settings are why (None when they are set)."""
    if not rates.tariff_per_kwh > 0:
        return ("local cost: not priced; set the electricity price per kWh (Settings, or "
                "--tariff) to price local replies from their energy")  # fmt: skip
    if not rates.estimated_watts > 0:
        return ("local cost: replies without measured energy are not priced; an estimated "
                "power draw (Settings, or --watts) prices them, labelled estimated")  # fmt: skip
    return None
