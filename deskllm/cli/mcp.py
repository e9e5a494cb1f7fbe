"""`deskllm mcp`: the MCP servers the chat may use (add, import, remove, list), and the
terminal side of a chat with tools (`deskllm chat --mcp`): consent asked on the terminal,
each call and its result on stderr, the answer on stdout."""

from __future__ import annotations

import argparse
import functools
import json
import sys
import threading
from collections.abc import Callable
from pathlib import Path

from deskllm.tools.advice import small_model_note
from deskllm.tools.mcp_config import McpConfig, McpConfigError, McpServer, name_value_pairs

Command = Callable[[argparse.Namespace], int]


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("mcp", help="MCP servers whose tools the chat may use")
    actions = p.add_subparsers(dest="mcp_action", metavar="ACTION", required=True)
    add = actions.add_parser(
        "add", help="add a server: NAME -- COMMAND [ARGS...] (stdio) or NAME --url URL",
        usage="deskllm mcp add NAME [--env K=V]... -- COMMAND [ARGS...]\n"
              "       deskllm mcp add NAME --url URL [--header K=V]...",
    )  # fmt: skip
    add.add_argument("name")
    add.add_argument("--url", default=None, help="a Streamable HTTP server's address")
    add.add_argument("--env", action="append", default=[], metavar="K=V",
                     help="an environment variable for a stdio server (kept in the keyring)")
    add.add_argument("--header", action="append", default=[], metavar="K=V",
                     help="an HTTP header for a URL server (kept in the keyring)")
    add.add_argument("--replace", action="store_true", help="replace a server of that name")
    add.add_argument("command", nargs=argparse.REMAINDER,
                     help="after --: the program that runs the server, and its arguments")
    add.set_defaults(func=cmd_add)
    imp = actions.add_parser("import", help="add the servers of another app's mcp.json "
                                            "(Claude Desktop, LM Studio, Cursor)")  # fmt: skip
    imp.add_argument("file", type=Path)
    imp.add_argument("--replace", action="store_true", help="replace servers of the same name")
    imp.set_defaults(func=cmd_import)
    rm = actions.add_parser("remove", aliases=["rm"], help="forget a server")
    rm.add_argument("name")
    rm.set_defaults(func=cmd_remove)
    ls = actions.add_parser("list", aliases=["ls"],
                            help="the servers, started to list their tools (or why not)")
    ls.add_argument("--json", action="store_true", help="one JSON object")
    ls.set_defaults(func=cmd_list)


def config() -> McpConfig:
    from deskllm.remote.keys import KeyStore

    return McpConfig(secrets=KeyStore())


def _pairs(items: list[str], what: str) -> dict[str, str]:
    return name_value_pairs(items, lambda item: f"--{what} {item!r}: write it as NAME=VALUE")


def _config_errors(exit_code: int) -> Callable[[Command], Command]:
    """A command whose McpConfigError (a bad flag, a bad mcp.json, an unknown server) is
    printed as `deskllm: ...` and exits with `exit_code`."""

    def wrap(command: Command) -> Command:
        @functools.wraps(command)
        def run(args: argparse.Namespace) -> int:
            try:
                return command(args)
            except McpConfigError as exc:
                print(f"deskllm: {exc}", file=sys.stderr)
                return exit_code

        return run

    return wrap


@_config_errors(2)
def cmd_add(args: argparse.Namespace) -> int:
    command = [c for c in args.command if c != "--"] if args.command else []
    store = config()
    if args.name in {s.name for s in store.servers()} and not args.replace:
        raise McpConfigError(f"a server named {args.name!r} exists; add --replace to "
                             "replace it")  # fmt: skip
    if bool(args.url) == bool(command):
        raise McpConfigError("give either -- COMMAND [ARGS...] or --url URL")
    entry = {"url": args.url, "headers": _pairs(args.header, "header")} if args.url else {
        "command": command[0], "args": command[1:], "env": _pairs(args.env, "env")}
    from deskllm.tools.mcp_config import server_from_json

    server = server_from_json(args.name, entry)
    store.put(server)
    print(f"added MCP server {server.name}: {server.describe()}")
    return 0


@_config_errors(2)
def cmd_import(args: argparse.Namespace) -> int:
    added = config().import_file(args.file, replace_existing=args.replace)
    print(f"imported {len(added)} MCP server{'s' if len(added) != 1 else ''}"
          + (f": {', '.join(added)}" if added else " (the others are configured already; "
             "--replace replaces them)"))  # fmt: skip
    return 0


@_config_errors(1)
def cmd_remove(args: argparse.Namespace) -> int:
    server = config().remove(args.name)
    print(f"removed MCP server {server.name}")
    return 0


@_config_errors(2)
def cmd_list(args: argparse.Namespace) -> int:
    from deskllm.tools.mcp_hub import McpHub

    servers = config().servers()
    enabled = [s for s in servers if s.enabled]
    with McpHub(enabled) as hub:
        failures = hub.start() if enabled else {}
        tools = hub.tools()
    rows = []
    for server in servers:
        state = ("disabled" if not server.enabled else
                 "failed" if server.name in failures else "running")  # fmt: skip
        rows.append({
            "name": server.name, "transport": server.transport, "target": server.describe(),
            "state": state, "error": failures.get(server.name),
            "always_allow": list(server.always_allow),
            "tools": [{"name": t.name, "description": t.description}
                      for t in tools if t.server == server.name],
        })  # fmt: skip
    if args.json:
        print(json.dumps({"servers": rows}, indent=2))
        return 0
    if not rows:
        print("no MCP servers; add one with `deskllm mcp add NAME -- COMMAND [ARGS...]`")
    for row in rows:
        print(f"{row['name']}  ({row['transport']}: {row['target']})  {row['state']}")
        if row["error"]:
            print(f"  {row['error']}")
        for tool in row["tools"]:
            allow = "  [always allowed]" if tool["name"] in row["always_allow"] else ""
            print(f"  - {tool['name']}: {tool['description'].splitlines()[0] if tool['description'] else ''}{allow}")  # noqa: E501
    return 0


def tool_chat(args: argparse.Namespace, client, model_path: str | None, sampling) -> int:
    """`deskllm chat --mcp NAME[,NAME]`: the servers started, each call asked on the terminal
    (unless --allow or "always" before), one message (--prompt) or a REPL. Exit 1 when a
    server failed to start."""
    from deskllm.engine.domain import ChatMessage
    from deskllm.tools.mcp_hub import McpHub
    from deskllm.tools.tool_loop import run_tool_turn

    store = config()
    try:
        servers = [store.get(name.strip()) for name in args.mcp.split(",") if name.strip()]
    except McpConfigError as exc:
        print(f"deskllm: {exc}", file=sys.stderr)
        return 2
    allowed = set(args.allow) | {t for s in servers for t in s.always_allow}
    failed = 0
    with McpHub(servers, call_timeout_s=args.tool_timeout) as hub:
        for name, why in hub.start().items():
            failed += 1
            print(f"deskllm: the MCP server {name} failed to start: {why}; the chat goes on "
                  "without it", file=sys.stderr)  # fmt: skip
        tools = hub.tools()
        print(f"[tools: {', '.join(t.name for t in tools) or 'none'}]", file=sys.stderr)
        if tools and model_path and (note := small_model_note(model_path)):
            print(f"[note: {note}]", file=sys.stderr)
        if args.tool_choice == "required" and not tools:
            print("deskllm: --tool-choice required, but no tool is available", file=sys.stderr)
            return 1
        messages = [ChatMessage("system", args.system)] if args.system else []
        conversation = f"mcp-{threading.get_ident()}"

        def consent(call) -> str:
            return ask_consent(call, store)

        def on_result(call, outcome) -> None:
            mark = "error" if outcome.is_error else "result"
            print(f"[{mark}] {outcome.text}", file=sys.stderr, flush=True)

        def on_call(call, decision) -> None:
            print(f"[call] {call.tool.server}/{call.name} {json.dumps(call.arguments)}"
                  f"{' — denied' if decision == 'deny' else ''}", file=sys.stderr, flush=True)

        from deskllm.cli.chat import user_messages

        for text in user_messages(args.prompt):
            messages.append(ChatMessage("user", text))
            stop = threading.Event()
            try:
                turn = run_tool_turn(
                    client, conversation, messages, sampling, hub, consent,
                    tool_choice=args.tool_choice, allowed=allowed,
                    on_text=lambda t: (sys.stdout.write(t), sys.stdout.flush()),
                    on_call=on_call, on_result=on_result, cancel=stop,
                )  # fmt: skip
            except KeyboardInterrupt:  # Ctrl+C: this turn ends, a running tool is abandoned
                stop.set()
                client.cancel()
                print("\n[stopped]", file=sys.stderr)
                messages.pop()
                continue
            print()
            if turn.error:
                print(f"deskllm: {turn.error}", file=sys.stderr)
                return 1
            if turn.step_limit_reached:
                print("[the model kept calling tools: stopped at the step limit]",
                      file=sys.stderr)  # fmt: skip
            messages += turn.messages
    return 1 if failed else 0


def ask_consent(call, store: McpConfig) -> str:
    """Allow once / always / deny, asked on the terminal (its tty, even when stdin is a
    pipe); with no terminal, denied. "Always" is kept in mcp.json for that server's tool."""
    question = (f"Allow {call.tool.server}/{call.name} {json.dumps(call.arguments)}? "
                "[o]nce / [a]lways / [d]eny: ")  # fmt: skip
    try:
        with open("/dev/tty", "r+", encoding="utf-8") as tty:
            tty.write(question)
            tty.flush()
            answer = tty.readline().strip().lower()
    except OSError:
        print(f"[{call.name}: no terminal to ask; denied (pre-approve it with --allow "
              f"{call.name})]", file=sys.stderr)  # fmt: skip
        return "deny"
    if answer.startswith("a"):
        store.allow_always(call.tool.server, call.tool.remote_name)
        return "always"
    return "once" if answer.startswith("o") or answer == "y" else "deny"


__all__ = ["McpServer", "register", "tool_chat"]
