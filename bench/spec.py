"""Speculative decoding (n-gram drafts) against plain decoding and against llama.cpp's
llama-server's n-gram modes, side by side in one run per model (this machine is shared and
noisy: read the ratios). Prints one JSON object.

    .venv/bin/python bench/spec.py [--model NAME_OR_PATH ...] [--rounds 3] [--threads 2]

--model may be given more than once (default: the starter model, and Gemma 3 270M where
bench/fetch_gemma.sh put it). Per model an engine of one slot (as llama-server --parallel 1);
each round (the order of the modes reversed every other round) every task gets one greedy
reply (repeat_penalty 1) per mode: "off", "ngram", "auto". Tasks: `code` (rewrite a
~400-token code file with one change), `quote` (answer by quoting a pasted text) are
copy-heavy; `free` (a story) is not. Decode speed is the engine's own figure (Metrics.tg_tps,
first to last token), medians over rounds. Then an engine of four slots: four concurrent
streams (the two copy tasks twice) timed end to end with speculation "auto" and "off".
llama-server (packaging/build_llama_server.sh; skipped where not built) answers the same
prompts, greedy, with each --spec-type n-gram mode it has; its decode speed is its own
timings.predicted_per_second.

Keys per model, and at the top level the worst across models:
  copy_over_plain                n-gram tok/s / plain, the worse copy task (target >= 1.8)
  copy_over_llama_server_ngram   ours with n-gram / llama-server's best n-gram mode, the worse
                                 copy task (target >= 1.0)
  free_auto_over_plain           "auto" on the story / plain (target >= 0.95)
  agg4_spec_over_plain           four streams' aggregate tok/s, "auto" / "off" (target >= 1.0)
  acceptance_copy, acceptance_free   drafted tokens accepted (n-gram mode)
  draft_over_llama_server_draft  draft-model speculation against llama-server's draft-simple
                                 with the same pair, the worst task (target >= 1.0)
  draft_over_plain               draft-model speculation / plain decoding of the same model,
                                 the worst task (reported: on a CPU where the draft costs
                                 about what the model does, no draft pays)
  acceptance_draft               drafted tokens the model accepted (all tasks)
The draft pair: the model requantized to Q8_0 (llama_model_quantize, kept in
~/.cache/deskllm-bench) is the model, the model as given its draft; one slot, each task
"off" and "draft" per round, then llama-server plain and --spec-type draft-simple
--model-draft with the same files. --no-draft leaves the pair out.
Per model also: draft.{task}.{off,draft,llama_server_plain,llama_server_draft},
tasks.{task}.{mode} {tg_tps, tokens, drafted, accepted, passes},
tasks.{task}.same_as_plain (the greedy replies equal, token for token), llama_server.{mode}
.{task} {tg_tps, tokens, drafted, accepted, same_as_plain}.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import httpx2
from serve import LLAMA_SERVER, add_worst, each_model, free_port, stop, wait_ready

from deskllm.engine.client import EngineClient
from deskllm.engine.domain import ChatMessage, LoadParams, Sampling
from deskllm.engine.extra_bufts_probe import extra_bufts_work
from deskllm.llamacpp.requantize import requantize

CODE = '''import json
from dataclasses import dataclass, field
from pathlib import Path


@dataclass
class Inventory:
    """Items on the shelves of a small shop, by name, with their counts and prices."""

    path: Path
    counts: dict[str, int] = field(default_factory=dict)
    prices: dict[str, float] = field(default_factory=dict)

    def load(self) -> None:
        data = json.loads(self.path.read_text())
        self.counts = {name: int(item["count"]) for name, item in data.items()}
        self.prices = {name: float(item["price"]) for name, item in data.items()}

    def save(self) -> None:
        data = {name: {"count": self.counts[name], "price": self.prices[name]}
                for name in self.counts}
        self.path.write_text(json.dumps(data, indent=2))

    def add(self, name: str, count: int, price: float) -> None:
        self.counts[name] = self.counts.get(name, 0) + count
        self.prices[name] = price

    def remove(self, name: str, count: int) -> None:
        if self.counts.get(name, 0) < count:
            raise ValueError(f"only {self.counts.get(name, 0)} of {name} left")
        self.counts[name] -= count

    def value(self) -> float:
        return sum(self.counts[name] * self.prices[name] for name in self.counts)

    def low_stock(self, limit: int = 5) -> list[str]:
        return sorted(name for name, count in self.counts.items() if count < limit)
'''
TEXT = ("The lighthouse stood on the rock for two hundred years. Its keeper climbed the ninety "
        "steps every evening, lit the lamp, wound the clockwork and wrote in her log: the wind, "
        "the height of the waves, the ships that passed. In the winter of the great storm the "
        "lamp burned for six days without rest, and not one ship was lost on the reef. When the "
        "light was made automatic, she left the island with her logs, forty years of weather "
        "in her own hand, and gave them to the museum in the harbour town.")  # fmt: skip
TASKS = {
    "code": "Rewrite this Python code with one change: rename the method low_stock to "
            "running_low. Give the whole code.\n\n```python\n" + CODE + "```",
    "quote": "Here is a text.\n\n" + TEXT + "\n\nQuote the text above word for word.",
    "free": "Write a long story about a lighthouse keeper and a storm.",
}  # fmt: skip
COPY_TASKS = ("code", "quote")
MODES = ("off", "ngram", "auto")
LS_MODES = ("ngram-simple", "ngram-mod", "ngram-map-k")
SLOTS = 4
CTX = 2048  # one slot's context


def greedy(mode: str, tokens: int) -> Sampling:
    return Sampling(temperature=0.0, repeat_penalty=1.0, max_tokens=tokens, speculation=mode)


def one(client: EngineClient, task: str, mode: str, tokens: int) -> dict:
    reply = client.chat(uuid.uuid4().hex, [ChatMessage("user", TASKS[task])],
                        greedy(mode, tokens)).wait()  # fmt: skip
    if reply.done is None:
        raise RuntimeError(f"{task}/{mode}: {reply.error}")
    m = reply.done.metrics
    return {"tg_tps": m.tg_tps or 0.0, "tokens": m.generated_tokens, "drafted": m.draft_n,
            "accepted": m.draft_n_accepted, "passes": m.draft_passes,
            "text": reply.text}  # fmt: skip


def alternating(client: EngineClient, modes: tuple[str, ...], rounds: int,
                tokens: int) -> dict[str, dict[str, list[dict]]]:  # fmt: skip
    """Every task's greedy reply (one()) in every mode, each round, after a short warm-up; the
    modes' order reversed every other round (what runs second may find the CPU warmer or
    busier)."""
    runs: dict[str, dict[str, list[dict]]] = {t: {m: [] for m in modes} for t in TASKS}
    one(client, "quote", "off", 8)  # warm up
    for r in range(rounds):
        order = modes if r % 2 == 0 else modes[::-1]
        for task in TASKS:
            for mode in order:
                runs[task][mode].append(one(client, task, mode, tokens))
    return runs


def four_streams(client: EngineClient, mode: str, tokens: int) -> float:
    """Aggregate tok/s of four replies at once (each copy task twice), end to end."""
    got: list[int] = []
    lock = threading.Lock()

    def run(task: str) -> None:
        n = one(client, task, mode, tokens)["tokens"]
        with lock:
            got.append(n)

    threads = [threading.Thread(target=run, args=(t,)) for t in COPY_TASKS * 2]
    started = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return sum(got) / (time.perf_counter() - started)


def llama_server(path: str, threads: int, spec: str | None, extra_bufts: bool,
                 tokens: int, rounds: int, draft: str | None = None) -> dict:  # fmt: skip
    """llama-server's decode tok/s (median over rounds) and draft figures per task. `draft`:
    its draft model (--model-draft, for --spec-type draft-simple)."""
    port = free_port()
    args = [str(LLAMA_SERVER), "--model", path, "--host", "127.0.0.1", "--port", str(port),
            "--threads", str(threads), "--threads-batch", str(threads), "--parallel", "1",
            "--ctx-size", str(CTX), "--jinja", "--no-webui",
            *([] if extra_bufts else ["--no-repack"]),
            *(["--spec-type", spec] if spec else []),
            *(["--model-draft", draft, "--threads-draft", str(threads)]
              if draft else [])]  # fmt: skip
    process = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_ready(process, url + "/health", "llama-server")
        out = {}
        for task in TASKS:
            speeds, timings = [], {}
            for _ in range(rounds):
                body = {"messages": [{"role": "user", "content": TASKS[task]}],
                        "temperature": 0, "repeat_penalty": 1.0, "max_tokens": tokens,
                        "cache_prompt": False}  # fmt: skip
                r = httpx2.post(url + "/v1/chat/completions", json=body, timeout=900)
                r.raise_for_status()
                timings = r.json().get("timings", {})
                speeds.append(timings.get("predicted_per_second", 0.0))
            out[task] = {"tg_tps": statistics.median(speeds),
                         "tokens": timings.get("predicted_n"),
                         "drafted": timings.get("draft_n"),
                         "accepted": timings.get("draft_n_accepted"),
                         "text": r.json()["choices"][0]["message"]["content"]}  # fmt: skip
        return out
    finally:
        stop(process)


CACHE = Path.home() / ".cache" / "deskllm-bench"


def draft_pair(path: str) -> tuple[str, str]:
    """(the model, its draft): `path` requantized to Q8_0, and `path`."""
    target = CACHE / f"{Path(path).stem}.q8_0-target.gguf"
    if not target.is_file():
        CACHE.mkdir(parents=True, exist_ok=True)
        requantize(Path(path), {"Q8_0": target})
    return str(target), path


def measure_draft(path: str, args: argparse.Namespace, extra_bufts: bool) -> dict:
    """Draft-model speculation with draft_pair(path): ours "off" and "draft", llama-server's
    plain and draft-simple, per task (medians over rounds)."""
    target, draft = draft_pair(path)
    params = LoadParams(target, n_ctx=CTX, n_threads=args.threads,
                        use_extra_bufts=extra_bufts, kv_ram_budget_mb=0, kv_disk_budget_mb=0,
                        draft_model_path=draft)  # fmt: skip
    with EngineClient(n_slots=1) as client:
        client.load(params)
        runs = alternating(client, ("off", "draft"), args.rounds, args.tokens)
    out: dict = {task: {mode: round(statistics.median(x["tg_tps"] for x in got), 2)
                        for mode, got in by_mode.items()}
                 for task, by_mode in runs.items()}  # fmt: skip
    drafted = sum(x["drafted"] for by in runs.values() for x in by["draft"])
    accepted = sum(x["accepted"] for by in runs.values() for x in by["draft"])
    result = {
        "model": Path(target).name, "draft": Path(draft).name, "tasks": out,
        "acceptance_draft": round(accepted / drafted, 3) if drafted else None,
        "draft_over_plain": round(min(o["draft"] / o["off"] for o in out.values()), 3),
    }
    if LLAMA_SERVER.is_file():
        for name, spec, model_draft in (("llama_server_plain", None, None),
                                        ("llama_server_draft", "draft-simple", draft)):
            ls = llama_server(target, args.threads, spec, extra_bufts, args.tokens,
                              args.rounds, model_draft)  # fmt: skip
            for task, figures in ls.items():
                out[task][name] = round(figures["tg_tps"], 2)
        result["draft_over_llama_server_draft"] = round(
            min(o["draft"] / o["llama_server_draft"] for o in out.values()), 3)
    return result


def measure(path: str, args: argparse.Namespace) -> dict:
    extra_bufts = extra_bufts_work(path)
    params = LoadParams(path, n_ctx=CTX, n_threads=args.threads, use_extra_bufts=extra_bufts,
                        kv_ram_budget_mb=0, kv_disk_budget_mb=0)  # fmt: skip
    agg: dict[str, list[float]] = {"off": [], "auto": []}
    # One slot for the single streams, as llama-server's --parallel 1: in a pool of four, the
    # cells other replies left are attended to (masked) by every step, which slows a lone
    # stream whatever the mode.
    with EngineClient(n_slots=1) as client:
        client.load(params)
        runs = alternating(client, MODES, args.rounds, args.tokens)
    with EngineClient(n_slots=SLOTS) as client:
        client.load(params)
        for r in range(args.rounds):
            for mode in ("off", "auto") if r % 2 == 0 else ("auto", "off"):
                agg[mode].append(four_streams(client, mode, args.tokens))
    tasks = {}
    for task, by_mode in runs.items():
        tasks[task] = {mode: {
            "tg_tps": round(statistics.median(x["tg_tps"] for x in got), 2),
            "tokens": got[-1]["tokens"], "drafted": sum(x["drafted"] for x in got),
            "accepted": sum(x["accepted"] for x in got),
            "passes": sum(x["passes"] for x in got)} for mode, got in by_mode.items()}  # fmt: skip
        tasks[task]["same_as_plain"] = by_mode["ngram"][0]["text"] == by_mode["off"][0]["text"]

    def speed(task: str, mode: str) -> float:
        return tasks[task][mode]["tg_tps"]

    def acceptance(names) -> float | None:
        drafted = sum(tasks[t]["ngram"]["drafted"] for t in names)
        accepted = sum(tasks[t]["ngram"]["accepted"] for t in names)
        return round(accepted / drafted, 3) if drafted else None

    result = {
        "copy_over_plain": round(min(speed(t, "ngram") / speed(t, "off") for t in COPY_TASKS), 3),
        "free_auto_over_plain": round(speed("free", "auto") / speed("free", "off"), 3),
        "agg4_spec_over_plain": round(statistics.median(agg["auto"])
                                      / statistics.median(agg["off"]), 3),  # fmt: skip
        "acceptance_copy": acceptance(COPY_TASKS),
        "acceptance_free": acceptance(("free",)),
        "agg4_tps": {m: round(statistics.median(v), 2) for m, v in agg.items()},
        "tasks": tasks,
    }
    if not args.no_draft:
        pair = measure_draft(path, args, extra_bufts)
        result["draft"] = pair
        for key in ("draft_over_llama_server_draft", "draft_over_plain", "acceptance_draft"):
            result[key] = pair.get(key)
    if LLAMA_SERVER.is_file():
        ls = {mode: llama_server(path, args.threads, None if mode == "plain" else mode,
                                 extra_bufts, args.tokens, args.rounds)
              for mode in ("plain", *LS_MODES)}  # fmt: skip
        for mode in LS_MODES:  # their greedy replies with drafts against their own plain ones
            for task, figures in ls[mode].items():
                figures["same_as_plain"] = figures["text"] == ls["plain"][task]["text"]
        for by_task in ls.values():
            for figures in by_task.values():
                del figures["text"]
        result["llama_server"] = ls
        result["copy_over_llama_server_ngram"] = round(min(
            speed(t, "ngram") / max(ls[m][t]["tg_tps"] for m in LS_MODES) for t in COPY_TASKS), 3)
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", action="append", default=None,
                        help="a .gguf path or installed name; repeat for more models")  # fmt: skip
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--tokens", type=int, default=256)
    parser.add_argument("--no-draft", action="store_true", help="leave the draft pair out")
    args = parser.parse_args()
    if not LLAMA_SERVER.is_file():
        print(f"note: {LLAMA_SERVER} is missing (packaging/build_llama_server.sh builds it); "
              "no llama-server figures", file=sys.stderr)  # fmt: skip
    result = each_model(args.model, lambda path: measure(path, args))
    result |= {"rounds": args.rounds, "threads": args.threads, "tokens": args.tokens}
    add_worst(result, {"copy_over_plain": min, "copy_over_llama_server_ngram": min,
                       "free_auto_over_plain": min, "agg4_spec_over_plain": min,
                       "acceptance_copy": min, "acceptance_free": min,
                       "draft_over_llama_server_draft": min, "draft_over_plain": min,
                       "acceptance_draft": min})  # fmt: skip
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
