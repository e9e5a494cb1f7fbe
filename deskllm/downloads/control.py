"""Pause and cancel requests for a running transfer, sent from any thread."""

from __future__ import annotations

import threading
from typing import Protocol

from deskllm.downloads.errors import Interrupted


class Abortable(Protocol):
    def abort(self) -> None: ...


class Control:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._paused = False
        self._cancelled = False
        self._response: Abortable | None = None

    def pause(self) -> None:
        self._stop(cancel=False)

    def cancel(self) -> None:
        self._stop(cancel=True)

    def _stop(self, cancel: bool) -> None:
        with self._lock:
            self._paused = True
            self._cancelled = self._cancelled or cancel
            response = self._response
        self._wake.set()
        if response is not None:
            response.abort()  # a read blocked on a slow or stalled server returns now

    @property
    def stopped(self) -> bool:
        return self._paused

    @property
    def cancelled(self) -> bool:
        return self._cancelled

    def check(self) -> None:
        """Raise Interrupted when a pause or cancel was asked for."""
        if self._paused:
            raise Interrupted(self._cancelled)

    def attach(self, response: Abortable | None) -> None:
        with self._lock:
            self._response = response
            stopped = self._paused
        if stopped and response is not None:
            response.abort()

    def sleep(self, seconds: float) -> None:
        """Wait (backoff) but wake at once on pause or cancel."""
        self._wake.wait(seconds)
        self.check()
