"""The router behind `deskllm chat --model auto`: local first, a remote model only when the
local one cannot do the job, and never without the user's say-so.

Privacy first: the router has a remote target only when the user allowed routing to that
endpoint (`deskllm remote add --allow-routing`); without one every reply is local and no
connection is opened. With a target, in order:

- `asked`: the user asked for the remote for this reply (`ask_remote_next`);
- `context`: the conversation does not fit the local model's context. The engine is asked not
  to leave old turns out (Chat.drop_old_turns False), so it refuses after tokenizing with the
  model's own tokenizer and template, before anything is evaluated;
- `uncertain`: the mean log-probability of the local reply's first K tokens is below the
  threshold (`threshold_for_share` calibrates it to a share of escalations). The first K
  tokens are held back until the decision, so a discarded start is never shown or stored;
- `local_failed`: the local engine failed (crashed, hung) before any text.

A remote failure before any text falls back to local with a notice (`remote_failed`). Every
reply's figures say which engine answered (`engine`), the model, the reason and the score.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, fields, replace

from deskllm.engine.client import EngineClient
from deskllm.engine.domain import (
    ChatMessage,
    Done,
    Error,
    Event,
    Exited,
    Metrics,
    PromptProgress,
    Sampling,
    TextDelta,
)
from deskllm.engine.errors import ErrorKind
from deskllm.engine.reply import Reply
from deskllm.engine.slot_client import SlotClient
from deskllm.remote.remote_model import RemoteModel

DEFAULT_UNCERTAINTY_TOKENS = 16

# Why a reply went where it went (the message figures' `route_reason`).
LOCAL = "local"  # the local model answered: it fits, and it was sure enough (or not checked)
PRIVATE = "private"  # no endpoint allows routing: local, nothing left the machine
UNREACHABLE = "unreachable"  # the endpoint that allows routing did not answer: local
ASKED = "asked"
CONTEXT = "context"
UNCERTAIN = "uncertain"
LOCAL_FAILED = "local_failed"
REMOTE_FAILED = "remote_failed"
CONTINUED = "continued"  # a reply continued in place: always the local engine


@dataclass(frozen=True)
class RoutedMetrics(Metrics):
    """A reply's figures with the route: stored in the message's metrics JSON."""

    model: str | None = None  # the model that answered: a local file, or NAME/MODEL
    route_reason: str | None = None
    route_score: float | None = None  # mean log-probability of the local reply's first K tokens
    route_notice: str | None = None  # what the user should know (a fallback)


@dataclass(frozen=True)
class RoutePolicy:
    """`escalate_below`: a mean token log-probability; None turns the uncertainty check off
    (the local reply streams at once). `uncertainty_tokens`: K, the tokens it averages."""

    escalate_below: float | None = None
    uncertainty_tokens: int = DEFAULT_UNCERTAINTY_TOKENS


def uncertainty_score(logprobs: Sequence[float]) -> float | None:
    """The mean log-probability of the sampled tokens (higher: surer); None without tokens."""
    return sum(logprobs) / len(logprobs) if logprobs else None


def threshold_for_share(scores: Sequence[float], share: float) -> float:
    """The threshold that escalates `share` of the replies scored `scores` (RouteLLM's
    calibration: the score at that quantile). A reply escalates when its score is below the
    threshold, so round(share × n) of these scores do (fewer only where scores tie)."""
    if not 0.0 <= share <= 1.0:
        raise ValueError("the share of escalations is between 0 and 1")
    if not scores:
        raise ValueError("calibration needs at least one score")
    ordered = sorted(scores)
    n_escalate = round(share * len(ordered))
    if n_escalate == 0:
        return -math.inf
    if n_escalate >= len(ordered):
        return math.inf
    return ordered[n_escalate]


class Router:
    """A ChatBackend like EngineClient and RemoteModel: `local` has a model loaded (the
    engine's client, or the window's SlotClient of it); `target` is the remote model, None
    in privacy mode (the default). `unreachable`: why the endpoint that allows routing could
    not be asked for a target (each reply is local, saying so, not `private`)."""

    label = "auto"

    def __init__(
        self,
        local: EngineClient | SlotClient,
        target: RemoteModel | None = None,
        policy: RoutePolicy | None = None,
        unreachable: str | None = None,
    ) -> None:
        self.local = local
        self.target = target
        self.unreachable = unreachable
        self.policy = policy or RoutePolicy()
        self._lock = threading.Lock()
        self._current: Reply | None = None
        self._ask_next = False
        self.overhead_s = 0.0  # the last reply's time in the router itself (bench/router.py)
        self._upstream_s = 0.0
        # A turn with tools: the tools of the reply being routed, and the engine (its model
        # label) and reason of the turn's first reply, which answers the rest of the turn.
        self._tools: str | None = None
        self._tool_engine: tuple[str, str] | None = None

    @property
    def params(self):
        return self.local.params

    @property
    def local_model(self) -> str:
        """The loaded local model's file: what a local reply's figures name."""
        return self.local.label or ""

    def ask_remote_next(self) -> None:
        """Send the next reply to the remote target (the user asked for it)."""
        if self.target is None:
            raise ValueError("no endpoint allows routing: add one with --allow-routing")
        self._ask_next = True

    def chat(
        self,
        conversation_id: str,
        messages: list[ChatMessage] | tuple[ChatMessage, ...],
        sampling: Sampling | None = None,
        *,
        continue_reply: bool = False,
        tools_json: str | None = None,
    ) -> Reply:
        """`tools_json`: a turn with tools. Its first reply is routed as any other; the
        replies after a tool's result go to the same engine, so one model sees its own calls
        through (the loop is not split between two engines)."""
        asked, self._ask_next = self._ask_next, False
        messages, sampling = tuple(messages), sampling or Sampling()
        self._tools = tools_json
        pinned = self._tool_engine if tools_json and messages and (
            messages[-1].role == "tool") else None  # fmt: skip
        if pinned is not None:
            route = self._pinned(conversation_id, messages, sampling, *pinned)
        else:
            route = self._route(conversation_id, messages, sampling, asked, continue_reply)
        return Reply(self._timed(self._noting_engine(route)), self.cancel)

    def _noting_engine(self, events: Iterator[Event]) -> Iterator[Event]:
        for event in events:
            if isinstance(event, Done) and isinstance(event.metrics, RoutedMetrics):
                metrics = event.metrics
                self._tool_engine = (metrics.model, metrics.route_reason) if self._tools else None
            yield event

    def _pinned(self, cid: str, messages: tuple[ChatMessage, ...], sampling: Sampling,
                model: str, reason: str) -> Iterator[Event]:  # fmt: skip
        """A reply of a turn with tools on the engine that began the turn."""
        if model == self.local_model or self.target is None:
            reply = self._start(self._local_chat(cid, messages, sampling))
            yield from self._tagged(self._pull(reply), self.local_model, reason)
        else:
            reply = self._start(self._target_chat(cid, messages, sampling))
            yield from self._tagged(self._pull(reply), self.target.label, reason)

    def _local_chat(self, cid: str, messages, sampling: Sampling, **options) -> Reply:
        if self._tools:
            options["tools_json"] = self._tools
        return self.local.chat(cid, messages, sampling, **options)

    def _target_chat(self, cid: str, messages, sampling: Sampling) -> Reply:
        assert self.target is not None
        options = {"tools_json": self._tools} if self._tools else {}
        return self.target.chat(cid, messages, sampling, **options)

    def cancel(self) -> None:
        with self._lock:
            reply = self._current
        if reply is not None:
            reply.cancel()

    def forget(self, conversation_id: str) -> None:
        self.local.forget(conversation_id)

    def close(self) -> None:
        if self.target is not None:
            self.target.close()

    # Routing ---------------------------------------------------------------------------------
    def _route(
        self,
        cid: str,
        messages: tuple[ChatMessage, ...],
        sampling: Sampling,
        asked: bool,
        continue_reply: bool,
    ) -> Iterator[Event]:
        if continue_reply:
            reply = self._start(self._local_chat(cid, messages, sampling, continue_reply=True))
            yield from self._tagged(self._pull(reply), self.local_model, CONTINUED)
            return
        if self.target is None:
            reply = self._start(self._local_chat(cid, messages, sampling))
            if self.unreachable is None:
                yield from self._tagged(self._pull(reply), self.local_model, PRIVATE)
            else:
                notice = f"the remote endpoint is unreachable: {self.unreachable}"
                yield from self._tagged(self._pull(reply), self.local_model, UNREACHABLE,
                                        notice=notice)  # fmt: skip
            return
        if asked:
            yield from self._remote(cid, messages, sampling, ASKED)
            return
        yield from self._local_first(cid, messages, sampling)

    def _local_first(
        self, cid: str, messages: tuple[ChatMessage, ...], sampling: Sampling
    ) -> Iterator[Event]:
        threshold = self.policy.escalate_below
        k = self.policy.uncertainty_tokens if threshold is not None else 0
        reply = self._start(
            self._local_chat(cid, messages, replace(sampling, logprobs=k), drop_old_turns=False)
        )
        held: list[Event] = []  # the start of the reply, until the uncertainty is decided
        decided, shown, score = k == 0, False, None
        stream = self._pull(reply)
        for event in stream:
            if isinstance(event, PromptProgress):
                yield event  # how far the prompt is read: shown while the router decides
                continue
            if isinstance(event, Error | Exited) and not shown and not held_text(held):
                reason = CONTEXT if event.kind == ErrorKind.CONTEXT else LOCAL_FAILED
                stream.close()  # frees the local engine now: a fallback may need it
                yield from self._remote(cid, messages, sampling, reason, local_error=event)
                return
            if not decided:
                logprobs = event.metrics.token_logprobs if isinstance(event, Done) else (
                    event.token_logprobs if isinstance(event, Metrics) else ())  # fmt: skip
                if len(logprobs) >= k or isinstance(event, Done | Error | Exited):
                    decided = True
                    score = uncertainty_score(logprobs[:k])
                    if score is not None and score < threshold:
                        reply.cancel()
                        for _ in stream:  # let the engine finish the cancel
                            pass
                        yield from self._remote(cid, messages, sampling, UNCERTAIN, score=score)
                        return
                else:
                    held.append(event)
                    continue
            for out in [*held, event]:
                shown = shown or isinstance(out, TextDelta)
                yield self._tag(out, self.local_model, LOCAL, score)
            held.clear()

    def _remote(
        self,
        cid: str,
        messages: tuple[ChatMessage, ...],
        sampling: Sampling,
        reason: str,
        *,
        score: float | None = None,
        local_error: Error | Exited | None = None,
    ) -> Iterator[Event]:
        assert self.target is not None
        reply = self._start(self._target_chat(cid, messages, sampling))
        shown = False
        for event in self._pull(reply):
            if isinstance(event, Error) and not shown:
                notice = f"{event.reason}; answered by the local model instead"
                if local_error is not None and reason == LOCAL_FAILED:
                    yield local_error  # neither engine could answer: the local failure stands
                    return
                # Back to local: a conversation too long for it loses its oldest turns.
                local = self._start(self._local_chat(cid, messages, sampling))
                yield from self._tagged(self._pull(local), self.local_model, REMOTE_FAILED,
                                        score, notice)  # fmt: skip
                return
            shown = shown or isinstance(event, TextDelta)
            yield self._tag(event, self.target.label, reason, score)

    # Helpers ---------------------------------------------------------------------------------
    def _start(self, reply: Reply) -> Reply:
        with self._lock:
            self._current = reply
        return reply

    def _tagged(
        self,
        events: Iterator[Event],
        model: str,
        reason: str,
        score: float | None = None,
        notice: str | None = None,
    ) -> Iterator[Event]:
        for event in events:
            yield self._tag(event, model, reason, score, notice)

    @staticmethod
    def _tag(
        event: Event,
        model: str,
        reason: str,
        score: float | None = None,
        notice: str | None = None,
    ) -> Event:
        if isinstance(event, Metrics):
            return routed(event, model, reason, score, notice)
        if isinstance(event, Done):
            warnings = (*event.warnings, notice) if notice else event.warnings
            metrics = routed(event.metrics, model, reason, score, notice)
            return replace(event, metrics=metrics, warnings=warnings)
        return event

    def _timed(self, events: Iterator[Event]) -> Iterator[Event]:
        """Measure the router's own time per reply: everything but waiting for the engines
        (`_pull`) and for the reader (bench/router.py reports it)."""
        self.overhead_s = self._upstream_s = 0.0
        downstream = 0.0
        started = time.perf_counter()
        try:
            for event in events:
                t = time.perf_counter()
                yield event
                downstream += time.perf_counter() - t
                self.overhead_s = time.perf_counter() - started - downstream - self._upstream_s
        finally:
            events.close()

    def _pull(self, reply: Reply) -> Iterator[Event]:
        """A reply's events, timing the wait for each."""
        events = reply.events()
        try:
            while True:
                t = time.perf_counter()
                try:
                    event = next(events)
                except StopIteration:
                    return
                finally:
                    self._upstream_s += time.perf_counter() - t
                yield event
        finally:
            events.close()


def held_text(events: list[Event]) -> bool:
    return any(isinstance(e, TextDelta) for e in events)


def routed(
    m: Metrics, model: str, reason: str, score: float | None = None, notice: str | None = None
) -> RoutedMetrics:
    base = {f.name: getattr(m, f.name) for f in fields(Metrics)}
    return RoutedMetrics(**base, model=model, route_reason=reason, route_score=score,
                         route_notice=notice)  # fmt: skip
