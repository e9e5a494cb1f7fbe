"""The endpoint registry: names, URLs and presets checked; rows in SQLite (migration m006)
that round-trip every field; no key anywhere in them."""

from __future__ import annotations

from pathlib import Path

import pytest

from deskllm.database import open_database
from deskllm.remote.endpoint import (
    Endpoint,
    EndpointInvalid,
    ModelPrice,
    check_name,
    normalize_url,
    resolve_url,
)
from deskllm.remote.presets import PRESETS
from deskllm.store.remote_endpoints import EndpointNotFound, EndpointRegistry


def test_migration_creates_the_table_without_a_key_column(tmp_path: Path):
    db = open_database(tmp_path / "d.sqlite3")
    columns = set(db["remote_endpoints"].columns_dict)
    assert columns == {"name", "base_url", "preset", "allow_routing", "prices",
                       "connect_timeout_s", "read_timeout_s", "created_at"}  # fmt: skip
    assert not any("key" in c for c in columns)


@pytest.mark.parametrize(
    ("given", "stored"),
    [
        ("http://10.0.0.5:8080", "http://10.0.0.5:8080/v1"),
        ("http://10.0.0.5:8080/", "http://10.0.0.5:8080/v1"),
        ("https://api.example.com/openai/v1/", "https://api.example.com/openai/v1"),
        ("  http://box:1234/v1 ", "http://box:1234/v1"),
    ],
)
def test_urls_are_stored_as_base_urls(given: str, stored: str):
    assert normalize_url(given) == stored


@pytest.mark.parametrize("url", ["ftp://x/v1", "box:8080", "http:///v1", "http://u:sk-1@box/v1"])
def test_bad_urls_are_refused(url: str):
    with pytest.raises(EndpointInvalid):
        normalize_url(url)


@pytest.mark.parametrize("name", ["", "a/b", "with space", "-dash-first", "x" * 65])
def test_names_that_cannot_be_addressed_are_refused(name: str):
    with pytest.raises(EndpointInvalid):
        check_name(name)


def test_presets_give_default_addresses():
    assert resolve_url(None, "ollama") == "http://127.0.0.1:11434/v1"
    assert resolve_url(None, "deskllm") == "http://127.0.0.1:8383/v1"
    assert {"llama-server", "vllm", "ollama", "lmstudio", "deskllm", "openai"} <= set(PRESETS)
    with pytest.raises(EndpointInvalid, match="no default address"):
        resolve_url(None, "openai")
    with pytest.raises(EndpointInvalid, match="unknown preset"):
        resolve_url("http://x", "nonesuch")


def test_registry_round_trip(tmp_path: Path):
    registry = EndpointRegistry(open_database(tmp_path / "d.sqlite3"))
    lab = Endpoint("lab", "http://10.0.0.5:8080/v1", "llama-server", allow_routing=True,
                   connect_timeout_s=2.5, read_timeout_s=30)  # fmt: skip
    registry.add(lab)
    registry.add(Endpoint("cloud", "https://api.example.com/v1"))
    assert registry.get("lab") == lab
    assert [e.name for e in registry.all()] == ["lab", "cloud"]
    assert registry.get("cloud").allow_routing is False  # routing is opt-in
    with pytest.raises(EndpointInvalid, match="exists already"):
        registry.add(Endpoint("lab", "http://elsewhere/v1"))
    priced = registry.set_price("cloud", "big-model", ModelPrice(0.5, 1.5))
    assert EndpointRegistry(registry.db).get("cloud").prices == priced.prices
    assert registry.remove("lab") and not registry.remove("lab")
    with pytest.raises(EndpointNotFound, match="cloud"):
        registry.get("lab")
