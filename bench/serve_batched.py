"""Aggregate decode speed of `deskllm serve --parallel N` with 1, 2, 4 and 8 concurrent
streams, and the raw batched runtime (BatchRuntime in this process, no server) for the same
stream counts, side by side in one run (this machine is shared and noisy: read the ratios).
Prints one JSON object.

    .venv/bin/python bench/serve_batched.py [--model NAME] [--threads 2] [--streams 1,2,4,8]
                                            [--tokens 64] [--rounds 2] [--ctx 1024]

Every stream decodes a greedy reply of exactly --tokens tokens (ignore_eos) to its own prompt.
  agg_tps_K        server: Σ(tokens - 1) over K streams / (last end - first first-text), as
                   the clients receive them over HTTP (raw SSE)
  raw_agg_tps_K    the same figure from BatchRuntime.step() directly (no process, pipe, HTTP)
  server_over_raw_K  agg_tps_K / raw_agg_tps_K, per round, median
  scaling_K        agg_tps_K / agg_tps_1: what batching gains through the server
  ttft_idle_p95, ttft_busy_p95  seconds from sending a 1-token request to its first text, alone
                   and while N-1 other streams decode (chunked prefill keeps the new prompt from
                   waiting for them to end)
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx2

from deskllm.cli.chat import resolve_model
from deskllm.store import ModelLibrary, open_database

PROMPTS = [
    "Write a long story about a lighthouse.", "Describe a day at the beach.",
    "Explain how bread is made.", "Tell me about the history of trains.",
    "Write a poem about autumn leaves.", "Describe the life of a honeybee.",
    "Explain how a bicycle works.", "Tell a story about a lost cat.",
]  # fmt: skip


def start_server(model_path: str, threads: int, ctx: int, parallel: int):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    process = subprocess.Popen(
        [sys.executable, "-m", "deskllm", "serve", "--model", model_path, "--port", str(port),
         "--threads", str(threads), "--ctx", str(ctx), "--parallel", str(parallel)],
        stderr=subprocess.DEVNULL,
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"the server exited with {process.returncode}")
        try:
            if httpx2.get(url + "/health", timeout=5).status_code == 200:
                return process, url
        except httpx2.TransportError:
            pass
        time.sleep(0.2)
    process.kill()
    raise RuntimeError("the server did not start in time")


def stream(url: str, model: str, prompt: str, tokens: int, out: dict,
           stop: threading.Event | None = None) -> None:  # fmt: skip
    """One streamed reply; `out` gets sent, first (first text) and end times, and tokens.
    `stop`: leave once it is set (closing the connection ends the reply)."""
    body = {
        "model": model, "messages": [{"role": "user", "content": prompt}], "stream": True,
        "temperature": 0, "repeat_penalty": 1.0, "max_tokens": tokens, "ignore_eos": True,
        "stream_options": {"include_usage": True},
    }  # fmt: skip
    out["sent"] = time.perf_counter()
    with httpx2.stream("POST", url + "/v1/chat/completions", json=body, timeout=900) as r:
        r.raise_for_status()
        for line in r.iter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            chunk = json.loads(line[6:])
            if chunk.get("usage"):
                out["tokens"] = chunk["usage"]["completion_tokens"]
            elif chunk["choices"] and chunk["choices"][0]["delta"].get("content"):
                out.setdefault("first", time.perf_counter())
            if stop is not None and stop.is_set():
                break
    out["end"] = time.perf_counter()


def aggregate(runs: list[dict]) -> float:
    span = max(r["end"] for r in runs) - min(r["first"] for r in runs)
    return sum(r["tokens"] - 1 for r in runs) / span


def server_agg(url: str, model: str, k: int, tokens: int) -> float:
    runs = [{} for _ in range(k)]
    threads = [threading.Thread(target=stream, args=(url, model, PROMPTS[i], tokens, runs[i]))
               for i in range(k)]  # fmt: skip
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return aggregate(runs)


def raw_agg(runtime, prompts: list[list[int]], k: int, tokens: int) -> float:
    from deskllm.engine.protocol import Sampling

    sampling = Sampling(temperature=0, repeat_penalty=1.0, max_tokens=tokens, ignore_eos=True)
    runs = [runtime.submit(10_000 + i, prompts[i], sampling) for i in range(k)]
    ends: dict[int, float] = {}
    while runtime.busy:
        for out in runtime.step():
            if out.finish is not None:
                ends[out.run.request_id] = time.perf_counter()
    return aggregate([{"first": r.first_token, "end": ends[r.request_id],
                       "tokens": r.generated} for r in runs])  # fmt: skip


def ttft(url: str, model: str, samples: int, background: int) -> list[float]:
    """TTFT of `samples` one-token requests, one after another, while `background` long
    streams decode (they are left once the samples are taken)."""
    still_running = []
    bg = [{} for _ in range(background)]
    stop = threading.Event()
    threads = [threading.Thread(target=stream,
                                args=(url, model, PROMPTS[i], 4000, bg[i], stop))
               for i in range(background)]  # fmt: skip
    for t in threads:
        t.start()
    while any("first" not in r for r in bg):
        time.sleep(0.05)
    times = []
    for i in range(samples):
        out: dict = {}
        stream(url, model, f"Question {i}: {PROMPTS[-1 - i % 4]}", 1, out)
        times.append(out["first"] - out["sent"])
        still_running.append(all(t.is_alive() for t in threads))
    stop.set()
    for t in threads:
        t.join()
    if not all(still_running):
        print("warning: background streams ended before the TTFT samples", file=sys.stderr)
    return times


def p95(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(0.95 * len(ordered)))]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default=None, help="a .gguf path or installed name")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--streams", default="1,2,4,8")
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--ctx", type=int, default=1024, help="context of one slot")
    parser.add_argument("--ttft-samples", type=int, default=8)
    args = parser.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))
    counts = [int(k) for k in args.streams.split(",")]
    slots = max(counts)
    model_path = resolve_model(ModelLibrary(open_database()), args.model)

    from deskllm.engine.batch_runtime import BatchRuntime
    from deskllm.engine.chat_template import ChatTemplate
    from deskllm.engine.extra_bufts_probe import extra_bufts_work
    from deskllm.engine.load_defaults import resolve_params
    from deskllm.engine.protocol import ChatMessage, LoadParams

    params = resolve_params(LoadParams(model_path=model_path, n_ctx=args.ctx,
                                       n_threads=args.threads), None)  # fmt: skip
    runtime = BatchRuntime(params, slots, extra_bufts_work(model_path))
    template = ChatTemplate(runtime.chat_template(), runtime.bos_text, runtime.eos_text)
    prompts = [runtime.tokenize(template.render([ChatMessage("user", p)]).text) for p in PROMPTS]
    process, url = start_server(model_path, args.threads, args.ctx, slots)
    server: dict[int, list[float]] = {k: [] for k in counts}
    raw: dict[int, list[float]] = {k: [] for k in counts}
    try:
        model = httpx2.get(url + "/v1/models").json()["data"][0]["id"]
        server_agg(url, model, 1, 8)  # warm both paths alike
        raw_agg(runtime, prompts, 1, 8)
        for _ in range(args.rounds):
            for k in counts:  # interleaved: load on the machine hits both paths alike
                server[k].append(server_agg(url, model, k, args.tokens))
                raw[k].append(raw_agg(runtime, prompts, k, args.tokens))
        idle = ttft(url, model, args.ttft_samples, 0)
        busy = ttft(url, model, args.ttft_samples, slots - 1)
    finally:
        process.terminate()
        process.wait(30)
        runtime.close()
    result: dict = {"model": Path(model_path).name, "n_threads": args.threads, "slots": slots,
                    "tokens": args.tokens, "rounds": args.rounds}  # fmt: skip
    base = statistics.median(server[counts[0]])
    for k in counts:
        result[f"agg_tps_{k}"] = statistics.median(server[k])
        result[f"raw_agg_tps_{k}"] = statistics.median(raw[k])
        result[f"server_over_raw_{k}"] = statistics.median(
            s / r for s, r in zip(server[k], raw[k], strict=True)
        )
        result[f"scaling_{k}"] = result[f"agg_tps_{k}"] / base
    result |= {
        "ttft_idle_p95": p95(idle),
        "ttft_busy_p95": p95(busy),
        "ttft_busy_over_idle": p95(busy) / p95(idle),
        "samples": {"server": server, "raw": raw},
        "cpu_count": os.cpu_count(),
        "load_avg_1m": os.getloadavg()[0],
    }
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
