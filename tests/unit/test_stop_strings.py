"""StopMatcher: stop strings over a stream of deltas, with text that may become one held back."""

import pytest

from deskllm.engine.stop_strings import StopMatcher


def stream(matcher: StopMatcher, deltas: list[str]) -> tuple[str, bool, list[str]]:
    """Feed deltas like the engine does; returns (all text emitted, stopped, each emission)."""
    emitted = []
    for delta in deltas:
        out, stopped = matcher.feed(delta)
        emitted.append(out)
        if stopped:
            return "".join(emitted), True, emitted
    emitted.append(matcher.flush())
    return "".join(emitted), False, emitted


def test_no_stop_strings_passes_everything_through():
    m = StopMatcher(())
    assert m.feed("hello <") == ("hello <", False)
    assert m.flush() == ""


def test_empty_stop_strings_are_ignored():
    m = StopMatcher(("", "</s>"))
    assert m.stops == ("</s>",)
    assert m.feed("abc") == ("abc", False)


def test_stop_string_in_one_delta_cuts_before_it():
    m = StopMatcher(("<|im_end|>",))
    assert m.feed("Hello there<|im_end|>ignored") == ("Hello there", True)


def test_stop_string_at_the_very_start():
    assert StopMatcher(("###",)).feed("###rest") == ("", True)


def test_stop_string_split_across_deltas():
    m = StopMatcher(("<|im_end|>",))
    assert m.feed("Hello <|im") == ("Hello ", False)  # "<|im" could become the stop string
    assert m.feed("_en") == ("", False)
    assert m.feed("d|> after") == ("", True)  # nothing of the stop string ever leaks out


@pytest.mark.parametrize("size", [1, 2, 3, 5])
def test_stop_string_split_into_any_pieces(size):
    text = "The answer is 42.\nUser: and then"
    deltas = [text[i : i + size] for i in range(0, len(text), size)]
    out, stopped, _ = stream(StopMatcher(("\nUser:",)), deltas)
    assert stopped
    assert out == "The answer is 42."


def test_held_text_that_does_not_become_a_stop_is_released():
    m = StopMatcher(("<|im_end|>",))
    assert m.feed("a <|i") == ("a ", False)
    out, stopped = m.feed("talic|>")  # diverges: the held text is emitted with the new text
    assert not stopped
    assert out == "<|italic|>"


def test_no_false_holdback_at_the_end():
    m = StopMatcher(("</s>",))
    out, stopped = m.feed("x < y and a </")
    assert (out, stopped) == ("x < y and a ", False)
    assert m.flush() == "</"  # the stream ended: what was held back is not lost
    assert m.flush() == ""  # and it is given only once


def test_text_without_any_stop_prefix_is_not_held():
    m = StopMatcher(("</s>", "\n\nUser"))
    # "<" alone can start "</s>", but "<b" cannot: nothing is held after it
    assert m.feed("1 <b> 2") == ("1 <b> 2", False)
    assert m.flush() == ""


def test_whole_stream_reassembles_exactly_when_no_stop_occurs():
    text = "<|im_e and </ and \n\nUse and ## but never a full stop string #"
    m = StopMatcher(("<|im_end|>", "</s>", "\n\nUser", "###"))
    out, stopped, _ = stream(m, list(text))
    assert not stopped
    assert out == text


def test_multiple_stop_strings_first_occurrence_wins():
    m = StopMatcher(("</s>", "User:"))
    # "User:" comes first in the text although "</s>" is listed first
    assert m.feed("abc User: def </s> x") == ("abc ", True)


def test_multiple_stop_strings_split_across_deltas():
    m = StopMatcher(("</s>", "<|eot_id|>"))
    out, stopped, _ = stream(m, ["ok <|e", "ot_", "id|> </s>"])
    assert stopped
    assert out == "ok "


def test_holdback_uses_the_longest_matching_prefix_over_all_stops():
    m = StopMatcher(("ab", "xyzab"))
    out, stopped = m.feed("123xyza")
    assert (out, stopped) == ("123", False)  # "xyza" may still become "xyzab"
    out, stopped = m.feed("b!")
    assert (out, stopped) == ("", True)  # "xyzab" starts before the "ab" inside it


def test_stop_string_that_is_a_prefix_of_another():
    m = StopMatcher(("User", "User:"))
    assert m.feed("hi Us") == ("hi ", False)
    assert m.feed("er") == ("", True)


def test_unicode_stop_string_and_text():
    m = StopMatcher(("ＥＮＤ", "😀🛑"))
    out, stopped, _ = stream(m, ["Grüße ", "日本語", " 😀", "🛑 tail"])
    assert stopped
    assert out == "Grüße 日本語 "


def test_unicode_partial_holdback_is_released_intact():
    m = StopMatcher(("😀🛑",))
    out1, _ = m.feed("héllo 😀")
    assert out1 == "héllo "
    out2, stopped = m.feed("😀 ok")
    assert not stopped
    assert out1 + out2 + m.flush() == "héllo 😀😀 ok"


def test_matcher_is_reusable_after_a_stop():
    m = StopMatcher(("</s>",))
    assert m.feed("a </") == ("a ", False)
    assert m.feed("s>") == ("", True)
    # the held text was cleared when the stop was found
    assert m.flush() == ""
    assert m.feed("next turn") == ("next turn", False)


def test_the_stop_string_that_ended_the_text_is_named():
    matcher = StopMatcher(("\n\n", "END", "ENDING"))
    assert matcher.matched is None
    assert matcher.feed("one EN") == ("one ", False)
    assert matcher.feed("DING") == ("", True)
    assert matcher.matched == "END"  # at one place, the shorter: it was complete first
