"""KvStateCache: an LRU in RAM that spills to disk, with a guard on every saved state."""

import os
import stat
import struct
import sys
import threading
import time
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from deskllm.engine import kv_cache
from deskllm.engine.kv_cache import (
    KvState,
    KvStateCache,
    delete_conversation_states,
    make_guard,
    model_identity,
)
from deskllm.engine.slots import common_prefix

GUARD = make_guard(model={"path": "/m.gguf", "size": 1}, n_ctx=4096, kv_type="f16")


def state(seed: int, n_tokens: int = 10, n_data: int = 1000) -> KvState:
    """A distinct state of size 4 * n_tokens + n_data bytes."""
    return KvState(
        tuple(range(seed, seed + n_tokens)), bytes((seed + i) % 256 for i in range(n_data))
    )


SIZE = state(0).size_bytes  # 1040


def disk_files(d: Path) -> list[Path]:
    return sorted(d.glob("*.kv"))


def test_state_size_counts_tokens_and_data():
    assert state(0, n_tokens=3, n_data=7).size_bytes == 3 * 4 + 7


def test_make_guard_is_stable_and_sensitive():
    a = make_guard(model="x", n_ctx=1, kv_type="f16")
    assert a == make_guard(kv_type="f16", n_ctx=1, model="x")  # order of parts does not matter
    assert a != make_guard(model="x", n_ctx=2, kv_type="f16")
    assert a != make_guard(model="x", n_ctx=1, kv_type="q8_0")


def test_model_identity_changes_when_the_file_changes(tmp_path):
    f = tmp_path / "m.gguf"
    f.write_bytes(b"a" * 10)
    before = model_identity(str(f))
    assert before["path"] == os.path.realpath(f)
    f.write_bytes(b"b" * 11)
    assert model_identity(str(f)) != before
    assert make_guard(model=model_identity(str(f))) != make_guard(model=before)


def test_ram_only_put_and_get():
    cache = KvStateCache(GUARD, ram_budget_bytes=10 * SIZE, disk_dir=None, disk_budget_bytes=0)
    cache.put("a", state(1))
    assert cache.get("a") == (state(1), "ram")
    assert cache.get("missing") is None
    assert cache.keys() == ["a"]


def test_put_replaces_the_state_of_a_key():
    cache = KvStateCache(GUARD, 10 * SIZE, None, 0)
    cache.put("a", state(1))
    cache.put("a", state(2))
    assert cache.get("a") == (state(2), "ram")
    assert cache.keys() == ["a"]


def test_ram_lru_within_budget_without_disk_drops_the_least_recently_used():
    cache = KvStateCache(GUARD, ram_budget_bytes=2 * SIZE, disk_dir=None, disk_budget_bytes=0)
    cache.put("a", state(1))
    cache.put("b", state(2))
    assert cache.get("a")[1] == "ram"  # "a" is now the most recently used
    cache.put("c", state(3))  # over budget: "b" (least recently used) goes
    assert cache.get("b") is None
    assert cache.get("a") == (state(1), "ram")
    assert cache.get("c") == (state(3), "ram")
    assert sorted(cache.keys()) == ["a", "c"]


def test_ram_lru_spills_to_disk(tmp_path):
    cache = KvStateCache(GUARD, 2 * SIZE, tmp_path, disk_budget_bytes=100 * SIZE)
    cache.put("a", state(1))
    cache.wait_written()
    cache.put("b", state(2))
    cache.wait_written()
    assert disk_files(tmp_path) == []  # within the RAM budget nothing is written
    cache.put("c", state(3))
    cache.wait_written()
    assert len(disk_files(tmp_path)) == 1  # "a" spilled
    assert cache.get("a") == (state(1), "disk")
    assert cache.get("b") == (state(2), "ram")
    assert cache.get("c") == (state(3), "ram")
    assert sorted(cache.keys()) == ["a", "b", "c"]


def test_state_larger_than_ram_budget_goes_straight_to_disk(tmp_path):
    cache = KvStateCache(
        GUARD, ram_budget_bytes=SIZE // 2, disk_dir=tmp_path, disk_budget_bytes=10 * SIZE
    )
    cache.put("big", state(5))
    cache.wait_written()
    assert cache.get("big") == (state(5), "disk")


def test_state_larger_than_both_budgets_is_not_kept(tmp_path):
    cache = KvStateCache(GUARD, SIZE // 2, tmp_path, disk_budget_bytes=SIZE // 2)
    cache.put("big", state(5))
    cache.wait_written()
    assert cache.get("big") is None
    assert disk_files(tmp_path) == []


def test_keys_are_the_callers_keys_for_states_on_disk(tmp_path):
    cache = KvStateCache(GUARD, 0, tmp_path, 10 * SIZE)
    cache.put("conv1", state(1))
    cache.wait_written()
    cache.put("conv2", state(2))
    cache.wait_written()
    keys = cache.keys()
    assert sorted(keys) == ["conv1", "conv2"]
    assert [k for k in keys if GUARD in k] == []


def test_keys_do_not_list_a_key_twice(tmp_path):
    cache = KvStateCache(GUARD, 10 * SIZE, tmp_path, 10 * SIZE)
    cache.put("a", state(1))
    cache.wait_written()
    cache.flush_to_disk()  # "a" is now both in RAM and on disk
    assert cache.keys() == ["a"]


def test_flush_to_disk_then_restart_loads_from_disk(tmp_path):
    cache = KvStateCache(GUARD, 10 * SIZE, tmp_path, 10 * SIZE)
    cache.put("a", state(1))
    cache.wait_written()
    cache.put("b", state(2, n_tokens=0, n_data=17))
    cache.wait_written()
    assert disk_files(tmp_path) == []
    cache.flush_to_disk()
    del cache

    restarted = KvStateCache(GUARD, 10 * SIZE, tmp_path, 10 * SIZE)
    assert sorted(restarted.keys()) == ["a", "b"]
    assert restarted.get("a") == (state(1), "disk")
    assert restarted.get("b") == (state(2, n_tokens=0, n_data=17), "disk")


def test_a_different_guard_is_never_returned(tmp_path):
    cache = KvStateCache(GUARD, 0, tmp_path, 10 * SIZE)
    cache.put("a", state(1))
    cache.wait_written()
    assert cache.get("a") is not None

    other_guard = make_guard(model={"path": "/m.gguf", "size": 2}, n_ctx=4096, kv_type="f16")
    other = KvStateCache(other_guard, 10 * SIZE, tmp_path, 10 * SIZE)
    assert other.get("a") is None
    assert other.keys() == []
    # the other cache's own states do not mix with the first one's either
    other.put("a", state(9))
    other.wait_written()
    other.flush_to_disk()
    assert cache.get("a") == (state(1), "disk")
    assert KvStateCache(other_guard, 0, tmp_path, 10 * SIZE).get("a") == (state(9), "disk")


def test_discard_removes_from_ram_and_disk(tmp_path):
    cache = KvStateCache(GUARD, 10 * SIZE, tmp_path, 10 * SIZE)
    cache.put("a", state(1))
    cache.wait_written()
    cache.flush_to_disk()
    cache.discard("a")
    assert cache.get("a") is None
    assert disk_files(tmp_path) == []
    assert KvStateCache(GUARD, 10 * SIZE, tmp_path, 10 * SIZE).get("a") is None
    cache.discard("never-there")  # no error


def test_disk_budget_evicts_the_oldest(tmp_path):
    file_size = SIZE + 128  # a state's file: its bytes plus a small header
    cache = KvStateCache(GUARD, 0, tmp_path, disk_budget_bytes=3 * file_size)
    for i, key in enumerate(["a", "b", "c"]):
        cache.put(key, state(i))
        cache.wait_written()
        # make the age order unambiguous whatever the file system's timestamp resolution
        os.utime(cache._path(key), ns=(1_000_000_000 * (i + 1),) * 2)
    assert sorted(cache.keys()) == ["a", "b", "c"]

    cache.put("d", state(3))  # over budget: the oldest ("a") goes
    cache.wait_written()
    assert sorted(cache.keys()) == ["b", "c", "d"]
    assert cache.get("a") is None
    assert sum(p.stat().st_size for p in disk_files(tmp_path)) <= 3 * file_size


def test_reading_from_disk_makes_a_state_recent(tmp_path):
    file_size = SIZE + 128
    cache = KvStateCache(GUARD, 0, tmp_path, disk_budget_bytes=2 * file_size)
    cache.put("a", state(1))
    cache.wait_written()
    cache.put("b", state(2))
    cache.wait_written()
    os.utime(cache._path("a"), ns=(1_000_000_000,) * 2)
    os.utime(cache._path("b"), ns=(2_000_000_000,) * 2)
    assert cache.get("a") == (state(1), "disk")  # "a" is used again: now "b" is the oldest
    cache.put("c", state(3))
    cache.wait_written()
    assert sorted(cache.keys()) == ["a", "c"]


def test_the_state_just_written_is_evicted_last_even_with_equal_timestamps(tmp_path):
    file_size = SIZE + 128
    cache = KvStateCache(GUARD, 0, tmp_path, disk_budget_bytes=2 * file_size)
    cache.put("a", state(1))
    cache.wait_written()
    cache.put("b", state(2))
    cache.wait_written()
    future = (4_000_000_000_000_000_000,) * 2  # older files that look as new as any (clock skew)
    os.utime(cache._path("a"), ns=future)
    os.utime(cache._path("b"), ns=future)
    cache.put("c", state(3))
    cache.wait_written()
    assert cache.get("c") == (state(3), "disk")
    assert len(cache.keys()) == 2


def test_disk_budget_counts_states_of_other_guards(tmp_path):
    file_size = SIZE + 128
    old = KvStateCache("oldguard", 0, tmp_path, 2 * file_size)
    old.put("x", state(1))
    old.wait_written()
    old.put("y", state(2))
    old.wait_written()
    cache = KvStateCache(GUARD, 0, tmp_path, 2 * file_size)
    cache.put("a", state(3))
    cache.wait_written()
    assert cache.get("a") == (state(3), "disk")
    assert sum(p.stat().st_size for p in disk_files(tmp_path)) <= 2 * file_size


def write_then_damage(tmp_path: Path, damage) -> tuple[KvStateCache, Path]:
    cache = KvStateCache(GUARD, 0, tmp_path, 10 * SIZE)
    cache.put("a", state(1, n_tokens=50, n_data=500))
    cache.wait_written()
    path = cache._path("a")
    assert path.is_file()
    path.write_bytes(damage(path.read_bytes()))
    return KvStateCache(GUARD, 0, tmp_path, 10 * SIZE), path


def test_truncated_in_the_data_is_ignored_and_removed(tmp_path):
    cache, path = write_then_damage(tmp_path, lambda raw: raw[:-100])
    assert cache.get("a") is None
    assert not path.exists()
    assert cache.keys() == []


def test_truncated_in_the_tokens_is_ignored(tmp_path):
    cache, path = write_then_damage(tmp_path, lambda raw: raw[:40])
    assert cache.get("a") is None
    assert not path.exists()


def test_truncated_header_is_ignored(tmp_path):
    cache, path = write_then_damage(tmp_path, lambda raw: raw[:9])
    assert cache.get("a") is None
    assert not path.exists()


def test_empty_file_is_ignored(tmp_path):
    cache, _ = write_then_damage(tmp_path, lambda raw: b"")
    assert cache.get("a") is None


def test_bad_magic_is_ignored(tmp_path):
    cache, _ = write_then_damage(tmp_path, lambda raw: b"XXXXX\n" + raw[6:])
    assert cache.get("a") is None


def test_absurd_token_count_is_ignored_quickly(tmp_path):
    def huge_count(raw: bytes) -> bytes:
        return raw[:6] + (2**62).to_bytes(8, "little") + raw[14:]

    cache, _ = write_then_damage(tmp_path, huge_count)
    assert cache.get("a") is None


def test_trailing_garbage_is_ignored(tmp_path):
    cache, _ = write_then_damage(tmp_path, lambda raw: raw + b"\0" * 64)
    assert cache.get("a") is None


def test_a_damaged_file_does_not_affect_other_states(tmp_path):
    cache = KvStateCache(GUARD, 0, tmp_path, 10 * SIZE)
    cache.put("good", state(1))
    cache.wait_written()
    cache.put("bad", state(2))
    cache.wait_written()
    cache._path("bad").write_bytes(b"garbage")
    restarted = KvStateCache(GUARD, 0, tmp_path, 10 * SIZE)
    assert restarted.get("bad") is None
    assert restarted.get("good") == (state(1), "disk")


def test_no_temporary_files_are_left_behind(tmp_path):
    cache_dir = tmp_path / "cache"
    cache = KvStateCache(GUARD, 0, cache_dir, 10 * SIZE)
    for i in range(5):
        cache.put(f"k{i}", state(i))
        cache.wait_written()
    names = [p.name for p in cache_dir.iterdir()]
    assert len(names) == 5
    assert [n for n in names if not n.endswith(f".{GUARD}.kv")] == []


def test_keys_with_path_characters_stay_inside_the_cache_dir(tmp_path):
    cache_dir = tmp_path / "cache"
    cache = KvStateCache(GUARD, 0, cache_dir, 10 * SIZE)
    cache.put("../../escape", state(1))
    cache.wait_written()
    assert cache.get("../../escape") == (state(1), "disk")
    assert [p.parent for p in tmp_path.rglob("*.kv")] == [cache_dir]


# What a state file says about itself ----------------------------------------------------------
def test_the_guard_is_inside_the_file_not_only_in_its_name(tmp_path):
    cache = KvStateCache(GUARD, 0, tmp_path, 10 * SIZE)
    cache.put("a", state(1))
    cache.wait_written()
    other_guard = make_guard(model="another model", n_ctx=4096, kv_type="f16")
    other = KvStateCache(other_guard, 0, tmp_path, 10 * SIZE)
    cache._path("a").rename(other._path("a"))  # renamed by hand (or by a buggy old version)
    assert other.get("a") is None
    assert not other._path("a").exists()


def test_a_state_renamed_to_another_conversation_is_refused(tmp_path):
    cache = KvStateCache(GUARD, 0, tmp_path, 10 * SIZE)
    cache.put("a", state(1))
    cache.wait_written()
    cache._path("a").rename(cache._path("b"))
    assert cache.get("b") is None


def flip(offset_from_end: int):
    def damage(raw: bytes) -> bytes:
        i = len(raw) - offset_from_end
        return raw[:i] + bytes([raw[i] ^ 0x01]) + raw[i + 1 :]

    return damage


def test_a_flipped_bit_in_the_state_data_is_detected(tmp_path, caplog):
    cache, path = write_then_damage(tmp_path, flip(10))  # inside llama.cpp's data
    with caplog.at_level("WARNING", logger="deskllm.engine"):
        assert cache.get("a") is None
    assert not path.exists()
    assert str(path) in caplog.text and "checksum" in caplog.text


def test_a_flipped_bit_in_the_tokens_is_detected(tmp_path):
    cache, _ = write_then_damage(tmp_path, flip(500 + 4 * 10))  # 500 data bytes, then tokens
    assert cache.get("a") is None


def test_sizes_shifted_between_tokens_and_data_are_detected(tmp_path):
    # One token more and four data bytes less keep the file's length: only the digest of the
    # header tells them apart.
    good = KvStateCache(GUARD, 0, tmp_path, 10 * SIZE)
    good.put("a", state(1, n_tokens=50, n_data=500))
    good.wait_written()
    path = good._path("a")
    raw = bytearray(path.read_bytes())
    n_tokens, n_data = struct.unpack_from("<QQ", raw, 10)
    struct.pack_into("<QQ", raw, 10, n_tokens + 1, n_data - 4)
    path.write_bytes(bytes(raw))
    assert KvStateCache(GUARD, 0, tmp_path, 10 * SIZE).get("a") is None


def test_a_file_larger_than_the_disk_budget_is_refused_unread(tmp_path):
    cache = KvStateCache(GUARD, 0, tmp_path, 10 * SIZE)
    cache.put("a", state(1))
    cache.wait_written()
    path = cache._path("a")
    with path.open("ab") as fh:
        fh.truncate(1 << 40)  # a sparse terabyte: reading it whole would exhaust memory
    assert cache.get("a") is None
    assert not path.exists()


def test_more_tokens_than_the_context_holds_is_refused(tmp_path):
    writer = KvStateCache(GUARD, 0, tmp_path, 10 * SIZE)
    writer.put("a", state(1, n_tokens=20))
    writer.put("b", state(1, n_tokens=20))
    writer.wait_written()
    assert KvStateCache(GUARD, 0, tmp_path, 10 * SIZE, max_tokens=19).get("a") is None
    assert KvStateCache(GUARD, 0, tmp_path, 10 * SIZE, max_tokens=20).get("b") is not None


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX permissions")
def test_state_files_are_private(tmp_path):
    cache = KvStateCache(GUARD, 0, tmp_path / "kv", 10 * SIZE)
    leftover = cache._path("a").with_name(cache._path("a").name + ".tmp")
    leftover.write_bytes(b"from a crash")
    leftover.chmod(0o644)
    cache.put("a", state(1))
    cache.wait_written()
    assert stat.S_IMODE(cache._path("a").stat().st_mode) == 0o600
    assert stat.S_IMODE((tmp_path / "kv").stat().st_mode) == 0o700
    assert not leftover.exists()


def test_delete_conversation_states_removes_every_guard_and_nothing_else(tmp_path):
    kv = tmp_path / "kv"
    for guard in (GUARD, "oldguard"):
        cache = KvStateCache(guard, 0, kv, 10 * SIZE)
        for key in ("conv-1", "conv-10", "conv-1x"):
            cache.put(key, state(1))
            cache.wait_written()
    (kv / f"conv-1.{GUARD}.kv.tmp").write_bytes(b"half written")
    assert delete_conversation_states(kv, "conv-1") == 3
    left = sorted(p.name.split(".")[0] for p in kv.iterdir())
    assert left == ["conv-10", "conv-10", "conv-1x", "conv-1x"]
    assert KvStateCache(GUARD, 0, kv, 10 * SIZE).get("conv-1") is None
    assert KvStateCache(GUARD, 0, kv, 10 * SIZE).get("conv-10") is not None
    assert delete_conversation_states(tmp_path / "no-such-dir", "conv-1") == 0


# Writing in the background ---------------------------------------------------------------------
# The writer's file for a key is made blocking with a FIFO as its temporary file: opening it
# to write waits (in the kernel) until the test opens it to read.
def block_write_of(cache: KvStateCache, key: str) -> Path:
    path = cache._path(key)
    fifo = path.with_name(path.name + ".tmp")
    os.mkfifo(fifo)
    return fifo


def in_thread(fn) -> threading.Thread:
    thread = threading.Thread(target=fn, daemon=True)
    thread.start()
    return thread


fifo_only = pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs FIFOs")


@fifo_only
def test_a_state_pushed_out_of_ram_is_written_without_waiting_for_the_disk(tmp_path):
    cache = KvStateCache(GUARD, SIZE, tmp_path, 10 * SIZE)
    fifo = block_write_of(cache, "a")
    cache.put("a", state(1))
    putting = in_thread(lambda: cache.put("b", state(2)))  # pushes "a" out of RAM
    putting.join(10)
    assert not putting.is_alive()  # the disk write of "a" is blocked: put did not wait for it
    # Until its file is written the state is served from memory.
    assert cache.get("a") == (state(1), "ram")
    assert sorted(cache.keys()) == ["a", "b"]
    written = fifo.read_bytes()  # lets the writer go on
    cache.wait_written()
    # What the writer wrote is the state's file: put it where the FIFO was renamed to.
    path = cache._path("a")
    path.unlink()
    path.write_bytes(written)
    assert cache.get("a") == (state(1), "disk")


@fifo_only
def test_a_state_discarded_while_it_is_written_leaves_no_file(tmp_path):
    cache = KvStateCache(GUARD, 0, tmp_path / "kv", 10 * SIZE)
    fifo = block_write_of(cache, "a")
    cache.put("a", state(1))
    deadline = time.monotonic() + 10
    while cache._writing != "a" and time.monotonic() < deadline:  # the writer took it
        time.sleep(0.01)
    cache.discard("a")  # the conversation was deleted while its state was being written
    assert cache.get("a") is None
    fifo.read_bytes()
    cache.wait_written()
    assert list((tmp_path / "kv").iterdir()) == []
    assert cache.get("a") is None and cache.keys() == []


@fifo_only
def test_put_waits_for_the_writer_once_a_ram_budget_of_states_is_queued(tmp_path):
    cache = KvStateCache(GUARD, SIZE, tmp_path, 10 * SIZE)
    fifo = block_write_of(cache, "a")
    cache.put("a", state(1))
    cache.put("b", state(2))  # "a" queued (its write blocked): one state may wait
    putting = in_thread(lambda: cache.put("c", state(3)))  # "b" queued too: over the budget
    putting.join(0.5)
    assert putting.is_alive()
    fifo.read_bytes()
    putting.join(10)
    assert not putting.is_alive()
    cache.wait_written()
    assert cache.get("b") == (state(2), "disk")
    assert cache.get("c") == (state(3), "ram")


def test_the_writer_thread_ends_when_idle_and_the_next_state_pushed_out_starts_another(
    tmp_path, monkeypatch
):
    # Each model load makes a cache: an idle writer must not stay behind for every one.
    monkeypatch.setattr(kv_cache, "_WRITER_IDLE_S", 0.2)
    cache = KvStateCache(GUARD, 0, tmp_path, 10 * SIZE)
    cache.put("a", state(1))
    writer = cache._writer
    writer.join(10)
    assert not writer.is_alive()
    assert cache.get("a") == (state(1), "disk")
    cache.put("b", state(2))
    cache.wait_written()
    assert cache.get("b") == (state(2), "disk")


@given(st.lists(st.integers(0, 3), max_size=40), st.lists(st.integers(0, 3), max_size=40))
def test_the_shared_prefix_by_halving_is_the_common_prefix(a, b):
    assert kv_cache._shared_prefix(tuple(a), tuple(b)) == common_prefix(a, b)  # token by token


def test_the_states_in_ram_answer_a_prompt_by_its_longest_shared_prefix(tmp_path):
    cache = KvStateCache(GUARD, 100 * SIZE, tmp_path, 100 * SIZE)
    system = tuple(range(100, 130))
    cache.put("a", KvState(system + (1, 2, 3), b"a"))
    cache.put("b", KvState(system + (1, 2, 9, 9), b"b"))
    cache.put("c", KvState((7,) + system, b"c"))
    found = cache.longest_prefix([*system, 1, 2, 3, 4])
    assert found is not None and found[0].data == b"a" and found[1] == 33
    found = cache.longest_prefix([*system, 5])
    assert found is not None and found[1] == 30 and found[0].data in (b"a", b"b")
    assert cache.longest_prefix([8, 8]) is None
