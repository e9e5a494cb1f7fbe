"""Slots of the engine: which slot a new request takes, and how a step's token budget
is shared. Pure bookkeeping (no llama.cpp), so the scheduler's choices are testable alone.

A slot is one llama.cpp sequence. A finished slot keeps the tokens its KV cells hold, so the
next request whose prompt starts the same way (the next turn of a conversation, a shared
system prompt) reads only the difference. The runtime saves a slot's cells into the
conversation state cache before another request overwrites them.

Cells are reused only where a cold read would have made the same ones: on the CPU, llama.cpp's
one-token decode rounds differently from a multi-token one, while multi-token decodes agree
however a prompt is cut. So a finished reply's cells
(decoded one token a step) are read again, batched, while no request runs ("unread"), and no
prompt chunk is a single token where that can be helped.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field


@dataclass
class Slot:
    """`index`: the llama.cpp sequence id. `tokens`: what its KV cells hold, in order.
    `request_id`: the request it answers (None: free). `last_used`: a tick of the scheduler's
    clock when it was last freed (older slots are given up first). `conversation`: whose
    tokens it holds (the key its state is saved under; None: nobody's). `n_exact`: leading
    cells made by multi-token decodes. `unread`: tokens whose cells were dropped to be read
    again, batched, after `tokens` (a request that takes the slot meanwhile reads them with
    its prompt if it shares them). `cells`: which cells of the pool `tokens` are (CellLedger's
    ids; a prefix taken from another slot is the same cells)."""

    index: int
    tokens: list[int] = field(default_factory=list)
    request_id: int | None = None
    last_used: int = 0
    conversation: str | None = None
    n_exact: int = 0
    unread: list[int] = field(default_factory=list)
    cells: list[int] = field(default_factory=list)

    @property
    def free(self) -> bool:
        return self.request_id is None


class CellLedger:
    """Which cells of the one KV pool each slot's tokens are. A prefix one slot takes from
    another (llama_memory_seq_cp) is the same cells in both, so the pool's use is the distinct
    cells, not the sum of the slots' lengths. Bookkeeping beside llama.cpp's own, which does
    not say how many cells are in use."""

    def __init__(self) -> None:
        self._refs: Counter[int] = Counter()  # cell id → slots holding it
        self._next = 0

    @property
    def used(self) -> int:
        return len(self._refs)

    def grow(self, slot: Slot, tokens: Sequence[int]) -> None:
        """`tokens` were decoded after the slot's: new cells."""
        ids = range(self._next, self._next + len(tokens))
        self._next += len(tokens)
        slot.tokens.extend(tokens)
        slot.cells.extend(ids)
        self._refs.update(ids)

    def cut(self, slot: Slot, keep: int) -> None:
        """The slot keeps its first `keep` cells; a dropped cell is freed once no slot has it."""
        for cell in slot.cells[keep:]:
            self._refs[cell] -= 1
            if not self._refs[cell]:
                del self._refs[cell]
        del slot.tokens[keep:]
        del slot.cells[keep:]

    def share(self, source: Slot, slot: Slot, n: int) -> None:
        """The (empty) slot takes `source`'s first `n` cells as they are."""
        if slot.tokens:
            raise ValueError("a slot takes a shared prefix only when empty")
        slot.tokens.extend(source.tokens[:n])
        slot.cells.extend(source.cells[:n])
        self._refs.update(slot.cells)


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


# A free slot is taken for its cache where the prompt shares at least this share of what the
# slot holds. Otherwise the request takes an empty slot, else the one used least recently (as
# llama-server does below its --slot-prompt-similarity): taking a slot for a few shared tokens
# (a chat template's opening) would throw away a long prefix other requests share (a
# prompt that starts with another slot's tokens gets them by reference wherever it goes).
SLOT_SIMILARITY = 0.25


def choose_slot(slots: Sequence[Slot], prompt: Sequence[int]) -> SlotChoice | None:
    """The free slot for `prompt` (None: all busy): of those sharing SLOT_SIMILARITY of
    their tokens with it, the one sharing the longest prefix (of equals, the one used least
    recently); without one, an empty slot, else the one used least recently, so the caches of
    recent conversations stay. At most all but the last prompt token is reused: its logits
    must be computed now. (The slots share one KV pool: which slot a request takes costs
    nothing.)"""
    free = [s for s in slots if s.free]
    if not free:
        return None
    shared = {s.index: common_prefix(s.tokens, prompt) for s in free}
    similar = [s for s in free
               if shared[s.index] and shared[s.index] >= SLOT_SIMILARITY * len(s.tokens)]
    if similar:
        slot = max(similar, key=lambda s: (shared[s.index], -s.last_used, -s.index))
    else:
        slot = min(free, key=lambda s: (bool(s.tokens), s.last_used, s.index))
    return SlotChoice(slot, reusable(shared[slot.index], len(prompt)))


def continues(slot: Slot, prompt: Sequence[int]) -> bool:
    """Whether `prompt` goes on from the slot's cells through the tokens it has yet to read
    again (a finished reply's; its last token may differ: the template's end of turn):
    then reading them now is reading the prompt. A prompt that only starts as the reply's
    did (the same question again) does not wait for the reply to be read."""
    n, tail = len(slot.tokens), slot.unread
    if not tail or common_prefix(slot.tokens, prompt) < n:
        return False
    return common_prefix(tail, prompt[n:]) >= len(tail) - 1


def reusable(lcp: int, n_prompt: int) -> int:
    """Of `lcp` cached prompt tokens, those kept: all but the last prompt token (its logits
    are computed now), and one fewer where the rest would be one token before the last (a
    chunk of one would be a one-token decode)."""
    kept = min(lcp, max(n_prompt - 1, 0))
    return kept - 1 if kept > 0 and n_prompt - kept == 2 else kept


def restore_target(slots: Sequence[Slot]) -> Slot | None:
    """The free slot to give up for a restored state: the one used least recently."""
    free = [s for s in slots if s.free]
    if not free:
        return None
    return min(free, key=lambda s: (s.last_used, s.index))


def share_budget(n_decoding: int, prefill_wants: Sequence[int], n_batch: int) -> list[int]:
    """Prompt tokens each prefilling slot reads in one step: every decoding slot has its one
    token first (running streams never wait for a long prompt), then prefilling slots take what
    is left of `n_batch` in arrival order. `prefill_wants[i]`: tokens slot i still has to read.
    A share never leaves one token for later, nor is one token of more (see the module)."""
    left = max(n_batch - n_decoding, 0)
    shares = []
    for want in prefill_wants:
        take = min(want, left)
        if want - take == 1 and take > 2:
            take -= 1  # leave two for the next step, not one
        elif take == 1 and want > 1 and left < n_batch:
            take = 0  # wait for room (unless n_batch is 1: room never comes)
        shares.append(take)
        left -= take
    return shares
