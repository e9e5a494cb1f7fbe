"""Per-token log-probabilities for the API's `logprobs`: computed from a token's logits, and
kept in step with the text actually sent (stop strings hold text back and cut it)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from deskllm.engine.domain import TokenLogprob

if TYPE_CHECKING:
    import numpy as np

MAX_TOP = 20  # OpenAI's limit for top_logprobs


def token_logprob(
    logits: np.ndarray, token: int, top_n: int, piece: Callable[[int], bytes]
) -> TokenLogprob:
    """log p(token) under softmax(logits), and the `top_n` most likely tokens (most likely
    first). `piece(token)` is a token's bytes."""
    import numpy as np  # here: the app's process imports this module without needing it

    top = float(logits.max())
    lse = top + float(np.log(np.exp(logits - top).sum()))
    alternatives: tuple[TokenLogprob, ...] = ()
    n = min(max(top_n, 0), MAX_TOP, logits.shape[0])
    if n:
        best = np.argpartition(-logits, n - 1)[:n]
        best = best[np.argsort(-logits[best], kind="stable")]
        alternatives = tuple(_entry(int(t), float(logits[t]) - lse, piece) for t in best)
    return _entry(token, float(logits[token]) - lse, piece, alternatives)


def _entry(
    token: int, logprob: float, piece: Callable[[int], bytes], top: tuple = ()
) -> TokenLogprob:
    raw = piece(token)
    return TokenLogprob(raw.decode("utf-8", "replace"), raw, logprob, top)


class LogprobTrail:
    """Tokens' entries waiting for their text to be sent. Each token's text starts at an
    offset of the generated text; the text sent is always a prefix of it (the stop matcher
    only holds back or cuts), so the entries to send with it are those starting before its
    end. What is left at the end belongs to a stop string that was cut: dropped."""

    def __init__(self) -> None:
        self._entries: list[tuple[int, TokenLogprob]] = []
        self._produced = 0  # characters of all decoded pieces so far

    def add(self, entry: TokenLogprob, piece: str) -> None:
        self._entries.append((self._produced, entry))
        self._produced += len(piece)

    def take(self, sent_chars: int) -> tuple[TokenLogprob, ...]:
        """The entries whose text starts before `sent_chars` (all the text sent so far)."""
        n = 0
        while n < len(self._entries) and self._entries[n][0] < sent_chars:
            n += 1
        taken, self._entries = self._entries[:n], self._entries[n:]
        return tuple(entry for _, entry in taken)
