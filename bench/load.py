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
Not measured yet: the open-loop (Poisson) load with TTFT/ITL percentiles and goodput.
"""

from __future__ import annotations

import argparse
import json
import math
import signal
import statistics
import subprocess
import sys
import threading

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
    result = {key: statistics.median(r[key] for r in rounds) for key in rounds[0]}
    return result | {"path": model, "rounds": rounds}


WORST = {"prefix_wave_eval_ratio": max, "prefix_wave_ttft8_over_llama_server": max,
         "prefix_wave_kv_cells_used": max, "one_conversation_pool_share": min}  # fmt: skip


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", action="append", default=None,
                        help="a .gguf path or installed name; repeat for more models")  # fmt: skip
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
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
