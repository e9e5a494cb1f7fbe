"""Reasoning told apart from the answer as a reply streams: the markers found in templates and
vocabularies, the split whatever the pieces, a prompt that opens the block, markers later in
an answer left alone."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from deskllm.engine.reasoning import THINK, ReasoningMarkers, ReasoningSplitter, markers_of

QWEN3 = "{%- if enable_thinking is defined and enable_thinking is false %}<think>\n\n</think>"
DEEPSEEK_R1 = "{% if add_generation_prompt %}<｜Assistant｜><think>\n{% endif %}"


def split(text: str, cuts: list[int], inside: bool = False) -> tuple[str, str, int]:
    splitter = ReasoningSplitter(THINK, inside)
    pieces, last = [], 0
    for cut in sorted(set(cuts)):
        pieces.append(text[last:cut])
        last = cut
    pieces.append(text[last:])
    parts = [p for piece in pieces for p in splitter.feed(piece)] + splitter.finish()
    reasoning = "".join(p.text for p in parts if p.reasoning)
    answer = "".join(p.text for p in parts if not p.reasoning)
    return reasoning, answer, sum(p.consumed for p in parts)


def test_markers_come_from_the_template_or_the_vocabulary():
    assert markers_of(QWEN3, lambda _t: False) == THINK
    assert markers_of(DEEPSEEK_R1, lambda _t: False) == THINK
    assert markers_of("{{ messages }}", lambda t: t == "[/THINK]") == ReasoningMarkers(
        "[THINK]", "[/THINK]")
    assert markers_of("<reasoning>{{ x }}</reasoning>", lambda _t: False) == ReasoningMarkers(
        "<reasoning>", "</reasoning>")
    assert markers_of("{{ bos_token }}{% for m in messages %}{{ m.content }}{% endfor %}",
                      lambda _t: False) is None  # fmt: skip


TEXT = "<think>\nThe user wants a colour. Blue is common.\n</think>\n\nBlue."


@given(st.lists(st.integers(0, len(TEXT)), max_size=12))
def test_any_pieces_split_the_same(cuts):
    reasoning, answer, consumed = split(TEXT, cuts)
    assert reasoning.strip() == "The user wants a colour. Blue is common."
    assert answer == "Blue."
    assert consumed == len(TEXT)


@given(st.lists(st.integers(0, 40), max_size=8))
def test_a_prompt_that_opens_the_block_starts_inside(cuts):
    text = "Thinking about it.</think>\nAn answer."
    reasoning, answer, consumed = split(text, cuts, inside=True)
    assert (reasoning, answer, consumed) == ("Thinking about it.", "An answer.", len(text))
    assert ReasoningSplitter.prompt_opens("<｜Assistant｜><think>\n", THINK)
    assert not ReasoningSplitter.prompt_opens("<think>\n\n</think>\n\n", THINK)


@given(st.lists(st.integers(0, 60), max_size=8))
def test_a_marker_inside_an_answer_is_answer_text(cuts):
    text = "Use the <think> tag in HTML? There is no such tag.</think> done"
    assert split(text, cuts) == ("", text, len(text))


def test_a_reply_without_markers_is_all_answer_and_an_unclosed_block_all_reasoning():
    assert split("Just an answer.", [3, 5]) == ("", "Just an answer.", 15)
    reasoning, answer, _ = split("<think>still going and going", [10, 12, 14])
    assert (reasoning, answer) == ("still going and going", "")
