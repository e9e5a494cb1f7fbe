"""The engine's token log-probabilities in the shapes of OpenAI's two APIs."""

from __future__ import annotations

from collections.abc import Sequence

from deskllm.engine.domain import TokenLogprob
from deskllm.server.chat_completion.protocol import ChoiceLogprobs, TopLogprob
from deskllm.server.chat_completion.protocol import TokenLogprob as ApiTokenLogprob


def chat_logprobs(entries: Sequence[TokenLogprob]) -> ChoiceLogprobs:
    """Chat completions: `{"content": [{"token", "logprob", "bytes", "top_logprobs"}]}`."""
    return ChoiceLogprobs(
        content=[
            ApiTokenLogprob(
                token=e.token,
                logprob=e.logprob,
                bytes=list(e.bytes),
                top_logprobs=[
                    TopLogprob(token=t.token, logprob=t.logprob, bytes=list(t.bytes)) for t in e.top
                ],
            )  # fmt: skip
            for e in entries
        ]
    )


def completion_logprobs(entries: Sequence[TokenLogprob], offset: int = 0) -> dict:
    """Legacy completions: parallel lists `tokens`, `token_logprobs`, `top_logprobs` (one
    token → logprob mapping per token) and `text_offset` (from `offset` characters)."""
    offsets = []
    for e in entries:
        offsets.append(offset)
        offset += len(e.token)
    return {
        "tokens": [e.token for e in entries],
        "token_logprobs": [e.logprob for e in entries],
        "top_logprobs": [{t.token: t.logprob for t in e.top} for e in entries],
        "text_offset": offsets,
    }
