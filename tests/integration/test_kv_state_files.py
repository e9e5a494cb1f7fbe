"""KV-state files written by the real engine: tampering, deleting a conversation, fuzzing.

One real state file is written per module (a short chat, then close); tests mutate copies.
"""

from __future__ import annotations

import shutil
import tracemalloc
import uuid
from dataclasses import dataclass, replace
from pathlib import Path

import pytest
from engine_helpers import collect
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from deskllm.engine.client import EngineClient
from deskllm.engine.domain import ChatMessage, LoadParams, Sampling
from deskllm.engine.kv_cache import (
    KvState,
    KvStateCache,
    delete_conversation_states,
    read_state_file,
)

SHORT = Sampling(temperature=0.0, max_tokens=8, seed=1)
BUDGET = 64 << 20  # the disk budget of these tests' caches (bytes)


@dataclass(frozen=True)
class RealState:
    params: LoadParams
    kv_dir: Path
    key: str
    guard: str
    file: Path
    state: KvState
    raw: bytes  # the file as written then: later tests run engines on the same folder


def chat(client: EngineClient, cid: str, text: str):
    return collect(client.chat(cid, [ChatMessage("user", text)], SHORT)).done


@pytest.fixture(scope="module")
def real_state(tmp_path_factory, starter_model, extra_bufts) -> RealState:
    kv_dir = tmp_path_factory.mktemp("kv")
    params = LoadParams(str(starter_model), n_ctx=2048, n_threads=2,
                        use_extra_bufts=extra_bufts, kv_disk_dir=str(kv_dir))  # fmt: skip
    key = uuid.uuid4().hex
    with EngineClient() as client:
        client.load(params)
        chat(client, key, "Name three colours of the sea.")
    (file,) = kv_dir.glob(f"{key}.*.kv")  # written when the engine closed
    guard = file.name.split(".")[1]
    raw = file.read_bytes()
    state = read_state_file(file, key, guard, BUDGET)
    return RealState(params, kv_dir, key, guard, file, state, raw)


def copy_state(real: RealState, to: Path, key: str, state: KvState | None = None) -> Path:
    """The real state under another key in `to`, re-encoded (valid checksum) when `state`."""
    cache = KvStateCache(real.guard, 0, to, BUDGET)
    cache.put(key, state or real.state)
    cache.wait_written()
    return cache._path(key)


# Restore ---------------------------------------------------------------------------------------
def test_a_state_with_a_valid_checksum_but_impossible_tokens_is_not_restored(
    real_state, capfd
):
    kv_dir = Path(real_state.params.kv_disk_dir)
    tokens = real_state.state.tokens
    bad_token, short = uuid.uuid4().hex, uuid.uuid4().hex
    files = [
        copy_state(real_state, kv_dir, bad_token,
                   KvState((*tokens[:-1], 10**6), real_state.state.data)),  # fmt: skip
        # One token fewer than the cells in llama.cpp's data: positions and tokens disagree.
        copy_state(real_state, kv_dir, short, KvState(tokens[:-1], real_state.state.data)),
    ]
    capfd.readouterr()
    with EngineClient() as client:
        client.load(real_state.params)
        for cid in (bad_token, short):
            # Another prompt first: the slot then holds no more of this one than a state would.
            chat(client, uuid.uuid4().hex, "Say hello in French.")
            done = chat(client, cid, "Name three colours of the sea.")
            assert done.metrics.restored_from is None
            assert done.metrics.cached_tokens < done.metrics.prompt_tokens // 2
        chat(client, uuid.uuid4().hex, "Say hello in French.")
        again = chat(client, real_state.key, "Name three colours of the sea.")
        assert again.metrics.restored_from == "disk"  # the untouched state still restores
    log = capfd.readouterr().err
    assert f"{files[0]}" in log and "outside the model's vocabulary" in log
    assert f"{files[1]}" in log and "positions for" in log


# Deleting a conversation ----------------------------------------------------------------------
def test_forget_drops_a_conversation_from_ram_and_disk(real_state, tmp_path):
    params = replace(real_state.params, kv_disk_dir=str(tmp_path))
    kept, in_ram, current = (uuid.uuid4().hex for _ in range(3))
    copy_state(real_state, tmp_path, in_ram)  # also an older state of it on disk
    with EngineClient() as client:
        client.load(params)
        for cid in (kept, in_ram, current):
            chat(client, cid, f"Hello from {cid}.")
        assert set(client.status().cached_conversations) >= {kept, in_ram}
        client.forget(in_ram)
        client.forget(current)  # the one the context holds now
    # Closing wrote every state left in RAM (and the context's) to disk: not the forgotten.
    on_disk = {p.name.split(".")[0] for p in tmp_path.glob("*.kv")}
    assert on_disk == {kept}
    with EngineClient() as client:
        client.load(params)
        assert chat(client, in_ram, "Hello again.").metrics.restored_from is None
        assert chat(client, kept, f"Hello from {kept}.").metrics.restored_from == "disk"


def test_deleting_states_without_an_engine(real_state, tmp_path):
    for d in (tmp_path / "a", tmp_path / "b"):
        copy_state(real_state, d, real_state.key)
        copy_state(real_state, d, "other")
    shutil.copy(real_state.file, tmp_path / "a" / real_state.file.name.replace(
        real_state.guard, "0" * len(real_state.guard)))  # the same conversation, older model
    assert delete_conversation_states(tmp_path / "a", real_state.key) == 2
    assert [p.name.split(".")[0] for p in (tmp_path / "a").iterdir()] == ["other"]
    assert len(list((tmp_path / "b").iterdir())) == 2


# Fuzzing ---------------------------------------------------------------------------------------
HEADER_FIELDS = {"version": (4, 2), "n_guard": (6, 2), "n_key": (8, 2), "n_tokens": (10, 8),
                 "n_data": (18, 8)}  # fmt: skip


@st.composite
def mutations(draw, size: int):
    """A list of edits of a file of `size` bytes: flipped bytes, a cut, an appended tail,
    a header field set to any value, a range copied over another."""
    kind = draw(st.sampled_from(["flip", "cut", "append", "field", "splice"]))
    if kind == "flip":
        spots = st.tuples(st.integers(0, size - 1), st.integers(1, 255))
        return kind, draw(st.lists(spots, min_size=1, max_size=8))
    if kind == "cut":
        return kind, draw(st.integers(0, size - 1))
    if kind == "append":
        return kind, draw(st.binary(min_size=1, max_size=4096))
    if kind == "field":
        name = draw(st.sampled_from(sorted(HEADER_FIELDS)))
        width = HEADER_FIELDS[name][1]
        return kind, (name, draw(st.integers(0, 256 ** width - 1)))
    start, length = draw(st.integers(0, size - 1)), draw(st.integers(1, 4096))
    return kind, (start, length, draw(st.integers(0, size - 1)))


def mutate(raw: bytes, mutation) -> bytes:
    kind, arg = mutation
    data = bytearray(raw)
    if kind == "flip":
        for offset, xor in arg:
            data[offset] ^= xor
    elif kind == "cut":
        del data[arg:]
    elif kind == "append":
        data += arg
    elif kind == "field":
        offset, width = HEADER_FIELDS[arg[0]]
        data[offset : offset + width] = arg[1].to_bytes(width, "little")
    else:
        start, length, to = arg
        piece = data[start : start + length]
        data[to : to + len(piece)] = piece
    return bytes(data)


@pytest.fixture(scope="module")
def original(real_state) -> bytes:
    return real_state.raw


@settings(
    max_examples=150, deadline=2000, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(data=st.data())
def test_a_mutated_state_file_is_never_used(real_state, original, tmp_path, data):
    mutation = data.draw(mutations(len(original)))
    damaged = mutate(original, mutation)
    d = tmp_path / uuid.uuid4().hex
    d.mkdir()
    path = d / real_state.file.name
    path.write_bytes(damaged)
    cache = KvStateCache(real_state.guard, 0, d, BUDGET, max_tokens=2048)
    tracemalloc.start()
    try:
        got = cache.get(real_state.key)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    if damaged == original:  # a splice or flip can leave the bytes as they were
        assert got == (real_state.state, "disk")
        return
    assert got is None, f"{mutation[0]} mutation was accepted"
    assert not path.exists()  # dropped, not tried again at the next start
    # Reading costs about three copies of the file (bytes, state data, tokens), no more.
    assert peak <= 3 * len(original) + (1 << 20), peak
