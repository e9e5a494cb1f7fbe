"""Tool calls read from a model's own text, in the three formats models are trained on:

- Hermes / Qwen: `<tool_call>{"name": ..., "arguments": {...}}</tool_call>`, one tag per call,
  text around them is the reply's content;
- Llama 3.x: the whole reply is JSON, `{"name": ..., "parameters": {...}}` (after
  `<|python_tag|>` for some), several separated by `;`; a list of them is read too;
- Mistral: `[TOOL_CALLS]` then a JSON list of `{"name", "arguments"}` (v3), or
  `[TOOL_CALLS]name[ARGS]{...}` (v11 and later). Where the tokenizer hides the marker (a
  control token), what is left is the bare JSON list, read as Llama's.

ToolCallStream holds back streamed text from where a call may begin, so no call is sent as
content. Only calls to the request's functions count: a reply naming another function is
left as text.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

HERMES_CALL = re.compile(r"<tool_call>\s*(.*?)\s*(?:</tool_call>|$)", re.S)
MISTRAL = "[TOOL_CALLS]"
MISTRAL_V11 = re.compile(r"([A-Za-z0-9_.-]+)\[ARGS\]")
PYTHON_TAG = "<|python_tag|>"
MARKERS = ("<tool_call>", MISTRAL, PYTHON_TAG)


@dataclass(frozen=True)
class ToolCall:
    name: str
    arguments: str  # JSON text, as OpenAI sends it

    def arguments_object(self) -> dict:
        """The arguments as an object, as Anthropic's and Ollama's APIs give them; arguments
        that are not a JSON object are given whole under "arguments"."""
        try:
            arguments = json.loads(self.arguments)
        except json.JSONDecodeError:
            return {"arguments": self.arguments}
        return arguments if isinstance(arguments, dict) else {"arguments": arguments}


@dataclass(frozen=True)
class ParsedReply:
    content: str | None  # text outside the calls; None when there is none
    calls: tuple[ToolCall, ...]


def parse_tool_calls(text: str, names: set[str] | frozenset[str]) -> ParsedReply:
    """The calls in a reply (to functions in `names`) and the text around them. A reply with
    no readable call is all content."""
    plain = ParsedReply(text or None, ())
    if "<tool_call>" in text:
        calls = [_call(_json(body)) for body in HERMES_CALL.findall(text)]
        content = HERMES_CALL.sub("", text).strip() or None
    elif MISTRAL in text:
        head, _, tail = text.partition(MISTRAL)
        calls = _mistral(tail.strip())
        content = head.strip() or None
    else:
        calls = _json_calls(text.replace(PYTHON_TAG, "", 1).strip())
        content = None
    if not calls or any(c is None or c.name not in names for c in calls):
        return plain
    return ParsedReply(content, tuple(calls))


def _json(body: str) -> object:
    try:
        return json.loads(body)
    except ValueError:
        return None


def _call(data: object) -> ToolCall | None:
    """One call from `{"name", "arguments"}` (or Llama's `"parameters"`); arguments given as
    JSON text are kept as they are if they are JSON."""
    if not isinstance(data, dict) or not isinstance(data.get("name"), str):
        return None
    arguments = data.get("arguments", data.get("parameters", {}))
    if isinstance(arguments, str) and _json(arguments) is not None:
        return ToolCall(data["name"], arguments)
    return ToolCall(data["name"], json.dumps(arguments, ensure_ascii=False))


def _json_calls(text: str) -> list[ToolCall | None]:
    """The reply as nothing but JSON calls: one object, a list, or objects separated by `;`
    (Llama 3.x). Anything else in it and it is not a call."""
    if not text.startswith(("{", "[")):
        return []
    decoder, found, i = json.JSONDecoder(), [], 0
    while i < len(text):
        try:
            value, i = decoder.raw_decode(text, i)
        except ValueError:
            return []
        found.extend(value if isinstance(value, list) else [value])
        while i < len(text) and text[i] in " \t\r\n;":
            i += 1
    return [_call(v) for v in found]


def _mistral(tail: str) -> list[ToolCall | None]:
    if tail.startswith(("[", "{")):
        return _json_calls(tail)
    calls: list[ToolCall | None] = []
    decoder = json.JSONDecoder()
    while (m := MISTRAL_V11.match(tail)) is not None:
        try:
            arguments, end = decoder.raw_decode(tail, m.end())
        except ValueError:
            return [None]
        calls.append(ToolCall(m.group(1), json.dumps(arguments, ensure_ascii=False)))
        tail = tail[end:].lstrip()
        tail = tail.removeprefix(MISTRAL).lstrip()
    return calls if not tail else [None]


class ToolCallStream:
    """Streamed text with tool calls held back. `feed` returns the text that can go out as
    content now; `finish` reads what was held: the calls, and content not yet sent.
    `calls_only` (tool_choice required or a named function: a grammar makes the whole reply
    one JSON call) holds everything."""

    def __init__(self, names: set[str] | frozenset[str], calls_only: bool = False) -> None:
        self.names = names
        self.capturing = calls_only
        self.held = ""
        self.sent_any = False

    def feed(self, text: str) -> str:
        self.held += text
        if self.capturing:
            return ""
        if not self.sent_any:
            start = self.held.lstrip()
            if not start or start.startswith(("{", "[")):  # a JSON call (Llama) may begin
                self.capturing = bool(start)
                return ""
        found = [i for m in MARKERS if (i := self.held.find(m)) != -1]
        if found:
            out, self.held = self.held[: min(found)], self.held[min(found) :]
            self.capturing = True
        else:
            keep = _marker_prefix_len(self.held)
            out, self.held = self.held[: len(self.held) - keep], self.held[len(self.held) - keep :]
        self.sent_any = self.sent_any or bool(out)
        return out

    def finish(self) -> ParsedReply:
        held, self.held = self.held, ""
        if not self.capturing:
            return ParsedReply(held or None, ())
        return parse_tool_calls(held, self.names)


def _marker_prefix_len(text: str) -> int:
    """The longest tail of `text` that a marker starts with (it may go on to be one)."""
    best = 0
    for marker in MARKERS:
        for n in range(min(len(marker) - 1, len(text)), best, -1):
            if marker.startswith(text[-n:]):
                best = n
                break
    return best


def openai_calls(calls: list[tuple[str, str, dict]]) -> str:
    """An assistant turn's calls (id, name, arguments) as the chat template takes them:
    OpenAI's list, as JSON."""
    return json.dumps([{"id": i, "type": "function", "function": {
        "name": name, "arguments": json.dumps(args)}} for i, name, args in calls])  # fmt: skip


def call_schema(name: str, parameters: dict | None) -> dict:
    """One call as the Llama 3.x JSON style writes it, which the parser reads."""
    return {
        "type": "object",
        "properties": {"name": {"const": name}, "arguments": parameters or {"type": "object"}},
        "required": ["name", "arguments"],
        "additionalProperties": False,
    }
