"""The MCP servers the user configured, kept as LM Studio and Claude Desktop keep them: an
`mcp.json` with `mcpServers` (`command` / `args` / `env` for a server started over stdio, `url`
/ `headers` for Streamable HTTP) in the deskllm home, plus deskllm's `enabled` and the tools
the user chose to always allow. Secret values of `env` and `headers` go to the OS keyring (or
the private key file, as remote API keys do) and the file keeps only their names."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from deskllm import paths

SECRET = "<keyring>"  # in mcp.json, in place of a value kept in the keyring
_NAME_OK = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-.")


class McpConfigError(ValueError):
    """A server entry that cannot be used, or a file that cannot be read: says which and why."""


def name_value_pairs(items: Iterable[str], wrong: Callable[[str], str]) -> dict[str, str]:
    """NAME=VALUE items (a server's environment or headers) as a dict; an item without a
    name or "=" raises McpConfigError(wrong(item)), worded for where it was written."""
    pairs = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise McpConfigError(wrong(item))
        pairs[key.strip()] = value
    return pairs


@dataclass(frozen=True)
class McpServer:
    name: str
    command: str | None = None  # stdio: the program and its arguments
    args: tuple[str, ...] = ()
    env: dict[str, str] = field(default_factory=dict)
    url: str | None = None  # Streamable HTTP
    headers: dict[str, str] = field(default_factory=dict)
    enabled: bool = True
    always_allow: tuple[str, ...] = ()  # tools run without asking

    @property
    def transport(self) -> str:
        return "http" if self.url else "stdio"

    def describe(self) -> str:
        if self.url:
            return self.url
        return " ".join([self.command or "", *self.args]).strip()


def server_from_json(name: str, entry: Any) -> McpServer:
    """One `mcpServers` entry. Raises McpConfigError with the reason."""
    if not name or not set(name) <= _NAME_OK:
        raise McpConfigError(f"{name!r}: a server name is letters, digits, '_', '-' and '.'")
    if not isinstance(entry, dict):
        raise McpConfigError(f"{name}: the entry is not an object")
    command, url = entry.get("command"), entry.get("url") or entry.get("serverUrl")
    if bool(command) == bool(url):
        raise McpConfigError(f"{name}: give either command (stdio) or url (Streamable HTTP)")
    args, env, headers = entry.get("args", []), entry.get("env", {}), entry.get("headers", {})
    if not isinstance(args, list) or not all(isinstance(a, str) for a in args):
        raise McpConfigError(f"{name}: args must be a list of strings")
    for what, mapping in (("env", env), ("headers", headers)):
        if not isinstance(mapping, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in mapping.items()
        ):
            raise McpConfigError(f"{name}: {what} must map names to strings")
    if url is not None and not (isinstance(url, str) and url.startswith(("http://", "https://"))):
        raise McpConfigError(f"{name}: url must start with http:// or https://")
    allow = entry.get("alwaysAllow", [])
    if not isinstance(allow, list) or not all(isinstance(a, str) for a in allow):
        raise McpConfigError(f"{name}: alwaysAllow must be a list of tool names")
    return McpServer(name, command, tuple(args), dict(env), url, dict(headers),
                     bool(entry.get("enabled", True)), tuple(allow))  # fmt: skip


def server_to_json(server: McpServer) -> dict[str, Any]:
    entry: dict[str, Any] = {}
    if server.url:
        entry["url"] = server.url
        if server.headers:
            entry["headers"] = server.headers
    else:
        entry["command"] = server.command
        entry["args"] = list(server.args)
        if server.env:
            entry["env"] = server.env
    if not server.enabled:
        entry["enabled"] = False
    if server.always_allow:
        entry["alwaysAllow"] = list(server.always_allow)
    return entry


class McpConfig:
    """The servers in `path` (default: mcp.json in the deskllm home). `secrets` keeps the
    values of env and headers (KeyStore-like: set/get/delete by a name); None keeps them in
    the file itself (tests, or a machine without a keyring chooses the private file)."""

    def __init__(self, path: Path | None = None, secrets: Any | None = None) -> None:
        self.path = path or paths.home() / "mcp.json"
        self.secrets = secrets

    def servers(self) -> list[McpServer]:
        """Every configured server, secrets filled in. Raises McpConfigError for a file that is
        not JSON or an entry that is not valid."""
        data = self._read()
        found = []
        for name, entry in data.get("mcpServers", {}).items():
            server = server_from_json(name, entry)
            found.append(replace(server, env=self._filled(name, "env", server.env),
                                 headers=self._filled(name, "headers", server.headers)))
        return found

    def get(self, name: str) -> McpServer:
        for server in self.servers():
            if server.name == name:
                return server
        known = ", ".join(s.name for s in self.servers()) or "none"
        raise McpConfigError(f"no MCP server named {name!r} (configured: {known}); add it with "
                             "`deskllm mcp add`")  # fmt: skip

    def put(self, server: McpServer) -> None:
        """Add or replace `server`; its env and header values go to the secret store."""
        data = self._read()
        entry = server_to_json(server)
        for what in ("env", "headers"):
            if what in entry and self.secrets is not None:
                for key, value in entry[what].items():
                    self.secrets.set(_secret_name(server.name, what, key), value)
                entry[what] = dict.fromkeys(entry[what], SECRET)
        data.setdefault("mcpServers", {})[server.name] = entry
        self._write(data)

    def remove(self, name: str) -> McpServer:
        server = self.get(name)
        data = self._read()
        del data["mcpServers"][name]
        self._write(data)
        if self.secrets is not None:
            for what, mapping in (("env", server.env), ("headers", server.headers)):
                for key in mapping:
                    self.secrets.delete(_secret_name(name, what, key))
        return server

    def update(self, name: str, change: Callable[[McpServer], McpServer]) -> McpServer:
        server = change(self.get(name))
        self.put(server)
        return server

    def allow_always(self, name: str, tool: str) -> McpServer:
        """Run server `name`'s `tool` (as the server names it) without asking from now on."""
        return self.update(name, lambda s: replace(s, always_allow=tuple(
            sorted({*s.always_allow, tool}))))  # fmt: skip

    def import_file(self, path: Path, replace_existing: bool = False) -> list[str]:
        """The servers of another app's mcp.json (Claude Desktop, LM Studio, Cursor): the names
        added. A name already configured is kept unless `replace_existing`."""
        try:
            data = json.loads(Path(path).read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise McpConfigError(f"{path}: cannot read it as JSON ({exc})") from None
        entries = data.get("mcpServers") if isinstance(data, dict) else None
        if not isinstance(entries, dict):
            raise McpConfigError(f"{path}: no \"mcpServers\" object in it")
        servers = [server_from_json(name, entry) for name, entry in entries.items()]
        existing = {s.name for s in self.servers()}
        added = []
        for server in servers:
            if server.name in existing and not replace_existing:
                continue
            self.put(server)
            added.append(server.name)
        return added

    def _filled(self, name: str, what: str, mapping: dict[str, str]) -> dict[str, str]:
        if self.secrets is None:
            return mapping
        return {k: (self.secrets.get(_secret_name(name, what, k)) or "") if v == SECRET else v
                for k, v in mapping.items()}  # fmt: skip

    def _read(self) -> dict[str, Any]:
        try:
            text = self.path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return {"mcpServers": {}}
        except (OSError, UnicodeDecodeError) as exc:
            raise McpConfigError(f"{self.path}: cannot read it ({exc})") from None
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise McpConfigError(
                f"{self.path} is not valid JSON ({exc}); fix or delete it") from None
        if not isinstance(data, dict) or not isinstance(data.get("mcpServers", {}), dict):
            raise McpConfigError(f"{self.path}: \"mcpServers\" must be an object")
        return data

    def _write(self, data: dict[str, Any]) -> None:
        tmp = self.path.with_suffix(".tmp")
        paths.write_private_text(tmp, json.dumps(data, indent=2) + "\n")
        tmp.replace(self.path)  # whole or not at all


def _secret_name(server: str, what: str, key: str) -> str:
    return f"mcp:{server}:{what}:{key}"
