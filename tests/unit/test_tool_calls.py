"""Tool calls read from model output (one test per format), held back from streamed text,
and what tools / tool_choice ask of the engine."""

import json

import pytest

from deskllm.engine.tool_calls import (
    ToolCall,
    ToolCallStream,
    parse_tool_calls,
)
from deskllm.server.chat_completion.protocol import ChatCompletionRequest
from deskllm.server.chat_completion.tool_choice import NO_TOOLS, plan_tools
from deskllm.server.errors import ApiError

NAMES = frozenset({"get_weather", "get_time"})
WEATHER = {"city": "Paris", "unit": "celsius"}


def test_hermes_qwen_tool_call_tags():
    text = (
        "Let me look.\n<tool_call>\n"
        '{"name": "get_weather", "arguments": {"city": "Paris", "unit": "celsius"}}\n'
        "</tool_call>\n<tool_call>\n"
        '{"name": "get_time", "arguments": {"zone": "CET"}}\n</tool_call>'
    )
    parsed = parse_tool_calls(text, NAMES)
    assert parsed.content == "Let me look."
    assert [c.name for c in parsed.calls] == ["get_weather", "get_time"]
    assert json.loads(parsed.calls[0].arguments) == WEATHER
    assert json.loads(parsed.calls[1].arguments) == {"zone": "CET"}


def test_hermes_call_cut_before_its_closing_tag_still_counts():
    parsed = parse_tool_calls('<tool_call>\n{"name": "get_time", "arguments": {}}', NAMES)
    assert parsed.calls == (ToolCall("get_time", "{}"),) and parsed.content is None


def test_llama3_json_with_parameters():
    text = (
        '<|python_tag|>{"name": "get_weather", "parameters": {"city": "Paris", "unit": "celsius"}}'
    )
    parsed = parse_tool_calls(text, NAMES)
    assert parsed.content is None
    assert [c.name for c in parsed.calls] == ["get_weather"]
    assert json.loads(parsed.calls[0].arguments) == WEATHER
    # Several calls separated by ";", without the tag (a control token the tokenizer hid).
    two = '{"name": "get_time", "parameters": {}}; {"name": "get_weather", "parameters": {}}'
    assert [c.name for c in parse_tool_calls(two, NAMES).calls] == ["get_time", "get_weather"]


def test_mistral_tool_calls_list_and_v11_form():
    text = (
        '[TOOL_CALLS][{"name": "get_weather", "arguments": {"city": "Paris", "unit": "celsius"}}]'
    )
    [call] = parse_tool_calls(text, NAMES).calls
    assert call.name == "get_weather" and json.loads(call.arguments) == WEATHER
    v11 = '[TOOL_CALLS]get_time[ARGS]{"zone": "UTC"}[TOOL_CALLS]get_weather[ARGS]{"city": "Oslo"}'
    calls = parse_tool_calls(v11, NAMES).calls
    assert [(c.name, json.loads(c.arguments)) for c in calls] == [
        ("get_time", {"zone": "UTC"}),
        ("get_weather", {"city": "Oslo"}),
    ]
    # The marker hidden by the tokenizer: the bare list.
    bare = '[{"name": "get_time", "arguments": {"zone": "UTC"}}]'
    assert [c.name for c in parse_tool_calls(bare, NAMES).calls] == ["get_time"]


@pytest.mark.parametrize(
    "text",
    [
        "The weather in Paris is mild.",
        '{"city": "Paris"}',  # JSON, but not a call
        '{"name": "delete_everything", "arguments": {}}',  # not one of the request's tools
        '<tool_call>{"name": "get_time", "arguments": </tool_call>',  # broken JSON
        '{"name": "get_time", "arguments": {}} and then some words',
    ],
)
def test_text_that_is_not_a_call_stays_content(text):
    parsed = parse_tool_calls(text, NAMES)
    assert parsed.calls == () and parsed.content == text


def test_arguments_given_as_json_text_are_kept():
    [call] = parse_tool_calls(
        '{"name": "get_time", "arguments": "{\\"zone\\": \\"UTC\\"}"}', NAMES
    ).calls
    assert call.arguments == '{"zone": "UTC"}'


def feed_all(stream: ToolCallStream, pieces: list[str]) -> str:
    return "".join(stream.feed(p) for p in pieces)


def test_stream_sends_text_and_holds_a_hermes_call():
    stream = ToolCallStream(NAMES)
    pieces = ["Sure", ", checking", ". <tool", "_call>\n", '{"name": "get_time", ',
              '"arguments": {}}\n</tool_call>']  # fmt: skip
    sent = feed_all(stream, pieces)
    assert sent == "Sure, checking. "
    parsed = stream.finish()
    assert parsed.calls == (ToolCall("get_time", "{}"),)


def test_stream_holds_a_leading_json_call_and_lets_plain_text_through():
    stream = ToolCallStream(NAMES)
    assert feed_all(stream, ["  ", '{"name": "get_time",', ' "parameters": {}}']) == ""
    assert stream.finish().calls == (ToolCall("get_time", "{}"),)
    plain = ToolCallStream(NAMES)
    assert feed_all(plain, ["Hello", " there", " <"]) == "Hello there "
    assert plain.finish().content == "<"  # a held possible marker start goes out at the end


def test_stream_gives_back_held_text_that_was_not_a_call():
    stream = ToolCallStream(NAMES)
    assert feed_all(stream, ['{"answer": 4}']) == ""
    parsed = stream.finish()
    assert parsed.calls == () and parsed.content == '{"answer": 4}'


def request(**fields) -> ChatCompletionRequest:
    tools = [
        {"type": "function", "function": {"name": "get_weather", "parameters": {
            "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}},
        {"type": "function", "function": {"name": "get_time"}},
    ]  # fmt: skip
    return ChatCompletionRequest.model_validate(
        {"model": "m", "messages": [{"role": "user", "content": "hi"}], "tools": tools, **fields}
    )


def test_tool_choice_plans():
    auto = plan_tools(request())
    assert auto.parse_calls and not auto.forced and auto.names == NAMES
    assert [t["function"]["name"] for t in json.loads(auto.tools_json)] == [
        "get_weather", "get_time"]  # fmt: skip
    assert plan_tools(request(tool_choice="none")) == NO_TOOLS
    required = json.loads(plan_tools(request(tool_choice="required")).forced_schema)
    assert [s["properties"]["name"]["const"] for s in required["anyOf"]] == [
        "get_weather", "get_time"]  # fmt: skip
    named = plan_tools(
        request(tool_choice={"type": "function", "function": {"name": "get_weather"}})
    )
    schema = json.loads(named.forced_schema)
    assert schema["properties"]["name"] == {"const": "get_weather"}
    assert schema["properties"]["arguments"]["required"] == ["city"]
    assert named.names == {"get_weather"}


@pytest.mark.parametrize(
    "fields",
    [
        {"tool_choice": {"type": "function", "function": {"name": "nope"}}},
        {"tool_choice": "required", "response_format": {"type": "json_object"}},
    ],
)
def test_tool_choice_that_cannot_be_met_is_400(fields):
    with pytest.raises(ApiError) as caught:
        plan_tools(request(**fields))
    assert caught.value.status == 400


def test_tool_choice_without_tools_is_400():
    req = ChatCompletionRequest.model_validate(
        {"model": "m", "messages": [{"role": "user", "content": "hi"}], "tool_choice": "required"}
    )
    with pytest.raises(ApiError):
        plan_tools(req)


TWO_CALLS = (
    '<tool_call>{"name": "get_weather", "arguments": {"city": "Paris"}}</tool_call>'
    '<tool_call>{"name": "get_time", "arguments": {"zone": "CET"}}</tool_call>'
)


def test_parallel_tool_calls_false_gives_the_first_call_only():
    assert [c.name for c in plan_tools(request()).read(TWO_CALLS).calls] == [
        "get_weather", "get_time"]  # fmt: skip
    one = plan_tools(request(parallel_tool_calls=False))
    assert [c.name for c in one.read(TWO_CALLS).calls] == ["get_weather"]
    stream = ToolCallStream(one.names)
    assert stream.feed(TWO_CALLS) == ""
    assert [c.name for c in one.limit(stream.finish()).calls] == ["get_weather"]
    assert one.read("just text").calls == () and one.read("just text").content == "just text"


def test_anthropic_disable_parallel_tool_use_gives_the_first_call_only():
    from deskllm.server.messages.protocol import MessagesRequest
    from deskllm.server.messages.serving import plan_tools as plan_messages

    def messages_request(**choice) -> MessagesRequest:
        tools = [{"name": n, "input_schema": {"type": "object"}} for n in sorted(NAMES)]
        return MessagesRequest.model_validate({
            "model": "m", "max_tokens": 8, "messages": [{"role": "user", "content": "hi"}],
            "tools": tools, "tool_choice": {"type": "auto", **choice}})  # fmt: skip

    assert len(plan_messages(messages_request()).read(TWO_CALLS).calls) == 2
    one = plan_messages(messages_request(disable_parallel_tool_use=True))
    assert [c.name for c in one.read(TWO_CALLS).calls] == ["get_weather"]
