"""Downloads against FakeHub (a real HTTP server speaking the Hub's routes), real files, real
SQLite, and the CLI as real processes: killed, offline, two at once, a full disk."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import signal
import struct
import subprocess
import sys
import time
from pathlib import Path

import pytest
from hub_fixtures import GATED_REPO, MAIN_REPO, SPLIT_REPO, STEM, hub_repos
from hub_server import FakeHub

from deskllm.downloads import (
    AuthError,
    DownloadManager,
    DownloadState,
    Progress,
    TransferOptions,
    resolve,
)
from deskllm.downloads.partfile import Sidecar, lock_path, part_path, sidecar_path
from deskllm.downloads.sha256_state import new_sha256
from deskllm.store import ModelLibrary, open_database

FAST = TransferOptions(backoff_base_s=0.02, backoff_max_s=0.5, stall_timeout_s=5.0)
TIMEOUT = 120  # seconds a single download may take here before a test gives up


def sha256(path: Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def wait_for(predicate, timeout: float = TIMEOUT, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)


class Recorder:
    """Collects progress events (from worker threads)."""

    def __init__(self) -> None:
        self.events: list[Progress] = []

    def __call__(self, event: Progress) -> None:
        self.events.append(event)

    def states(self, download_id: int) -> list[DownloadState]:
        out: list[DownloadState] = []
        for e in self.events:
            if e.id == download_id and (not out or out[-1] != e.state):
                out.append(e.state)
        return out


@pytest.fixture
def models(deskllm_home: Path) -> Path:
    return deskllm_home / "models"


@pytest.fixture
def managers(deskllm_home: Path, models: Path):
    """make(**kw) -> a started DownloadManager on this test's home; all closed at the end."""
    made: list[DownloadManager] = []

    def make(recorder: Recorder | None = None, **kw) -> DownloadManager:
        kw.setdefault("options", FAST)
        kw.setdefault("models_dir", models)
        manager = DownloadManager(deskllm_home / "deskllm.sqlite3", on_progress=recorder, **kw)
        manager.start()
        made.append(manager)
        return manager

    yield make
    for manager in made:
        manager.close()


def cli_env(hub: FakeHub, home: Path, tmp_path: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("HF_HUB_OFFLINE", "HF_TOKEN")}
    return (
        env
        | {
            "DESKLLM_HOME": str(home),
            "HF_ENDPOINT": hub.url,
            "HF_HOME": str(tmp_path / "hf-home"),
            "PYTHONUNBUFFERED": "1",
        }
        | extra
    )


def cli(*args: str, env: dict[str, str], **kw) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "deskllm", "download", *args],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, **kw,
    )  # fmt: skip


def leftovers(dest: Path) -> list[Path]:
    return [p for p in (part_path(dest), sidecar_path(dest), lock_path(dest)) if p.exists()]


# -- the whole path ------------------------------------------------------------------------


def test_download_verifies_and_adds_to_library(hub, managers, models, quant_ladder, deskllm_home):
    item = resolve(MAIN_REPO, "Q4_K_M")
    recorder = Recorder()
    manager = managers(recorder)
    record = manager.wait(manager.add(item), timeout=TIMEOUT)

    assert record.state == DownloadState.DONE, record.error
    dest = models / "bartowski" / "SmolLM2-135M-Instruct-GGUF" / f"{STEM}-Q4_K_M.gguf"
    assert record.path == str(dest)
    assert sha256(dest) == sha256(quant_ladder["Q4_K_M"]) == item.parts[0].sha256
    assert leftovers(dest) == []
    assert hub.served(MAIN_REPO, dest.name) == dest.stat().st_size  # each byte once
    states = recorder.states(record.id)
    assert states[0] == DownloadState.QUEUED and states[-2:] == ["verifying", "done"]
    assert DownloadState.DOWNLOADING in states
    downloading = [e for e in recorder.events if e.state == DownloadState.DOWNLOADING]
    assert {e.total for e in downloading} == {item.total}
    assert max(e.speed_bps for e in downloading) > 0

    library = ModelLibrary(open_database(deskllm_home / "deskllm.sqlite3"))
    [model] = library.list()
    assert (model.id, model.path, model.source) == (record.model_id, str(dest), "download")
    assert model.quant == "Q4_K_M"
    # Asking again for a file that is there fetches nothing.
    again = manager.wait(manager.add(item), timeout=TIMEOUT)
    assert again.state == DownloadState.DONE
    assert hub.served(MAIN_REPO, dest.name) == dest.stat().st_size


def test_cli_killed_at_half_resumes_without_fetching_bytes_on_disk_again(
    hub, deskllm_home, tmp_path, quant_ladder
):
    name = f"{STEM}-Q2_K.gguf"
    size = quant_ladder["Q2_K"].stat().st_size
    part = part_path(deskllm_home / "models" / "bartowski" / "SmolLM2-135M-Instruct-GGUF" / name)
    env = cli_env(hub, deskllm_home, tmp_path)
    hub.fault(MAIN_REPO, name, throttle_bytes_per_s=20e6)
    first = cli(MAIN_REPO, "Q2_K", env=env)
    try:
        wait_for(lambda: part.exists() and part.stat().st_size >= size // 2, what="50%")
        first.send_signal(signal.SIGKILL)
        first.wait(10)
    finally:
        first.kill()
    on_disk = part.stat().st_size
    assert 0 < on_disk < size
    time.sleep(0.5)  # the server notices the dead client and stops counting
    served_before = hub.served(MAIN_REPO, name)
    hub.fault(MAIN_REPO, name)  # full speed again

    second = cli(MAIN_REPO, "Q2_K", "--json", env=env)
    out, err = second.communicate(timeout=TIMEOUT)
    assert second.returncode == 0, err
    result = json.loads(out)
    assert result["state"] == "done" and result["quant"] == "Q2_K"
    assert sha256(Path(result["path"])) == sha256(quant_ladder["Q2_K"])
    # The server's own counter: the second process fetched exactly what was not on disk.
    assert hub.served(MAIN_REPO, name) - served_before == size - on_disk
    assert result["fetched_bytes"] == size - on_disk
    assert result["resumed_from_bytes"] == on_disk
    if new_sha256().state() is not None:
        # The saved hash state was used: only the tail past the last checkpoint was re-read.
        assert result["rehashed_bytes"] < on_disk
    assert "%" in err and "verifying" in err
    library = ModelLibrary(open_database(deskllm_home / "deskllm.sqlite3"))
    assert [m.path for m in library.list()] == [result["path"]]


def test_corrupted_byte_is_refused_and_removed(hub, managers, models, quant_ladder):
    name = f"{STEM}-Q3_K_M.gguf"
    size = quant_ladder["Q3_K_M"].stat().st_size
    hub.fault(MAIN_REPO, name, corrupt_byte_at=size // 2, corrupt_times=1)
    manager = managers()
    record = manager.wait(manager.add(resolve(MAIN_REPO, "Q3_K_M")), timeout=TIMEOUT)

    assert record.state == DownloadState.FAILED
    assert f"{MAIN_REPO}/{name} is corrupt" in record.error
    assert "removed; download it again" in record.error
    dest = models / MAIN_REPO / name
    assert not dest.exists() and leftovers(dest) == []
    assert record.model_id is None
    # Downloading again (the server is fine now) gives the right file.
    manager.resume(record.id)
    record = manager.wait(record.id, timeout=TIMEOUT)
    assert record.state == DownloadState.DONE
    assert sha256(dest) == sha256(quant_ladder["Q3_K_M"])


def test_dropped_connections_and_5xx_are_retried_from_the_last_byte(
    hub, managers, models, quant_ladder
):
    name = f"{STEM}-Q4_K_M.gguf"
    size = quant_ladder["Q4_K_M"].stat().st_size
    hub.fault(MAIN_REPO, name, drop_after_bytes=7 << 20, drop_times=3)
    manager = managers()
    record = manager.wait(manager.add(resolve(MAIN_REPO, "Q4_K_M")), timeout=TIMEOUT)
    assert record.state == DownloadState.DONE, record.error
    assert manager.stats(record.id).retries == 3
    assert hub.served(MAIN_REPO, name) == size  # every resume started at the last byte
    ranges = [r.range for r in hub.requests if r.path.startswith("/cdn-lfs/")]
    assert ranges == [None] + [f"bytes={n * (7 << 20)}-" for n in (1, 2, 3)]

    name = f"{STEM}-Q2_K.gguf"
    hub.fault(MAIN_REPO, name, fail_status=503, fail_times=2)
    record = manager.wait(manager.add(resolve(MAIN_REPO, "Q2_K")), timeout=TIMEOUT)
    assert record.state == DownloadState.DONE, record.error
    assert manager.stats(record.id).retries == 2
    assert sha256(models / MAIN_REPO / name) == sha256(quant_ladder["Q2_K"])


# -- the disk ------------------------------------------------------------------------------


@pytest.fixture
def small_disk(tmp_path: Path):
    mount = tmp_path / "small-disk"
    mount.mkdir()
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=120m", "tmpfs", str(mount)],
        capture_output=True, text=True,
    )  # fmt: skip
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here (needs root): {done.stderr.strip()}")
    yield mount
    subprocess.run(["umount", "-l", str(mount)], check=False)


def test_disk_full_before_and_during_a_download(hub, managers, small_disk, quant_ladder):
    margin0 = TransferOptions(backoff_base_s=0.02, disk_margin_bytes=0)
    recorder = Recorder()
    manager = managers(recorder, models_dir=small_disk, options=margin0)
    folder = small_disk / MAIN_REPO

    # Before: Q8_0 does not fit in 120 MB: refused before a byte is fetched.
    q8 = f"{STEM}-Q8_0.gguf"
    assert quant_ladder["Q8_0"].stat().st_size > 120e6
    record = manager.wait(manager.add(resolve(MAIN_REPO, "Q8_0")), timeout=TIMEOUT)
    assert record.state == DownloadState.FAILED
    assert f"not enough free space in {folder}" in record.error
    assert hub.served(MAIN_REPO, q8) == 0 and leftovers(folder / q8) == []

    # During: the disk fills up (another program) while Q2_K is being written.
    name = f"{STEM}-Q2_K.gguf"
    size = quant_ladder["Q2_K"].stat().st_size
    hub.fault(MAIN_REPO, name, throttle_bytes_per_s=40e6)
    filler = small_disk / "filler"
    filled: list[bool] = []

    def fill_at_40_percent(event: Progress) -> None:
        if event.name.endswith(name) and event.fraction > 0.4 and not filled:
            filled.append(True)
            free = os.statvfs(small_disk).f_bavail * os.statvfs(small_disk).f_frsize
            with open(filler, "wb") as f:
                f.write(b"\1" * (free - (1 << 20)))

    manager.subscribe(fill_at_40_percent)
    record = manager.wait(manager.add(resolve(MAIN_REPO, "Q2_K")), timeout=TIMEOUT)
    assert record.state == DownloadState.FAILED
    assert record.error.startswith(f"the disk is full: {MAIN_REPO}/{name} needs ")
    assert f"more in {folder}" in record.error and "kept" in record.error
    part = part_path(folder / name)
    on_disk = part.stat().st_size
    assert 0.4 * size < on_disk < size
    time.sleep(0.5)  # the server notices the closed connection and stops counting
    served_at_failure = hub.served(MAIN_REPO, name)

    # Space freed: the download resumes and nothing already on disk is fetched again.
    filler.unlink()
    hub.fault(MAIN_REPO, name)
    manager.resume(record.id)
    record = manager.wait(record.id, timeout=TIMEOUT)
    assert record.state == DownloadState.DONE, record.error
    assert sha256(folder / name) == sha256(quant_ladder["Q2_K"])
    assert hub.served(MAIN_REPO, name) - served_at_failure == size - on_disk


# -- control -------------------------------------------------------------------------------


def test_pause_resume_and_cancel(hub, managers, models, quant_ladder):
    recorder = Recorder()
    manager = managers(recorder)
    name = f"{STEM}-Q4_K_M.gguf"
    size = quant_ladder["Q4_K_M"].stat().st_size
    dest = models / MAIN_REPO / name
    hub.fault(MAIN_REPO, name, throttle_bytes_per_s=20e6)
    download_id = manager.add(resolve(MAIN_REPO, "Q4_K_M"))
    wait_for(lambda: part_path(dest).exists() and part_path(dest).stat().st_size > size // 5)
    manager.pause(download_id)
    record = manager.wait(download_id, timeout=30)
    assert record.state == DownloadState.PAUSED
    on_disk = part_path(dest).stat().st_size
    assert record.bytes_done == on_disk and sidecar_path(dest).exists()
    time.sleep(0.3)
    assert part_path(dest).stat().st_size == on_disk  # paused means no more writes
    served = hub.served(MAIN_REPO, name)

    hub.fault(MAIN_REPO, name)
    manager.resume(download_id)
    record = manager.wait(download_id, timeout=TIMEOUT)
    assert record.state == DownloadState.DONE
    assert sha256(dest) == sha256(quant_ladder["Q4_K_M"])
    assert hub.served(MAIN_REPO, name) - served == size - on_disk
    states = recorder.states(download_id)
    assert states[:3] == ["queued", "downloading", "paused"]
    assert states[3:] == ["queued", "downloading", "verifying", "done"]

    other = f"{STEM}-Q5_K_M.gguf"
    hub.fault(MAIN_REPO, other, throttle_bytes_per_s=20e6)
    cancel_id = manager.add(resolve(MAIN_REPO, "Q5_K_M"))
    wait_for(lambda: part_path(models / MAIN_REPO / other).exists())
    wait_for(lambda: part_path(models / MAIN_REPO / other).stat().st_size > 1 << 20)
    manager.cancel(cancel_id)
    record = manager.wait(cancel_id, timeout=30)
    assert record.state == DownloadState.CANCELLED
    assert leftovers(models / MAIN_REPO / other) == [] and not (models / MAIN_REPO / other).exists()

    # Cancelling a paused download (no worker running) removes its partial file too.
    again = manager.add(resolve(MAIN_REPO, "Q5_K_M"))
    assert again != cancel_id  # a cancelled row is history; this is a new download
    wait_for(lambda: part_path(models / MAIN_REPO / other).exists())
    manager.pause(again)
    assert manager.wait(again, timeout=30).state == DownloadState.PAUSED
    assert part_path(models / MAIN_REPO / other).exists()
    manager.cancel(again)
    assert manager.get(again).state == DownloadState.CANCELLED
    assert leftovers(models / MAIN_REPO / other) == []


def test_concurrency_limit_and_a_queue_that_survives_a_restart(
    hub, managers, models, quant_ladder, deskllm_home
):
    labels = ("Q2_K", "Q3_K_M", "Q4_K_M")
    for label in labels:
        hub.fault(MAIN_REPO, f"{STEM}-{label}.gguf", throttle_bytes_per_s=25e6)
    recorder = Recorder()
    manager = managers(recorder, max_concurrent=2)
    ids = [manager.add(resolve(MAIN_REPO, label)) for label in labels]
    wait_for(lambda: part_path(models / MAIN_REPO / f"{STEM}-Q2_K.gguf").exists())
    time.sleep(0.5)
    assert [manager.get(i).state for i in ids] == ["downloading", "downloading", "queued"]

    # The app closes: running downloads stop and stay queued with their partial files.
    manager.close()
    time.sleep(0.5)  # the server notices the closed connections and stops counting
    paths = [models / MAIN_REPO / f"{STEM}-{label}.gguf" for label in labels]
    on_disk = [part_path(p).stat().st_size if part_path(p).exists() else 0 for p in paths]
    served = [hub.served(MAIN_REPO, p.name) for p in paths]
    assert on_disk[0] > 0 and on_disk[1] > 0 and on_disk[2] == served[2] == 0
    peek = DownloadManager(deskllm_home / "deskllm.sqlite3", models_dir=models)  # not started
    assert [r.state for r in peek.list()] == ["queued"] * 3
    assert all(r.bytes_done > 0 for r in peek.list()[:2])
    peek.close()
    for label in labels:
        hub.fault(MAIN_REPO, f"{STEM}-{label}.gguf", throttle_bytes_per_s=60e6)
    recorder = Recorder()
    restarted = managers(recorder, max_concurrent=2)  # start() restores the queue
    records = [restarted.wait(i, timeout=TIMEOUT) for i in ids]
    assert [r.state for r in records] == ["done"] * 3
    for label, path, disk, sent in zip(labels, paths, on_disk, served, strict=True):
        assert sha256(path) == sha256(quant_ladder[label])
        # Resumed: what was on disk at the restart was not fetched again.
        assert hub.served(MAIN_REPO, path.name) - sent == path.stat().st_size - disk

    running: set[int] = set()
    most = 0
    for event in recorder.events:
        if event.state in ("downloading", "verifying"):
            running.add(event.id)
        else:
            running.discard(event.id)
        most = max(most, len(running))
    assert most == 2


def test_a_split_model_is_one_item(hub, managers, models, multipart, deskllm_home):
    item = resolve(SPLIT_REPO, "Q4_1")
    assert [p.path for p in item.parts] == [f"Q4_1/{p.name}" for p in multipart]
    recorder = Recorder()
    manager = managers(recorder)
    record = manager.wait(manager.add(item), timeout=TIMEOUT)
    assert record.state == DownloadState.DONE, record.error
    folder = models / SPLIT_REPO / "Q4_1"
    for source in multipart:
        assert sha256(folder / source.name) == sha256(source)
    assert record.path == str(folder / multipart[0].name)
    totals = {e.total for e in recorder.events if e.state == DownloadState.DOWNLOADING}
    assert totals == {sum(p.stat().st_size for p in multipart)}
    fractions = [e.fraction for e in recorder.events if e.state == DownloadState.DOWNLOADING]
    assert fractions == sorted(fractions)  # one bar across both parts, never going back
    [model] = ModelLibrary(open_database(deskllm_home / "deskllm.sqlite3")).list()
    assert model.path == record.path


# -- the network ---------------------------------------------------------------------------


def test_offline_start_is_a_clear_error_at_once(hub, managers, deskllm_home, tmp_path, monkeypatch):
    item = resolve(MAIN_REPO, "Q2_K")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    started = time.monotonic()
    assert resolve(MAIN_REPO, "Q2_K") == item  # the catalog answers from its cache
    manager = managers()
    record = manager.wait(manager.add(item), timeout=30)
    assert record.state == DownloadState.FAILED
    assert record.error.startswith(f"cannot download {MAIN_REPO}/{item.name}: offline mode is on")
    assert "HF_HUB_OFFLINE" in record.error
    # The CLI, in this home (the repo is cached) and in a fresh one (it is not).
    fresh = tmp_path / "fresh-home"
    fresh.mkdir()
    for home in (deskllm_home, fresh):
        proc = cli(MAIN_REPO, "Q2_K", env=cli_env(hub, home, tmp_path, HF_HUB_OFFLINE="1"))
        _, err = proc.communicate(timeout=60)
        assert proc.returncode == 1 and "offline mode" in err and "HF_HUB_OFFLINE" in err, err
    assert time.monotonic() - started < 30  # nothing waited for a network that is not there
    assert hub.served(MAIN_REPO, f"{STEM}-Q2_K.gguf") == 0


def test_a_download_cut_by_the_network_resumes_when_it_is_back(
    hub, managers, models, quant_ladder, multipart, mmproj_file, monkeypatch
):
    name = f"{STEM}-Q2_K.gguf"
    size = quant_ladder["Q2_K"].stat().st_size
    hub.fault(MAIN_REPO, name, throttle_bytes_per_s=20e6)
    manager = managers(options=TransferOptions(backoff_base_s=0.02, max_retries=2))
    download_id = manager.add(resolve(MAIN_REPO, "Q2_K"))
    part = part_path(models / MAIN_REPO / name)
    wait_for(lambda: part.exists() and part.stat().st_size > size // 3)
    hub.close()  # the network goes away mid-file
    record = manager.wait(download_id, timeout=60)
    assert record.state == DownloadState.FAILED
    assert "after 3 failed attempts" in record.error and "kept" in record.error
    on_disk = part.stat().st_size

    with FakeHub() as back:  # the network is back (a new server: a new port)
        hub_repos(back, quant_ladder, multipart, mmproj_file)
        monkeypatch.setenv("HF_ENDPOINT", back.url)
        manager.resume(download_id)
        record = manager.wait(download_id, timeout=TIMEOUT)
        assert record.state == DownloadState.DONE, record.error
        assert back.served(MAIN_REPO, name) == size - on_disk
    assert sha256(models / MAIN_REPO / name) == sha256(quant_ladder["Q2_K"])


def test_gated_repo_needs_a_token(hub, managers, models, quant_ladder, monkeypatch):
    with pytest.raises(AuthError, match=f"{GATED_REPO} is a gated model") as refused:
        resolve(GATED_REPO, "Q4_K_M")  # the catalog checks access before anything is queued
    assert "hf auth login" in str(refused.value) and "HF_TOKEN" in str(refused.value)

    # Listed with access, downloaded without a token (it expired, was removed...).
    monkeypatch.setenv("HF_TOKEN", FakeHub.ACCESS_TOKEN)
    item = resolve(GATED_REPO, "Q4_K_M")
    monkeypatch.delenv("HF_TOKEN")
    manager = managers()
    record = manager.wait(manager.add(item), timeout=30)
    assert record.state == DownloadState.FAILED
    assert record.error.startswith(f"{GATED_REPO} is a gated model: accept its terms at ")
    assert "HF_TOKEN" in record.error and "hf auth login" in record.error
    assert leftovers(models / GATED_REPO / item.name) == []

    with_token = managers(options=TransferOptions(token=FakeHub.ACCESS_TOKEN))
    record = with_token.wait(with_token.add(item), timeout=TIMEOUT)
    assert record.state == DownloadState.DONE, record.error
    assert sha256(models / GATED_REPO / item.name) == sha256(quant_ladder["Q4_K_M"])
    # The token went to the Hub, not to the CDN the Hub redirected to.
    assert [r.authorized for r in hub.requests if r.path.startswith("/cdn-lfs/")] == [False]


def test_a_second_process_cannot_touch_a_file_being_downloaded(
    hub, deskllm_home, tmp_path, quant_ladder
):
    name = f"{STEM}-Q4_K_M.gguf"
    part = part_path(deskllm_home / "models" / MAIN_REPO / name)
    env = cli_env(hub, deskllm_home, tmp_path)
    hub.fault(MAIN_REPO, name, throttle_bytes_per_s=15e6)
    first = cli(MAIN_REPO, "Q4_K_M", env=env)
    try:
        wait_for(lambda: part.exists() and part.stat().st_size > 1 << 20, what="first bytes")
        second = cli(MAIN_REPO, "Q4_K_M", env=env)
        _, err = second.communicate(timeout=60)
        assert second.returncode == 1
        assert "already being downloaded by another deskllm process" in err
        hub.fault(MAIN_REPO, name)
        out, err = first.communicate(timeout=TIMEOUT)
    finally:
        first.kill()
    assert first.returncode == 0, err
    assert sha256(Path(out.strip())) == sha256(quant_ladder["Q4_K_M"])


def test_without_a_quant_the_planners_recommendation_is_taken(hub, quant_ladder, monkeypatch):
    from deskllm.hardware import report_from_dict
    from deskllm.planner import machine

    # This machine: every rung fits, so the best quality in the repo is taken.
    item = resolve(MAIN_REPO)
    assert item.quant == "Q8_0"
    # A machine with ~1 GB of RAM (a profile: no such machine here): a smaller quant fits.
    profile = json.loads((Path(__file__).parent.parent / "data" / "hardware"
                          / "desktop_cpu_16gb.json").read_text())
    profile["memory"]["total_bytes"] = 1024 * 2**20
    profile["memory"]["available_bytes"] = 900 * 2**20
    monkeypatch.setattr(machine, "current_hardware", lambda: report_from_dict(profile))
    small = resolve(MAIN_REPO)
    assert small.quant != "Q8_0" and small.total < item.total


# -- damaged files left by an earlier run -------------------------------------------------

# What the GUI does at start (DownloadBridge): restore the queue left by the last run. In a
# child: before the sidecar checks, a damaged hash state killed the process (SIGSEGV).
_RESTORE = """
import json, logging
from deskllm.downloads import DownloadManager, TransferOptions
logging.basicConfig(level=logging.INFO)
manager = DownloadManager(options=TransferOptions(backoff_base_s=0.02, backoff_max_s=0.5))
manager.start(restore=True)
out = []
for record in manager.list():
    record = manager.wait(record.id, timeout=120)
    stats = manager.stats(record.id)
    out.append({"state": record.state.value, "error": record.error,
                "fetched": stats and stats.fetched, "rehashed": stats and stats.rehashed})
manager.close()
print(json.dumps(out))
"""


def _with_block_count(state: str, num: int) -> str:
    raw = bytearray(base64.b64decode(state))
    struct.pack_into("<I", raw, 104, num)  # SHA256_CTX.num: bytes waiting in its 64-byte block
    return base64.b64encode(raw).decode("ascii")


def _damage(kind: str, dest: Path) -> Path:
    """Damage what a closed download left on disk; returns the file the log must name."""
    side, part = sidecar_path(dest), part_path(dest)
    raw = json.loads(side.read_text())
    if kind == "block count, rewritten whole":  # a well-formed sidecar with a hostile state
        sidecar = Sidecar.load(side)
        assert sidecar is not None and sidecar.hash_state is not None
        sidecar.hash_state = _with_block_count(sidecar.hash_state, 10**6)
        sidecar.save(side)
    elif kind == "block count, in place":
        raw["hash_state"] = _with_block_count(raw["hash_state"], 10**6)
        side.write_text(json.dumps(raw))
    elif kind == "wrong types":
        raw |= {"bytes_done": str(raw["bytes_done"]), "etag": ["x"]}
        raw.pop("check", None)
        side.write_text(json.dumps(raw))
    elif kind == "truncated":
        side.write_bytes(side.read_bytes()[:40])
    else:
        assert kind == "no partial file"
        part.unlink()
        return part
    return side


@pytest.mark.parametrize(
    "damage",
    ["block count, rewritten whole", "block count, in place", "wrong types", "truncated",
     "no partial file"],
)  # fmt: skip
def test_a_damaged_sidecar_never_stops_the_downloads_restored_at_start(
    damage, hub, managers, models, quant_ladder, deskllm_home, tmp_path
):
    if new_sha256().state() is None:
        pytest.skip("no saved hash state here: the sidecars hold none to damage")
    name = f"{STEM}-Q2_K.gguf"
    size = quant_ladder["Q2_K"].stat().st_size
    dest = models / MAIN_REPO / name
    hub.fault(MAIN_REPO, name, throttle_bytes_per_s=20e6)
    manager = managers()
    manager.add(resolve(MAIN_REPO, "Q2_K"))
    wait_for(lambda: part_path(dest).exists() and part_path(dest).stat().st_size > size // 4)
    manager.close()  # the app closes: the download stays queued, with its partial file
    time.sleep(0.5)  # the server notices the closed connection and stops counting
    on_disk = part_path(dest).stat().st_size
    named = _damage(damage, dest)
    hub.fault(MAIN_REPO, name)
    served = hub.served(MAIN_REPO, name)

    child = subprocess.run(
        [sys.executable, "-c", _RESTORE], env=cli_env(hub, deskllm_home, tmp_path),
        capture_output=True, text=True, timeout=TIMEOUT,
    )  # fmt: skip
    assert child.returncode == 0, f"the restore died ({child.returncode}): {child.stderr}"
    [result] = json.loads(child.stdout)
    assert result["state"] == "done", result["error"]
    assert sha256(dest) == sha256(quant_ladder["Q2_K"])
    assert leftovers(dest) == []
    warnings = [line for line in child.stderr.splitlines() if line.startswith("WARNING")]
    assert any(str(named) in line for line in warnings), child.stderr
    if damage == "block count, rewritten whole":
        # Only the hash state was bad: the bytes on disk are hashed again, not fetched again.
        assert result["rehashed"] == on_disk
        assert result["fetched"] == hub.served(MAIN_REPO, name) - served == size - on_disk
    else:
        # A sidecar that cannot be trusted says nothing about the partial file: start over.
        assert result["fetched"] == size
