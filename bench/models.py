"""Many models on demand: `deskllm serve` with the starter model served and three requantized
copies of it installed (Q8_0, Q6_K, Q5_K_M, made with llama_model_quantize), each loaded
beside the served one when a request names it. Prints one JSON object.

    .venv/bin/python bench/models.py [--rounds 5] [--threads 2]

Server 1 (no budget: every model fits):
  load          each copy's plain load, `--rounds` times: unloaded (Ollama's keep_alive 0),
                then loaded with nothing to answer (a generate with no prompt), timed; then
                its first TTFT. The medians are that model's plain load and TTFT.
  repeat        the same short chat to the served model, `--rounds` × 2 times: TTFT each.
  alternate     the same chat to the served model and the Q8_0 copy in turn (both loaded).
Server 2 (`--memory-budget` = the served model's memory + 1.3 × the largest copy's, as
/v1/models reported them on server 1: room for the served model and one copy):
  swaps         Q8_0, Q6_K, Q5_K_M, Q8_0, Q6_K, ...: each request loads its model and unloads
                the one before (least recently used); the request's time to its first
                text (the unload, the load and the first token) against that model's plain
                load plus first TTFT (from the second round: each model's first load in a
                server process is not timed on either server).
  resume        a ~700-token conversation on Q8_0 (its own `user`), Q6_K loaded (Q8_0
                evicted, its KV state saved), then the conversation's next turn on Q8_0:
                cached_tokens over prompt_tokens.

Keys:
  alternate_ttft_over_repeat    median alternate TTFT / median repeat TTFT (target <= 1.1)
  requests_failed               requests without an answer (target 0)
  oom                           engines that died (deskllm_engine_restarts_total; target 0)
  eviction_order_lru            every eviction took the least recently used idle model
  swap_over_load                worst swap time / (median plain load + median first TTFT)
                                (target <= 1.1); swap_over_load_p50 the median swap
  evicted_resume_cached_share   the resumed conversation's cached share (target >= 0.9)
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx2
from serve import free_port, stop, wait_ready

from deskllm.catalog.starter import starter_model_path
from deskllm.database import open_database
from deskllm.llamacpp.requantize import requantize
from deskllm.store import ModelLibrary

SERVED = "smollm2-135m-instruct-q4_1"
COPIES = {"Q8_0": "copy-q8_0", "Q6_K": "copy-q6_k", "Q5_K_M": "copy-q5_k_m"}
ASK = [{"role": "user", "content": "Name three colours."}]
LONG = ("The harbour town wakes before dawn: fishing boats leave one by one, gulls follow "
        "them out, and the bakery on the quay lights its ovens. ") * 24  # fmt: skip


def make_home(home: Path, threads: int) -> None:
    starter = starter_model_path()
    if starter is None:
        sys.exit("the starter model is not installed; run ./dev setup")
    paths = {label: home / "models" / f"copy.{label}.gguf" for label in COPIES}
    paths[next(iter(paths))].parent.mkdir(parents=True)
    requantize(starter, paths, threads=threads)
    db = open_database(home / "deskllm.sqlite3")
    try:
        library = ModelLibrary(db)
        library.add(starter, source="starter")
        for label, path in paths.items():
            library.add(path, name=f"copy ({label})")
    finally:
        db.close()


def start(home: Path, threads: int, *extra: str) -> tuple[subprocess.Popen, str]:
    port = free_port()
    process = subprocess.Popen(
        [sys.executable, "-m", "deskllm", "serve", "--model", str(starter_model_path()),
         "--port", str(port),
         "--threads", str(threads), "--ctx", "2048", "--parallel", "1", *extra],
        env=os.environ | {"DESKLLM_HOME": str(home), "HF_HUB_OFFLINE": "1"},
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    wait_ready(process, url + "/health", "deskllm serve")
    return process, url


def ttft(url: str, model: str, messages: list[dict], user: str | None = None) -> dict:
    """One streamed greedy reply of 8 tokens: seconds to its first text, and its usage."""
    body = {"model": model, "messages": messages, "stream": True, "temperature": 0,
            "max_tokens": 8, "stream_options": {"include_usage": True}}  # fmt: skip
    if user:
        body["user"] = user
    out: dict = {"sent": time.perf_counter(), "text": ""}
    with httpx2.stream("POST", url + "/v1/chat/completions", json=body, timeout=600) as r:
        if r.status_code != 200:
            r.read()
            return {"error": f"{r.status_code}: {r.text[:300]}"}
        for line in r.iter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            chunk = json.loads(line[6:])
            for choice in chunk.get("choices", ()):
                if choice["delta"].get("content"):
                    out.setdefault("first", time.perf_counter())
                    out["text"] += choice["delta"]["content"]
            if chunk.get("usage"):
                out["usage"] = chunk["usage"]
    out["end"] = time.perf_counter()
    out["ttft"] = out.get("first", out["end"]) - out["sent"]
    return out


def loaded(url: str) -> dict[str, dict]:
    cards = httpx2.get(url + "/v1/models", timeout=60).json()["data"]
    return {c["id"]: c for c in cards if c.get("loaded") and c["id"] != "auto"}


def generate(url: str, model: str, keep_alive) -> None:
    answer = httpx2.post(url + "/api/generate", json={"model": model, "keep_alive": keep_alive,
                                                      "stream": False}, timeout=600)
    answer.raise_for_status()


def metric(url: str, name: str) -> float:
    for line in httpx2.get(url + "/metrics", timeout=60).text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    return 0.0


def server_one(home: Path, args: argparse.Namespace, result: dict, failed: list) -> dict:
    process, url = start(home, args.threads)
    try:
        loads = {}
        for model in COPIES.values():
            generate(url, model, "10m")  # loaded once (files read into the page cache)
            times, firsts = [], []
            for _ in range(args.rounds):  # a load varies by a fifth: its median, not one
                generate(url, model, 0)  # unloaded
                started = time.perf_counter()
                generate(url, model, "10m")
                times.append(time.perf_counter() - started)
                first = ttft(url, model, ASK)
                failed += ["error" in first]
                firsts.append(first.get("ttft", 0.0))
            loads[model] = {"load_s": statistics.median(times),
                            "first_ttft_s": statistics.median(firsts),
                            "load_samples_s": [round(t, 3) for t in times]}  # fmt: skip
        result["loads"] = loads
        footprints = {m: c["memory_bytes"] for m, c in loaded(url).items()}
        repeat, alternate = [], []
        for _ in range(args.rounds * 2):
            out = ttft(url, SERVED, ASK)
            failed.append("error" in out)
            repeat.append(out.get("ttft", 0.0))
        for i in range(args.rounds * 2):
            out = ttft(url, SERVED if i % 2 else COPIES["Q8_0"], ASK)
            failed.append("error" in out)
            alternate.append(out.get("ttft", 0.0))
        result["repeat_ttft_p50_s"] = statistics.median(repeat)
        result["alternate_ttft_p50_s"] = statistics.median(alternate)
        result["alternate_ttft_over_repeat"] = round(
            result["alternate_ttft_p50_s"] / result["repeat_ttft_p50_s"], 3)
        result["oom"] = int(metric(url, "deskllm_engine_restarts_total"))
        return footprints
    finally:
        stop(process)


def server_two(home: Path, args: argparse.Namespace, footprints: dict, result: dict,
               failed: list) -> None:  # fmt: skip
    largest = max(footprints[m] for m in COPIES.values())
    budget = (footprints[SERVED] + 1.3 * largest) / (1 << 30)
    result["memory_budget_gib"] = round(budget, 4)
    process, url = start(home, args.threads, "--memory-budget", f"{budget:.4f}")
    try:
        order, lru_ok, ratios, swaps = list(COPIES.values()), True, [], []
        previous: str | None = None
        for i in range(args.rounds * len(order)):
            model = order[i % len(order)]
            out = ttft(url, model, ASK)
            # Sent to first text, as the plain load + first TTFT it is set against (the rest
            # of the reply is no part of a swap).
            took = out.get("ttft", 0.0)
            failed.append("error" in out)
            now = set(loaded(url)) - {SERVED}
            # The only other copy loaded was the one used just before: it must be the one
            # unloaded, and the asked one must be there alone.
            lru_ok &= now == {model} and (previous is None or previous not in now)
            if i >= len(order):  # each model's first load in this server is not timed, as
                plain = result["loads"][model]  # on server one (file and header caches)
                ratios.append(took / (plain["load_s"] + plain["first_ttft_s"]))
                swaps.append(round(took, 3))
            previous = model
        result["eviction_order_lru"] = lru_ok
        result["swap_over_load"] = round(max(ratios), 3)
        result["swap_over_load_p50"] = round(statistics.median(ratios), 3)
        result["swap_samples_s"] = swaps
        result["evictions"] = int(metric(url, "deskllm_model_evictions_total"))
        # A conversation evicted with its model, and resumed.
        turns = [{"role": "system", "content": LONG}, *ASK]
        first = ttft(url, COPIES["Q8_0"], turns, user="resume")
        ttft(url, COPIES["Q6_K"], ASK)  # evicts Q8_0
        assert COPIES["Q8_0"] not in loaded(url), "the Q8_0 copy was not evicted"
        turns += [{"role": "assistant", "content": first["text"]},
                  {"role": "user", "content": "And three animals?"}]  # fmt: skip
        resumed = ttft(url, COPIES["Q8_0"], turns, user="resume")
        failed += ["error" in first, "error" in resumed]
        usage = resumed.get("usage") or {}
        cached = (usage.get("prompt_tokens_details") or {}).get("cached_tokens", 0)
        result["evicted_resume_prompt_tokens"] = usage.get("prompt_tokens", 0)
        result["evicted_resume_cached_share"] = round(cached / max(1, usage.get(
            "prompt_tokens", 1)), 3)
        result["oom"] += int(metric(url, "deskllm_engine_restarts_total"))
    finally:
        stop(process)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    result: dict = {"cpu_count": os.cpu_count(), "load_avg_1m": [os.getloadavg()[0]]}
    failed: list[bool] = []
    with tempfile.TemporaryDirectory(prefix="deskllm-bench-models-") as tmp:
        home = Path(tmp)
        make_home(home, args.threads)
        footprints = server_one(home, args, result, failed)
        result["memory_bytes"] = footprints
        server_two(home, args, footprints, result, failed)
    result["requests_failed"] = sum(failed)
    result["load_avg_1m"].append(os.getloadavg()[0])
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
