"""Automatic threads against every fixed thread count, on an idle machine and on a busy one,
side by side in one run per model (this machine is shared and noisy: read the ratios). Prints
one JSON object.

    .venv/bin/python bench/threads.py [--model NAME_OR_PATH ...] [--rounds 2] [--tokens 64]

--model may be given more than once (default: the starter model, and Gemma 3 270M where
bench/fetch_gemma.sh put it). Per model, one engine per configuration stays loaded for the
whole run, as the app keeps its model loaded while the machine gets busy and free again:
fixed counts (1, half the physical cores, one less than all, all) and Automatic (threads 0:
it starts at the physical cores and adapts, deskllm/engine/thread_governor.py), and a
control: a second engine of the all-cores count (the noise floor). Each round,
the machine idle, then busy (the bench starts one busy process per logical core, a pure
Python loop, and stops it), 2 s to settle each time; each configuration in turn (the order
rotated every round: each comes first, right after the other condition, as often; use a
multiple of the configurations for --rounds) gets one greedy request: a ~300-token prompt of
its own (nothing cached) and --tokens tokens (ignore_eos). Speeds are the engine's own
figures (Metrics: tg_tps from first to last token, pp_tps over the evaluated prompt), medians
over the rounds.

Keys per model and condition ("idle", "busy"): fixed_N and control {decode, prompt}, auto
{decode, prompt,
threads: the count at each reply's end}. Per model, and at the top level the worst across
models:
  busy_auto_over_best_fixed   Automatic's decode tok/s / the best fixed count's (target >= 0.9)
  idle_auto_over_best_fixed   the same on the idle machine (target >= 0.97)
  busy_auto_prompt_over_best_fixed, idle_auto_prompt_over_best_fixed
                              the same for prompt tok/s (reported, no target)
  busy_control_over_twin, idle_control_over_twin
                              a second engine of the all-cores count over its twin: how far
                              two identical configurations scatter in this run (per model;
                              at the top level the one farthest from 1)
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
import uuid

from serve import add_worst, each_model

from deskllm.engine.client import EngineClient
from deskllm.engine.domain import ChatMessage, LoadParams, Sampling
from deskllm.engine.load_defaults import resolve_params

SETTLE_S = 2.0
CONTROL = "control"
TEXT = ("The lighthouse keeper wrote down the weather every hour: the wind, the clouds, the "
        "height of the waves and the ships that passed. ") * 12  # fmt: skip


def busy_load() -> list[subprocess.Popen]:
    """One busy process per logical core, the way a build or a browser tab loads a laptop."""
    return [subprocess.Popen([sys.executable, "-c", "while True: pass"])
            for _ in range(os.cpu_count() or 1)]  # fmt: skip


def stop_load(processes: list[subprocess.Popen]) -> None:
    for process in processes:
        process.kill()
        process.wait()


def thread_counts() -> list[int]:
    import psutil

    cores = psutil.cpu_count(logical=False) or 1
    return sorted({1, max(1, cores // 2), max(1, cores - 1), cores})


def reply(client: EngineClient, tokens: int) -> dict:
    """One greedy reply to a prompt no engine has seen; the engine's figures and threads."""
    prompt = f"Note {uuid.uuid4().hex}. {TEXT}\nSay what the keeper wrote."
    sampling = Sampling(temperature=0, max_tokens=tokens, ignore_eos=True)
    done = client.chat(uuid.uuid4().hex, [ChatMessage("user", prompt)], sampling).wait()
    m = done.metrics
    return {"decode": m.tg_tps or 0.0, "prompt": m.pp_tps or 0.0, "threads": m.n_threads,
            "reason": m.threads_reason}  # fmt: skip


def measure(path: str, args: argparse.Namespace) -> dict:
    configs: dict[str, LoadParams] = {
        f"fixed_{n}": resolve_params(LoadParams(model_path=path, n_ctx=1024, n_threads=n), None)
        for n in thread_counts()
    }
    configs["auto"] = resolve_params(LoadParams(model_path=path, n_ctx=1024), None)
    # The noise floor: a second engine of the all-cores count, measured like the others but
    # never the best fixed one. Its ratio to its twin says how far two identical
    # configurations scatter on this machine in this run.
    configs[CONTROL] = configs[f"fixed_{max(thread_counts())}"]
    clients = {name: EngineClient() for name in configs}
    samples: dict = {cond: {name: [] for name in configs} for cond in ("idle", "busy")}
    try:
        for name, params in configs.items():
            clients[name].load(params)
            clients[name].chat("warm", [ChatMessage("user", "Hi")],
                               Sampling(temperature=0, max_tokens=4)).wait()  # fmt: skip
        order = list(configs)
        for _ in range(args.rounds):
            for cond in ("idle", "busy"):
                load = busy_load() if cond == "busy" else []
                try:
                    time.sleep(SETTLE_S)
                    for name in order:
                        samples[cond][name].append(reply(clients[name], args.tokens))
                finally:
                    stop_load(load)
            order = order[1:] + order[:1]  # each configuration first in turn
    finally:
        for client in clients.values():
            client.close()
    result: dict = {}
    for cond, by_config in samples.items():
        figures = {}
        for name, runs in by_config.items():
            figures[name] = {key: statistics.median(r[key] for r in runs)
                             for key in ("decode", "prompt")}  # fmt: skip
            if name == "auto":
                figures[name]["threads"] = [r["threads"] for r in runs]
                figures[name]["reasons"] = [r["reason"] for r in runs]
        result[cond] = figures
        fixed = [f for name, f in figures.items() if name.startswith("fixed_")]
        for key, suffix in (("decode", ""), ("prompt", "_prompt")):
            best = max(f[key] for f in fixed)
            result[f"{cond}_auto{suffix}_over_best_fixed"] = (
                round(figures["auto"][key] / best, 3) if best else None
            )
        twin = figures[f"fixed_{max(thread_counts())}"]["decode"]
        result[f"{cond}_control_over_twin"] = (
            round(figures[CONTROL]["decode"] / twin, 3) if twin else None
        )
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", action="append", default=None,
                        help="a .gguf path or installed name; repeat for more models")  # fmt: skip
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--tokens", type=int, default=64)
    args = parser.parse_args()
    result = each_model(args.model, lambda path: measure(path, args))
    result |= {"rounds": args.rounds, "tokens": args.tokens, "thread_counts": thread_counts()}
    add_worst(result, {f"{cond}_auto{suffix}_over_best_fixed": min
                       for cond in ("busy", "idle") for suffix in ("", "_prompt")})  # fmt: skip
    add_worst(result, {f"{cond}_control_over_twin": lambda v: max(v, key=lambda x: abs(x - 1))
                       for cond in ("busy", "idle")})  # fmt: skip
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
