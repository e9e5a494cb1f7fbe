# ruff: noqa: E501 (a published template, kept as written)
"""Tools in the prompt: given to a template that knows them (a Qwen 2.5 template), described
in the system message for one that does not (SmolLM2's), and for the ChatML fallback."""

import json

from deskllm.engine.chat_template import ChatTemplate
from deskllm.engine.domain import ChatMessage

SMOLLM2 = (
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
    "{{ '<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging "
    "Face<|im_end|>\n' }}{% endif %}{{'<|im_start|>' + message['role'] + '\n' + "
    "message['content'] + '<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}"
    "{{ '<|im_start|>assistant\n' }}{% endif %}"
)

# Qwen 2.5's template, its tool parts as published (shortened system text).
QWEN25 = """{%- if tools %}
    {{- '<|im_start|>system\\n' }}
    {%- if messages[0]['role'] == 'system' %}{{- messages[0]['content'] }}{%- else %}{{- 'You are Qwen.' }}{%- endif %}
    {{- "\\n\\n# Tools\\n\\n<tools>" }}
    {%- for tool in tools %}{{- "\\n" }}{{- tool | tojson }}{%- endfor %}
    {{- "\\n</tools><|im_end|>\\n" }}
{%- else %}
    {%- if messages[0]['role'] == 'system' %}{{- '<|im_start|>system\\n' + messages[0]['content'] + '<|im_end|>\\n' }}{%- endif %}
{%- endif %}
{%- for message in messages %}
    {%- if (message.role == "user") or (message.role == "system" and not loop.first) or (message.role == "assistant" and not message.tool_calls) %}
        {{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>' + '\\n' }}
    {%- elif message.role == "assistant" %}
        {{- '<|im_start|>' + message.role }}
        {%- if message.content %}{{- '\\n' + message.content }}{%- endif %}
        {%- for tool_call in message.tool_calls %}
            {%- if tool_call.function is defined %}{%- set tool_call = tool_call.function %}{%- endif %}
            {{- '\\n<tool_call>\\n{"name": "' }}{{- tool_call.name }}{{- '", "arguments": ' }}{{- tool_call.arguments | tojson }}{{- '}\\n</tool_call>' }}
        {%- endfor %}
        {{- '<|im_end|>\\n' }}
    {%- elif message.role == "tool" %}
        {%- if (loop.index0 == 0) or (messages[loop.index0 - 1].role != "tool") %}{{- '<|im_start|>user' }}{%- endif %}
        {{- '\\n<tool_response>\\n' }}{{- message.content }}{{- '\\n</tool_response>' }}
        {%- if loop.last or (messages[loop.index0 + 1].role != "tool") %}{{- '<|im_end|>\\n' }}{%- endif %}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}
"""

TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}}}}}]  # fmt: skip
CALL = [{"id": "call_1", "type": "function",
         "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}]  # fmt: skip
HISTORY = (
    ChatMessage("system", "Be brief."),
    ChatMessage("user", "Weather in Paris?"),
    ChatMessage("assistant", "", tool_calls_json=json.dumps(CALL)),
    ChatMessage("tool", "18 C, sunny", tool_call_id="call_1", name="get_weather"),
)


def test_a_template_that_knows_tools_gets_them_and_the_calls():
    template = ChatTemplate(QWEN25)
    assert template.knows_tools()
    rendered = template.render(HISTORY, tools=TOOLS)
    assert rendered.source == "model" and rendered.warning is None
    assert "# Tools" in rendered.text and '"name": "get_weather"' in rendered.text
    # The call's arguments reach the template as a mapping (HF's convention), so its tojson
    # writes them as JSON, not as a quoted string.
    assert '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}' in rendered.text
    assert "<|im_start|>user\n<tool_response>\n18 C, sunny\n</tool_response><|im_end|>" in (
        rendered.text
    )
    assert rendered.text.endswith("<|im_start|>assistant\n")


def test_a_template_without_tools_gets_them_in_the_system_message():
    template = ChatTemplate(SMOLLM2)
    assert not template.knows_tools()
    rendered = template.render(HISTORY, tools=TOOLS)
    assert rendered.source == "model"
    system = rendered.text.split("<|im_end|>")[0]
    assert system.startswith("<|im_start|>system\nBe brief.\n\nYou may call one or more")
    assert json.dumps(TOOLS[0]) in system and "<tool_call>" in system
    assert ('<|im_start|>assistant\n<tool_call>\n{"name": "get_weather", "arguments": '
            '{"city": "Paris"}}\n</tool_call><|im_end|>') in rendered.text  # fmt: skip
    assert "<|im_start|>user\n<tool_response>\n18 C, sunny\n</tool_response>" in rendered.text


def test_no_template_falls_back_to_chatml_with_tools_in_text():
    rendered = ChatTemplate(None).render(HISTORY[:2], tools=TOOLS)
    assert rendered.source == "fallback"
    assert rendered.text.startswith("<|im_start|>system\nBe brief.\n\nYou may call")


def test_without_tools_the_prompt_is_unchanged():
    plain = (ChatMessage("user", "Hi"),)
    template = ChatTemplate(QWEN25)
    assert template.render(plain).text == "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"
    assert template._knows_tools is None  # not even probed
