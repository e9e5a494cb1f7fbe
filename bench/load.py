"""Serving at the memory limit: `deskllm serve` against llama.cpp's llama-server (built from the
same vendored sources by packaging/build_llama_server.sh), same model, threads, slots and KV
pool, one server at a time. Prints one JSON object.

    .venv/bin/python bench/load.py [--model NAME_OR_PATH ...] [--threads 2] [--rounds 2]

--model may be given more than once (default: the starter model, and Gemma 3 270M where
bench/fetch_gemma.sh put it). Per model, each round and each server, fresh:

  prefix wave   --parallel 8, --ctx 2048 (a pool of 16,384 cells): eight streamed chat
                requests sent at once, each the same ~1,500-token system prompt and its own
                short question, 16-token greedy replies (ignore_eos). The prompts are
                tokenized by llama-server's /apply-template and /tokenize: P is their common
                prefix, S the sum of the rest. deskllm's evaluated tokens are
                usage.prompt_tokens - cached_tokens, llama-server's its timings.prompt_n.
  pool share    deskllm only, --parallel 4, --ctx 1024 (a pool of 4,096): one conversation
                whose prompt and max_tokens come to 90% of the pool, with three short streams
                beside it; its prompt_tokens + completion_tokens over the pool.

Keys per model (medians over the rounds), and at the top level the worst across models:
  prefix_wave_eval_ratio               deskllm's evaluated tokens / (P + S) (target <= 1.15)
  prefix_wave_ttft8                    deskllm's slowest of the eight TTFTs (s)
  llama_server_prefix_wave_ttft8       llama-server's
  prefix_wave_ttft8_over_llama_server  their ratio (target <= 0.35)
  llama_server_prefix_wave_eval_ratio  llama-server's evaluated tokens / (P + S)
  prefix_wave_kv_cells_used            deskllm's /metrics deskllm_kv_cells{state="used"}
                                       after the wave, over (P + S + replies) (target <= 1.2)
  one_conversation_pool_share          the pool share (target >= 0.9; fixed slots: 0.25)

  open loop     --parallel 8, --ctx 2048: requests arrive at random (Poisson) at each of
                `--rates` requests/s for `--seconds` each, whether earlier ones finished or
                not, from one seeded mix: half the shared system prompt above with a short
                question (32 tokens out), three in ten a turn of one of six chats that come
                back with their history (24 out, `user` set), two in ten a long single
                prompt of ~600 tokens (48 out); greedy, ignore_eos. Per rate and server: TTFT
                p50/p95/p99, inter-token latency p50/p95 (over every gap between text
                chunks: llama-server sends a token a chunk, deskllm the text of ~50 ms,
                so its figure is a gap between several tokens), end-to-end p50/p95, output
                tok/s (completion tokens over the span from the first request sent to the
                last reply done), and goodput: requests
                per second of the rate's window that met TTFT <= --ttft-slo (2 s) and their
                own ITL p95 <= --itl-slo (0.15 s).
  goodput_over_llama_server            deskllm's goodput / llama-server's at the first rate
                                       where llama-server's TTFT p95 passes the TTFT SLO (the
                                       highest rate when it never does) (target >= 1.2)

The harness is written here rather than taken from guidellm: guidellm drives one server per
run with its own request synthesis and reports per-benchmark summaries; comparing two servers
on one seeded mix of shared prefixes and returning chats, with our own SLO, is shorter to say
directly.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import signal
import statistics
import subprocess
import sys
import threading
import time

import httpx2
from serve import LLAMA_SERVER, add_worst, each_model, free_port, stop, stream_chat, wait_ready

TOPICS = ["keys", "doors", "lamps", "desks", "cups", "maps", "pens", "bags"]
QUESTIONS = [f"Question {i}: what does rule {i} say about {t}?" for i, t in enumerate(TOPICS)]
SYSTEM = "You answer questions about the house rules. " + " ".join(
    f"Rule {i}: the item number {i} stays in room {i % 7} unless moved." for i in range(85)
)
WAVE_SLOTS, WAVE_CTX = 8, 2048
SHARE_SLOTS, SHARE_CTX = 4, 1024


def start(kind: str, model: str, threads: int, slots: int, ctx: int,
          extra_bufts: bool) -> tuple[subprocess.Popen, str]:  # fmt: skip
    port = free_port()
    if kind == "deskllm":
        command = [sys.executable, "-m", "deskllm", "serve", "--model", model, "--port",
                   str(port), "--threads", str(threads), "--ctx", str(ctx), "--parallel",
                   str(slots), "--max-queue", "32"]  # fmt: skip
    else:
        command = [str(LLAMA_SERVER), "--model", model, "--host", "127.0.0.1", "--port",
                   str(port), "--threads", str(threads), "--threads-batch", str(threads),
                   "--parallel", str(slots), "--ctx-size", str(ctx * slots), "--kv-unified",
                   "--jinja", *([] if extra_bufts else ["--no-repack"])]  # fmt: skip
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    wait_ready(process, url + "/health", kind)
    return process, url


def model_id(url: str) -> str:
    return httpx2.get(url + "/v1/models").json()["data"][0]["id"]


def chat(url: str, model: str, messages: list[dict], max_tokens: int, out: dict) -> None:
    """One streamed greedy chat reply; `out` gets what `stream_chat` records."""
    body = {"model": model, "messages": messages, "stream": True, "temperature": 0,
            "max_tokens": max_tokens, "ignore_eos": True,
            "stream_options": {"include_usage": True}}  # fmt: skip
    stream_chat(url, body, out)


def at_once(url: str, model: str, requests: list[tuple[list[dict], int]]) -> list[dict]:
    outs: list[dict] = [{} for _ in requests]
    threads = [threading.Thread(target=chat, args=(url, model, msgs, n, out))
               for (msgs, n), out in zip(requests, outs, strict=True)]  # fmt: skip
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if failed := [o["error"] for o in outs if "error" in o]:
        raise RuntimeError(f"{url}: {failed[0]}")
    return outs


def wave_messages() -> list[list[dict]]:
    return [[{"role": "system", "content": SYSTEM}, {"role": "user", "content": q}]
            for q in QUESTIONS]  # fmt: skip


def prompt_tokens(llama_url: str, conversations: list[list[dict]]) -> list[list[int]]:
    """Each conversation's prompt tokens, as llama-server renders and tokenizes it."""
    tokens = []
    for messages in conversations:
        prompt = httpx2.post(llama_url + "/apply-template", json={"messages": messages}).json()
        tokens.append(httpx2.post(llama_url + "/tokenize", json={
            "content": prompt["prompt"], "add_special": True, "parse_special": True,
        }).json()["tokens"])  # fmt: skip
    return tokens


def common_prefix(seqs: list[list[int]]) -> int:
    n = 0
    while all(len(s) > n and s[n] == seqs[0][n] for s in seqs):
        n += 1
    return n


def metric(url: str, name: str) -> float:
    for line in httpx2.get(url + "/metrics").text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[-1])
    raise KeyError(name)


def prefix_wave(kind: str, model: str, args: argparse.Namespace, extra: bool) -> dict:
    process, url = start(kind, model, args.threads, WAVE_SLOTS, WAVE_CTX, extra)
    try:
        name = model_id(url)
        at_once(url, name, [([{"role": "user", "content": "Hi"}], 4)])  # warm
        outs = at_once(url, name, [(m, 16) for m in wave_messages()])
        result = {"ttft8": max(o["first"] - o["sent"] for o in outs)}
        if kind == "deskllm":
            result["evaluated"] = sum(
                o["usage"]["prompt_tokens"]
                - ((o["usage"].get("prompt_tokens_details") or {}).get("cached_tokens") or 0)
                for o in outs
            )
            result["kv_cells_used"] = metric(url, 'deskllm_kv_cells{state="used"}')
            result["replies"] = sum(o["usage"]["completion_tokens"] for o in outs)
        else:
            result["evaluated"] = sum(o["timings"]["prompt_n"] for o in outs)
            tokens = prompt_tokens(url, wave_messages())
            p = common_prefix(tokens)
            result["prefix"], result["rest"] = p, sum(len(t) - p for t in tokens)
        return result
    finally:
        stop(process)


def pool_share(model: str, args: argparse.Namespace, extra: bool) -> float:
    process, url = start("deskllm", model, args.threads, SHARE_SLOTS, SHARE_CTX, extra)
    try:
        name = model_id(url)
        pool = SHARE_SLOTS * SHARE_CTX
        long = [{"role": "user", "content": "Summarise these notes. " + " ".join(
            f"note{i % 50} is fine" for i in range(120))}]  # fmt: skip
        probe: dict = {}
        chat(url, name, long, 1, probe)
        n_prompt = probe["usage"]["prompt_tokens"]
        requests = [(long, math.ceil(0.9 * pool) - n_prompt)]
        requests += [([{"role": "user", "content": f"Name a fruit, number {i}."}], 12)
                     for i in range(3)]  # fmt: skip
        outs = at_once(url, name, requests)
        usage = outs[0]["usage"]
        return (usage["prompt_tokens"] + usage["completion_tokens"]) / pool
    finally:
        stop(process)


LONG_WORDS = ("river", "stone", "window", "garden", "letter", "engine", "market", "winter")


def open_loop_requests(n: int, seed: int = 7) -> list[tuple[list[dict], int, str | None]]:
    """The seeded mix: (messages, max_tokens, user) for each of `n` arrivals. A returning chat
    carries its earlier turns (the replies as text the client kept: a fixed stand-in, so both
    servers get the same prompts)."""
    rng = random.Random(seed)
    chats: list[list[dict]] = [[] for _ in range(6)]
    out = []
    for i in range(n):
        kind = rng.random()
        if kind < 0.5:
            question = QUESTIONS[rng.randrange(len(QUESTIONS))]
            out.append(([{"role": "system", "content": SYSTEM},
                         {"role": "user", "content": question}], 32, None))  # fmt: skip
        elif kind < 0.8:
            c = rng.randrange(len(chats))
            chats[c] = chats[c] + [{"role": "user", "content": f"Turn {i}: tell me more."}]
            out.append((list(chats[c]), 24, f"chat-{c}"))
            chats[c].append({"role": "assistant", "content": f"Here is more, part {i}."})
        else:
            words = " ".join(rng.choice(LONG_WORDS) for _ in range(450))
            out.append(([{"role": "user", "content": f"Summarise: {words}"}], 48, None))
    return out


def percentile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, math.ceil(q * len(ordered)) - 1)]


def text_gaps(out: dict) -> list[float]:
    """Seconds between a streamed reply's text chunks (its inter-token latencies)."""
    times = out["times"]
    return [b - a for a, b in zip(times, times[1:], strict=False)]


def open_loop_rate(url: str, name: str, rate: float, args: argparse.Namespace) -> dict:
    """Arrivals at `rate` per second for args.seconds (seeded), each a streamed request on
    its own thread; the figures once every reply ended."""
    rng = random.Random(int(rate * 1000))
    arrivals, at = [], 0.0
    while True:
        at += rng.expovariate(rate)
        if at >= args.seconds:
            break
        arrivals.append(at)
    requests = open_loop_requests(len(arrivals), seed=7 + int(rate * 1000))  # fresh prompts
    outs: list[dict] = [{} for _ in arrivals]
    threads = []
    started = time.perf_counter()
    for when, (messages, tokens, user), out in zip(arrivals, requests, outs, strict=True):
        time.sleep(max(0.0, started + when - time.perf_counter()))
        body = {"model": name, "messages": messages, "stream": True, "temperature": 0,
                "max_tokens": tokens, "ignore_eos": True,
                "stream_options": {"include_usage": True}}  # fmt: skip
        if user:
            body["user"] = user
        thread = threading.Thread(target=stream_chat, args=(url, body, out))
        thread.start()
        threads.append(thread)
    for thread in threads:
        thread.join()
    done = [o for o in outs if "error" not in o and "first" in o]
    ttft = [o["first"] - o["sent"] for o in done]
    gaps = [gap for o in done for gap in text_gaps(o)]
    e2e = [o["end"] - o["sent"] for o in done]
    tokens = sum(o.get("tokens", 0) for o in done)
    span = max((o["end"] for o in outs), default=started) - started
    good = sum(o["first"] - o["sent"] <= args.ttft_slo
               and (percentile(text_gaps(o), 0.95) or 0.0) <= args.itl_slo
               for o in done)  # fmt: skip
    return {
        "rate": rate, "requests": len(outs), "failed": len(outs) - len(done),
        "ttft_p50_s": percentile(ttft, 0.5), "ttft_p95_s": percentile(ttft, 0.95),
        "ttft_p99_s": percentile(ttft, 0.99), "itl_p50_s": percentile(gaps, 0.5),
        "itl_p95_s": percentile(gaps, 0.95), "e2e_p50_s": percentile(e2e, 0.5),
        "e2e_p95_s": percentile(e2e, 0.95),
        "output_tps": tokens / span if span > 0 else None,
        "goodput_rps": good / args.seconds,
    }  # fmt: skip


def open_loop(kind: str, model: str, args: argparse.Namespace, extra: bool) -> list[dict]:
    process, url = start(kind, model, args.threads, WAVE_SLOTS, WAVE_CTX, extra)
    try:
        name = model_id(url)
        # Warm: the shared system prompt read once (both servers keep it), a long prompt.
        at_once(url, name, [(messages, 4) for messages, _n, _user in open_loop_requests(40)
                            if messages[0]["role"] == "system"][:1])  # fmt: skip
        at_once(url, name, [([{"role": "user", "content": "Hi"}], 4)])
        return [open_loop_rate(url, name, rate, args) for rate in args.rates]
    finally:
        stop(process)


def goodput_ratio(desk: list[dict], peer: list[dict], slo: float) -> float | None:
    """deskllm's goodput over llama-server's at the first rate where llama-server's TTFT p95
    passes the SLO (the last rate when it never does)."""
    at = next((i for i, r in enumerate(peer) if (r["ttft_p95_s"] or 0) > slo), len(peer) - 1)
    theirs = peer[at]["goodput_rps"]
    return desk[at]["goodput_rps"] / theirs if theirs else None


def measure(model: str, args: argparse.Namespace) -> dict:
    from deskllm.engine.extra_bufts_probe import extra_bufts_work

    extra = extra_bufts_work(model)
    rounds: list[dict] = []
    for _ in range(args.rounds):
        desk = prefix_wave("deskllm", model, args, extra)
        peer = prefix_wave("llama-server", model, args, extra)
        whole = peer["prefix"] + peer["rest"]
        rounds.append({
            "prefix_wave_eval_ratio": desk["evaluated"] / whole,
            "llama_server_prefix_wave_eval_ratio": peer["evaluated"] / whole,
            "prefix_wave_ttft8": desk["ttft8"],
            "llama_server_prefix_wave_ttft8": peer["ttft8"],
            "prefix_wave_ttft8_over_llama_server": desk["ttft8"] / peer["ttft8"],
            "prefix_wave_kv_cells_used": desk["kv_cells_used"] / (whole + desk["replies"]),
            "prefix_tokens": peer["prefix"], "other_tokens": peer["rest"],
            "one_conversation_pool_share": pool_share(model, args, extra),
        })  # fmt: skip
    result = {key: statistics.median(r[key] for r in rounds) for key in rounds[0]} if rounds else {}
    result |= {"path": model, "rounds": rounds}
    if args.rates:
        desk = open_loop("deskllm", model, args, extra)
        peer = open_loop("llama-server", model, args, extra)
        result |= {"open_loop": {"deskllm": desk, "llama_server": peer},
                   "goodput_over_llama_server": goodput_ratio(desk, peer, args.ttft_slo)}
    return result


WORST = {"prefix_wave_eval_ratio": max, "prefix_wave_ttft8_over_llama_server": max,
         "prefix_wave_kv_cells_used": max, "one_conversation_pool_share": min,
         "goodput_over_llama_server": min}  # fmt: skip


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", action="append", default=None,
                        help="a .gguf path or installed name; repeat for more models")  # fmt: skip
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=2,
                        help="prefix-wave rounds (0: the open loop only)")  # fmt: skip
    parser.add_argument("--rates", default="0.25,0.5,1,2",
                        help="open-loop arrival rates, requests/s, comma-separated ('' skips it)")
    parser.add_argument("--seconds", type=float, default=60.0,
                        help="how long arrivals come at each rate")  # fmt: skip
    parser.add_argument("--ttft-slo", type=float, default=2.0, help="goodput's TTFT bound (s)")
    parser.add_argument("--itl-slo", type=float, default=0.15,
                        help="goodput's bound on a request's inter-token latency p95 (s)")
    args = parser.parse_args()
    args.rates = [float(r) for r in args.rates.split(",") if r.strip()]
    if not LLAMA_SERVER.is_file():
        parser.error(f"{LLAMA_SERVER} is missing: run packaging/build_llama_server.sh")
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))  # still stop the servers
    result = each_model(args.model, lambda path: measure(path, args))
    result |= {"n_threads": args.threads, "rounds": args.rounds}
    add_worst(result, WORST)
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
