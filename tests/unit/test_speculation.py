"""Draft proposals by prompt lookup, and the draft length's adaptation."""

from hypothesis import given
from hypothesis import strategies as st

from deskllm.engine.speculation import (
    BACK_OFF_STEPS,
    MAX_DRAFT,
    MISSES_TO_BACK_OFF,
    DraftPolicy,
    NgramIndex,
)


def test_the_tokens_after_the_latest_earlier_match_are_proposed():
    index = NgramIndex([1, 2, 3, 4, 5, 9, 1, 2, 3, 7, 8, 6, 1, 2, 3])
    assert index.propose(2) == [7, 8]  # the later of the two earlier "1 2 3"
    assert index.propose(10) == [7, 8, 6, 1, 2, 3]


def test_the_longest_match_wins_over_a_more_recent_shorter_one():
    index = NgramIndex([5, 1, 2, 3, 4, 8, 2, 3, 9, 5, 1, 2, 3])
    assert index.propose(1) == [4]  # "5 1 2 3" (4-gram) beats the newer "2 3" → 9


def test_nothing_is_proposed_without_a_match_or_room():
    assert NgramIndex([1, 2, 3, 4]).propose(4) == []
    assert NgramIndex([1, 2, 1, 2]).propose(0) == []
    assert NgramIndex([]).propose(4) == []


def test_extending_finds_matches_across_the_prompt_and_the_reply():
    index = NgramIndex([10, 11, 12, 13, 14])
    index.extend([10])
    assert index.propose(3) == []  # one token is no n-gram
    index.extend([11])
    assert index.propose(3) == [12, 13, 14]


@given(st.lists(st.integers(0, 5), max_size=60), st.integers(1, 8))
def test_a_proposal_is_always_a_copy_of_what_followed_the_sequences_end(tokens, limit):
    index = NgramIndex(tokens)
    draft = index.propose(limit)
    assert len(draft) <= limit
    if draft:
        starts = [i for i in range(len(tokens)) if tokens[i : i + len(draft)] == draft]
        assert any(i >= 2 and tokens[i - 2 : i] == tokens[-2:] for i in starts)


def test_the_draft_grows_while_taken_whole_and_shrinks_to_what_was_taken():
    policy = DraftPolicy()
    first = policy.limit()
    policy.record(first, first)
    assert policy.limit() == 2 * first
    for _ in range(10):
        policy.record(policy.length, policy.length)
    assert policy.limit() == MAX_DRAFT
    policy.record(MAX_DRAFT, 3)
    assert policy.limit() == 4


def test_drafts_that_keep_missing_stop_for_a_while_then_are_tried_again():
    policy = DraftPolicy()
    for _ in range(MISSES_TO_BACK_OFF):
        assert policy.limit() > 0
        policy.record(4, 0)
    waited = 0
    while policy.limit() == 0:
        waited += 1
    assert waited == BACK_OFF_STEPS
    for _ in range(MISSES_TO_BACK_OFF):  # missing again: a longer wait
        policy.record(2, 0)
    waited = 0
    while policy.limit() == 0:
        waited += 1
    assert waited == 2 * BACK_OFF_STEPS


def test_the_figures_count_drafted_and_accepted_tokens():
    policy = DraftPolicy()
    policy.record(4, 4)
    policy.record(8, 2)
    assert (policy.drafted, policy.accepted, policy.passes) == (12, 6, 2)
