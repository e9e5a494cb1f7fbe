"""Helpers for tests that drive the real engine."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
import threading
import time
from collections.abc import Iterable
from pathlib import Path

from deskllm.engine.domain import ChatMessage, Done, Error, Event, Exited, Metrics, TextDelta
from deskllm.engine.reply import Reply
from deskllm.gguf.header import read_header

BROKEN_TEMPLATE = "{% for m in messages %}{{ m.content }"  # a syntax error


def system_and_user(system: str, question: str) -> list[ChatMessage]:
    """A chat of a system prompt and one user message."""
    return [ChatMessage("system", system), ChatMessage("user", question)]


def with_template(src: Path, dst: Path, template: str) -> Path:
    """A copy of the model whose tokenizer.chat_template is `template` (gguf's own tool)."""
    subprocess.run(
        [sys.executable, "-m", "gguf.scripts.gguf_new_metadata", str(src), str(dst),
         "--chat-template", template, "--force"],
        check=True, capture_output=True, timeout=120,
    )  # fmt: skip
    assert read_header(dst).chat_template == template
    return dst


@dataclasses.dataclass
class Collected:
    deltas: list[str]
    metrics: list[Metrics]
    final: Event | None

    @property
    def text(self) -> str:
        return "".join(self.deltas)

    @property
    def done(self) -> Done:
        assert isinstance(self.final, Done), f"expected Done, got {self.final!r}"
        return self.final


def collect(source: Reply | Iterable[Event]) -> Collected:
    """Every event of a Reply (or of an event iterator), sorted by kind."""
    events = source.events() if isinstance(source, Reply) else source
    deltas, metrics, final = [], [], None
    for event in events:
        if isinstance(event, TextDelta):
            deltas.append(event.text)
        elif isinstance(event, Metrics):
            metrics.append(event)
        elif isinstance(event, Done | Error | Exited):
            final = event
    return Collected(deltas, metrics, final)


def cancel_after(client, seconds: float) -> threading.Timer:
    timer = threading.Timer(seconds, client.cancel)
    timer.start()
    return timer


def wait_for(predicate, timeout: float = 10.0, interval: float = 0.05) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(interval)
    return predicate()


def segfaulting_probe(_model_path: str) -> None:
    """A probe child that dies the way the AMX crash kills it: SIGSEGV."""
    import os
    import signal

    os.kill(os.getpid(), signal.SIGSEGV)


def failing_probe(_model_path: str) -> None:
    raise SystemExit(3)
