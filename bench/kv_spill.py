"""How long saving a conversation's KV state holds up the engine when the state it pushes out
of the RAM cache goes to disk: `KvStateCache.put()` as the engines call it (the state is
written by the cache's writer thread) against `put()` followed by the wait for that write,
which is what the engine's loop spent before the writer thread, every running stream waiting.
Side by side in one run, in a folder next to the real state cache (the same disk). Prints one
JSON object.

    .venv/bin/python bench/kv_spill.py [--tokens 1000,4000] [--rounds 5]

States are random bytes of the starter model's size per token (23 KB). Keys per size
("<tokens>_tokens"): state_mb, put_ms_p50 / put_ms_max (the engine's wait now),
put_and_write_ms_p50 / put_and_write_ms_max (the wait before), stall_ratio
(put_ms_p50 / put_and_write_ms_p50, target well under 1).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from deskllm import paths  # noqa: E402
from deskllm.engine.kv_cache import KvState, KvStateCache, make_guard  # noqa: E402

BYTES_PER_TOKEN = 23 * 1024  # the starter model's KV cells, f16


def state_of(n_tokens: int, seed: int) -> KvState:
    data = os.urandom(n_tokens * BYTES_PER_TOKEN)
    return KvState(tuple(range(seed, seed + n_tokens)), data)


def measure(n_tokens: int, rounds: int, folder: Path) -> dict:
    states = [state_of(n_tokens, i) for i in range(4)]
    size = states[0].size_bytes
    # RAM for one state: every put pushes the previous one out, to the writer.
    cache = KvStateCache(make_guard(bench="kv_spill"), size, folder, 64 * size)
    cache.put("warm", states[-1])
    put_ms, put_and_write_ms = [], []
    for i in range(rounds):  # alternated: load on the machine hits both alike
        started = time.perf_counter()
        cache.put(f"a{i}", states[i % 3])
        put_ms.append((time.perf_counter() - started) * 1000)
        cache.wait_written()  # outside the timing: the writer's work, not the engine's
        started = time.perf_counter()
        cache.put(f"b{i}", states[(i + 1) % 3])
        cache.wait_written()
        put_and_write_ms.append((time.perf_counter() - started) * 1000)
    med = statistics.median
    return {
        "state_mb": round(size / 2**20, 1),
        "put_ms_p50": round(med(put_ms), 2),
        "put_ms_max": round(max(put_ms), 2),
        "put_and_write_ms_p50": round(med(put_and_write_ms), 2),
        "put_and_write_ms_max": round(max(put_and_write_ms), 2),
        "stall_ratio": round(med(put_ms) / med(put_and_write_ms), 4),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", default="1000,4000", help="state sizes, in tokens")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    base = paths.kv_cache_dir().parent
    folder = Path(tempfile.mkdtemp(prefix="kv-spill-bench-", dir=base))
    try:
        result = {f"{n}_tokens": measure(n, args.rounds, folder)
                  for n in (int(t) for t in args.tokens.split(","))}  # fmt: skip
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
