"""API keys of remote endpoints: the private-file fallback where no keyring works (this Linux
box has no Secret Service daemon), and a real keyring backend (keyrings.alt's
PlaintextKeyring, chosen the way users choose one: PYTHON_KEYRING_BACKEND)."""

from __future__ import annotations

import json
import os
import stat
import sys
from pathlib import Path

import keyring
import keyring.core
import pytest

from deskllm.remote.keys import KeyStore, keyring_usable

KEY = "sk-test-5b1e9c0d7a"


@pytest.fixture
def backend_named(monkeypatch: pytest.MonkeyPatch, tmp_path: Path):
    """The keyring backend PYTHON_KEYRING_BACKEND names, as the keyring library loads it;
    keyrings.alt's files go to this test's XDG data folder."""

    def load(name: str):
        monkeypatch.setenv("PYTHON_KEYRING_BACKEND", name)
        monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg-data"))
        keyring.core.init_backend()
        return keyring.get_keyring()

    yield load
    monkeypatch.delenv("PYTHON_KEYRING_BACKEND")
    keyring.core.init_backend()


def test_without_a_keyring_the_key_goes_to_a_private_file(backend_named, deskllm_home: Path):
    store = KeyStore(backend_named("keyring.backends.fail.Keyring"))
    assert not store.uses_keyring
    where = store.set("lab", KEY)
    assert str(store.fallback) in where and store.fallback.parent == deskllm_home
    if sys.platform != "win32":
        assert stat.S_IMODE(os.stat(store.fallback).st_mode) == 0o600
    assert store.get("lab") == KEY
    assert KeyStore(backend_named("keyring.backends.fail.Keyring")).get("lab") == KEY  # reread
    store.set("other", "sk-other")
    store.delete("lab")
    assert store.get("lab") is None and store.get("other") == "sk-other"
    assert KEY not in store.fallback.read_text()


def test_a_damaged_key_file_gives_no_keys_and_says_so(backend_named, caplog):
    store = KeyStore(backend_named("keyring.backends.fail.Keyring"))
    store.fallback.write_text("{not json")
    assert store.get("lab") is None
    assert "could not read" in caplog.text
    store.set("lab", KEY)  # written whole again
    assert json.loads(store.fallback.read_text()) == {"lab": KEY}


def test_a_real_keyring_backend_keeps_the_key_and_no_file_does(backend_named, tmp_path: Path):
    backend = backend_named("keyrings.alt.file.PlaintextKeyring")
    assert keyring_usable(backend)
    store = KeyStore()  # the library's choice, as the app makes it
    assert type(store.backend).__name__ == "PlaintextKeyring"
    store.set("lab", KEY)
    assert backend.get_password("deskllm", "remote-endpoint:lab") == KEY
    assert not store.fallback.exists()
    assert KeyStore().get("lab") == KEY
    store.delete("lab")
    assert KeyStore().get("lab") is None


def test_moving_to_a_keyring_drops_the_file_copy(backend_named):
    KeyStore(backend_named("keyring.backends.fail.Keyring")).set("lab", "sk-old")
    store = KeyStore(backend_named("keyrings.alt.file.PlaintextKeyring"))
    assert store.get("lab") == "sk-old"  # found in the file while the keyring has none
    store.set("lab", KEY)
    assert store.get("lab") == KEY
    assert "lab" not in json.loads(store.fallback.read_text())
