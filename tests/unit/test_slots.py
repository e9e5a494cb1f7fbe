"""The scheduler's slot choice and step budget, without a model."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from deskllm.engine.slots import (
    REUSE_SLACK,
    Slot,
    busy_neighbours,
    choose_slot,
    common_prefix,
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


def test_a_restored_state_goes_next_to_running_slots_else_into_the_least_recently_used():
    # A slot whose reply is still to be read again is free: its prompt reads what it shares.
    slots = [Slot(0, [1], last_used=3, unread=[2, 3]), Slot(1, last_used=5),
             Slot(2, last_used=1), Slot(3, last_used=0, request_id=4)]  # fmt: skip
    assert restore_target(slots).index == 2  # beside the running slot 3
    slots[3].request_id = None
    assert restore_target(slots).index == 3  # none runs: the least recently used
    assert restore_target([Slot(0, request_id=1)]) is None


def test_among_equal_prefixes_a_slot_next_to_running_ones_is_taken():
    # llama.cpp decodes each run of consecutive sequence ids in a pass of its own: a new
    # stream beside the running ones adds no pass; one with a gap on both sides would.
    slots = [Slot(0, request_id=1), Slot(1, [7], last_used=9), Slot(2, [8], last_used=0),
             Slot(3, [9], last_used=5), Slot(4, request_id=2)]  # fmt: skip
    assert choose_slot(slots, [1, 2]).slot.index == 3  # beside 4; not 2, used less lately
    slots[2].request_id, slots[4].request_id = 3, None
    assert choose_slot(slots, [1, 2]).slot.index == 1  # between two running: no new pass
    # Up to REUSE_SLACK more shared tokens do not open a gap; more than that do.
    long_prompt = list(range(100, 100 + REUSE_SLACK + 10))
    slots[4].tokens = long_prompt[:REUSE_SLACK]
    assert choose_slot(slots, long_prompt).slot.index == 1
    slots[4].tokens = long_prompt[: REUSE_SLACK + 2]
    choice = choose_slot(slots, long_prompt)
    assert choice.slot.index == 4 and choice.reused == REUSE_SLACK + 2


def test_among_slots_sharing_nothing_the_least_recently_used_is_given_up():
    slots = [Slot(0, [8], last_used=5), Slot(1, [9], last_used=2), Slot(2, [7], last_used=9)]
    choice = choose_slot(slots, [1, 2])
    assert choice.slot.index == 1 and choice.reused == 0


def test_running_streams_get_their_token_before_any_prompt_chunk():
    assert share_budget(3, [600, 100], 512) == [509, 0]
    assert share_budget(2, [10, 100, 1000], 64) == [10, 52, 0]
    assert share_budget(0, [], 512) == []


@given(
    st.lists(st.lists(st.integers(0, 3), max_size=8), min_size=1, max_size=6),
    st.lists(st.booleans(), min_size=6, max_size=6),
    st.lists(st.integers(0, 3), min_size=1, max_size=8),
)
def test_the_choice_is_beside_the_most_running_slots_of_those_near_the_best_prefix(
    caches, busy, prompt
):
    slots = [Slot(i, list(c), request_id=i if busy[i] else None) for i, c in enumerate(caches)]
    choice = choose_slot(slots, prompt)
    free = [s for s in slots if s.free]
    if not free:
        assert choice is None
        return
    assert choice.slot.free
    shared = {s.index: common_prefix(s.tokens, prompt) for s in free}
    close = [s for s in free if shared[s.index] >= max(shared.values()) - REUSE_SLACK]
    assert choice.slot in close
    most = max(busy_neighbours(slots, s) for s in close)
    assert busy_neighbours(slots, choice.slot) == most
    best = max(shared[s.index] for s in close if busy_neighbours(slots, s) == most)
    assert shared[choice.slot.index] == best
    assert choice.reused == reusable(best, len(prompt))
    assert choice.reused <= len(prompt) - 1 and len(prompt) - choice.reused != 2 or not best


@given(st.integers(0, 16), st.lists(st.integers(1, 2000), max_size=6), st.integers(16, 1024))
def test_a_step_never_holds_more_than_n_batch_tokens(n_decoding, wants, n_batch):
    shares = share_budget(n_decoding, wants, n_batch)
    assert all(0 <= s <= w for s, w in zip(shares, wants, strict=True))
    assert n_decoding + sum(shares) <= max(n_batch, n_decoding)
    if wants and n_decoding == 0:
        assert shares[0] > 0  # a step with nothing else always reads some of the first
