"""Command line: `deskllm hw | chat | models | bench | ...`. A thin face on the Qt-free core."""

from __future__ import annotations

import argparse
import importlib
import logging
import sys

# Each module registers its own subcommands: register(subparsers) sets `func` on its parsers.
COMMAND_MODULES = (
    "deskllm.cli.hw",
    "deskllm.cli.chat",
    "deskllm.cli.models",
    "deskllm.cli.bench",
    "deskllm.cli.quality",
    "deskllm.cli.catalog",
    "deskllm.cli.download",
    "deskllm.cli.plan",
    "deskllm.cli.recommend",
    "deskllm.cli.serve",
    "deskllm.cli.loaded",
    "deskllm.cli.mcp",
    "deskllm.cli.docs",
    "deskllm.cli.remote",
    "deskllm.cli.usage",
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="deskllm", description=__doc__)
    parser.add_argument("-v", "--verbose", action="store_true", help="log debug messages")
    parser.add_argument(
        "--self-test", action="store_true", help="probe, load the starter model, exit 0 if ok"
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMAND_MODULES:
        importlib.import_module(name).register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.WARNING,
        format="%(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    if args.self_test:
        from deskllm.cli.self_test import run_self_test

        return run_self_test()
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    return int(args.func(args) or 0)
