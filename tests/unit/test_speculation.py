"""Draft proposals by prompt lookup, and the draft length's adaptation."""

from hypothesis import given
from hypothesis import strategies as st

from deskllm.engine.speculation import (
    BACK_OFF_STEPS,
    EXPLORE_STEPS,
    MAX_DRAFT,
    MISSES_TO_BACK_OFF,
    PRIOR_TOKENS,
    AcceptanceByOrder,
    DraftPolicy,
    NgramIndex,
    StepCosts,
)


def test_the_tokens_after_the_latest_earlier_match_are_proposed():
    index = NgramIndex([1, 2, 3, 4, 5, 9, 1, 2, 3, 7, 8, 6, 1, 2, 3])
    assert index.propose(2) == [7, 8]  # the later of the two earlier "1 2 3"
    # Past the end the text repeats: the draft runs on into itself.
    assert index.propose(10) == [7, 8, 6, 1, 2, 3, 7, 8, 6, 1]


def test_a_repeating_tail_is_drafted_past_the_repeats_length():
    rows = [5, 6, 7, 1] * 3  # a list or a table: the same row again and again
    index = NgramIndex(rows[:-1])
    assert index.propose(9) == [1, 5, 6, 7, 1, 5, 6, 7, 1]


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
def test_a_proposal_is_always_what_followed_the_sequences_end_earlier(tokens, limit):
    index = NgramIndex(tokens)
    draft = index.propose(limit)
    assert len(draft) <= limit
    if draft:
        # What followed an earlier occurrence of the end, in the text that the draft goes on.
        text = tokens + draft
        starts = [i for i in range(len(tokens)) if text[i : i + len(draft)] == draft]
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


def cpu_like_costs() -> StepCosts:
    """Step times a 2-core CPU gave the starter model (ms by tokens in the decode)."""
    costs = StepCosts()
    for _ in range(5):
        costs.record(1, 0.0077)
        for n, ms in ((2, 14.7), (3, 17.7), (4, 20.5), (6, 29.7), (8, 33.9), (12, 46.7),
                      (16, 61.1)):  # fmt: skip
            costs.record(n, ms / 1000)
    return costs


def test_step_costs_are_learnt_from_the_engines_own_steps():
    costs = StepCosts()
    assert not costs.known(5)
    costs.record(1, 0.01)
    costs.record(4, 0.02)
    assert not costs.known(5)  # one multi-token size: no slope yet
    costs.record(8, 0.03)
    assert costs.known(5)
    assert abs(costs.seconds(6) - 0.025) < 1e-9 and costs.seconds(1) == 0.01
    costs.record(400, 9.0)  # a long prompt chunk is not a draft's step
    assert abs(costs.seconds(6) - 0.025) < 1e-9


def test_auto_drafts_long_where_drafts_are_taken_and_not_at_all_where_they_are_not():
    costs = cpu_like_costs()
    copying = DraftPolicy(auto=True)
    for _ in range(20):
        copying.record(8, 8)
    assert copying.best(MAX_DRAFT, 1.0, 1, costs) >= 4
    guessing = DraftPolicy(auto=True)
    for _ in range(20):
        guessing.record(4, 0)
    assert guessing.best(MAX_DRAFT, 1.0, 1, costs) == 0
    assert guessing.best(MAX_DRAFT, 4.0, 4, costs) == 0  # beside three other streams
    # Two tokens of three taken: on this CPU a 4-token decode costs 2.7 one-token ones.
    fair = DraftPolicy(auto=True)
    for _ in range(20):
        fair.record(4, 2)
    assert fair.best(MAX_DRAFT, 1.0, 1, costs) == 0
    good = DraftPolicy(auto=True)
    for _ in range(10):
        good.record(9, 8)  # eight in nine
    assert 3 <= good.best(MAX_DRAFT, 1.0, 1, costs) < MAX_DRAFT
    assert good.best(MAX_DRAFT, 4.0, 4, costs) > 0


def test_auto_tries_a_short_draft_again_after_a_while():
    costs = cpu_like_costs()
    guessing = DraftPolicy(auto=True)
    for _ in range(20):
        guessing.record(4, 0)
    tries = [guessing.best(MAX_DRAFT, 1.0, 1, costs) for _ in range(EXPLORE_STEPS)]
    assert tries[:-1] == [0] * (EXPLORE_STEPS - 1) and tries[-1] > 0


def test_the_engines_acceptance_by_match_length_is_a_new_replys_prior():
    stats = AcceptanceByOrder()
    for _ in range(50):
        stats.record(4, 8, 0)
        stats.record(2, 0, 1)
    acc4, rej4 = stats.prior(4)
    assert acc4 + rej4 <= PRIOR_TOKENS + 1e-9 and rej4 == 0
    fresh = DraftPolicy(auto=True)
    assert fresh.acceptance(stats.prior(4)) > 0.9 > 0.5 > fresh.acceptance(stats.prior(2))
    costs = cpu_like_costs()
    assert fresh.best(MAX_DRAFT, 1.0, 1, costs, stats.prior(4)) >= 4
    assert fresh.best(MAX_DRAFT, 1.0, 1, costs, stats.prior(2)) == 0
