"""Downloader benchmark: deskllm vs curl on the same file from the local FakeHub, and the bytes
fetched again after a download was killed half-way. Prints one JSON object.

    .venv/bin/python bench/downloads.py [--size-mb 100] [--rounds 7]

Both clients run as their own processes (the server has this process to itself) and are timed
by their own clocks: curl's time_total, deskllm's TransferStats.seconds (request to verified,
fsynced, renamed file: the sha256 is included). The server is tests/hub_server.py, which sends
plain bodies with sendfile(2) as real file servers do, so on a 2-core machine it leaves the
CPU to the clients being compared.

Keys: size_bytes, rounds, curl_mb_s and deskllm_mb_s (medians), ratio (the median over rounds
of deskllm / curl speed, each round side by side; target >= 0.9), ratio_without_fsync (the
same, less deskllm's final fsync: curl exits before its file is on disk), resume: {killed_at_bytes,
refetched_bytes (target 0), rehashed_bytes, resume_seconds}, rehash_full_s_per_gb (the second
pass a resume would cost without a saved hash state, warm page cache), hash_state (whether
OpenSSL's SHA256_CTX is used here), curl_cpu_s_per_gb and deskllm_cpu_s_per_gb (CPU time per
GB, all threads; the sha256 is most of the difference), load_avg (1-minute load at the end:
a busy machine skews the ratio against the client that does more work per byte).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT))

REPO = "bench/Bench-GGUF"
FILE = "bench-Q4_K_M.gguf"

# A long-running app downloads in a warm process: the child first fetches a small file (imports,
# libcrypto, sockets and code paths warm), then the timed one. curl's start-up is not in its
# time_total either.
_CHILD = """
import json, sys, time
from pathlib import Path
from deskllm.downloads import RemoteFile, download_file
repo, path, size, sha, dest, warm_path, warm_size, warm_sha = sys.argv[1:9]
warm = Path(dest).with_name("warm.gguf")
download_file(RemoteFile(repo, warm_path, int(warm_size), warm_sha), warm)
warm.unlink()
cpu = time.process_time()
stats = download_file(RemoteFile(repo, path, int(size), sha), Path(dest))
print(json.dumps(stats.__dict__ | {"cpu_s": time.process_time() - cpu}))
"""


def _random_file(path: Path, size: int) -> str:
    import hashlib

    h = hashlib.sha256()
    with open(path, "wb") as f:
        left = size
        while left:
            block = os.urandom(min(left, 8 << 20))
            h.update(block)
            f.write(block)
            left -= len(block)
    return h.hexdigest()


def _env(hub_url: str, home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "HF_HUB_OFFLINE"}
    return env | {"HF_ENDPOINT": hub_url, "DESKLLM_HOME": str(home), "HF_HOME": str(home / "hf")}


def _curl(url: str, out: Path) -> tuple[float, float]:
    """(seconds, CPU seconds) of one curl download."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    done = subprocess.run(
        ["curl", "-sS", "-L", "-o", str(out), "-w", "%{time_total}", url],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    out.unlink()
    cpu = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
    return float(done.stdout), cpu


def _deskllm(args: list[str], env: dict[str, str]) -> dict:
    done = subprocess.run(
        [sys.executable, "-c", _CHILD, *args], capture_output=True, text=True, env=env, check=True
    )
    return json.loads(done.stdout)


def _median_ratio(curl_s: list[float], ours_s: list[float]) -> float:
    """Median over rounds of deskllm's speed / curl's, each round measured side by side."""
    return statistics.median(c / o for c, o in zip(curl_s, ours_s, strict=True))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size-mb", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=7)
    opts = parser.parse_args()

    from hub_server import FakeHub

    from deskllm.downloads.partfile import part_path
    from deskllm.downloads.sha256_state import new_sha256
    from deskllm.downloads.transfer import _hash_range

    size = opts.size_mb * 1_000_000
    with tempfile.TemporaryDirectory() as tmp, FakeHub() as hub:
        work = Path(tmp)
        source = work / FILE
        sha = _random_file(source, size)
        warm = work / "warm.gguf"
        warm_sha = _random_file(warm, 1_000_000)
        hub.add_repo(REPO, {FILE: source, "warm.gguf": warm})
        env = _env(hub.url, work / "home")
        url = hub.file_url(REPO, FILE)
        dest = work / "out" / FILE
        args = [REPO, FILE, str(size), sha, str(dest), "warm.gguf", "1000000", warm_sha]

        curl_s, ours_s, ours_unsynced_s, curl_cpu, ours_cpu = [], [], [], [], []
        _curl(url, work / "warm")  # page cache and server warm for both
        for _ in range(opts.rounds):  # side by side: a busy moment hits both alike
            seconds, cpu = _curl(url, work / "curl.out")
            curl_s.append(seconds)
            curl_cpu.append(cpu)
            stats = _deskllm(args, env)
            assert stats["fetched"] == size
            ours_s.append(stats["seconds"])
            ours_unsynced_s.append(stats["seconds"] - stats["sync_seconds"])
            ours_cpu.append(stats["cpu_s"])
            dest.unlink()

        # Kill a download half-way (SIGKILL, no goodbye), then resume in a new process.
        hub.fault(REPO, FILE, throttle_bytes_per_s=max(size / 4, 1))
        child = subprocess.Popen([sys.executable, "-c", _CHILD, *args], env=env,
                                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
        part = part_path(dest)
        while not (part.exists() and part.stat().st_size >= size // 2):
            time.sleep(0.01)
        child.send_signal(signal.SIGKILL)
        child.wait()
        killed_at = part.stat().st_size
        time.sleep(0.5)  # let the server notice the dead client
        hub.fault(REPO, FILE)
        served_before = hub.served(REPO, FILE)
        resumed = _deskllm(args, env)
        refetched = hub.served(REPO, FILE) - served_before - (size - killed_at)

        # What a resume would cost without the saved hash state: hashing the partial again.
        t0 = time.perf_counter()
        _hash_range(dest, 0, size, new_sha256())
        rehash_s_per_gb = (time.perf_counter() - t0) / (size / 1e9)

    curl_mb_s = size / 1e6 / statistics.median(curl_s)
    ours_mb_s = size / 1e6 / statistics.median(ours_s)
    print(json.dumps({
        "size_bytes": size,
        "rounds": opts.rounds,
        "curl_mb_s": round(curl_mb_s, 1),
        "deskllm_mb_s": round(ours_mb_s, 1),
        "ratio": round(_median_ratio(curl_s, ours_s), 3),
        # The same without the final fsync (curl's file is not on disk yet when curl exits).
        "ratio_without_fsync": round(_median_ratio(curl_s, ours_unsynced_s), 3),
        # CPU seconds per GB (all threads): what a busy machine makes each client wait for.
        "curl_cpu_s_per_gb": round(statistics.median(curl_cpu) / (size / 1e9), 2),
        "deskllm_cpu_s_per_gb": round(statistics.median(ours_cpu) / (size / 1e9), 2),
        "resume": {
            "killed_at_bytes": killed_at,
            "refetched_bytes": refetched,
            "rehashed_bytes": resumed["rehashed"],
            "resume_seconds": round(resumed["seconds"], 3),
        },
        "rehash_full_s_per_gb": round(rehash_s_per_gb, 3),
        "hash_state": new_sha256().state() is not None,
        "load_avg": round(os.getloadavg()[0], 2),
    }, indent=2))  # fmt: skip


if __name__ == "__main__":
    main()
