"""RemotePool: several endpoints serving the same model name, used as one.

A request goes to the healthy member with the fewest requests outstanding. A member that
fails to connect (or drops the connection before the first token) is marked unhealthy and the
request moves on to the next; an unhealthy member is skipped until its health check (its
model list) passes again, tried at most every `recheck_s` seconds.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass

from deskllm.engine.domain import ChatMessage, Error, Event, Sampling, TextDelta
from deskllm.engine.errors import ErrorKind
from deskllm.engine.reply import Reply
from deskllm.remote.client import RemoteClient

DEFAULT_RECHECK_S = 5.0
# Failures that say the member is down, not that the request was wrong: the request is safe
# to send elsewhere as long as no text came back yet.
_MEMBER_DOWN = (ErrorKind.UNREACHABLE, ErrorKind.DROPPED, ErrorKind.TIMEOUT)


@dataclass
class PoolMember:
    client: RemoteClient
    outstanding: int = 0
    healthy: bool = True
    checked_at: float = 0.0  # time.monotonic() of the last failure or health check


class NoHealthyEndpoint(RuntimeError):
    pass


class RemotePool:
    def __init__(
        self, model: str, clients: list[RemoteClient], recheck_s: float = DEFAULT_RECHECK_S
    ) -> None:
        if not clients:
            raise ValueError("a pool needs at least one endpoint")
        self.model = model
        self.members = [PoolMember(c) for c in clients]
        self.recheck_s = recheck_s
        self._lock = threading.Lock()

    def pick(self, exclude: set[str] = frozenset()) -> PoolMember:
        """The healthy member with the fewest outstanding requests (reserved: its count is
        raised; `release` lowers it). Raises NoHealthyEndpoint."""
        self._recheck_due(exclude)
        with self._lock:
            candidates = [m for m in self.members if m.healthy and m.client.name not in exclude]
            if not candidates:
                names = ", ".join(m.client.name for m in self.members)
                raise NoHealthyEndpoint(f"no endpoint serving {self.model} is healthy ({names})")
            member = min(candidates, key=lambda m: m.outstanding)  # ties: registration order
            member.outstanding += 1
            return member

    def release(self, member: PoolMember) -> None:
        with self._lock:
            member.outstanding -= 1

    def mark_down(self, member: PoolMember) -> None:
        with self._lock:
            member.healthy = False
            member.checked_at = time.monotonic()

    def _recheck_due(self, exclude: set[str]) -> None:
        """Health-check the unhealthy members whose wait is over (outside the lock: a check
        is a network call)."""
        now = time.monotonic()
        with self._lock:
            due = [m for m in self.members if not m.healthy and m.client.name not in exclude
                   and now - m.checked_at >= self.recheck_s]  # fmt: skip
            for m in due:
                m.checked_at = now  # one checker at a time per member
        for m in due:
            if m.client.healthy():
                with self._lock:
                    m.healthy = True

    def chat(
        self,
        messages: list[ChatMessage] | tuple[ChatMessage, ...],
        sampling: Sampling | None = None,
        *,
        user: str | None = None,
        tools_json: str | None = None,
    ) -> Reply:
        """One reply from whichever member answers (Metrics.engine names it)."""
        state: dict[str, Reply] = {}

        def cancel() -> None:
            reply = state.get("reply")
            if reply is not None:
                reply.cancel()

        return Reply(self._events(tuple(messages), sampling, user, state, tools_json), cancel)

    def _events(
        self,
        messages: tuple[ChatMessage, ...],
        sampling: Sampling | None,
        user: str | None,
        state: dict[str, Reply],
        tools_json: str | None = None,
    ) -> Iterator[Event]:
        tried: set[str] = set()
        last_error: Error | None = None
        while True:
            try:
                member = self.pick(tried)
            except NoHealthyEndpoint as exc:
                reason = str(exc) if last_error is None else f"{exc}; last: {last_error.reason}"
                kind = last_error.kind if last_error is not None else ErrorKind.UNREACHABLE
                yield Error(None, reason, kind)
                return
            tried.add(member.client.name)
            reply = state["reply"] = member.client.chat(self.model, messages, sampling, user=user,
                                                        tools_json=tools_json)  # fmt: skip
            got_text = False
            try:
                for event in reply.events():
                    if isinstance(event, TextDelta):
                        got_text = True
                    elif isinstance(event, Error) and event.kind in _MEMBER_DOWN:
                        self.mark_down(member)
                        if not got_text:
                            last_error = event
                            break  # nothing was shown yet: ask the next member
                    yield event
                else:
                    return
            finally:
                self.release(member)

    def close(self) -> None:
        for m in self.members:
            m.client.close()
