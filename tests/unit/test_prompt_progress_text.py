"""PromptProgress: the share read, the time left at the speed so far, and the words shown."""

from __future__ import annotations

from deskllm.engine.domain import PromptProgress


def test_fraction_and_eta_count_only_the_tokens_to_read():
    # 1,000 of 3,531 were cached; 531 more read in 10 s: 2,000 left at 53.1 tok/s.
    p = PromptProgress(1, total=3531, cache=1000, processed=1531, seconds=10.0)
    assert p.fraction == 531 / 2531
    assert abs(p.eta_s - 2000 / 53.1) < 1e-9
    assert p.describe() == "1,531 of 3,531 prompt tokens read (21%), about 38 s left"


def test_long_waits_are_said_in_minutes_and_nothing_read_has_no_eta():
    slow = PromptProgress(1, total=10_000, cache=0, processed=100, seconds=60.0)
    assert slow.describe().endswith("about 99 min left")
    start = PromptProgress(1, total=500, cache=0, processed=0, seconds=0.5)
    assert start.eta_s is None and start.describe() == "0 of 500 prompt tokens read (0%)"
    assert PromptProgress(1, total=50, cache=50, processed=50, seconds=0.1).fraction == 1.0
