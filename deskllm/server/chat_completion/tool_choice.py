"""What a request's `tools` and `tool_choice` ask of the engine: the tools for the chat
template, whether to read calls from the reply, and for `required` or a named function the
JSON schema of a call, which the engine enforces with a grammar (the json_schema path)."""

from __future__ import annotations

import json
from dataclasses import dataclass

from deskllm.server import errors
from deskllm.server.chat_completion.protocol import ChatCompletionRequest


@dataclass(frozen=True)
class ToolPlan:
    tools_json: str | None  # given to the chat template; None: no tools in the prompt
    names: frozenset[str]  # the functions a call may name
    forced_schema: str | None  # a call's schema when the reply must be one
    parse_calls: bool  # read calls from the reply

    @property
    def forced(self) -> bool:
        return self.forced_schema is not None


NO_TOOLS = ToolPlan(None, frozenset(), None, False)


def plan_tools(req: ChatCompletionRequest) -> ToolPlan:
    """Raises ApiError (400) for a tool_choice that cannot be met."""
    choice = req.tool_choice
    if not req.tools:
        if choice not in (None, "none"):
            raise errors.bad_request("tool_choice needs tools.", param="tool_choice")
        return NO_TOOLS
    functions = {t.function.name: t.function for t in req.tools}
    if len(functions) < len(req.tools):
        raise errors.bad_request("Two tools have the same name.", param="tools")
    if choice == "none":
        return NO_TOOLS
    tools_json = json.dumps([t.model_dump(exclude_none=True, by_alias=True) for t in req.tools])
    names = frozenset(functions)
    if choice in (None, "auto"):
        return ToolPlan(tools_json, names, None, True)
    if req.response_format is not None and req.response_format.type != "text":
        raise errors.bad_request("tool_choice required or a named function cannot be combined "
                                 "with response_format.", param="response_format")  # fmt: skip
    if choice == "required":
        chosen = list(functions)
    else:
        name = choice.function.name
        if name not in functions:
            raise errors.bad_request(f"tool_choice names {name!r}, which is not in tools.",
                                     param="tool_choice")  # fmt: skip
        chosen = [name]
    schemas = [call_schema(name, functions[name].parameters) for name in chosen]
    schema = schemas[0] if len(schemas) == 1 else {"anyOf": schemas}
    return ToolPlan(tools_json, frozenset(chosen), json.dumps(schema), True)


def call_schema(name: str, parameters: dict | None) -> dict:
    """One call as the Llama 3.x JSON style writes it, which the parser reads."""
    return {
        "type": "object",
        "properties": {"name": {"const": name}, "arguments": parameters or {"type": "object"}},
        "required": ["name", "arguments"],
        "additionalProperties": False,
    }
