"""A streaming route reads its job's events with Job.stream(): text deltas that are already
waiting when one is taken (the route fell behind the engine) come as one, and every other
event keeps its place."""

from __future__ import annotations

import asyncio

from deskllm.engine.domain import Done, Metrics, TextDelta, TokenLogprob
from deskllm.server.engine_queue import ChatRequest, Job


def entry(text: str) -> TokenLogprob:
    return TokenLogprob(text, text.encode(), -0.5, ())


async def read(events: list) -> list:
    job = Job(ChatRequest("c", (), None), asyncio.get_running_loop())  # type: ignore[arg-type]
    for event in events:
        job._events.put_nowait(event)
    return [event async for event in job.stream()]


def test_waiting_deltas_are_merged_and_other_events_keep_their_place():
    metrics = Metrics(request_id=1)
    done = Done(request_id=1, finish_reason="stop", text="Hello world!", metrics=metrics)
    events = [
        TextDelta(1, "Hel", (entry("Hel"),)), TextDelta(1, "lo", (entry("lo"),)),
        metrics, TextDelta(1, " wor"), TextDelta(1, "ld", (entry("ld"),)),
        TextDelta(1, "!"), done, None,
    ]  # fmt: skip
    got = asyncio.run(read(events))
    assert got == [
        TextDelta(1, "Hello", (entry("Hel"), entry("lo"))),
        metrics,
        TextDelta(1, " world!", (entry("ld"),)),
        done,
    ]


def test_a_delta_read_as_it_comes_is_passed_on_as_it_is():
    async def one_at_a_time() -> list:
        job = Job(ChatRequest("c", (), None), asyncio.get_running_loop())  # type: ignore[arg-type]
        got = []
        reader = job.stream()
        for text in ("a", "b"):
            job._events.put_nowait(TextDelta(1, text))
            got.append(await anext(reader))
        job._events.put_nowait(None)
        got.extend([event async for event in reader])
        return got

    assert asyncio.run(one_at_a_time()) == [TextDelta(1, "a"), TextDelta(1, "b")]
