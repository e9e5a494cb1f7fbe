"""KV-state files written by the real engine: tampering, deleting a conversation.

One real state file is written per module (a short chat, then close); tests mutate copies.
"""

from __future__ import annotations

import shutil
import uuid
from dataclasses import dataclass, replace
from pathlib import Path

import pytest
from engine_helpers import collect

from deskllm.engine.client import EngineClient
from deskllm.engine.kv_cache import (
    KvState,
    KvStateCache,
    delete_conversation_states,
    read_state_file,
)
from deskllm.engine.protocol import ChatMessage, LoadParams, Sampling

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
    state = read_state_file(file, key, guard, BUDGET)
    return RealState(params, kv_dir, key, guard, file, state)


def copy_state(real: RealState, to: Path, key: str, state: KvState | None = None) -> Path:
    """The real state under another key in `to`, re-encoded (valid checksum) when `state`."""
    cache = KvStateCache(real.guard, 0, to, BUDGET)
    cache.put(key, state or real.state)
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
            done = chat(client, cid, "Name three colours of the sea.")
            assert done.metrics.restored_from is None and done.metrics.cached_tokens == 0
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
