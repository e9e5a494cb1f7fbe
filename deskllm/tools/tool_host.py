"""The MCP servers of a long-running app (the window): each started the first time a chat
that may use it starts a turn, kept running for the chats after it, stopped with the app. A
server that failed to start or died is started again by the next turn that uses it. A turn
gets a ToolBox: the tools of its conversation's servers, named as one hub names them."""

from __future__ import annotations

import threading
from typing import Any

from deskllm.tools.mcp_config import McpServer
from deskllm.tools.mcp_hub import CALL_TIMEOUT_S, McpHub, McpTool, ToolOutcome, named_tools


class ToolBox:
    """Several servers' hubs as one (what run_tool_turn needs: tools() and call())."""

    def __init__(self, hubs: dict[str, McpHub]) -> None:
        self.hubs = hubs

    def tools(self) -> list[McpTool]:
        return named_tools([found for hub in self.hubs.values() for found in hub.listed()])

    def call(self, tool: McpTool, arguments: dict[str, Any],
             cancel: threading.Event | None = None) -> ToolOutcome:  # fmt: skip
        hub = self.hubs.get(tool.server)
        if hub is None:
            return ToolOutcome(f"The MCP server {tool.server!r} is not available.", True)
        return hub.call(tool, arguments, cancel)


class ToolHost:
    """Thread-safe: turns on different threads may ask for servers at once."""

    def __init__(self, call_timeout_s: float = CALL_TIMEOUT_S) -> None:
        self.call_timeout_s = call_timeout_s
        self._hubs: dict[str, McpHub] = {}
        self._lock = threading.Lock()

    def toolbox(self, servers: list[McpServer]) -> tuple[ToolBox, dict[str, str]]:
        """The tools of `servers` (each started if it is not running, or started again if it
        failed or its configuration changed), and {name: why} for those that failed."""
        failures: dict[str, str] = {}
        hubs: dict[str, McpHub] = {}
        for server in servers:
            with self._lock:
                hub = self._hubs.get(server.name)
                stale = hub is not None and (hub.failures() or hub.servers != [server]
                                             or hub.call_timeout_s != self.call_timeout_s)
                if stale:
                    hub.close()
                    hub = None
                if hub is None:
                    hub = McpHub([server], call_timeout_s=self.call_timeout_s)
                    self._hubs[server.name] = hub
                    failed = hub.start()
                else:
                    failed = hub.failures()
            failures.update(failed)
            hubs[server.name] = hub
        return ToolBox(hubs), failures

    def hub(self, name: str) -> McpHub | None:
        """The hub of server `name`, once a turn or a listing started it."""
        with self._lock:
            return self._hubs.get(name)

    def running(self) -> dict[str, bool]:
        """Each server started so far: True while it runs, False when it failed or died."""
        with self._lock:
            return {name: not hub.failures() for name, hub in self._hubs.items()}

    def close(self) -> None:
        with self._lock:
            hubs, self._hubs = list(self._hubs.values()), {}
        for hub in hubs:
            hub.close()
