"""The MCP servers' configuration: mcp.json as Claude Desktop and LM Studio write it, checked
entry by entry; secrets kept out of the file (the real key store, on its private file here);
import, replace, remove, and always-allowed tools."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
from keyring.backends.fail import Keyring as NoKeyring

from deskllm.remote.keys import KeyStore
from deskllm.tools.mcp_config import (
    SECRET,
    McpConfig,
    McpConfigError,
    McpServer,
    name_value_pairs,
    server_from_json,
)


@pytest.fixture
def config(tmp_path) -> McpConfig:
    return McpConfig(tmp_path / "mcp.json", KeyStore(NoKeyring(), tmp_path / "keys.json"))


def test_servers_are_kept_with_their_secrets_apart(config, tmp_path):
    config.put(McpServer("search", "npx", ("-y", "search-mcp"), {"API_KEY": "k-123"}))
    config.put(McpServer("web", url="https://mcp.example/mcp",
                         headers={"Authorization": "Bearer t-9"}))  # fmt: skip
    text = (tmp_path / "mcp.json").read_text()
    assert "k-123" not in text and "t-9" not in text and SECRET in text
    assert oct((tmp_path / "mcp.json").stat().st_mode & 0o777) == "0o600"
    search, web = config.servers()
    assert search.env == {"API_KEY": "k-123"} and search.transport == "stdio"
    assert web.headers == {"Authorization": "Bearer t-9"} and web.transport == "http"
    removed = config.remove("search")
    assert removed.name == "search" and [s.name for s in config.servers()] == ["web"]
    assert "k-123" not in (tmp_path / "keys.json").read_text()  # its secret went with it


def test_import_reads_another_apps_file_and_keeps_what_is_there(config, tmp_path):
    config.put(McpServer("time", "uvx", ("mcp-server-time",)))
    other = tmp_path / "claude_desktop_config.json"
    other.write_text(json.dumps({"mcpServers": {
        "time": {"command": "docker", "args": ["run", "time"]},
        "fs": {"command": "npx", "args": ["-y", "@modelcontextprotocol/server-filesystem", "/"]},
    }}))  # fmt: skip
    assert config.import_file(other) == ["fs"]
    assert config.get("time").command == "uvx"
    assert config.import_file(other, replace_existing=True) == ["time", "fs"]
    assert config.get("time").command == "docker"


@pytest.mark.parametrize(("entry", "why"), [
    ({}, "either command"),
    ({"command": "a", "url": "http://x"}, "either command"),
    ({"command": "a", "args": "b"}, "args must be a list"),
    ({"command": "a", "env": {"K": 1}}, "env must map"),
    ({"url": "ftp://x"}, "url must start with"),
    ({"command": "a", "alwaysAllow": "t"}, "alwaysAllow"),
])  # fmt: skip
def test_bad_entries_are_refused_with_the_reason(entry, why):
    with pytest.raises(McpConfigError, match=why):
        server_from_json("s", entry)
    with pytest.raises(McpConfigError, match="a server name"):
        server_from_json("bad name", {"command": "a"})


def test_a_damaged_file_says_so(config, tmp_path):
    (tmp_path / "mcp.json").write_text("{not json")
    with pytest.raises(McpConfigError, match="not valid JSON"):
        config.servers()


def test_always_allowed_tools_persist(config):
    config.put(McpServer("time", "uvx", ("mcp-server-time",)))
    config.update("time", lambda s: replace(s, always_allow=("get_current_time",)))
    assert config.get("time").always_allow == ("get_current_time",)
    assert json.loads(config.path.read_text())["mcpServers"]["time"]["alwaysAllow"] == [
        "get_current_time"]
    with pytest.raises(McpConfigError, match="no MCP server named 'nope'"):
        config.get("nope")


def test_name_value_pairs_keep_what_follows_the_first_equals_and_name_a_bad_item():
    assert name_value_pairs(["A=1", " B =x=y", "C="], str) == {"A": "1", "B": "x=y", "C": ""}
    for bad in ("novalue", "=value", "  =v"):
        with pytest.raises(McpConfigError, match=f"bad: {bad}"):
            name_value_pairs(["OK=1", bad], lambda item: f"bad: {item}")
