"""Reply: one answer from an engine, iterable for its text while it streams and complete
afterwards (in the spirit of simonw/llm's Response).

    reply = client.chat(conversation_id, messages, sampling)
    for text in reply:          # TextDelta texts as they arrive
        print(text, end="")
    reply.text, reply.metrics, reply.done, reply.error

`events()` gives every event instead (text, live Metrics, and the final Done / Error /
Exited) for views that show live figures. A Reply is read once; reading it a second time, or
reading `.text` before the end, returns what has arrived. The final event decides the outcome:
Done is a finished (or stopped) reply, Error and Exited become `error`, one EngineError with
its kind and reason, so callers write one branch instead of three.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from deskllm.engine.domain import Done, Error, Event, Exited, Metrics, TextDelta
from deskllm.engine.errors import EngineError


class Reply:
    def __init__(self, events: Iterator[Event], cancel: Callable[[], None] | None = None) -> None:
        self._source = events
        self._cancel = cancel
        self._chunks: list[str] = []
        self._thinking: list[str] = []  # a reasoning model's thinking
        self._consumed = False
        self.metrics: Metrics | None = None  # the latest figures (Done's at the end)
        self.done: Done | None = None
        self.error: EngineError | None = None
        self.final: Done | Error | Exited | None = None

    def events(self) -> Iterator[Event]:
        """Every event as it comes; the Reply's fields are up to date when each is yielded."""
        if self._consumed:
            return
        self._consumed = True
        try:
            for event in self._source:
                self._note(event)
                yield event
                if self.final is not None:
                    return
        finally:
            # The source may hold the engine (its request lock) until it is closed: close it
            # now, not when the Reply is garbage.
            close = getattr(self._source, "close", None)
            if close is not None:
                close()
            # A source that stops without a final event is an error, not a silent success.
            if self.final is None and self.error is None:
                self.error = EngineError("the reply ended without a result")

    def __iter__(self) -> Iterator[str]:
        """The answer's text as it arrives (a reasoning model's thinking is not in it)."""
        for event in self.events():
            if isinstance(event, TextDelta) and not event.reasoning:
                yield event.text

    def wait(self) -> Reply:
        """Read to the end; returns self (for `client.chat(...).wait().text`)."""
        for _ in self.events():
            pass
        return self

    def cancel(self) -> None:
        """Stop generating; the reply ends with Done(finish_reason="cancelled")."""
        if self._cancel is not None:
            self._cancel()

    def _note(self, event: Event) -> None:
        if isinstance(event, TextDelta):
            (self._thinking if event.reasoning else self._chunks).append(event.text)
        elif isinstance(event, Metrics):
            self.metrics = event
        elif isinstance(event, Done):
            self.done, self.metrics, self.final = event, event.metrics, event
        elif isinstance(event, Error | Exited):
            self.error, self.final = EngineError(event.reason, event.kind), event

    @property
    def text(self) -> str:
        """What has arrived (Done's text once finished: stop strings are cut from it)."""
        return self.done.text if self.done is not None else "".join(self._chunks)

    @property
    def reasoning(self) -> str:
        """A reasoning model's thinking so far (Done's once finished)."""
        return self.done.reasoning if self.done is not None else "".join(self._thinking)

    @property
    def ok(self) -> bool:
        return self.done is not None

    @property
    def finish_reason(self) -> str | None:
        """stop | length | cancelled once done; None while streaming or after an error."""
        return self.done.finish_reason if self.done is not None else None
