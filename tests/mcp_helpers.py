"""MCP servers for the tool tests: `mcp-server-time` from PyPI, and the SDK-written test
server (tests/mcp_test_server.py) on Streamable HTTP."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import httpx2
from server_helpers import free_port

from deskllm.tools.mcp_config import McpServer

BIN = Path(sys.executable).parent
TIME = McpServer("time", str(BIN / "mcp-server-time"), ("--local-timezone", "UTC"))
TEST_SERVER = Path(__file__).parent / "mcp_test_server.py"


def start_test_server(counter: Path, only: str = "") -> tuple[subprocess.Popen, str]:
    """tests/mcp_test_server.py on a free port, once it answers; its process and URL.
    `only`: the tools it offers, comma-separated (all by default)."""
    port = free_port()
    process = subprocess.Popen([sys.executable, str(TEST_SERVER), str(port), str(counter), only],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}/mcp"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            httpx2.get(url, timeout=2)
            break
        except httpx2.TransportError:
            time.sleep(0.2)
    return process, url
