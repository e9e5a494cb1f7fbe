"""`deskllm remote add | list | test | remove | price | routing`: remote OpenAI-compatible
engines (the NAME/MODEL and */MODEL names every face accepts resolve in deskllm.backends)."""

from __future__ import annotations

import argparse
import json
import sys

from deskllm.backends.routing import probe, probe_all
from deskllm.database import open_database
from deskllm.remote.endpoint import (
    DEFAULT_CONNECT_TIMEOUT_S,
    DEFAULT_READ_TIMEOUT_S,
    Endpoint,
    EndpointInvalid,
    ModelPrice,
    check_name,
    resolve_url,
)
from deskllm.remote.keys import KeyStore
from deskllm.remote.presets import DEFAULT_PRESET, PRESETS
from deskllm.store.remote_endpoints import EndpointNotFound, EndpointRegistry


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "remote", help="remote OpenAI-compatible engines (add, list, test, remove, price, routing)"
    )
    rsub = p.add_subparsers(dest="remote_command", metavar="ACTION", required=True)

    add = rsub.add_parser("add", help="register an endpoint (its key goes to the OS keyring)")
    add.add_argument("name", help="a short name: letters, digits, '.', '_', '-'")
    add.add_argument(
        "url",
        nargs="?",
        default=None,
        help="base URL, e.g. http://host:8080/v1 (default: the preset's)",
    )
    add.add_argument(
        "--preset",
        choices=sorted(PRESETS),
        default=DEFAULT_PRESET,
        help="the kind of server: a default address and notes",
    )
    add.add_argument(
        "--key-stdin",
        action="store_true",
        help="read the API key from standard input (never from the command line)",
    )
    add.add_argument(
        "--allow-routing",
        action="store_true",
        help="let the router send requests here (off unless given)",
    )
    add.add_argument(
        "--connect-timeout",
        type=float,
        default=DEFAULT_CONNECT_TIMEOUT_S,
        metavar="S",
        help="seconds to wait for a connection",
    )
    add.add_argument(
        "--read-timeout",
        type=float,
        default=DEFAULT_READ_TIMEOUT_S,
        metavar="S",
        help="seconds to wait for the next bytes of an answer",
    )
    add.add_argument("--replace", action="store_true", help="replace an endpoint of that name")
    add.set_defaults(func=cmd_add)

    ls = rsub.add_parser("list", help="registered endpoints, their models and health")
    ls.add_argument("--json", action="store_true", help="a JSON list on stdout")
    ls.set_defaults(func=cmd_list)

    test = rsub.add_parser("test", help="connect to an endpoint and list its models")
    test.add_argument("name")
    test.set_defaults(func=cmd_test)

    price = rsub.add_parser(
        "price", help="set what a model costs on an endpoint, per million tokens"
    )
    price.add_argument("name")
    price.add_argument("model", help="the model name as the endpoint lists it")
    price.add_argument("--input", type=float, required=True, metavar="X",
                       help="price per million prompt (input) tokens")  # fmt: skip
    price.add_argument("--output", type=float, required=True, metavar="Y",
                       help="price per million completion (output) tokens")  # fmt: skip
    price.set_defaults(func=cmd_price)

    routing = rsub.add_parser(
        "routing", help="allow or forbid `deskllm chat --model auto` to send requests here"
    )
    routing.add_argument("name")
    routing.add_argument("state", choices=("on", "off"))
    routing.set_defaults(func=cmd_routing)

    rm = rsub.add_parser("remove", help="forget an endpoint and its key")
    rm.add_argument("name")
    rm.set_defaults(func=cmd_remove)  # fmt: skip


def cmd_add(args: argparse.Namespace) -> int:
    try:
        endpoint = Endpoint(
            name=check_name(args.name),
            base_url=resolve_url(args.url, args.preset),
            preset=args.preset,
            allow_routing=args.allow_routing,
            connect_timeout_s=_positive(args.connect_timeout, "--connect-timeout"),
            read_timeout_s=_positive(args.read_timeout, "--read-timeout"),
        )
    except EndpointInvalid as exc:
        print(f"deskllm: {exc}", file=sys.stderr)
        return 2
    key = None
    if args.key_stdin:
        key = sys.stdin.readline().strip()
        if not key:
            print("deskllm: --key-stdin: standard input held no key", file=sys.stderr)
            return 2
    registry = EndpointRegistry(open_database())
    try:
        registry.add(endpoint, replace_existing=args.replace)
    except EndpointInvalid as exc:
        print(f"deskllm: {exc}", file=sys.stderr)
        return 1
    keys = KeyStore()
    where = keys.set(endpoint.name, key) if key else None
    if key is None:
        keys.delete(endpoint.name)  # a replaced endpoint does not keep an old key
    routing = "routing allowed" if endpoint.allow_routing else "routing not allowed"
    print(f"added {endpoint.name} at {endpoint.base_url} ({endpoint.preset}, {routing}); "
          + (f"its key is kept in {where}" if where else "no key"))  # fmt: skip
    return 0


def _positive(value: float, flag: str) -> float:
    if not value > 0:
        raise EndpointInvalid(f"{flag} must be more than 0 seconds")
    return value


def cmd_list(args: argparse.Namespace) -> int:
    endpoints = EndpointRegistry(open_database()).all()
    keys = KeyStore()
    probes = probe_all(endpoints, keys)
    rows = [
        {"name": e.name, "url": e.base_url, "models": list(p.models), "healthy": p.healthy,
         "allow_routing": e.allow_routing}
        for e, p in zip(endpoints, probes, strict=True)
    ]  # fmt: skip
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    if not rows:
        print("no remote endpoints; add one with `deskllm remote add NAME URL`")
        return 0
    for row, p in zip(rows, probes, strict=True):
        health = "healthy" if row["healthy"] else "unhealthy"
        routing = "routing allowed" if row["allow_routing"] else "no routing"
        print(f"{row['name']}  {row['url']}  {health}  {routing}")
        print(f"    models: {', '.join(row['models'])}" if row["models"] else f"    {p.error}")
    return 0


def cmd_test(args: argparse.Namespace) -> int:
    try:
        endpoint = EndpointRegistry(open_database()).get(args.name)
    except EndpointNotFound as exc:
        print(f"deskllm: {exc}", file=sys.stderr)
        return 1
    keys = KeyStore()
    print(f"connecting to {endpoint.name} at {endpoint.base_url} "
          f"({'with' if keys.get(endpoint.name) else 'without'} an API key)…")  # fmt: skip
    answer = probe(endpoint, keys.get(endpoint.name))
    if answer.error is not None:
        print(f"deskllm: {answer.error}", file=sys.stderr)
        return 1
    print(f"ok: {endpoint.name} serves {len(answer.models)} model(s):")
    for model in answer.models:
        print(f"    {endpoint.name}/{model}")
    return 0


def cmd_remove(args: argparse.Namespace) -> int:
    removed = EndpointRegistry(open_database()).remove(args.name)
    KeyStore().delete(args.name)
    if not removed:
        print(f"deskllm: no remote endpoint named {args.name!r}", file=sys.stderr)
        return 1
    print(f"removed {args.name} and its key")
    return 0


def cmd_price(args: argparse.Namespace) -> int:
    if args.input < 0 or args.output < 0:
        print("deskllm: prices cannot be negative", file=sys.stderr)
        return 2
    try:
        EndpointRegistry(open_database()).set_price(
            args.name, args.model, ModelPrice(args.input, args.output)
        )
    except EndpointNotFound as exc:
        print(f"deskllm: {exc}", file=sys.stderr)
        return 1
    print(f"{args.name}/{args.model}: {args.input:g} per million input tokens, "
          f"{args.output:g} per million output tokens")  # fmt: skip
    return 0


def cmd_routing(args: argparse.Namespace) -> int:
    try:
        EndpointRegistry(open_database()).set_allow_routing(args.name, args.state == "on")
    except EndpointNotFound as exc:
        print(f"deskllm: {exc}", file=sys.stderr)
        return 1
    print(f"{args.name}: routing {'allowed' if args.state == 'on' else 'not allowed'}")
    return 0
