"""A reasoning model's thinking, told apart from its answer: the markers it writes around it
(`<think>…</think>` in DeepSeek-R1 and Qwen3, and the others in use), found in the model's
own chat template and vocabulary, and a splitter that reads a reply as it streams.

Reasoning is only where a reply begins: a marker later in an answer (a reply about HTML, say)
is answer text. A template whose generation prompt already opens the block (DeepSeek-R1's
ends with "<think>\\n") starts the reply inside it."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

from deskllm.engine.harmony import CLOSE_THINKING, is_harmony

__all__ = ["THINK", "ReasoningMarkers", "ReasoningSplitter", "Part", "markers_of"]


@dataclass(frozen=True)
class ReasoningMarkers:
    open: str
    close: str
    # What closes the block when fed to the model (a budget), where it is not `close` itself:
    # gpt-oss's thinking ends with control tokens, read back as `close` (engine.harmony).
    model_close: str = ""


THINK = ReasoningMarkers("<think>", "</think>")
# In use besides <think>: Claude-style distills, Magistral, Kimi, Seed-OSS.
KNOWN = (THINK, ReasoningMarkers("<thinking>", "</thinking>"),
         ReasoningMarkers("[THINK]", "[/THINK]"), ReasoningMarkers("◁think▷", "◁/think▷"),
         ReasoningMarkers("<seed:think>", "</seed:think>"))  # fmt: skip
# A tag the template writes and closes that names thinking or reasoning.
_TAG = re.compile(r"<((?:\w+:)?(?:think|thinking|thought|reasoning))>")


def markers_of(template: str | None, in_vocab: Callable[[str], bool]) -> ReasoningMarkers | None:
    """The markers a model thinks between: a known pair its chat template writes (either
    marker) or its vocabulary has as one token, else a <think>-like tag the template opens
    and closes; gpt-oss's analysis channel, as engine.harmony reads it. None: not a
    reasoning model (its replies are never split)."""
    source = template or ""
    if is_harmony(source):
        return ReasoningMarkers(THINK.open, THINK.close, model_close=CLOSE_THINKING)
    for pair in KNOWN:
        if pair.open in source or pair.close in source or in_vocab(pair.close):
            return pair
    for name in _TAG.findall(source):
        if f"</{name}>" in source:
            return ReasoningMarkers(f"<{name}>", f"</{name}>")
    return None


@dataclass(frozen=True)
class Part:
    """A piece of a reply: its text, whether it is reasoning, and how many characters of the
    raw reply it covers (markers and the whitespace around them included)."""

    text: str
    reasoning: bool
    consumed: int


class ReasoningSplitter:
    """Splits a streamed reply into reasoning and answer. Text that may be the start of a
    marker is held until the next piece says whether it is one."""

    def __init__(self, markers: ReasoningMarkers, inside: bool = False) -> None:
        self.markers = markers
        self.inside = inside  # in the reasoning block now
        self.started = inside  # a reasoning block was opened
        self.closed = False  # it was closed: the rest is answer
        self._answered = False  # answer text came before any marker: no reasoning here
        self._held = ""
        self._strip = inside  # whitespace after a marker is not part of the next text

    @staticmethod
    def prompt_opens(prompt: str, markers: ReasoningMarkers) -> bool:
        """Whether the generation prompt leaves the reply inside the reasoning block."""
        return prompt.rstrip().endswith(markers.open)

    def feed(self, text: str) -> list[Part]:
        parts: list[Part] = []
        raw = self._held + text
        self._held = ""
        while raw:
            if self.closed or self._answered:
                parts.append(self._part(raw, False))
                break
            marker = self.markers.close if self.inside else self.markers.open
            at = raw.find(marker)
            if at >= 0:
                before = raw[:at]
                if not self.inside and before.strip():  # answer text first: no reasoning
                    self._answered = True
                    continue
                if self.inside:
                    parts.append(self._part(before, True, at + len(marker)))
                    self.inside, self.closed = False, True
                else:
                    parts.append(Part("", False, at + len(marker)))
                    self.inside = self.started = True
                self._strip = True
                raw = raw[at + len(marker):]
                continue
            keep = _partial_suffix(raw, marker)
            body, self._held = raw[: len(raw) - keep], raw[len(raw) - keep:]
            if not self.inside and body.strip():
                self._answered = True
                parts.append(self._part(body, False))
            elif body:
                parts.append(self._part(body, self.inside))
            break
        return [p for p in parts if p.text or p.consumed]

    def finish(self) -> list[Part]:
        """What was held back, at the reply's end (a marker never completed is text)."""
        held, self._held = self._held, ""
        return [self._part(held, self.inside)] if held else []

    def _part(self, text: str, reasoning: bool, consumed: int | None = None) -> Part:
        n = len(text) if consumed is None else consumed
        if self._strip:
            stripped = text.lstrip()
            if stripped or consumed is not None:
                self._strip = False
            text = stripped
        return Part(text, reasoning, n)


def _partial_suffix(text: str, marker: str) -> int:
    """The length of the longest end of `text` that is a proper start of `marker`."""
    for n in range(min(len(marker) - 1, len(text)), 0, -1):
        if text.endswith(marker[:n]):
            return n
    return 0
