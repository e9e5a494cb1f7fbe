"""Single-stream decode speed through `deskllm serve`'s API against the engine client it is
built on, side by side in one run (this machine is shared and noisy: only the ratio means
anything). Prints one JSON object; the target is api_over_client >= 0.95.

    .venv/bin/python bench/serve.py [--model NAME] [--threads 2] [--tokens 256] [--rounds 3]

Both paths decode the same greedy reply with ignore_eos, so each generates exactly --tokens
tokens, and both are timed the same way: from the first text the client receives to the end
of the reply, (tokens - 1) / seconds.
  client_tg_tps  EngineClient.chat → Reply, in this process (what `deskllm bench` times)
  api_tg_tps     POST /v1/chat/completions with stream=true, read as raw SSE over HTTP
  *_engine_tg_tps  the engine's own decode speed in the same runs (Metrics.tg_tps, the API's
                 timings.predicted_per_second): on a busy machine the engine itself slows
                 down, so *_delivery (client tok/s / engine tok/s) isolates what each path's
                 transport costs
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
import time
import uuid
from pathlib import Path

import httpx2

from deskllm.cli.chat import resolve_model
from deskllm.engine.client import EngineClient
from deskllm.engine.protocol import ChatMessage, LoadParams, Sampling
from deskllm.loader import ModelLoader
from deskllm.store import ModelLibrary, open_database

PROMPT = "Write a long story about a lighthouse."
REPEATS = 2  # each path keeps the best of this many runs per round, alike


def client_tps(client: EngineClient, tokens: int) -> tuple[float, float]:
    sampling = Sampling(temperature=0.0, repeat_penalty=1.0, max_tokens=tokens, ignore_eos=True)
    reply = client.chat(uuid.uuid4().hex, [ChatMessage("user", PROMPT)], sampling)
    first = None
    for _text in reply:
        if first is None:
            first = time.perf_counter()
    end = time.perf_counter()
    if reply.done is None or first is None:
        raise RuntimeError(f"the reply failed: {reply.error}")
    tps = (reply.done.metrics.generated_tokens - 1) / (end - first)
    return tps, reply.done.metrics.tg_tps or 0.0


def api_tps(http: httpx2.Client, url: str, model: str, tokens: int) -> tuple[float, float]:
    body = {
        "model": model, "messages": [{"role": "user", "content": PROMPT}], "stream": True,
        "temperature": 0, "repeat_penalty": 1.0, "max_tokens": tokens, "ignore_eos": True,
        "stream_options": {"include_usage": True}, "user": uuid.uuid4().hex,
    }  # fmt: skip
    first = end = None
    generated, engine_tps = 0, 0.0
    with http.stream("POST", url + "/v1/chat/completions", json=body) as response:
        response.raise_for_status()
        for line in response.iter_lines():
            if not line.startswith("data: "):
                continue
            data = line.removeprefix("data: ")
            if data == "[DONE]":
                break
            chunk = json.loads(data)
            if chunk.get("usage"):
                generated = chunk["usage"]["completion_tokens"]
                engine_tps = chunk["timings"]["predicted_per_second"] or 0.0
            elif chunk["choices"] and chunk["choices"][0]["delta"].get("content"):
                if first is None:
                    first = time.perf_counter()
            elif chunk["choices"] and chunk["choices"][0].get("finish_reason"):
                end = time.perf_counter()
    if first is None or end is None or generated < 2:
        raise RuntimeError("the streamed reply was too short to time")
    return (generated - 1) / (end - first), engine_tps


def start_server(model_path: str, threads: int, ctx: int) -> tuple[subprocess.Popen, str]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    process = subprocess.Popen(
        [sys.executable, "-m", "deskllm", "serve", "--model", model_path, "--port", str(port),
         "--threads", str(threads), "--ctx", str(ctx)],
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


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default=None, help="a .gguf path or installed name")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--ctx", type=int, default=4096)
    parser.add_argument("--tokens", type=int, default=256)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    # Killed by a timeout: still stop the server (the finally below).
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))
    model_path = resolve_model(ModelLibrary(open_database()), args.model)
    process, url = start_server(model_path, args.threads, args.ctx)
    try:
        with EngineClient() as client, httpx2.Client(timeout=600) as http:
            ModelLoader(client).load(
                LoadParams(model_path=model_path, n_ctx=args.ctx, n_threads=args.threads)
            )
            model = http.get(url + "/v1/models").json()["data"][0]["id"]
            api_tps(http, url, model, 8)  # warm both paths alike
            client_tps(client, 8)
            direct, api = [], []
            for _ in range(args.rounds):
                # Interleaved and compared within each round: load on the machine hits both.
                direct.append(max(client_tps(client, args.tokens) for _ in range(REPEATS)))
                api.append(max(api_tps(http, url, model, args.tokens) for _ in range(REPEATS)))
    finally:
        process.terminate()
        process.wait(30)
    direct_tps, direct_engine = [d for d, _ in direct], [e for _, e in direct]
    api_tps_, api_engine = [a for a, _ in api], [e for _, e in api]
    result = {
        "model": Path(model_path).name,
        "n_threads": args.threads,
        "tokens": args.tokens,
        "client_tg_tps": statistics.median(direct_tps),
        "api_tg_tps": statistics.median(api_tps_),
        "api_over_client": statistics.median(
            a / d for a, d in zip(api_tps_, direct_tps, strict=True)
        ),
        "client_engine_tg_tps": statistics.median(direct_engine),
        "api_engine_tg_tps": statistics.median(api_engine),
        "client_delivery": statistics.median(
            d / e for d, e in zip(direct_tps, direct_engine, strict=True)
        ),
        "api_delivery": statistics.median(a / e for a, e in zip(api_tps_, api_engine, strict=True)),
        "samples": {"client": direct_tps, "api": api_tps_},
        "cpu_count": os.cpu_count(),
    }
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
