"""The router's calibration: a threshold at the quantile of observed scores escalates that
share of them; its score is the mean log-probability."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from deskllm.remote.router import threshold_for_share, uncertainty_score

scores_st = st.lists(st.floats(-20, 0), min_size=1, max_size=200, unique=True)


@given(scores_st, st.floats(0, 1))
def test_the_threshold_escalates_the_share_asked(scores: list[float], share: float) -> None:
    threshold = threshold_for_share(scores, share)
    escalated = sum(s < threshold for s in scores)
    assert escalated == round(share * len(scores))


def test_the_ends() -> None:
    scores = [-3.0, -1.0, -0.5, -2.0]
    assert threshold_for_share(scores, 1.0) == math.inf  # above any score: all escalate
    assert threshold_for_share(scores, 0.0) == -math.inf
    assert threshold_for_share(scores, 0.5) == -1.0  # -3 and -2 are below it
    with pytest.raises(ValueError):
        threshold_for_share(scores, 1.5)
    with pytest.raises(ValueError):
        threshold_for_share([], 0.5)


def test_the_score_is_the_mean_log_probability() -> None:
    assert uncertainty_score([-1.0, -3.0]) == -2.0
    assert uncertainty_score([]) is None
