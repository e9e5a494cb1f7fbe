"""A long prompt shows how far it is read: the engine's PromptProgress, Stop while it reads,
the API's `return_progress` (through the official openai SDK) and `deskllm chat`'s lines, on
the real engine with the starter model. On one thread a 512-token chunk of the prompt takes
seconds on a small machine (and a good part of one on a fast one), so progress also comes
from inside a step."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import openai
import pytest
from server_helpers import API_KEY, running_server, serve_env

from deskllm.engine.client import EngineClient
from deskllm.engine.domain import ChatMessage, Metrics, PromptProgress, Sampling, TextDelta

SHORT = Sampling(temperature=0, max_tokens=4)
N_BATCH = 512  # LoadParams' default: what the app and the server read a prompt in


def long_text(first: str, words: int = 400) -> str:
    """About 2.9 tokens a word (some 1,170 in all); `first` changes the prompt's start, so
    no cache holds it."""
    names = ["river", "stone", "lamp", "garden", "copper", "violet", "harbour", "window"]
    body = " ".join(f"{names[i % 8]}{i % 97}" for i in range(words))
    return f"{first}. Read this list and say which word comes first: {body}"


@pytest.fixture(scope="module")
def client(tmp_path_factory, starter_model: Path, extra_bufts: bool):
    from deskllm.engine.domain import LoadParams

    with EngineClient() as engine:
        engine.load(LoadParams(str(starter_model), n_ctx=4096, n_threads=1, n_batch=N_BATCH,
                               use_extra_bufts=extra_bufts, kv_ram_budget_mb=0,
                               kv_disk_budget_mb=0))  # fmt: skip
        yield engine


def read_events(engine: EngineClient, text: str, stop_after_progress: bool = False):
    """Every event of one reply, with when it came; with `stop_after_progress`, Stop at the
    first PromptProgress."""
    reply = engine.chat(None, [ChatMessage("user", text)], SHORT)
    events, stopped_at = [], None
    for event in reply.events():
        events.append((time.perf_counter(), event))
        if stop_after_progress and stopped_at is None and isinstance(event, PromptProgress):
            stopped_at = time.perf_counter()
            reply.cancel()
    return reply, events, stopped_at


def test_a_long_prompt_reports_progress_before_its_first_token(client):
    started = time.perf_counter()
    reply, events, _ = read_events(client, long_text("Alpha"))
    assert reply.done is not None and reply.done.finish_reason in ("stop", "length")
    total = reply.done.metrics.prompt_tokens
    assert total > 2 * N_BATCH
    first_text = next(i for i, (_, e) in enumerate(events) if isinstance(e, TextDelta))
    progress = [e for _, e in events if isinstance(e, PromptProgress)]
    assert progress, "no progress while a multi-second prompt was read"
    # All of it before the text, in order, each about this prompt.
    assert all(isinstance(e, PromptProgress | Metrics) for _, e in events[:first_text])
    assert not any(isinstance(e, PromptProgress) for _, e in events[first_text:])
    assert all(p.total == total and p.cache == 0 for p in progress)
    read = [p.processed for p in progress]
    assert read == sorted(read) and read[-1] < total
    # Some come from inside a step: between chunk boundaries (a step reads N_BATCH tokens).
    assert any(r % N_BATCH != 0 for r in read), read
    last = progress[-1]
    assert 0 < last.fraction < 1 and last.eta_s is not None and last.seconds > 0
    assert last.describe().startswith(f"{last.processed:,} of {total:,} prompt tokens read")
    assert events[first_text][0] - started > 1.0  # the premise: a read of seconds


def test_stop_while_the_prompt_is_read_ends_the_reply_inside_a_step(client):
    # A whole read, to know how long one step takes on this machine.
    started = time.perf_counter()
    full, events, _ = read_events(client, long_text("Beta"))
    first_text = next(t for t, e in events if isinstance(e, TextDelta))
    steps = -(-full.done.metrics.prompt_tokens // N_BATCH)
    step_s = (first_text - started) / steps

    reply, events, stopped_at = read_events(client, long_text("Gamma"), stop_after_progress=True)
    assert stopped_at is not None
    done = reply.done
    assert done is not None and done.finish_reason == "cancelled" and done.text == ""
    ended = events[-1][0]
    # Without stopping inside the step, the reply would end only when its chunk is read.
    assert ended - stopped_at < 0.5 * step_s, (ended - stopped_at, step_s)
    # The engine goes on answering, with the same prompt read whole.
    again = client.chat(None, [ChatMessage("user", long_text("Gamma"))], SHORT).wait()
    assert again.done is not None and again.done.finish_reason in ("stop", "length")
    assert again.done.metrics.prompt_tokens == full.done.metrics.prompt_tokens


def test_the_api_streams_progress_only_when_asked(tmp_path, session_home, extra_bufts):
    with running_server(tmp_path, session_home, "--api-key", API_KEY, "--threads", "1",
                        "--ctx", "4096") as server:  # fmt: skip
        api = openai.OpenAI(base_url=server.v1, api_key=API_KEY, max_retries=0, timeout=300)
        model = api.models.list().data[0].id

        def stream(text: str, **extra) -> list:
            return list(api.chat.completions.create(
                model=model, messages=[{"role": "user", "content": text}], stream=True,
                temperature=0, max_tokens=4, stream_options={"include_usage": True},
                extra_body=extra,
            ))  # fmt: skip

        chunks = stream(long_text("Delta"), return_progress=True)
        usage = chunks[-1].usage
        progress = [c.model_extra["prompt_progress"] for c in chunks
                    if (c.model_extra or {}).get("prompt_progress")]  # fmt: skip
        assert progress, "no prompt_progress chunk"
        assert set(progress[0]) == {"total", "cache", "processed", "time_ms"}
        assert all(p["total"] == usage.prompt_tokens for p in progress)
        assert [p["processed"] for p in progress] == sorted(p["processed"] for p in progress)
        assert all(0 <= p["cache"] <= p["processed"] < p["total"] for p in progress)
        assert all(p["time_ms"] > 0 for p in progress)
        first_text = next(i for i, c in enumerate(chunks)
                          if c.choices and c.choices[0].delta.content)  # fmt: skip
        assert all(not (c.model_extra or {}).get("prompt_progress") for c in chunks[first_text:])
        # The same request without it: not one progress chunk.
        plain = stream(long_text("Epsilon"))
        assert not any((c.model_extra or {}).get("prompt_progress") for c in plain)


def test_cli_chat_prints_progress_lines_with_metrics(tmp_path, session_home, starter_model):
    result = subprocess.run(
        [sys.executable, "-m", "deskllm", "chat", "--model", str(starter_model), "--threads",
         "1", "--ctx", "4096", "--temperature", "0", "--max-tokens", "4", "--metrics",
         "--prompt", long_text("Zeta")],
        env=serve_env(tmp_path, session_home), capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    lines = [line for line in result.stderr.splitlines() if "prompt tokens read" in line]
    assert lines, result.stderr
    assert all(line.startswith("[") and " of " in line and "%)" in line for line in lines)
