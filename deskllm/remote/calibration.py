"""The prompt set the router's uncertainty threshold is calibrated on, and the scores the
local model gives it (`threshold_for_share` turns them into a threshold)."""

from __future__ import annotations

from collections.abc import Sequence

from deskllm.engine.backend import ChatBackend
from deskllm.engine.domain import ChatMessage, Sampling
from deskllm.remote.router import DEFAULT_UNCERTAINTY_TOKENS, uncertainty_score

# Everyday requests from easy to hard, so the scores spread: a share of escalations picked
# on them means something for a chat. Fixed: bench/router.py measures on the same set.
CALIBRATION_PROMPTS: tuple[str, ...] = (
    "What is the capital of France?",
    "Say hello in Spanish.",
    "What is 2 + 2?",
    "Name three primary colors.",
    "Translate 'good morning' into German.",
    "Write a haiku about a lighthouse in winter.",
    "Explain what a hash table is in two sentences.",
    "Why is the sky blue?",
    "Give me a synonym for 'happy'.",
    "What year did the Second World War end?",
    "Summarize the plot of Hamlet in one sentence.",
    "Prove that the square root of 2 is irrational.",
    "What is the derivative of x^3 * sin(x)?",
    "Write a Python function that reverses a linked list.",
    "Who won the 1987 Tour de France, and on which bicycle brand?",
    "Explain the difference between TCP and UDP for a network engineer.",
    "What are the side effects of combining ibuprofen with lisinopril?",
    "Compose a limerick about a quantum physicist's cat.",
    "List the first ten prime numbers.",
    "Describe the causes of the 2008 financial crisis in three bullet points.",
    "What does the Latin phrase 'alea iacta est' mean and who said it?",
    "How many moons does Neptune have, and what is the largest called?",
    "Write a SQL query that finds duplicate emails in a users table.",
    "Explain Gödel's first incompleteness theorem to a twelve-year-old.",
)


def local_scores(
    client: ChatBackend,
    prompts: Sequence[str] = CALIBRATION_PROMPTS,
    k: int = DEFAULT_UNCERTAINTY_TOKENS,
    sampling: Sampling | None = None,
    system: str = "",
) -> list[float]:
    """The local model's uncertainty score on each prompt (its first `k` tokens only)."""
    base = sampling or Sampling()
    scores = []
    for i, prompt in enumerate(prompts):
        messages = [ChatMessage("system", system)] if system else []
        messages.append(ChatMessage("user", prompt))
        s = Sampling(**(base.__dict__ | {"max_tokens": k, "logprobs": k}))
        reply = client.chat(f"calibration-{i}", messages, s).wait()
        score = uncertainty_score(reply.metrics.token_logprobs if reply.metrics else ())
        if score is not None:
            scores.append(score)
    return scores
