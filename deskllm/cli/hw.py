"""`deskllm hw`: a readable hardware summary, or `--json` for one JSON object."""

from __future__ import annotations

import argparse
import json
import sys


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the `hw` subcommand."""
    parser = subparsers.add_parser(
        "hw",
        help="show what this machine can run models on",
        description="Probe CPU, memory, GPUs (NVML, Vulkan, OpenCL, Metal), the engine's "
        "devices and memory bandwidth, and explain what is or is not used.",
    )
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument(
        "--refresh-bandwidth",
        action="store_true",
        help="measure memory bandwidth again instead of using this machine's cached result",
    )
    parser.set_defaults(func=run_hw)


def run_hw(args: argparse.Namespace) -> int:
    """Print the report. Exit code 0: a failing probe is part of the report, not a failure."""
    from deskllm.hardware import probe_hardware, report_to_dict
    from deskllm.hardware.summary import format_summary
    from deskllm.planner.measured_configs import cite_measurements

    report = probe_hardware(refresh_bandwidth=args.refresh_bandwidth)
    report = cite_measurements(report)  # what `deskllm bench --suite` measured here
    if args.json:
        from deskllm.hardware.energy import energy_report

        json.dump(report_to_dict(report) | {"energy": energy_report()}, sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        print(format_summary(report))
    return 0
