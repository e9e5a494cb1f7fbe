"""An MCP server written with the official SDK (MCPServer, FastMCP's successor), served over
Streamable HTTP for the tool tests: `count` counts its calls (in a file, so a test can tell
that a denied call never ran), `hang` never answers, `flood` returns 10 MB, `crash` ends the
server mid-call.

    python tests/mcp_test_server.py PORT COUNT_FILE [TOOL,TOOL...]

The optional third argument offers only those tools (a model held to "any call" then has one
to choose).
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

from mcp.server.mcpserver import MCPServer

port, count_file = int(sys.argv[1]), Path(sys.argv[2])
only = {name for name in (sys.argv[3] if len(sys.argv) > 3 else "").split(",") if name}
server = MCPServer("deskllm-test")


def offered(function):
    return server.tool()(function) if not only or function.__name__ in only else function


@offered
def count(label: str) -> str:
    """Count a call and say how many there were."""
    n = int(count_file.read_text() or 0) + 1 if count_file.exists() else 1
    count_file.write_text(str(n))
    return f"{label}: call number {n}"


@offered
def hang(seconds: float = 3600) -> str:
    """Never answer (sleeps)."""
    time.sleep(seconds)
    return "woke up"


@offered
def flood(megabytes: int = 10) -> str:
    """Return a very long text."""
    return "x" * (megabytes << 20)


@offered
def crash() -> str:
    """End the server while the call runs."""
    sys.stderr.write("test server: crashing on purpose\n")
    sys.stderr.flush()
    os._exit(3)


server.run("streamable-http", host="127.0.0.1", port=port)
