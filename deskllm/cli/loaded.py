"""`deskllm ps` and `deskllm unload`: the models a running `deskllm serve` holds, and letting
go of them. They ask the server over its own API (`GET /v1/models`; Ollama's `keep_alive: 0`
to unload), as `ollama ps` and `ollama stop` do."""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from deskllm.server.config import DEFAULT_PORT


def register(sub: argparse._SubParsersAction) -> None:
    ps = sub.add_parser("ps", help="the models a running `deskllm serve` has loaded")
    ps.add_argument("--json", action="store_true", help="one JSON object")
    _server_args(ps)
    ps.set_defaults(func=cmd_ps)
    unload = sub.add_parser("unload", help="unload a model a running `deskllm serve` loaded "
                                           "on demand")  # fmt: skip
    which = unload.add_mutually_exclusive_group(required=True)
    which.add_argument("model", nargs="?", help="the model's id (as `deskllm ps` lists it)")
    which.add_argument("--all", action="store_true",
                       help="every model loaded on demand (the served one stays)")  # fmt: skip
    _server_args(unload)
    unload.set_defaults(func=cmd_unload)


def _server_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--url", default=f"http://127.0.0.1:{DEFAULT_PORT}",
                   help="the server (default %(default)s)")  # fmt: skip
    p.add_argument("--api-key-file", type=Path, default=None, metavar="PATH",
                   help="the server's key (default: DESKLLM_API_KEY, else the key `deskllm "
                        "serve` stored in the deskllm home, if any)")  # fmt: skip


class ServerError(RuntimeError):
    """The server could not be asked, or refused: the message says why and what to do."""


def _key(args: argparse.Namespace) -> str | None:
    from deskllm.server.api_key import ENV_VAR, key_path, read_key_file

    if args.api_key_file is not None:
        return read_key_file(args.api_key_file)
    if os.environ.get(ENV_VAR):
        return os.environ[ENV_VAR]
    path = key_path()
    return path.read_text(encoding="utf-8").strip() if path.is_file() else None


def _call(args: argparse.Namespace, method: str, path: str, body: dict | None = None) -> dict:
    import httpx2

    key = _key(args)
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    url = args.url.rstrip("/") + path
    try:
        answer = httpx2.request(method, url, json=body, headers=headers, timeout=120)
    except httpx2.HTTPError as exc:
        raise ServerError(f"no server answers at {args.url} ({exc}); start one with `deskllm "
                          "serve` or name it with --url") from None  # fmt: skip
    try:
        data = answer.json()
    except ValueError:
        data = {}
    if answer.status_code >= 400:
        error = data.get("error")
        message = error.get("message") if isinstance(error, dict) else error
        raise ServerError(f"{args.url} answered {answer.status_code}: "
                          f"{message or answer.text[:200]}")  # fmt: skip
    return data


def loaded_models(args: argparse.Namespace) -> list[dict]:
    """The loaded models as /v1/models gives them: id, memory, slots, keep-alive left."""
    cards = _call(args, "GET", "/v1/models").get("data", [])
    return [
        {"id": c["id"], "memory_bytes": c.get("memory_bytes"), "slots": c.get("slots"),
         "context_length": c.get("context_length"),
         "keep_alive_left_s": c.get("keep_alive_left_s"), "pinned": bool(c.get("pinned"))}
        for c in cards if c.get("loaded") and c.get("owned_by", "deskllm") == "deskllm"
        and c["id"] != "auto"
    ]  # fmt: skip


def _expires(model: dict) -> str:
    left = model["keep_alive_left_s"]
    if model["pinned"]:
        return "never (served)"
    if left is None:
        return "never"
    return f"in {left / 60:.0f} min" if left >= 90 else f"in {left:.0f} s"


def cmd_ps(args: argparse.Namespace) -> int:
    try:
        models = loaded_models(args)
    except ServerError as exc:
        print(f"deskllm: {exc}", file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps({"models": models}, indent=2))
        return 0
    rows = [("MODEL", "MEMORY", "SLOTS", "CONTEXT", "UNLOADS")]
    for m in models:
        memory = f"{m['memory_bytes'] / (1 << 30):.2f} GiB" if m["memory_bytes"] else "?"
        rows.append((m["id"], memory, str(m["slots"] or "?"), str(m["context_length"] or "?"),
                     _expires(m)))  # fmt: skip
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    for row in rows:
        print("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip())
    return 0


def cmd_unload(args: argparse.Namespace) -> int:
    try:
        if args.all:
            names = [m["id"] for m in loaded_models(args) if not m["pinned"]]
        else:
            names = [args.model]
        for name in names:
            _call(args, "POST", "/api/generate", {"model": name, "keep_alive": 0,
                                                  "stream": False})  # fmt: skip
            print(f"unloaded {name}")
    except ServerError as exc:
        print(f"deskllm: {exc}", file=sys.stderr)
        return 1
    if args.all and not names:
        print("nothing to unload: only the served model is loaded (it stays)")
    return 0
