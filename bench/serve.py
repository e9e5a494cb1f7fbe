"""`deskllm serve --parallel` against a plain batched decode loop, llama.cpp's llama-server,
llama-cpp-python's own server and `deskllm bench`'s decode path, side by side in one run per
model (this machine is shared and noisy: read the ratios). Prints one JSON object.

    .venv/bin/python bench/serve.py [--model NAME_OR_PATH ...] [--threads 2] [--tokens 64]
                                    [--rounds 2] [--streams 1,2,4,8] [--ctx 1024]

--model may be given more than once. Without it: the starter model, and Gemma 3 270M from
~/.cache/deskllm-bench/gemma-3-270m-q4_k_m.gguf when bench/fetch_gemma.sh has put it there.

Output: {"models": {file name: {keys below}}, "n_threads", "tokens", "rounds", "cpu_count",
"load_avg_1m": [at the start, at the end], and agg_over_llama_server_N and
ttft_over_llama_server_N: the worst across models}. Every stream decodes a greedy reply of --tokens
tokens to its own prompt (ignore_eos where the server has it); speeds are medians over the
rounds and ratios medians of the ratios within each round. Each measurement starts once every
process the benchmark started is idle (deskllm's engine reads finished replies again in the
background; llama-cpp-python's server decodes on after its client left), and deskllm serve and
llama-server take turns going first (--rounds 2 or more, even, is fair). Keys per model:
  agg_tps_N            N concurrent streams through POST /v1/chat/completions (stream=true) of
                       `deskllm serve --parallel 8`: Σ(tokens - 1) / (last end - first text)
  raw_batched_tps_N    a plain loop on the C API in this process, what llama-batched-bench
                       measures: one context, N sequences, one llama_decode of N tokens per
                       step, greedy sampling; N·(tokens - 1) / (last step - first token)
  agg_over_raw_N       agg_tps_N / raw_batched_tps_N (target >= 0.85)
  ttft_p50_N           the median of those N streams' seconds from sending to the first text
  llama_server_tps_N, llama_server_ttft_p50_N
                       the same N streams, same client, to llama.cpp's llama-server built from
                       the engine's vendored sources (packaging/build_llama_server.sh) with the
                       same slots (--parallel 8), KV pool (8 × --ctx, unified, as the engine),
                       threads and model; --no-repack where the engine turns the
                       extra buffer types off. Left out, with a note, where it was not built.
  agg_over_llama_server_N   agg_tps_N / llama_server_tps_N (target >= 1.0)
  ttft_over_llama_server_N  ttft_p50_N / llama_server_ttft_p50_N (target <= 1.5)
  peer_tps_1           llama-cpp-python's server (python -m llama_cpp.server, same threads and
                       context), one stream, the same client and prompt as agg_tps_1
  peer_completed_4     of 4 concurrent streams to it, how many ended with text
  peer_stream_tps_4    each of those 4 streams' tok/s (0 for one that got no text)
  peer_agg_tps_4       their aggregate, as agg_tps_N
  api_over_peer_1      agg_tps_1 / peer_tps_1 (target >= 1.2)
  agg_over_peer_4      agg_tps_4 / peer_agg_tps_4 (target >= 2)
  peer_default_tps_1, peer_default_completed_4, peer_default_agg_tps_4,
  api_over_peer_default_1, agg_over_peer_default_4
                       the same against llama_cpp.server started with its own defaults, as a
                       user would start it (no --n_threads: half the cores, 1 on 2 cores)
  ttft_idle_p50        seconds from sending a 1-token request to its first text, alone
  ttft_busy_p95        the same while 3 other streams decode
  ttft_busy_over_idle  ttft_busy_p95 / ttft_idle_p50 (target <= 3)
  bench_tg_tps         one reply of --tg-tokens through EngineClient, as `deskllm bench` times
                       its tg_tps (first text to end, best of 2 per round)
  api_tg_tps           the same reply through the server's API, timed the same way
  api_over_bench_tg    api_tg_tps / bench_tg_tps (target >= 0.95)
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import httpx2

from deskllm import settings as settings_mod
from deskllm.backends import Resolver
from deskllm.engine.chat_template import ChatTemplate
from deskllm.engine.client import EngineClient
from deskllm.engine.domain import ChatMessage, LoadParams, Sampling
from deskllm.engine.llama_model import L, LlamaModel
from deskllm.llamacpp import build
from deskllm.loader import ModelLoader
from deskllm.loader.params import params_from_settings
from deskllm.store import open_database

LLAMA_SERVER = Path(__file__).parents[1] / "build" / "llama-server" / "llama-server"
GEMMA = Path.home() / ".cache" / "deskllm-bench" / "gemma-3-270m-q4_k_m.gguf"
SLOTS = 8
BUSY_STREAMS = 3
PEER_STREAMS = 4
# llama_cpp.server with deskllm's thread count, and with its own default (no --n_threads).
PEER_KINDS = {"peer": True, "peer_default": False}
MODEL_IDS: dict[str, str] = {}  # each server's URL → the model name its requests give
REPEATS = 2  # the single-stream tg paths keep the best of this many runs per round, alike
PROMPTS = [
    "Write a long story about a lighthouse.", "Describe a day at the beach.",
    "Explain how bread is made.", "Tell me about the history of trains.",
    "Write a poem about autumn leaves.", "Describe the life of a honeybee.",
    "Explain how a bicycle works.", "Tell a story about a lost cat.",
]  # fmt: skip


# Servers ------------------------------------------------------------------------------------
def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_ready(process: subprocess.Popen, url: str, name: str) -> None:
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"{name} exited with {process.returncode}")
        try:
            if httpx2.get(url, timeout=5).status_code == 200:
                return
        except httpx2.TransportError:
            pass
        time.sleep(0.2)
    process.kill()
    raise RuntimeError(f"{name} did not start in time")


def start_deskllm(model_path: str, threads: int, ctx: int) -> tuple[subprocess.Popen, str]:
    port = free_port()
    process = subprocess.Popen(
        [sys.executable, "-m", "deskllm", "serve", "--model", model_path, "--port", str(port),
         "--threads", str(threads), "--ctx", str(ctx), "--parallel", str(SLOTS)],
        stderr=subprocess.DEVNULL,
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    wait_ready(process, url + "/health", "deskllm serve")
    MODEL_IDS[url] = httpx2.get(url + "/v1/models").json()["data"][0]["id"]
    return process, url


def start_peer(model_path: str, threads: int | None, ctx: int) -> tuple[subprocess.Popen, str]:
    """llama-cpp-python's server on the llama.cpp build deskllm uses, with `threads` (None:
    its own default thread count) and the context; its own defaults otherwise."""
    port = free_port()
    env = dict(os.environ)
    if build.engine_dir() is not None:
        env["PYTHONPATH"] = os.pathsep.join([str(build.engine_dir()), env.get("PYTHONPATH", "")])
    threads_args = [] if threads is None else [
        "--n_threads", str(threads), "--n_threads_batch", str(threads)]  # fmt: skip
    process = subprocess.Popen(
        [sys.executable, "-m", "llama_cpp.server", "--model", model_path, "--port", str(port),
         *threads_args, "--n_ctx", str(ctx), "--verbose", "false"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env,
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    wait_ready(process, url + "/v1/models", "llama_cpp.server")
    MODEL_IDS[url] = httpx2.get(url + "/v1/models").json()["data"][0]["id"]
    return process, url


def start_llama_server(model_path: str, threads: int, ctx: int,
                       extra_bufts: bool) -> tuple[subprocess.Popen, str]:  # fmt: skip
    """llama-server with deskllm serve's slots, per-slot context and threads."""
    port = free_port()
    process = subprocess.Popen(
        [str(LLAMA_SERVER), "--model", model_path, "--host", "127.0.0.1", "--port", str(port),
         "--threads", str(threads), "--threads-batch", str(threads), "--parallel", str(SLOTS),
         "--ctx-size", str(ctx * SLOTS), "--kv-unified", "--jinja",
         *([] if extra_bufts else ["--no-repack"])],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    wait_ready(process, url + "/health", "llama-server")
    MODEL_IDS[url] = httpx2.get(url + "/v1/models").json()["data"][0]["id"]
    return process, url


def stop(process: subprocess.Popen | None) -> None:
    """End a server and wait for its children too: deskllm's engine saves its KV states as it
    exits, and that work must not fall into the next server's measurement."""
    import psutil

    if process is None or process.poll() is not None:
        return
    try:
        children = psutil.Process(process.pid).children(recursive=True)
    except psutil.NoSuchProcess:
        children = []
    process.terminate()
    try:
        process.wait(30)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
    _gone, alive = psutil.wait_procs(children, timeout=30)
    for child in alive:
        child.kill()


def settle(timeout_s: float = 15.0) -> None:
    """Wait until every process this one started is idle (the servers, their engines, the
    EngineClient's): after a reply deskllm's engine reads it again in the background (its
    cells then equal a cold read), and llama-cpp-python's server goes on decoding a reply
    whose client left; that work must not fall into the next measurement, whichever path it
    times."""
    import psutil

    tree = psutil.Process().children(recursive=True)

    def cpu_s() -> float:
        total = 0.0
        for p in tree:
            with contextlib.suppress(psutil.NoSuchProcess):
                t = p.cpu_times()
                total += t.user + t.system
        return total

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        before = cpu_s()
        time.sleep(0.25)
        if cpu_s() - before < 0.025:  # under 10% of one core
            return


# Clients ------------------------------------------------------------------------------------
def stream(url: str, prompt: str, tokens: int, out: dict,
           stop_event: threading.Event | None = None) -> None:  # fmt: skip
    """One streamed greedy reply of `tokens` tokens to `prompt` (see `stream_chat`)."""
    body = {
        "model": MODEL_IDS[url], "messages": [{"role": "user", "content": prompt}], "stream": True,
        "temperature": 0, "repeat_penalty": 1.0, "max_tokens": tokens, "ignore_eos": True,
        "stream_options": {"include_usage": True}, "user": uuid.uuid4().hex,
    }  # fmt: skip
    stream_chat(url, body, out, stop_event)


def stream_chat(url: str, body: dict, out: dict,
                stop_event: threading.Event | None = None) -> None:  # fmt: skip
    """One streamed chat request read as raw SSE; `out` gets sent, first (first text), each
    text chunk's (times) and end times, usage and timings (where the server sends them),
    tokens (the usage figure, else the text chunks counted), finished (a finish reason came)
    and error (an HTTP failure).
    `stop_event`: leave once it is set (closing the connection ends the reply)."""
    out["sent"] = time.perf_counter()
    chunks = 0
    try:
        with httpx2.stream("POST", url + "/v1/chat/completions", json=body, timeout=900) as r:
            r.raise_for_status()
            for line in r.iter_lines():
                if not line.startswith("data: ") or line == "data: [DONE]":
                    continue
                chunk = json.loads(line[6:])
                if chunk.get("usage"):
                    out["usage"] = chunk["usage"]
                    out["tokens"] = chunk["usage"]["completion_tokens"]
                if chunk.get("timings"):
                    out["timings"] = chunk["timings"]
                choices = chunk.get("choices") or [{}]
                if (choices[0].get("delta") or {}).get("content"):
                    chunks += 1
                    now = time.perf_counter()
                    out.setdefault("first", now)
                    out.setdefault("times", []).append(now)  # inter-token latencies
                if choices[0].get("finish_reason"):
                    out["finished"] = True
                if stop_event is not None and stop_event.is_set():
                    break
    except httpx2.HTTPError as exc:
        out["error"] = str(exc)
    out["end"] = time.perf_counter()
    out.setdefault("tokens", chunks)


def concurrent(url: str, k: int, tokens: int) -> list[dict]:
    runs: list[dict] = [{} for _ in range(k)]
    threads = [threading.Thread(target=stream, args=(url, PROMPTS[i], tokens, runs[i]))
               for i in range(k)]  # fmt: skip
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return runs


def aggregate(runs: list[dict]) -> float:
    timed = [r for r in runs if "first" in r]
    if not timed:
        return 0.0
    span = max(r["end"] for r in timed) - min(r["first"] for r in timed)
    return sum(max(r["tokens"] - 1, 0) for r in timed) / span


def one_stream_tps(run: dict) -> float:
    if "first" not in run or run["tokens"] < 2 or run["end"] <= run["first"]:
        return 0.0
    return (run["tokens"] - 1) / (run["end"] - run["first"])


def served_agg(url: str, k: int, tokens: int, name: str) -> tuple[float, float]:
    """Aggregate tok/s of `k` streams and their median TTFT; every stream must be whole."""
    runs = concurrent(url, k, tokens)
    broken = [r for r in runs if r.get("error") or r.get("tokens") != tokens or "first" not in r]
    if broken:
        raise RuntimeError(f"{name}: {len(broken)} of {k} streams fell short: {broken}")
    return aggregate(runs), statistics.median(r["first"] - r["sent"] for r in runs)


def ttft(url: str, samples: int, background: int, tokens: int) -> list[float]:
    """TTFT of `samples` one-token requests, one after another, while `background` streams
    of `tokens` decode (they are left once the samples are taken). `tokens` fits a slot's
    share of the pool: longer ones would be promised cells the others then wait for."""
    bg: list[dict] = [{} for _ in range(background)]
    stop_event = threading.Event()
    threads = [threading.Thread(target=stream, args=(url, PROMPTS[i], tokens, bg[i], stop_event))
               for i in range(background)]  # fmt: skip
    for t in threads:
        t.start()
    while any("first" not in r for r in bg):
        if not any(t.is_alive() for t in threads):
            raise RuntimeError("the background streams ended before their first text")
        time.sleep(0.05)
    times, all_running = [], True
    # The idle and the busy samples begin otherwise: neither finds the other's saved prompt.
    word = "Busy" if background else "Idle"
    for i in range(samples):
        out: dict = {}
        stream(url, f"{word} question {i}: {PROMPTS[-1 - i % 4]}", 1, out)
        times.append(out["first"] - out["sent"])
        all_running = all_running and all(t.is_alive() for t in threads)
    stop_event.set()
    for t in threads:
        t.join()
    if not all_running:
        raise RuntimeError("background streams ended before the TTFT samples were taken")
    return times


def quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def bench_tg(client: EngineClient, tokens: int) -> float:
    """`deskllm bench`'s tg_tps: EngineClient in this process, first text to the end."""
    sampling = Sampling(temperature=0.0, repeat_penalty=1.0, max_tokens=tokens, ignore_eos=True)
    reply = client.chat(uuid.uuid4().hex, [ChatMessage("user", PROMPTS[0])], sampling)
    first = None
    for _text in reply:
        if first is None:
            first = time.perf_counter()
    end = time.perf_counter()
    if reply.done is None or first is None:
        raise RuntimeError(f"the reply failed: {reply.error}")
    return (reply.done.metrics.generated_tokens - 1) / (end - first)


def api_tg(url: str, tokens: int) -> float:
    out: dict = {}
    stream(url, PROMPTS[0], tokens, out)
    if out.get("error") or out.get("tokens") != tokens:
        raise RuntimeError(f"the API reply fell short: {out}")
    return one_stream_tps(out)


# The plain batched loop ---------------------------------------------------------------------
class RawBatched(LlamaModel):
    """llama-batched-bench's measurement from ctypes: one context holding `n_seq` sequences
    as the server's (the engine's own model and context: its per-sequence context, batch
    size, KV type and tokenizer, so the prompts are the server's tokens), no scheduler."""

    def __init__(self, params: LoadParams, n_seq: int, extra_bufts: bool) -> None:
        super().__init__(params, extra_bufts, n_slots=n_seq)
        self.L = L
        self.batch = L.llama_batch_init(params.n_batch, 0, 1)
        self.greedy = L.llama_sampler_init_greedy()

    def _decode(self, entries: list[tuple[int, int, int, bool]]) -> None:
        b = self.batch
        for i, (token, pos, seq, logits) in enumerate(entries):
            b.token[i], b.pos[i], b.n_seq_id[i] = token, pos, 1
            b.seq_id[i][0], b.logits[i] = seq, logits
        b.n_tokens = len(entries)
        rc = self.L.llama_decode(self.ctx, b)
        if rc != 0:
            raise RuntimeError(f"llama_decode returned {rc}")

    def run(self, prompts: list[list[int]], tokens: int) -> float:
        """Prefill each prompt, then `tokens - 1` steps of one token per sequence."""
        L = self.L
        L.llama_memory_clear(L.llama_get_memory(self.ctx), True)
        last: list[int] = []
        for seq, prompt in enumerate(prompts):  # prompts are short: one batch each
            self._decode([(t, p, seq, p == len(prompt) - 1) for p, t in enumerate(prompt)])
            last.append(L.llama_sampler_sample(self.greedy, self.ctx, -1))
        start = time.perf_counter()
        pos = [len(p) for p in prompts]
        for _ in range(tokens - 1):
            self._decode([(last[s], pos[s], s, True) for s in range(len(prompts))])
            last = [L.llama_sampler_sample(self.greedy, self.ctx, s) for s in range(len(prompts))]
            pos = [p + 1 for p in pos]
        return len(prompts) * (tokens - 1) / (time.perf_counter() - start)

    def close(self) -> None:
        self.L.llama_sampler_free(self.greedy)
        self.L.llama_batch_free(self.batch)
        super().close()


def chat_prompts(raw: RawBatched) -> list[list[int]]:
    """The prompts as the server renders them (the model's chat template)."""
    template = ChatTemplate(raw.chat_template(), raw.bos_text, raw.eos_text)
    rendered = [template.render([ChatMessage("user", p)]).text for p in PROMPTS]
    return [raw.tokenize(text) for text in rendered]


# One model ----------------------------------------------------------------------------------
def measure(model_path: str, args: argparse.Namespace, counts: list[int]) -> dict:
    from deskllm.engine.extra_bufts_probe import extra_bufts_work
    from deskllm.engine.load_defaults import resolve_params

    params = resolve_params(params_from_settings(settings_mod.load(), model_path, n_ctx=args.ctx,
                                                 n_threads=args.threads), None)  # fmt: skip
    extra = extra_bufts_work(model_path)
    raw = RawBatched(params, max(counts), extra)
    prompts = chat_prompts(raw)
    served = llama = None
    peers: dict[str, tuple[subprocess.Popen, str]] = {}  # "peer": same threads; "peer_default"
    samples: dict = {"agg": {k: [] for k in counts}, "raw": {k: [] for k in counts},
                     "ttft": {k: [] for k in counts}, "ls": {k: [] for k in counts},
                     "ls_ttft": {k: [] for k in counts},
                     "peer_stream_tps_4": [], "bench_tg": [], "api_tg": []}  # fmt: skip
    for kind in PEER_KINDS:
        samples |= {f"{kind}_1": [], f"{kind}_4": [], f"{kind}_completed_4": []}
    try:
        served, url = start_deskllm(model_path, args.threads, args.ctx)
        if LLAMA_SERVER.is_file():
            llama, llama_url = start_llama_server(model_path, args.threads, args.ctx, extra)
            concurrent(llama_url, 1, 8)
        for kind, threads in PEER_KINDS.items():
            peers[kind] = start_peer(model_path, args.threads if threads else None, args.ctx)
        with EngineClient() as client:
            ModelLoader(client).load(params)
            concurrent(url, 1, 8)  # warm every path alike
            for _, peer_url in peers.values():
                concurrent(peer_url, 1, 8)
            raw.run(prompts[:1], 8)
            bench_tg(client, 8)
            servers = [(url, "deskllm serve", "agg", "ttft")]
            if llama is not None:
                servers.append((llama_url, "llama-server", "ls", "ls_ttft"))
            for round_no in range(args.rounds):
                # Which server goes first swaps each round: the first measurement after
                # another's burst, or after an idle spell, runs slower on this kind of machine
                # (a 1-stream TTFT of either server measured there is about twice its usual).
                order = servers if round_no % 2 == 0 else servers[::-1]
                for k in counts:  # interleaved: load on the machine hits both paths alike
                    for server_url, name, agg_key, ttft_key in order:
                        settle()
                        agg, first = served_agg(server_url, k, args.tokens, name)
                        samples[agg_key][k].append(agg)
                        samples[ttft_key][k].append(first)
                    settle()
                    samples["raw"][k].append(raw.run(prompts[:k], args.tokens))
                for kind, (_, peer_url) in peers.items():
                    samples[f"{kind}_1"].append(aggregate(concurrent(peer_url, 1, args.tokens)))
                    runs = concurrent(peer_url, PEER_STREAMS, args.tokens)
                    samples[f"{kind}_4"].append(aggregate(runs))
                    samples[f"{kind}_completed_4"].append(
                        sum(1 for r in runs if r.get("finished") and r.get("tokens", 0) > 0)
                    )
                    if kind == "peer":
                        samples["peer_stream_tps_4"].append([one_stream_tps(r) for r in runs])
                bench, api = [], []
                for _ in range(REPEATS):  # alternated, each after the server went idle
                    settle()
                    bench.append(bench_tg(client, args.tg_tokens))
                    settle()
                    api.append(api_tg(url, args.tg_tokens))
                samples["bench_tg"].append(max(bench))
                samples["api_tg"].append(max(api))
        for process, _ in peers.values():  # idle, but the TTFT figures need nothing else
            stop(process)  # in memory's way
        peers.clear()
        stop(llama)
        settle()
        idle = ttft(url, args.ttft_samples, 0, 0)
        settle()
        busy = ttft(url, args.ttft_samples, BUSY_STREAMS, args.ctx - 128)
    finally:
        stop(served)
        stop(llama)
        for process, _ in peers.values():
            stop(process)
        raw.close()

    def ratio(a: list[float], b: list[float]) -> float | None:
        """Median of the per-round ratios; None where b got nothing (a peer's empty replies)."""
        pairs = [(x, y) for x, y in zip(a, b, strict=True) if y > 0]
        return statistics.median(x / y for x, y in pairs) if pairs else None

    med = statistics.median
    result: dict = {"path": model_path}
    for k in counts:
        result[f"agg_tps_{k}"] = med(samples["agg"][k])
        result[f"raw_batched_tps_{k}"] = med(samples["raw"][k])
        result[f"agg_over_raw_{k}"] = ratio(samples["agg"][k], samples["raw"][k])
        result[f"ttft_p50_{k}"] = med(samples["ttft"][k])
        if samples["ls"][k]:
            result[f"llama_server_tps_{k}"] = med(samples["ls"][k])
            result[f"llama_server_ttft_p50_{k}"] = med(samples["ls_ttft"][k])
            result[f"agg_over_llama_server_{k}"] = ratio(samples["agg"][k], samples["ls"][k])
            result[f"ttft_over_llama_server_{k}"] = ratio(samples["ttft"][k], samples["ls_ttft"][k])
    agg_1, agg_4 = samples["agg"].get(1), samples["agg"].get(PEER_STREAMS)
    result |= {
        "peer_tps_1": med(samples["peer_1"]),
        "peer_completed_4": min(samples["peer_completed_4"]),
        "peer_stream_tps_4": samples["peer_stream_tps_4"][-1],
        "peer_agg_tps_4": med(samples["peer_4"]),
        "api_over_peer_1": ratio(agg_1, samples["peer_1"]) if agg_1 else None,
        "agg_over_peer_4": ratio(agg_4, samples["peer_4"]) if agg_4 else None,
        "peer_default_tps_1": med(samples["peer_default_1"]),
        "peer_default_completed_4": min(samples["peer_default_completed_4"]),
        "peer_default_agg_tps_4": med(samples["peer_default_4"]),
        "api_over_peer_default_1": ratio(agg_1, samples["peer_default_1"]) if agg_1 else None,
        "agg_over_peer_default_4": ratio(agg_4, samples["peer_default_4"]) if agg_4 else None,
        "ttft_idle_p50": quantile(idle, 0.5),
        "ttft_busy_p95": quantile(busy, 0.95),
        "ttft_busy_over_idle": quantile(busy, 0.95) / quantile(idle, 0.5),
        "bench_tg_tps": med(samples["bench_tg"]),
        "api_tg_tps": med(samples["api_tg"]),
        "api_over_bench_tg": ratio(samples["api_tg"], samples["bench_tg"]),
        "samples": samples | {"ttft_idle": idle, "ttft_busy": busy},
    }
    return result


def each_model(asked: list[str] | None, measure: Callable[[str], dict]) -> dict:
    """`measure` on each model's path: those asked for (paths or installed names), else the
    starter model and Gemma 3 270M where bench/fetch_gemma.sh put it. Each model's figures
    go to stderr as they come (kept if a later one fails). {"models": {file name: figures},
    "cpu_count", "load_avg_1m": [at the start, at the end]}."""
    if not asked and not GEMMA.is_file():
        print(f"note: {GEMMA} is missing (bench/fetch_gemma.sh fetches it); starter model only",
              file=sys.stderr)  # fmt: skip
    resolver = Resolver(open_database())
    load_start = os.getloadavg()[0]
    models = {}
    for name in asked or [None] + ([str(GEMMA)] if GEMMA.is_file() else []):
        path = resolver.local_path(name)
        models[Path(path).name] = measure(path)
        print(json.dumps({Path(path).name: models[Path(path).name]}), file=sys.stderr)
    return {"models": models, "cpu_count": os.cpu_count(),
            "load_avg_1m": [load_start, os.getloadavg()[0]]}  # fmt: skip


def add_worst(result: dict, worst_of: dict[str, Callable]) -> dict:
    """Each key's worst value across `result`'s models at its top level (where one has it)."""
    for key, worst in worst_of.items():
        values = [m[key] for m in result["models"].values() if m.get(key) is not None]
        if values:
            result[key] = worst(values)
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", action="append", default=None,
                        help="a .gguf path or installed name; repeat for more models")  # fmt: skip
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--streams", default="1,2,4,8")
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--tg-tokens", type=int, default=128)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--ctx", type=int, default=1024, help="context of one slot")
    parser.add_argument("--ttft-samples", type=int, default=10)
    args = parser.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))  # still stop the servers
    counts = [int(k) for k in args.streams.split(",")]
    if max(counts) > SLOTS:
        parser.error(f"at most {SLOTS} streams")
    if not LLAMA_SERVER.is_file():
        print(f"note: {LLAMA_SERVER} is missing (packaging/build_llama_server.sh builds it); "
              "no llama-server figures", file=sys.stderr)  # fmt: skip
    result = each_model(args.model, lambda path: measure(path, args, counts))
    result |= {"n_threads": args.threads, "tokens": args.tokens, "tg_tokens": args.tg_tokens,
               "rounds": args.rounds}  # fmt: skip
    for k in counts:  # the worst case across models, at the top level
        add_worst(result, {f"agg_over_llama_server_{k}": min,
                           f"ttft_over_llama_server_{k}": max})  # fmt: skip
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
