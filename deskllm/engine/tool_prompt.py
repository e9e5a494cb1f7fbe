"""Tools in the prompt, for chat templates that know them and for those that do not.

A template that knows tools (Qwen, Hermes, Llama 3.x, Mistral...) gets them as HF's chat
templates expect: `tools` in the context, assistant turns with `tool_calls` (arguments as a
mapping) and `tool` turns. For one that ignores them (SmolLM2's, ChatML), the tools are
described in the system message with the Hermes format, which is how llama.cpp's generic
handler does it; calls in the history are then written as that format's text, and tool
answers as user turns in `<tool_response>` tags.
"""

from __future__ import annotations

import contextlib
import json
from typing import Any

from deskllm.engine.domain import ChatMessage

HERMES_SYSTEM = (
    "You may call one or more functions to assist with the user query. The functions are "
    "described within <tools></tools> XML tags:\n<tools>\n{tools}\n</tools>\n\n"
    "For each function call, return a JSON object with the function name and arguments "
    "within <tool_call></tool_call> XML tags:\n<tool_call>\n"
    '{{"name": <function-name>, "arguments": <args-json-object>}}\n</tool_call>'
)


def calls_of(message: ChatMessage) -> list[dict[str, Any]]:
    """An assistant turn's tool calls as templates expect them: each function's arguments
    as a mapping (OpenAI sends them as JSON text), left as text where they are not JSON."""
    if not message.tool_calls_json:
        return []
    calls = []
    for call in json.loads(message.tool_calls_json):
        function = dict(call.get("function") or {})
        arguments = function.get("arguments")
        if isinstance(arguments, str):
            with contextlib.suppress(ValueError):
                function["arguments"] = json.loads(arguments)
        calls.append({**call, "function": function})
    return calls


def message_dict(message: ChatMessage) -> dict[str, Any]:
    """A message as a template reads it: the tool fields only where the message has them."""
    data: dict[str, Any] = {"role": message.role, "content": message.content}
    if message.tool_calls_json:
        data["tool_calls"] = calls_of(message)
    if message.tool_call_id is not None:
        data["tool_call_id"] = message.tool_call_id
    if message.name is not None:
        data["name"] = message.name
    return data


def hermes_call_text(message: ChatMessage) -> str:
    """An assistant turn's calls written out in the Hermes format, after its text."""
    parts = [message.content] if message.content else []
    for call in calls_of(message):
        function = call.get("function") or {}
        body = {"name": function.get("name"), "arguments": function.get("arguments", {})}
        parts.append(f"<tool_call>\n{json.dumps(body, ensure_ascii=False)}\n</tool_call>")
    return "\n".join(parts)


def tools_in_text(
    messages: list[ChatMessage] | tuple[ChatMessage, ...], tools: list[dict] | None
) -> list[ChatMessage]:
    """The conversation for a template that does not know tools: the tools described in the
    system message (added when there is none), calls and answers written as plain text."""
    out: list[ChatMessage] = []
    for m in messages:
        if m.role == "assistant" and m.tool_calls_json:
            out.append(ChatMessage("assistant", hermes_call_text(m)))
        elif m.role == "tool":
            out.append(ChatMessage("user", f"<tool_response>\n{m.content}\n</tool_response>"))
        else:
            out.append(ChatMessage(m.role, m.content))
    if tools:
        listed = "\n".join(json.dumps(t, ensure_ascii=False) for t in tools)
        described = HERMES_SYSTEM.format(tools=listed)
        if out and out[0].role == "system":
            out[0] = ChatMessage("system", f"{out[0].content}\n\n{described}")
        else:
            out.insert(0, ChatMessage("system", described))
    return out


def tools_of(request: object) -> list[dict] | None:
    """A Chat request's tools (sent as JSON text: the pipe carries plain values)."""
    text = getattr(request, "tools_json", None)
    return json.loads(text) if text else None
