"""Launch-to-window time of the app: the frozen build (dist/deskllm/deskllm, or --exe, e.g. the
installed /opt/deskllm/deskllm) and, side by side, the app from the virtual environment. Each
launch gets a fresh home (a first start: the starter model is registered then). The app logs
"window visible N s after launch" when its main window is first exposed, N measured from the
start of its process; the bench also times launch to that line from outside. Prints one JSON
object; the target is frozen_s <= 2.

    .venv/bin/python bench/startup.py [--exe PATH] [--rounds 5]

Uses a real X server (Xvfb) when one can be started, else Qt's offscreen platform.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LINE = re.compile(rb"window visible ([0-9.]+) s after launch")


@contextmanager
def display():
    """An X display for the launches: a private Xvfb when there is one."""
    if not shutil.which("Xvfb"):
        yield {"QT_QPA_PLATFORM": "offscreen"}, "offscreen"
        return
    number = 90 + os.getpid() % 100
    args = ["Xvfb", f":{number}", "-screen", "0", "1280x800x24", "-nolisten", "tcp"]
    server = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 10
        while not Path(f"/tmp/.X11-unix/X{number}").exists():
            if time.monotonic() > deadline or server.poll() is not None:
                raise RuntimeError("Xvfb did not start")
            time.sleep(0.05)
        yield {"DISPLAY": f":{number}", "QT_QPA_PLATFORM": "xcb"}, "xcb (Xvfb)"
    finally:
        server.terminate()
        server.wait()


def launch(
    cmd: list[str], env: dict[str, str], timeout_s: float = 60, database: Path | None = None
) -> tuple[float, float]:
    """(seconds the app reports, seconds from Popen to its log line) of one first start;
    `database`: a database file the home starts with (bench/docs.py)."""
    with tempfile.TemporaryDirectory(prefix="deskllm-startup-") as home:
        if database is not None:
            shutil.copyfile(database, Path(home) / "deskllm.sqlite3")
        started = time.perf_counter()
        app = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                               env=env | {"DESKLLM_HOME": home}, cwd=home)  # fmt: skip
        try:
            deadline = time.monotonic() + timeout_s
            assert app.stderr is not None
            for line in app.stderr:
                match = LINE.search(line)
                if match:
                    return float(match.group(1)), time.perf_counter() - started
                if time.monotonic() > deadline:
                    break
            raise RuntimeError(f"{cmd[0]} never showed its window (exit code {app.poll()})")
        finally:
            app.terminate()
            try:
                app.wait(10)
            except subprocess.TimeoutExpired:
                app.kill()
                app.wait()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--exe", default=str(ROOT / "dist" / "deskllm" / "deskllm"))
    parser.add_argument("--rounds", type=int, default=5)
    opts = parser.parse_args()
    if not Path(opts.exe).is_file():
        raise SystemExit(f"{opts.exe} does not exist: build it with packaging/build_linux.sh")
    base = {k: v for k, v in os.environ.items() if not k.startswith(("QT_", "DESKLLM_"))}
    commands = {"frozen": [opts.exe], "venv": [sys.executable, str(ROOT / "main.py")]}
    results: dict[str, list[tuple[float, float]]] = {name: [] for name in commands}
    with display() as (env, platform):
        for cmd in commands.values():
            launch(cmd, base | env)  # the first launch warms the page cache for both
        for _ in range(opts.rounds):  # side by side
            for name, cmd in commands.items():
                results[name].append(launch(cmd, base | env))
    report = {"platform": platform, "rounds": opts.rounds, "exe": opts.exe, "target_s": 2.0}
    for name, runs in results.items():
        report[f"{name}_s"] = round(statistics.median(r[0] for r in runs), 2)
        report[f"{name}_outside_s"] = round(statistics.median(r[1] for r in runs), 2)
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
