"""`deskllm remote add | list | test | remove`: remote OpenAI-compatible engines, and the
NAME/MODEL targets `deskllm chat --model` accepts."""

from __future__ import annotations

import argparse
import json
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from sqlite_utils import Database

from deskllm.database import open_database
from deskllm.engine.errors import EngineError
from deskllm.remote.client import RemoteClient
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
from deskllm.remote.pool import RemotePool
from deskllm.remote.presets import DEFAULT_PRESET, PRESETS
from deskllm.remote.remote_model import RemoteModel
from deskllm.store.remote_endpoints import EndpointNotFound, EndpointRegistry

POOL_NAME = "*"  # --model */MODEL: every registered endpoint that serves MODEL


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


def client_for(endpoint: Endpoint, keys: KeyStore) -> RemoteClient:
    return RemoteClient(endpoint, keys.get(endpoint.name))


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


def _probe(endpoint: Endpoint, keys: KeyStore) -> tuple[list[str], str | None]:
    """The endpoint's models, or the reason it did not answer."""
    with client_for(endpoint, keys) as client:
        try:
            return client.list_models(), None
        except EngineError as exc:
            return [], exc.reason


def cmd_list(args: argparse.Namespace) -> int:
    endpoints = EndpointRegistry(open_database()).all()
    keys = KeyStore()
    with ThreadPoolExecutor(max_workers=max(1, min(8, len(endpoints)))) as workers:
        probes = list(workers.map(lambda e: _probe(e, keys), endpoints))
    rows = [
        {"name": e.name, "url": e.base_url, "models": models, "healthy": error is None,
         "allow_routing": e.allow_routing}
        for e, (models, error) in zip(endpoints, probes, strict=True)
    ]  # fmt: skip
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    if not rows:
        print("no remote endpoints; add one with `deskllm remote add NAME URL`")
        return 0
    for row, (_, error) in zip(rows, probes, strict=True):
        health = "healthy" if row["healthy"] else "unhealthy"
        routing = "routing allowed" if row["allow_routing"] else "no routing"
        print(f"{row['name']}  {row['url']}  {health}  {routing}")
        print(f"    models: {', '.join(row['models'])}" if row["models"] else f"    {error}")
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
    models, error = _probe(endpoint, keys)
    if error is not None:
        print(f"deskllm: {error}", file=sys.stderr)
        return 1
    print(f"ok: {endpoint.name} serves {len(models)} model(s):")
    for model in models:
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


def remote_model_for(db: Database, spec: str | None) -> RemoteModel | None:
    """`--model NAME/MODEL` (a registered endpoint) or `*/MODEL` (a pool of every endpoint
    serving MODEL) → a RemoteModel; None for anything else, and for an existing file."""
    if not spec or "/" not in spec or Path(spec).exists():
        return None
    name, model = spec.split("/", 1)
    registry, keys = EndpointRegistry(db), KeyStore()
    if name != POOL_NAME:
        endpoint = registry.find(name)
        if endpoint is None:
            return None
        return RemoteModel(model, client_for(endpoint, keys), spec)
    endpoints = registry.all()
    with ThreadPoolExecutor(max_workers=max(1, min(8, len(endpoints)))) as workers:
        probes = list(workers.map(lambda e: _probe(e, keys), endpoints))
    serving = [e for e, (models, _) in zip(endpoints, probes, strict=True) if model in models]
    if not serving:
        raise SystemExit(f"deskllm: no registered endpoint that answers serves {model!r}")
    return RemoteModel(model, RemotePool(model, [client_for(e, keys) for e in serving]), spec)
