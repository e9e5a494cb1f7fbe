"""Token log-probabilities: the arithmetic, and the entries kept in step with sent text."""

import math

import numpy as np

from deskllm.engine.domain import TokenLogprob
from deskllm.engine.stop_strings import StopMatcher
from deskllm.engine.token_logprobs import LogprobTrail, token_logprob

PIECES = {0: b"a", 1: b"b", 2: b"c", 3: b"\xe2\x82"}


def test_logprob_and_top_alternatives():
    logits = np.array([2.0, 1.0, 0.5, -1.0], dtype=np.float32)
    entry = token_logprob(logits, 1, 2, PIECES.__getitem__)
    total = sum(math.exp(x) for x in logits)
    assert math.isclose(entry.logprob, 1.0 - math.log(total), rel_tol=1e-5)
    assert [t.token for t in entry.top] == ["a", "b"]  # most likely first
    assert entry.top[0].logprob > entry.top[1].logprob
    assert math.isclose(sum(math.exp(t.logprob) for t in token_logprob(
        logits, 0, 4, PIECES.__getitem__).top), 1.0, rel_tol=1e-5)  # fmt: skip
    partial = token_logprob(logits, 3, 0, PIECES.__getitem__)
    assert partial.bytes == b"\xe2\x82" and partial.top == ()  # a piece of a character


def entry(text: str) -> TokenLogprob:
    return TokenLogprob(text, text.encode(), -0.5)


def test_trail_sends_entries_with_their_text_and_drops_a_stop_strings():
    trail, matcher, sent = LogprobTrail(), StopMatcher(("END",)), ""
    out = []
    for piece in ["Hello", " wor", "ld", " E", "ND", " more"]:
        trail.add(entry(piece), piece)
        text, stopped = matcher.feed(piece)
        sent += text
        out.append([e.token for e in trail.take(len(sent))])
        if stopped:
            break
    assert sent == "Hello world "
    # " E": its space went out ("E" was held back, it may begin "END"), so its entry did.
    assert out == [["Hello"], [" wor"], ["ld"], [" E"], []]
    assert trail.take(len(sent)) == ()  # "ND" belongs to the stop string: never sent
