"""RemoteClient: one remote OpenAI-compatible endpoint, answering with the same `Reply` as the
local engine (text deltas, live Metrics, then Done or Error), so the store and the views
need no second path.

HTTP goes through httpx2, the client huggingface-hub 2.x already brings (a runtime
dependency): the `openai` SDK would be one more runtime dependency, and this needs only two
routes, raw SSE lines and socket-level control to cancel.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import logging
import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

import httpx2

from deskllm.engine.domain import ChatMessage, Done, Error, Event, Sampling, TextDelta
from deskllm.engine.errors import EngineError, ErrorKind
from deskllm.engine.reply import Reply
from deskllm.remote.endpoint import Endpoint
from deskllm.remote.stream_figures import StreamFigures

log = logging.getLogger("deskllm.remote")

LIVE_METRICS_EVERY_S = 0.25
_ids = itertools.count(1)


class RemoteClient:
    """Talks to one endpoint. Thread-safe: replies may stream at the same time; each Reply's
    cancel() ends only its own stream."""

    def __init__(self, endpoint: Endpoint, api_key: str | None = None) -> None:
        self.endpoint = endpoint
        self._key = api_key or None
        headers = {"Authorization": f"Bearer {self._key}"} if self._key else {}
        timeout = httpx2.Timeout(
            connect=endpoint.connect_timeout_s,
            read=endpoint.read_timeout_s,
            write=endpoint.read_timeout_s,
            pool=endpoint.connect_timeout_s,
        )
        # trust_env off: a proxy from the environment must not see the key or the chats.
        self._http = httpx2.Client(headers=headers, timeout=timeout, trust_env=False)

    @property
    def name(self) -> str:
        return self.endpoint.name

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> RemoteClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # Models and health ---------------------------------------------------------------------
    def list_models(self) -> list[str]:
        """The model names the endpoint serves (GET /models). Raises EngineError naming the
        endpoint: AUTH, UNREACHABLE, TIMEOUT or REMOTE."""
        try:
            response = self._http.get(self._url("/models"))
        except httpx2.HTTPError as exc:
            raise self.error_for(exc) from None
        if response.status_code != 200:
            raise self._status_error(response.status_code, response.text)
        try:
            data = response.json()["data"]
            return [str(card["id"]) for card in data]
        except (ValueError, KeyError, TypeError):
            raise EngineError(f"endpoint {self.name} answered /models with something that is "
                              "not an OpenAI model list", ErrorKind.REMOTE) from None  # fmt: skip

    def healthy(self) -> bool:
        """Whether the endpoint answers its model list now (its health check)."""
        try:
            self.list_models()
        except EngineError as exc:
            log.info("health check: %s", exc.reason)
            return False
        return True

    # Chat ----------------------------------------------------------------------------------
    def chat(
        self,
        model: str,
        messages: list[ChatMessage] | tuple[ChatMessage, ...],
        sampling: Sampling | None = None,
        *,
        user: str | None = None,
        tools_json: str | None = None,
    ) -> Reply:
        """One streamed reply from `model`. Nothing is sent until the Reply is read.
        `tools_json`: the tools it may call (OpenAI's list as JSON); its calls come back in
        the reply's text as `<tool_call>{"name", "arguments"}</tool_call>`, the form the tool
        loop reads from local models too."""
        stream = _Stream()
        body = self._body(model, tuple(messages), sampling or Sampling(), user, tools_json)
        return Reply(self._chat_events(body, stream), stream.cancel)

    def _body(
        self, model: str, messages: tuple[ChatMessage, ...], s: Sampling, user: str | None,
        tools_json: str | None = None,
    ) -> dict[str, Any]:  # fmt: skip
        body: dict[str, Any] = {
            "model": model,
            "messages": [_message(m) for m in messages],
            "stream": True,
            "stream_options": {"include_usage": True},  # token counts in the last chunk
            "temperature": s.temperature,
            "top_p": s.top_p,
            "max_tokens": s.max_tokens,
        }
        if s.seed >= 0:
            body["seed"] = s.seed
        if s.stop:
            body["stop"] = list(s.stop)
        if self.endpoint.sampling_extensions:
            body |= {"top_k": s.top_k, "min_p": s.min_p, "repeat_penalty": s.repeat_penalty}
            if s.ignore_eos:
                body["ignore_eos"] = True
        if user:
            body["user"] = user  # deskllm serve keeps one KV cache per user: prefix reuse
        if tools_json:
            body["tools"] = json.loads(tools_json)
            # The tool loop holds a local model to a call with a schema (a grammar); an
            # endpoint is asked for a call instead.
            body["tool_choice"] = "required" if s.json_schema else "auto"
        return body

    def _chat_events(self, body: dict[str, Any], stream: _Stream) -> Iterator[Event]:
        figures = StreamFigures(next(_ids), self.name)
        rid = figures.request_id
        text: list[str] = []
        calls: dict[int, dict[str, str]] = {}  # native tool calls, gathered by their index
        finish: str | None = None
        try:
            with self._http.stream("POST", self._url("/chat/completions"), json=body) as resp:
                stream.attach(resp)
                if resp.status_code != 200:
                    raise self._status_error(resp.status_code, resp.read().decode(errors="replace"))
                last_live = 0.0
                for data in _sse_data(resp.iter_lines()):
                    if data == "[DONE]":
                        break
                    chunk = _json_object(data)
                    if chunk is None:
                        continue
                    if isinstance(chunk.get("error"), dict | str):
                        raise self._status_error(None, data)
                    figures.on_chunk(chunk)
                    for choice in chunk.get("choices") or ():
                        delta = choice.get("delta") or {}
                        content = delta.get("content")
                        if isinstance(content, str) and content:
                            figures.on_text()
                            text.append(content)
                            yield TextDelta(rid, content)
                            now = time.monotonic()
                            if now - last_live >= LIVE_METRICS_EVERY_S:
                                last_live = now
                                yield figures.metrics()
                        _gather_calls(calls, delta.get("tool_calls"))
                        if choice.get("finish_reason"):
                            finish = str(choice["finish_reason"])
                for call in calls.values():
                    said = _call_text(call)
                    text.append(said)
                    yield TextDelta(rid, said)
                if stream.cancelled:
                    yield Done(rid, "cancelled", "".join(text), figures.metrics())
                    return
                if finish is None:
                    # [DONE] without a finish reason, or the body simply ended: cut short.
                    raise httpx2.RemoteProtocolError("the stream ended before the reply did")
            yield Done(rid, "length" if finish == "length" else "stop", "".join(text),
                       figures.metrics())  # fmt: skip
        except EngineError as exc:
            yield Error(rid, self._scrub(exc.reason), exc.kind)
        except (httpx2.HTTPError, OSError) as exc:
            if stream.cancelled:
                yield Done(rid, "cancelled", "".join(text), figures.metrics())
                return
            error = self.error_for(exc, mid_reply=figures.first_at is not None)
            yield Error(rid, error.reason, error.kind)
        finally:
            stream.detach()

    # Errors ---------------------------------------------------------------------------------
    def error_for(self, exc: BaseException, *, mid_reply: bool = False) -> EngineError:
        """An HTTP failure in words naming the endpoint (never the key)."""
        name, ep = self.name, self.endpoint
        if isinstance(exc, httpx2.ConnectTimeout | httpx2.PoolTimeout):
            return EngineError(f"endpoint {name} did not accept a connection within "
                               f"{ep.connect_timeout_s:g} s (connect timeout) at {ep.base_url}",
                               ErrorKind.TIMEOUT)  # fmt: skip
        if isinstance(exc, httpx2.TimeoutException):
            return EngineError(f"endpoint {name} sent nothing for {ep.read_timeout_s:g} s "
                               f"(read timeout){' mid-reply' if mid_reply else ''}",
                               ErrorKind.TIMEOUT)  # fmt: skip
        if isinstance(exc, httpx2.ConnectError):
            return EngineError(f"endpoint {name} is unreachable at {ep.base_url} "
                               f"({self._scrub(str(exc)) or type(exc).__name__})",
                               ErrorKind.UNREACHABLE)  # fmt: skip
        if mid_reply:
            return EngineError(f"endpoint {name} dropped the connection mid-reply "
                               f"({self._scrub(str(exc)) or type(exc).__name__})",
                               ErrorKind.DROPPED)  # fmt: skip
        return EngineError(f"endpoint {name} dropped the connection before answering "
                           f"({self._scrub(str(exc)) or type(exc).__name__})",
                           ErrorKind.DROPPED)  # fmt: skip

    def _status_error(self, status: int | None, body: str) -> EngineError:
        if status in (401, 403):
            if self._key:
                return EngineError(f"endpoint {self.name} refused the API key ({status})",
                                   ErrorKind.AUTH)  # fmt: skip
            return EngineError(f"endpoint {self.name} wants an API key ({status}): add it "
                               f"with `deskllm remote add {self.name} URL --key-stdin`",
                               ErrorKind.AUTH)  # fmt: skip
        message = self._scrub(_error_message(body))
        where = f"answered {status}" if status else "reported an error mid-reply"
        return EngineError(f"endpoint {self.name} {where}: {message}", ErrorKind.REMOTE)

    def _scrub(self, text: str) -> str:
        """Keys never reach a message, even if a server echoes one back."""
        return text.replace(self._key, "***") if self._key else text

    def _url(self, route: str) -> str:
        return self.endpoint.base_url + route


def _message(m: ChatMessage) -> dict[str, Any]:
    """A message as OpenAI's API takes it: an assistant's tool calls, a tool's answer."""
    out: dict[str, Any] = {"role": m.role, "content": m.content}
    if m.tool_calls_json:
        out["tool_calls"] = json.loads(m.tool_calls_json)
        out["content"] = m.content or None
    if m.role == "tool":
        out["tool_call_id"] = m.tool_call_id
        if m.name:
            out["name"] = m.name
    return out


def _gather_calls(calls: dict[int, dict[str, str]], deltas: Any) -> None:
    """Streamed tool calls come in pieces: the name first, the arguments in parts."""
    for piece in deltas if isinstance(deltas, list) else ():
        if not isinstance(piece, dict):
            continue
        call = calls.setdefault(int(piece.get("index") or 0), {"name": "", "arguments": ""})
        function = piece.get("function") or {}
        if isinstance(function.get("name"), str):
            call["name"] += function["name"]
        if isinstance(function.get("arguments"), str):
            call["arguments"] += function["arguments"]


def _call_text(call: dict[str, str]) -> str:
    """A native call as the Hermes text the tool loop reads (one parser for every engine)."""
    try:
        arguments = json.loads(call["arguments"] or "{}")
    except json.JSONDecodeError:
        arguments = call["arguments"]
    return f"<tool_call>{json.dumps({'name': call['name'], 'arguments': arguments})}</tool_call>"


class _Stream:
    """One reply's open response, so that cancel() from another thread can end it: shutting
    the socket down wakes a read blocked on it, which closing it alone does not."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._response: httpx2.Response | None = None
        self.cancelled = False

    def attach(self, response: httpx2.Response) -> None:
        with self._lock:
            self._response = response
            cancelled = self.cancelled
        if cancelled:
            self._shutdown(response)

    def detach(self) -> None:
        with self._lock:
            self._response = None

    def cancel(self) -> None:
        with self._lock:
            self.cancelled = True
            response = self._response
        if response is not None:
            self._shutdown(response)

    @staticmethod
    def _shutdown(response: httpx2.Response) -> None:
        network = response.extensions.get("network_stream")
        sock = network.get_extra_info("socket") if network is not None else None
        if isinstance(sock, socket.socket):
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)


def _sse_data(lines: Iterator[str]) -> Iterator[str]:
    """The data of each server-sent event (multi-line data joined); comments (": ping")
    and other fields skipped."""
    data: list[str] = []
    for line in lines:
        if not line:
            if data:
                yield "\n".join(data)
                data = []
        elif line.startswith("data:"):
            data.append(line[5:].removeprefix(" "))
    if data:
        yield "\n".join(data)


def _json_object(data: str) -> dict[str, Any] | None:
    try:
        value = json.loads(data)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def _error_message(body: str) -> str:
    """The message of an OpenAI-shaped error body, FastAPI's `detail`, or the text itself."""
    value = _json_object(body)
    if value is not None:
        error = value.get("error", value.get("detail"))
        if isinstance(error, dict) and error.get("message"):
            return str(error["message"])[:500]
        if isinstance(error, str | list):
            return str(error)[:500]
    return body.strip()[:500] or "no details"
