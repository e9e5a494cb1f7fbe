"""The scheduler's slot choice and step budget, without a model."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from deskllm.engine.slots import (
    SLOT_SIMILARITY,
    CellLedger,
    Slot,
    choose_slot,
    common_prefix,
    continues,
    restore_target,
    reusable,
    share_budget,
)


def test_a_request_takes_the_free_slot_with_the_longest_common_prefix():
    slots = [Slot(0, [1, 2, 9]), Slot(1, [1, 2, 3, 4, 7]), Slot(2, [5, 6])]
    choice = choose_slot(slots, [1, 2, 3, 4, 5, 6, 8])
    assert choice.slot.index == 1 and choice.reused == 4


def test_a_busy_slot_is_never_chosen_however_much_it_shares():
    slots = [Slot(0, [1, 2, 3, 4], request_id=7), Slot(1, [1, 9])]
    choice = choose_slot(slots, [1, 2, 3, 4, 5])
    assert choice.slot.index == 1 and choice.reused == 1


def test_no_free_slot_means_the_request_waits():
    assert choose_slot([Slot(0, request_id=1), Slot(1, request_id=2)], [1, 2]) is None


def test_the_last_prompt_token_is_always_evaluated_again():
    # The whole prompt is cached: its last token must still be decoded for its logits.
    choice = choose_slot([Slot(0, [1, 2, 3, 4])], [1, 2, 3])
    assert choice.reused == 2
    assert choose_slot([Slot(0, [1, 2, 3])], [1, 2, 3]).reused == 2


def test_no_prompt_chunk_is_a_single_token_where_one_more_can_be_read():
    # Two tokens would be left: one chunk of one, then the last token alone. Both are
    # one-token decodes, which round differently from the multi-token read of a cold prompt.
    assert choose_slot([Slot(0, [1, 2, 3, 4])], [1, 2, 3, 4, 5, 6]).reused == 3
    assert reusable(4, 7) == 4 and reusable(4, 6) == 3 and reusable(0, 2) == 0
    assert share_budget(0, [513], 512) == [511]  # not 512 and then 1
    assert share_budget(3, [5], 4) == [0]  # one token of five now: wait for room
    assert share_budget(0, [5], 1) == [1]  # unless there never is more


def test_a_restored_state_goes_into_the_least_recently_used_free_slot():
    # A slot whose reply is still to be read again is free: its prompt reads what it shares.
    slots = [Slot(0, [1], last_used=3, unread=[2, 3]), Slot(1, last_used=5),
             Slot(2, last_used=1), Slot(3, last_used=0, request_id=4)]  # fmt: skip
    assert restore_target(slots).index == 2  # slot 3 runs
    slots[3].request_id = None
    assert restore_target(slots).index == 3
    assert restore_target([Slot(0, request_id=1)]) is None


def test_among_slots_sharing_nothing_the_least_recently_used_is_given_up():
    slots = [Slot(0, [8], last_used=5), Slot(1, [9], last_used=2), Slot(2, [7], last_used=9)]
    choice = choose_slot(slots, [1, 2])
    assert choice.slot.index == 1 and choice.reused == 0


def test_running_streams_get_their_token_before_any_prompt_chunk():
    assert share_budget(3, [600, 100], 512) == [509, 0]
    assert share_budget(2, [10, 100, 1000], 64) == [10, 52, 0]
    assert share_budget(0, [], 512) == []


def test_a_slot_is_not_given_up_for_a_few_shared_tokens():
    # A long shared system prompt stays where a short chat shares only the template's opening.
    long_prefix = [1, 2, 3, *range(10, 40)]
    slots = [Slot(0, long_prefix, last_used=1), Slot(1, [], last_used=5)]
    choice = choose_slot(slots, [1, 2, 3, 99])
    assert choice.slot.index == 1 and choice.reused == 0
    # Without an empty slot, the one used least recently goes.
    choice = choose_slot([Slot(0, long_prefix, last_used=9), Slot(1, [7, 8], last_used=5)],
                         [1, 2, 3, 99])  # fmt: skip
    assert choice.slot.index == 1 and choice.reused == 0
    # The next turn of the conversation it holds takes it.
    assert choose_slot(slots, [*long_prefix, 5, 6]).slot.index == 0


@given(
    st.lists(st.lists(st.integers(0, 3), max_size=8), min_size=1, max_size=6),
    st.lists(st.booleans(), min_size=6, max_size=6),
    st.lists(st.integers(0, 3), min_size=1, max_size=8),
)
def test_the_choice_is_the_free_slot_sharing_enough_with_the_longest_prefix(caches, busy, prompt):
    slots = [Slot(i, list(c), request_id=i if busy[i] else None, last_used=-i)
             for i, c in enumerate(caches)]  # fmt: skip
    choice = choose_slot(slots, prompt)
    free = [s for s in slots if s.free]
    if not free:
        assert choice is None
        return
    assert choice.slot.free
    shared = common_prefix(choice.slot.tokens, prompt)
    similar = [s for s in free if common_prefix(s.tokens, prompt)
               and common_prefix(s.tokens, prompt) >= SLOT_SIMILARITY * len(s.tokens)]
    if similar:
        assert shared == max(common_prefix(s.tokens, prompt) for s in similar)
    elif any(not s.tokens for s in free):
        assert not choice.slot.tokens  # an empty slot before any cache is given up
    else:
        assert choice.slot.last_used == min(s.last_used for s in free)
    assert choice.reused == reusable(shared, len(prompt))
    assert choice.reused <= len(prompt) - 1 and len(prompt) - choice.reused != 2 or not shared


@given(st.integers(0, 16), st.lists(st.integers(1, 2000), max_size=6), st.integers(16, 1024))
def test_a_step_never_holds_more_than_n_batch_tokens(n_decoding, wants, n_batch):
    shares = share_budget(n_decoding, wants, n_batch)
    assert all(0 <= s <= w for s, w in zip(shares, wants, strict=True))
    assert n_decoding + sum(shares) <= max(n_batch, n_decoding)
    if wants and n_decoding == 0:
        assert shares[0] > 0  # a step with nothing else always reads some of the first


@given(st.lists(st.tuples(st.sampled_from(["grow", "cut", "share"]), st.integers(0, 3),
                          st.integers(0, 3), st.integers(0, 20)), max_size=40))  # fmt: skip
def test_the_ledger_counts_each_cell_once_however_slots_share_them(ops):
    ledger = CellLedger()
    slots = [Slot(i) for i in range(4)]
    for op, a, b, n in ops:
        if op == "grow":
            ledger.grow(slots[a], list(range(n)))
        elif op == "cut":
            ledger.cut(slots[a], min(n, len(slots[a].tokens)))
        elif a != b:
            ledger.cut(slots[b], 0)
            ledger.share(slots[a], slots[b], min(n, len(slots[a].tokens)))
        assert all(len(s.cells) == len(s.tokens) for s in slots)
        assert ledger.used == len({c for s in slots for c in s.cells})


def test_a_finished_reply_is_read_before_a_prompt_only_where_the_prompt_goes_on_from_it():
    # The slot holds the prompt's first tokens; the last prompt token and the reply are unread.
    slot = Slot(0, [1, 2, 3], unread=[4, 50, 51, 52])
    assert continues(slot, [1, 2, 3, 4, 50, 51, 52, 60, 61])  # the next turn of it
    assert continues(slot, [1, 2, 3, 4, 50, 51, 99, 60])  # its end of turn retokenized
    assert not continues(slot, [1, 2, 3, 4])  # the same question again
    assert not continues(slot, [1, 2, 3, 4, 50, 77, 78])  # another reply to it (regenerated)
    assert not continues(slot, [1, 9, 3, 4, 50, 51, 52, 60])  # another conversation
    assert not continues(Slot(0, [1, 2, 3]), [1, 2, 3, 4])  # nothing unread

