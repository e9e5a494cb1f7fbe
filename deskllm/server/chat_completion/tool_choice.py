"""What a request's `tools` and `tool_choice` ask of the engine: the tools for the chat
template, whether to read calls from the reply, and for `required` or a named function the
JSON schema of a call, which the engine enforces with a grammar (the json_schema path)."""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass

from deskllm.engine.tool_calls import ParsedReply, call_schema, parse_tool_calls
from deskllm.server import errors
from deskllm.server.chat_completion.protocol import ChatCompletionRequest


@dataclass(frozen=True)
class ToolPlan:
    tools_json: str | None  # given to the chat template; None: no tools in the prompt
    names: frozenset[str]  # the functions a call may name
    forced_schema: str | None  # a call's schema when the reply must be one
    parse_calls: bool  # read calls from the reply
    # parallel_tool_calls false (OpenAI), disable_parallel_tool_use (Anthropic): only the
    # reply's first call is given.
    one_call: bool = False

    @property
    def forced(self) -> bool:
        return self.forced_schema is not None

    def read(self, text: str) -> ParsedReply:
        """A finished reply's calls and content."""
        return self.limit(parse_tool_calls(text, self.names) if self.parse_calls
                          else ParsedReply(text, ()))  # fmt: skip

    def limit(self, parsed: ParsedReply) -> ParsedReply:
        return dataclasses.replace(parsed, calls=parsed.calls[:1]) if self.one_call else parsed


NO_TOOLS = ToolPlan(None, frozenset(), None, False)


def plan_tools(req: ChatCompletionRequest) -> ToolPlan:
    """Raises ApiError (400) for a tool_choice that cannot be met."""
    plan = _plan(req)
    return dataclasses.replace(plan, one_call=req.parallel_tool_calls is False)


def _plan(req: ChatCompletionRequest) -> ToolPlan:
    choice = req.tool_choice
    if not req.tools:
        if choice not in (None, "none"):
            raise errors.bad_request("tool_choice needs tools.", param="tool_choice")
        return NO_TOOLS
    params = parameters(req)
    if len(params) < len(req.tools):
        raise errors.bad_request("Two tools have the same name.", param="tools")
    if choice == "none":
        return NO_TOOLS
    tools_json = json.dumps([t.model_dump(exclude_none=True, by_alias=True) for t in req.tools])
    if choice in (None, "auto"):
        return tool_plan(tools_json, params)
    if req.response_format is not None and req.response_format.type != "text":
        raise errors.bad_request("tool_choice required or a named function cannot be combined "
                                 "with response_format.", param="response_format")  # fmt: skip
    if choice == "required":
        return tool_plan(tools_json, params, required=True)
    return tool_plan(tools_json, params, name=choice.function.name)


def parameters(req: ChatCompletionRequest) -> dict[str, dict | None]:
    return {t.function.name: t.function.parameters for t in req.tools or ()}


def tool_plan(
    tools_json: str,
    parameters: dict[str, dict | None],
    *,
    required: bool = False,
    name: str | None = None,
) -> ToolPlan:
    """Tools in the prompt and calls read from the reply. `required`, or a function's `name`:
    the reply must be a call (to any of the tools, or to that one), which the engine enforces
    with the call's JSON schema. Both APIs' tool choices come to this. Raises ApiError (400)
    for a name not in `parameters`."""
    if name is not None and name not in parameters:
        raise errors.bad_request(f"tool_choice names {name!r}, which is not in tools.",
                                 param="tool_choice")  # fmt: skip
    if not required and name is None:
        return ToolPlan(tools_json, frozenset(parameters), None, True)
    chosen = [name] if name is not None else list(parameters)
    schemas = [call_schema(n, parameters[n]) for n in chosen]
    schema = schemas[0] if len(schemas) == 1 else {"anyOf": schemas}
    return ToolPlan(tools_json, frozenset(chosen), json.dumps(schema), True)
