"""gpt-oss's harmony frames read as the other formats: thinking (the analysis channel) as
`<think>…</think>`, the final channel as the answer, a commentary message to a function as a
`<tool_call>` the tool-call parser reads, whatever the pieces the reply streams in; a reply
without frames shown as it is; the real gpt-oss template (vendored llama.cpp's) recognised and
rendered with tools, a call, its result and the reasoning effort."""

from __future__ import annotations

import glob
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from deskllm.engine.chat_template import ChatTemplate
from deskllm.engine.domain import ChatMessage
from deskllm.engine.harmony import CLOSE_THINKING, HarmonyStream, is_harmony
from deskllm.engine.reasoning import THINK, markers_of
from deskllm.engine.tool_calls import parse_tool_calls

THINK_THEN_ANSWER = ("<|channel|>analysis<|message|>The user wants the time.<|end|>"
                     "<|start|>assistant<|channel|>final<|message|>It is noon.")  # fmt: skip
THINK_THEN_CALL = ("<|channel|>analysis<|message|>Need the tool.<|end|><|start|>assistant"
                   "<|channel|>commentary to=functions.get_current_time <|constrain|>json"
                   '<|message|>{"timezone": "Asia/Tokyo"}')  # fmt: skip
CALL_FIRST = ' to=functions.get_current_time<|channel|>commentary json<|message|>{"timezone":"UTC"}'
ROOT = Path(__file__).resolve().parents[2]
VENDORED = glob.glob(str(ROOT / "build/llama-tools/*/vendor/llama.cpp/models/templates/"
                         "openai-gpt-oss-120b.jinja"))  # fmt: skip


def read(text: str, cuts: list[int]) -> str:
    stream, pieces, last = HarmonyStream(), [], 0
    for cut in sorted(set(cuts)):
        pieces.append(text[last:cut])
        last = cut
    pieces.append(text[last:])
    return "".join(stream.feed(p) for p in pieces) + stream.finish()


@given(st.lists(st.integers(0, len(THINK_THEN_CALL)), max_size=12))
def test_any_split_of_a_reply_reads_the_same(cuts):
    for text in (THINK_THEN_ANSWER, THINK_THEN_CALL, CALL_FIRST):
        assert read(text, cuts) == read(text, [])


def test_thinking_answer_and_calls_become_the_common_forms():
    assert read(THINK_THEN_ANSWER, []) == "<think>The user wants the time.</think>It is noon."
    said = read(THINK_THEN_CALL, [])
    assert said.startswith("<think>Need the tool.</think><tool_call>")
    parsed = parse_tool_calls(said.split("</think>", 1)[1], {"get_current_time"})
    assert [(c.name, c.arguments_object()) for c in parsed.calls] == [
        ("get_current_time", {"timezone": "Asia/Tokyo"})]
    first = parse_tool_calls(read(CALL_FIRST, []), {"get_current_time"})
    assert first.calls[0].arguments_object() == {"timezone": "UTC"}


def test_text_without_frames_and_stray_brackets_are_answer():
    assert read("Hello there, to you.", [3, 7]) == "Hello there, to you."
    assert read("<|channel|>final<|message|>a <|b and <|x|> stay <", [1]) == (
        "a <|b and <|x|> stay <")


def test_markers_of_a_harmony_template():
    template = "{{- '<|start|>assistant<|channel|>analysis<|message|>' + m + '<|end|>' }}"
    assert is_harmony(template) and not is_harmony("<think>")
    markers = markers_of(template, lambda _t: False)
    assert (markers.open, markers.close) == (THINK.open, THINK.close)
    assert markers.model_close == CLOSE_THINKING  # what a budget feeds the model


@pytest.mark.skipif(not VENDORED, reason="the vendored llama.cpp sources are not unpacked "
                    "(packaging/build_llama_server.sh unpacks them)")  # fmt: skip
def test_the_real_gpt_oss_template_renders_tools_calls_and_effort():
    source = Path(VENDORED[0]).read_text(encoding="utf-8")
    template = ChatTemplate(source, "", "")
    assert is_harmony(source) and template.knows_tools()
    tools = [{"type": "function", "function": {
        "name": "get_current_time", "description": "Now.",
        "parameters": {"type": "object",
                       "properties": {"timezone": {"type": "string"}}}}}]  # fmt: skip
    calls = ('[{"id": "call_1", "type": "function", "function": {"name": "get_current_time", '
             '"arguments": "{\\"timezone\\": \\"UTC\\"}"}}]')  # fmt: skip
    history = (ChatMessage("user", "Time?"), ChatMessage("assistant", "", calls),
               ChatMessage("tool", '{"datetime": "12:00"}', tool_call_id="call_1",
                           name="get_current_time"))  # fmt: skip
    rendered = template.render(history, tools=tools, think="high")
    text = rendered.text
    assert "Reasoning: high" in text and "namespace functions" in text
    assert "to=functions.get_current_time<|channel|>commentary json<|message|>" in text
    assert '{"timezone": "UTC"}<|call|>' in text
    assert "<|start|>functions.get_current_time to=assistant<|channel|>commentary" in text
    assert text.endswith("<|start|>assistant")
