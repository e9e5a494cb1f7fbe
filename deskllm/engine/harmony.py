"""gpt-oss's "harmony" format, read as the other formats are: its messages are framed by
control tokens (`<|start|>`, `<|channel|>`, `<|message|>`, `<|end|>`, `<|call|>`), the
channel says what a message is (`analysis`: thinking; `final`: the answer; a `commentary`
message addressed `to=functions.NAME`: a tool call). HarmonyStream turns the reply, with its
control tokens written out, into `<think>…</think>`, the answer, and `<tool_call>{"name",
"arguments"}</tool_call>`, so the reasoning splitter and the tool-call parser read gpt-oss
like any model. A reply starts after the generation prompt's `<|start|>assistant`: in a
message's header."""

from __future__ import annotations

import json
import re

START, CHANNEL, CONSTRAIN, MESSAGE = "<|start|>", "<|channel|>", "<|constrain|>", "<|message|>"
END, CALL, RETURN = "<|end|>", "<|call|>", "<|return|>"
TOKENS = (START, CHANNEL, CONSTRAIN, MESSAGE, END, CALL, RETURN)
# What the engine feeds a gpt-oss model to end its thinking (a reasoning budget).
CLOSE_THINKING = f"{END}{START}assistant{CHANNEL}final{MESSAGE}"
MAX_HEADER = 200  # characters: a header is a role, a channel and a recipient
_RECIPIENT = re.compile(r"to=functions\.([\w.\-]+)")


def is_harmony(template: str | None) -> bool:
    """Whether a chat template writes harmony messages (gpt-oss's)."""
    return bool(template) and f"{CHANNEL}analysis{MESSAGE}" in template


class HarmonyStream:
    def __init__(self) -> None:
        self._held = ""  # text that may be the start of a control token
        self._header = ""  # the header being read (None-like "" while in a message body)
        self._in_header = True
        self._mode = "answer"  # the body being read: "thinking", "answer" or "call"
        self._thinking_open = False
        self._thought = False  # a thinking block was written (a second one is answer text)
        self._framed = False  # a control token came: the reply is framed

    def feed(self, text: str) -> str:
        out: list[str] = []
        raw = self._held + text
        self._held = ""
        while raw:
            at = raw.find("<|")
            if at == -1:
                keep = 1 if raw.endswith("<") else 0  # "<" may begin a control token
                self._text(raw[: len(raw) - keep], out)
                self._held = raw[len(raw) - keep :]
                break
            self._text(raw[:at], out)
            raw = raw[at:]
            token = next((t for t in TOKENS if raw.startswith(t)), None)
            if token is None:
                if any(t.startswith(raw) for t in TOKENS):
                    self._held = raw  # its end comes with the next piece
                    break
                self._text(raw[:2], out)  # "<|" that starts no control token
                raw = raw[2:]
                continue
            self._token(token, out)
            raw = raw[len(token):]
        return "".join(out)

    def finish(self) -> str:
        """What closes the reply: an open thinking block or call (the model stopped at
        `<|call|>` or `<|return|>`, end-of-generation tokens the engine does not print)."""
        out = [self._held] if self._held and not self._in_header else []
        if self._in_header and not self._framed:
            out.append(self._header + self._held)  # text that only began like a header
        self._held = ""
        self._close(out)
        return "".join(out)

    def _text(self, text: str, out: list[str]) -> None:
        if not text:
            return
        if not self._in_header:
            out.append(text)
            return
        self._header += text
        start = self._header.lstrip()
        if not self._framed and start and not ("to=".startswith(start[:3])):
            # The reply begins with text, not a frame (a model that writes none): answer.
            out.append(self._header)
            self._header, self._in_header, self._mode = "", False, "answer"
            return
        plain = self._header
        for token in TOKENS:
            plain = plain.replace(f" {token} ", "")
        if len(plain) > MAX_HEADER or "\n" in plain:
            # Not a header (a model that writes no frames): answer text, shown as it is.
            out.append(plain)
            self._header, self._in_header, self._mode = "", False, "answer"

    def _token(self, token: str, out: list[str]) -> None:
        self._framed = True
        if token == MESSAGE and self._in_header:
            self._open(self._header, out)
            self._header, self._in_header = "", False
        elif token in (START, CHANNEL, CONSTRAIN):
            if not self._in_header:
                self._close(out)
                self._header, self._in_header = "", True
            self._header += " " + token + " "
        elif token in (END, CALL, RETURN):
            self._close(out)
            self._header, self._in_header = "", True

    def _open(self, header: str, out: list[str]) -> None:
        recipient = _RECIPIENT.search(header)
        channel = header.split(CHANNEL, 1)[1].split()[0] if CHANNEL in header else ""
        if recipient:
            out.append('<tool_call>{"name": ' + json.dumps(recipient.group(1)) + ', "arguments": ')
            self._mode = "call"
        elif channel == "analysis" and not self._thought:
            out.append("<think>")
            self._mode, self._thinking_open, self._thought = "thinking", True, True
        else:
            self._mode = "answer"

    def _close(self, out: list[str]) -> None:
        if self._mode == "call":
            out.append("}</tool_call>")
        elif self._thinking_open:
            out.append("</think>")
            self._thinking_open = False
        self._mode = "answer"
