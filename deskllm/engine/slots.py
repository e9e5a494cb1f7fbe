"""Slots of the batched engine: which slot a new request takes, and how a step's token budget
is shared. Pure bookkeeping (no llama.cpp), so the scheduler's choices are testable alone.

A slot is one llama.cpp sequence. A finished slot keeps the tokens its KV cells hold, so the
next request whose prompt starts the same way (the next turn of a conversation, a shared
system prompt) reads only the difference.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field


@dataclass
class Slot:
    """`index`: the llama.cpp sequence id. `tokens`: what its KV cells hold, in order.
    `request_id`: the request it answers (None: free). `last_used`: a tick of the scheduler's
    clock when it was last freed (older slots are given up first)."""

    index: int
    tokens: list[int] = field(default_factory=list)
    request_id: int | None = None
    last_used: int = 0

    @property
    def free(self) -> bool:
        return self.request_id is None


@dataclass(frozen=True)
class SlotChoice:
    slot: Slot
    reused: int  # leading prompt tokens whose KV cells the slot keeps (not evaluated again)


def common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i


def choose_slot(slots: Sequence[Slot], prompt: Sequence[int]) -> SlotChoice | None:
    """The free slot whose tokens share the longest prefix with `prompt` (None: all busy).
    Among equals the one used least recently, so the caches of recent conversations stay.
    At most all but the last prompt token is reused: its logits must be computed now."""
    free = [s for s in slots if s.free]
    if not free:
        return None
    scored = [(common_prefix(s.tokens, prompt), -s.last_used, -s.index, s) for s in free]
    lcp, _, _, slot = max(scored, key=lambda item: item[:3])
    return SlotChoice(slot, min(lcp, max(len(prompt) - 1, 0)))


def share_budget(n_decoding: int, prefill_wants: Sequence[int], n_batch: int) -> list[int]:
    """Prompt tokens each prefilling slot reads in one step: every decoding slot has its one
    token first (running streams never wait for a long prompt), then prefilling slots take what
    is left of `n_batch` in arrival order. `prefill_wants[i]`: tokens slot i still has to read."""
    left = max(n_batch - n_decoding, 0)
    shares = []
    for want in prefill_wants:
        take = min(want, left)
        shares.append(take)
        left -= take
    return shares
