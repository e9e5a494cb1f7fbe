"""What the router reads from the local engine: the sampled tokens' log-probabilities
(Sampling.logprobs) and a conversation that does not fit refused before it is evaluated
(Chat.drop_old_turns False)."""

from __future__ import annotations

import math

from engine_helpers import collect

from deskllm.engine.domain import ChatMessage, Done, Error, Sampling
from deskllm.engine.errors import ErrorKind


def ask(text: str) -> list[ChatMessage]:
    return [ChatMessage("system", "You are brief."), ChatMessage("user", text)]


def test_logprobs_of_the_first_tokens_come_before_the_reply_ends(engine) -> None:
    got = collect(
        engine.chat(
            "lp", ask("Name three colors."), Sampling(temperature=0, max_tokens=24, logprobs=6)
        )  # fmt: skip
    )
    done = got.done
    assert len(done.metrics.token_logprobs) == 6
    # Greedy takes the most likely token: its log-probability is at least the uniform one's.
    floor = -math.log(49152)
    assert all(floor <= lp <= 0 for lp in done.metrics.token_logprobs)
    # A live Metrics event carries all six mid-reply, so a router can decide before the end.
    early = [m for m in got.metrics if len(m.token_logprobs) == 6]
    assert early and early[0].generated_tokens < done.metrics.generated_tokens


def test_no_logprobs_unless_asked(engine) -> None:
    done = collect(engine.chat("lp0", ask("Hi."), Sampling(temperature=0, max_tokens=8))).done
    assert done.metrics.token_logprobs == ()


def test_sampled_tokens_at_high_temperature_score_lower_than_greedy(engine) -> None:
    """Greedy picks the argmax at every step, so its mean is above a hot sampler's."""
    question = ask("Write a sentence about the sea.")
    greedy = collect(engine.chat("g", question, Sampling(temperature=0, max_tokens=16,
                                                         logprobs=16))).done  # fmt: skip
    hot = collect(engine.chat("h", question, Sampling(temperature=3.0, top_k=0, top_p=1.0,
                                                      min_p=0, seed=7, max_tokens=16,
                                                      logprobs=16))).done  # fmt: skip
    mean = lambda d: sum(d.metrics.token_logprobs) / len(d.metrics.token_logprobs)  # noqa: E731
    assert mean(hot) < mean(greedy)


def test_a_conversation_too_long_is_refused_before_evaluation_when_asked(engine) -> None:
    long_turns = []
    for i in range(12):
        long_turns += [ChatMessage("user", f"Story part {i}: " + "the river runs on. " * 60),
                       ChatMessage("assistant", "Go on.")]  # fmt: skip
    messages = [*long_turns, ChatMessage("user", "Summarize.")]
    got = collect(engine.chat("long", messages, Sampling(temperature=0, max_tokens=8),
                              drop_old_turns=False))  # fmt: skip
    error = got.final
    assert isinstance(error, Error) and error.kind == ErrorKind.CONTEXT
    assert "does not fit the 2048-token context" in error.reason
    assert not got.metrics  # refused before the prompt was evaluated
    # The default leaves old turns out and answers.
    done = collect(engine.chat("long", messages, Sampling(temperature=0, max_tokens=8))).done
    assert isinstance(done, Done) and done.dropped_messages > 0
