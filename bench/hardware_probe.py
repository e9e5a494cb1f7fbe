"""Hardware probe time (bandwidth test excluded) and the bandwidth test's own time, in a fresh
interpreter as the app has. Prints one JSON object; the target is probe_ms <= 300.

    .venv/bin/python bench/hardware_probe.py
"""

from __future__ import annotations

import json
import os
import statistics
import time

from deskllm.hardware import probe_hardware
from deskllm.hardware.bandwidth import measure_read_bandwidth

if __name__ == "__main__":
    probe_hardware(bandwidth=False)  # first call pays for imports, as an app start would
    times = [probe_hardware(bandwidth=False).probe_ms for _ in range(5)]
    started = time.perf_counter()
    bw = measure_read_bandwidth(threads=os.cpu_count() or 1)
    bandwidth_s = time.perf_counter() - started
    print(json.dumps({
        "probe_ms_median": round(statistics.median(times), 1),
        "probe_ms": [round(t, 1) for t in times],
        "target_ms": 300,
        "bandwidth_gbps": round(bw.gbps, 1),
        "bandwidth_test_s": round(bandwidth_s, 3),
    }, indent=2))
