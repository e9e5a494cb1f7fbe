"""A raw prompt (the API's /v1/completions): the text as it is, without the chat template."""

from __future__ import annotations

from collections.abc import Callable

from deskllm.engine.errors import EngineError, ErrorKind


def fit_raw_prompt(
    tokenize: Callable[[str], list[int]], text: str, max_tokens: int, n_ctx: int
) -> list[int]:
    """The prompt's tokens (with BOS where the model wants one), or EngineError (kind
    CONTEXT) when it and room for the reply do not fit: a raw prompt has no turns to drop."""
    tokens = tokenize(text)
    if not tokens:
        raise EngineError("the prompt is empty", ErrorKind.BAD_REQUEST)
    reserve = min(max_tokens, n_ctx // 2)
    if len(tokens) + reserve > n_ctx:
        raise EngineError(
            f"the prompt is {len(tokens)} tokens; with {reserve} kept for the reply it does "
            f"not fit the {n_ctx}-token context. Shorten it or lower max_tokens.",
            ErrorKind.CONTEXT,
        )
    return tokens
