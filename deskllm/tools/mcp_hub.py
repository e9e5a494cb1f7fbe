"""The MCP servers of a chat, running: each one connected with the official `mcp` SDK on an
event loop of its own thread, its tools listed, its calls made with a timeout and their
output cut to a size limit. A server that fails to start or dies says why (the tail of its
stderr) and the others go on. Everything here is called from ordinary threads."""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import json
import logging
import tempfile
import threading
import time
from dataclasses import dataclass
from typing import Any

from deskllm.tools.mcp_config import McpServer

log = logging.getLogger("deskllm.tools")

CALL_TIMEOUT_S = 30.0  # a tool that takes longer is abandoned (Jan's default too)
START_TIMEOUT_S = 60.0  # starting a server: a package manager may fetch it first
OUTPUT_LIMIT = 32_000  # characters of a tool's output the model gets; the rest is cut
_STDERR_TAIL = 2_000


@dataclass(frozen=True)
class McpTool:
    server: str
    name: str  # as the model sees it: unique across the chat's servers
    remote_name: str  # as the server names it
    description: str
    parameters: dict[str, Any]

    def openai(self) -> dict[str, Any]:
        """The tool as OpenAI's `tools` list gives it to a chat template."""
        return {"type": "function", "function": {
            "name": self.name, "description": self.description, "parameters": self.parameters}}


@dataclass(frozen=True)
class ToolOutcome:
    text: str  # what the model is given
    is_error: bool
    truncated: bool = False
    seconds: float = 0.0


class _Running:
    """One connected server: its task, its request queue, its tools, its stderr."""

    def __init__(self, server: McpServer) -> None:
        self.server = server
        self.queue: asyncio.Queue | None = None
        self.task: asyncio.Task | None = None
        self.tools: list[Any] = []
        # Closed by McpHub.close(): it outlives this constructor, as the server does.
        self.stderr = tempfile.TemporaryFile("w+", encoding="utf-8", errors="replace")  # noqa: SIM115
        self.failure: str | None = None

    def stderr_tail(self) -> str:
        with contextlib.suppress(OSError, ValueError):
            self.stderr.flush()
            self.stderr.seek(0)
            return self.stderr.read()[-_STDERR_TAIL:].strip()
        return ""


class McpHub:
    """`servers` started by start(); tools() lists what they offer; call() runs one tool."""

    def __init__(self, servers: list[McpServer], call_timeout_s: float = CALL_TIMEOUT_S,
                 output_limit: int = OUTPUT_LIMIT,
                 start_timeout_s: float = START_TIMEOUT_S) -> None:  # fmt: skip
        self.servers = servers
        self.call_timeout_s = call_timeout_s
        self.output_limit = output_limit
        self.start_timeout_s = start_timeout_s
        self._running: dict[str, _Running] = {}
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="deskllm-mcp",
                                        daemon=True)  # fmt: skip
        self._thread.start()

    # Starting -----------------------------------------------------------------------------
    def start(self) -> dict[str, str]:
        """Start every server at once; {name: why} for those that failed (the chat goes on
        without them)."""
        future = asyncio.run_coroutine_threadsafe(self._start_all(), self._loop)
        return future.result()

    async def _start_all(self) -> dict[str, str]:
        running = [_Running(s) for s in self.servers]
        self._running = {r.server.name: r for r in running}
        await asyncio.gather(*(self._start(r) for r in running))
        return {r.server.name: r.failure for r in running if r.failure}

    async def _start(self, running: _Running) -> None:
        ready: asyncio.Future = asyncio.get_running_loop().create_future()
        running.queue = asyncio.Queue()
        running.task = asyncio.create_task(self._serve(running, ready))
        try:
            running.tools = await asyncio.wait_for(asyncio.shield(ready), self.start_timeout_s)
        except TimeoutError:
            running.failure = f"it did not answer within {self.start_timeout_s:.0f} s"
            running.task.cancel()
        except Exception as exc:  # noqa: BLE001 - any failure to start is said, not raised
            running.failure = _reason(exc)
        if running.failure:
            tail = running.stderr_tail()
            running.failure += f"; its stderr ends: {tail}" if tail else ""
            log.info("MCP server %s failed: %s", running.server.name, running.failure)

    async def _serve(self, running: _Running, ready: asyncio.Future) -> None:
        """The server's connection, held open in this one task (the SDK's task groups must
        be entered and left by the same task), answering calls from its queue."""
        from mcp import Client, StdioServerParameters
        from mcp.client.stdio import stdio_client

        server = running.server
        try:
            if server.url:
                import httpx2
                from mcp.client.streamable_http import streamable_http_client

                # The SDK's own timeouts (30 s to connect and send, 5 min between events of a
                # stream): a call's timeout is the hub's, not the stream's.
                http = httpx2.AsyncClient(headers=server.headers,
                                          timeout=httpx2.Timeout(30.0, read=300.0))
                transport: Any = streamable_http_client(server.url, http_client=http)
            else:
                params = StdioServerParameters(command=server.command or "",
                                               args=list(server.args), env=server.env or None)
                transport = stdio_client(params, errlog=running.stderr)
            async with Client(transport) as client:
                listed = await client.list_tools()
                ready.set_result(list(listed.tools))
                calls: set[asyncio.Task] = set()
                try:
                    while (item := await running.queue.get()) is not None:
                        # Each call a task of its own: a tool that hangs holds up no other.
                        task = asyncio.create_task(self._call(client, *item))
                        calls.add(task)
                        task.add_done_callback(calls.discard)
                finally:
                    for task in calls:
                        task.cancel()
        except BaseException as exc:  # noqa: BLE001 - also a CancelledError at close
            if not ready.done():
                ready.set_exception(exc if isinstance(exc, Exception) else RuntimeError(
                    "stopped"))  # fmt: skip
            running.failure = running.failure or _reason(exc)
            # Calls still waiting fail with the reason rather than wait forever.
            while running.queue is not None and not running.queue.empty():
                item = running.queue.get_nowait()
                if item is not None and not item[2].done():
                    item[2].set_exception(RuntimeError(running.failure))
            if isinstance(exc, asyncio.CancelledError):
                raise

    async def _call(self, client: Any, name: str, arguments: dict[str, Any],
                    answer: asyncio.Future) -> None:  # fmt: skip
        """One call, answered within the timeout: the SDK's call is left to be cancelled
        rather than waited for (its cancellation may wait on the server)."""
        call = asyncio.ensure_future(client.call_tool(name, arguments))
        call.add_done_callback(_retrieved)  # a call left behind may fail later: not an error
        done, _pending = await asyncio.wait({call}, timeout=self.call_timeout_s)
        if answer.done():
            call.cancel()
        elif not done:
            call.cancel()
            answer.set_exception(TimeoutError())
        elif call.exception() is not None:
            answer.set_exception(call.exception())
        else:
            answer.set_result(call.result())

    # Using --------------------------------------------------------------------------------
    def failures(self) -> dict[str, str]:
        return {n: r.failure for n, r in self._running.items() if r.failure}

    def tools(self) -> list[McpTool]:
        """The running servers' tools; a name two servers share is prefixed with the server's."""
        return named_tools(self.listed())

    def listed(self) -> list[tuple[str, Any]]:
        """(server, the SDK's tool) for every tool of the running servers."""
        return [(r.server.name, t) for r in self._running.values() if not r.failure
                for t in r.tools]  # fmt: skip

    def call(self, tool: McpTool, arguments: dict[str, Any],
             cancel: threading.Event | None = None) -> ToolOutcome:  # fmt: skip
        """Run `tool`; never raises: a failure, a timeout or a dead server is an error
        outcome the model is told. `cancel` set: abandoned at once (the result discarded)."""
        started = time.monotonic()
        running = self._running.get(tool.server)
        if running is None or running.failure:
            why = running.failure if running else "it is not running"
            return ToolOutcome(f"The MCP server {tool.server!r} is not available: {why}", True)

        async def submit() -> Any:
            answer = asyncio.get_running_loop().create_future()
            await running.queue.put((tool.remote_name, arguments, answer))
            return await answer

        future = asyncio.run_coroutine_threadsafe(submit(), self._loop)
        deadline = started + self.call_timeout_s + 5  # the SDK's own timeout comes first
        while not concurrent.futures.wait([future], timeout=0.1).done:
            stopped = cancel is not None and cancel.is_set()
            if stopped or time.monotonic() > deadline:
                future.cancel()
                why = "was stopped" if stopped else "timed out"
                return ToolOutcome(f"The tool {tool.name} {why} before it answered.", True,
                                   seconds=time.monotonic() - started)  # fmt: skip
        error = future.exception()
        if isinstance(error, TimeoutError):
            return ToolOutcome(f"The tool {tool.name} did not answer within "
                               f"{self.call_timeout_s:.0f} s.", True,
                               seconds=time.monotonic() - started)  # fmt: skip
        if error is not None:
            tail = running.stderr_tail()
            why = _reason(error) + (f" (stderr: {tail[-300:]})" if tail else "")
            return ToolOutcome(f"The tool {tool.name} failed: {why}", True,
                               seconds=time.monotonic() - started)  # fmt: skip
        result = future.result()
        text = _result_text(result)
        truncated = len(text) > self.output_limit
        if truncated:
            text = (text[: self.output_limit] + f"\n[… output cut: {len(text):,} characters, "
                    f"the first {self.output_limit:,} shown]")  # fmt: skip
        return ToolOutcome(text, bool(getattr(result, "is_error", False)), truncated,
                           time.monotonic() - started)  # fmt: skip

    def close(self) -> None:
        """Stop every server (their processes end) and the loop."""
        async def stop() -> None:
            for running in self._running.values():
                if running.queue is not None:
                    running.queue.put_nowait(None)
            tasks = [r.task for r in self._running.values() if r.task is not None]
            with contextlib.suppress(Exception):
                await asyncio.wait_for(asyncio.gather(*tasks, return_exceptions=True), 10)

        if self._loop.is_running():
            with contextlib.suppress(Exception):
                asyncio.run_coroutine_threadsafe(stop(), self._loop).result(15)
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(5)
        for running in self._running.values():
            with contextlib.suppress(OSError):
                running.stderr.close()

    def __enter__(self) -> McpHub:
        return self

    def __exit__(self, *_exc) -> None:
        self.close()


def named_tools(found: list[tuple[str, Any]]) -> list[McpTool]:
    """The tools as the model sees them: a name two servers share is prefixed with the
    server's (`time__now`), so every call names one tool."""
    counts: dict[str, int] = {}
    for _server, tool in found:
        counts[tool.name] = counts.get(tool.name, 0) + 1
    return [
        McpTool(server, f"{server}__{t.name}" if counts[t.name] > 1 else t.name, t.name,
                t.description or "", dict(t.input_schema or {"type": "object"}))
        for server, t in found
    ]  # fmt: skip


def _retrieved(task: asyncio.Future) -> None:
    if not task.cancelled():
        task.exception()


def _result_text(result: Any) -> str:
    """A tool's content as text: text parts as they are, anything else as JSON."""
    parts = []
    for block in getattr(result, "content", None) or ():
        text = getattr(block, "text", None)
        if text is not None:
            parts.append(text)
        else:
            with contextlib.suppress(Exception):
                parts.append(json.dumps(block.model_dump(mode="json", exclude_none=True)))
    if not parts and getattr(result, "structured_content", None) is not None:
        parts.append(json.dumps(result.structured_content))
    return "\n".join(parts)


def _reason(exc: BaseException) -> str:
    """An exception (an ExceptionGroup from the SDK's task groups included) in words."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    if isinstance(exc, FileNotFoundError):
        return f"the program was not found ({exc.filename or exc})"
    text = str(exc) or type(exc).__name__
    return text if len(text) < 500 else text[:500] + "…"
