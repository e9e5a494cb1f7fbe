"""Progress events: typed, immutable, delivered through a plain callback (the GUI turns them
into Qt signals; the CLI draws a bar)."""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum


class DownloadState(StrEnum):
    QUEUED = "queued"
    DOWNLOADING = "downloading"
    PAUSED = "paused"
    VERIFYING = "verifying"
    DONE = "done"
    FAILED = "failed"
    CANCELLED = "cancelled"

    @property
    def finished(self) -> bool:
        return self in (DownloadState.DONE, DownloadState.FAILED, DownloadState.CANCELLED)


@dataclass(frozen=True)
class Progress:
    """One snapshot of a download item (all of its parts together)."""

    id: int | None  # the manager's row id; None for a bare transfer
    name: str  # the model file, e.g. "owner/name/model-Q4_K_M.gguf"
    state: DownloadState
    bytes_done: int  # on disk, verified or not
    total: int
    speed_bps: float = 0.0  # moving average over the last few seconds
    eta_s: float | None = None  # None while unknown (no speed yet)
    error: str | None = None  # set when state is FAILED
    path: str | None = None  # the final file once DONE

    @property
    def fraction(self) -> float:
        return self.bytes_done / self.total if self.total else 0.0


ProgressCallback = Callable[[Progress], None]


class SpeedMeter:
    """Bytes per second over a sliding window: steady enough for an ETA, quick to follow a
    change (a throttled link, a resume)."""

    def __init__(self, window_s: float = 5.0, clock: Callable[[], float] = time.monotonic):
        self.window_s = window_s
        self._clock = clock
        self._samples: deque[tuple[float, int]] = deque()

    def reset(self) -> None:
        self._samples.clear()

    def add(self, bytes_done: int) -> float:
        now = self._clock()
        self._samples.append((now, bytes_done))
        while len(self._samples) > 2 and now - self._samples[0][0] > self.window_s:
            self._samples.popleft()
        return self.speed()

    def speed(self) -> float:
        if len(self._samples) < 2:
            return 0.0
        (t0, b0), (t1, b1) = self._samples[0], self._samples[-1]
        return (b1 - b0) / (t1 - t0) if t1 > t0 else 0.0

    @staticmethod
    def eta(speed: float, remaining: int) -> float | None:
        return remaining / speed if speed > 0 else None
