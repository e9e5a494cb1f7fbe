"""Stop strings over a token stream: text that could still become a stop string is held back."""

from __future__ import annotations


class StopMatcher:
    def __init__(self, stops: tuple[str, ...]) -> None:
        self.stops = tuple(s for s in stops if s)
        self._held = ""
        self.matched: str | None = None  # the stop string that ended the text, once one has

    def feed(self, text: str) -> tuple[str, bool]:
        """Returns (text safe to emit, stopped)."""
        if not self.stops:
            return text, False
        buf = self._held + text
        # Cut at the earliest stop string in the text, whichever of them it is.
        hits = [(at, stop) for stop in self.stops if (at := buf.find(stop)) != -1]
        if hits:
            self._held = ""
            at, self.matched = min(hits)  # at one place, the shorter one (a prefix) ended it
            return buf[:at], True
        # Hold back the longest tail that is a prefix of some stop string.
        hold = 0
        for stop in self.stops:
            for n in range(min(len(stop) - 1, len(buf)), 0, -1):
                if stop.startswith(buf[-n:]):
                    hold = max(hold, n)
                    break
        self._held = buf[len(buf) - hold :] if hold else ""
        return buf[: len(buf) - hold], False

    def flush(self) -> str:
        held, self._held = self._held, ""
        return held
