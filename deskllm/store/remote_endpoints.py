"""The registry of remote endpoints (deskllm.remote): a row per endpoint in SQLite, without
its API key, which the caller keeps in a `KeyStore`."""

from __future__ import annotations

import json
import time
from dataclasses import replace
from typing import Any

from sqlite_utils import Database
from sqlite_utils.db import NotFoundError

from deskllm.remote.endpoint import Endpoint, EndpointInvalid, ModelPrice, check_name

TABLE = "remote_endpoints"


class EndpointNotFound(LookupError):
    pass


class EndpointRegistry:
    def __init__(self, db: Database) -> None:
        self.db = db

    def add(self, endpoint: Endpoint, *, replace_existing: bool = False) -> Endpoint:
        """Register `endpoint`; EndpointInvalid if the name is taken (and not replaced)."""
        check_name(endpoint.name)
        if not replace_existing and self.find(endpoint.name) is not None:
            raise EndpointInvalid(f"an endpoint named {endpoint.name} exists already; remove "
                                  "it first")  # fmt: skip
        self.db[TABLE].insert(_row(endpoint), replace=True)
        return endpoint

    def find(self, name: str) -> Endpoint | None:
        try:
            return _endpoint(self.db[TABLE].get(name))
        except NotFoundError:
            return None

    def get(self, name: str) -> Endpoint:
        endpoint = self.find(name)
        if endpoint is None:
            known = ", ".join(e.name for e in self.all()) or "none registered"
            raise EndpointNotFound(f"no remote endpoint named {name!r} ({known})")
        return endpoint

    def all(self) -> list[Endpoint]:
        return [_endpoint(row) for row in self.db[TABLE].rows_where(order_by="created_at")]

    def remove(self, name: str) -> bool:
        """Whether there was one to remove."""
        if self.find(name) is None:
            return False
        self.db[TABLE].delete(name)
        return True

    def set_price(self, name: str, model: str, price: ModelPrice) -> Endpoint:
        endpoint = self.get(name)
        updated = replace(endpoint, prices=endpoint.prices | {model: price})
        self.db[TABLE].update(name, {"prices": _prices_json(updated.prices)})
        return updated

    def set_allow_routing(self, name: str, allow: bool) -> Endpoint:
        endpoint = self.get(name)
        self.db[TABLE].update(name, {"allow_routing": int(allow)})
        return replace(endpoint, allow_routing=allow)

    def routing_targets(self) -> list[Endpoint]:
        """The endpoints the router may use: only those the user allowed."""
        return [e for e in self.all() if e.allow_routing]


def _row(e: Endpoint) -> dict[str, Any]:
    return {
        "name": e.name,
        "base_url": e.base_url,
        "preset": e.preset,
        "allow_routing": int(e.allow_routing),
        "prices": _prices_json(e.prices),
        "connect_timeout_s": e.connect_timeout_s,
        "read_timeout_s": e.read_timeout_s,
        "created_at": time.time(),
    }


def _prices_json(prices: dict[str, ModelPrice]) -> str:
    return json.dumps({m: {"input": p.input_per_mtok, "output": p.output_per_mtok}
                       for m, p in prices.items()})  # fmt: skip


def _endpoint(row: dict[str, Any]) -> Endpoint:
    prices = {}
    try:
        raw = json.loads(row["prices"] or "{}")
    except ValueError:
        raw = {}
    for model, p in raw.items() if isinstance(raw, dict) else ():
        if isinstance(p, dict):
            prices[model] = ModelPrice(float(p.get("input", 0)), float(p.get("output", 0)))
    defaults = Endpoint(row["name"], row["base_url"])
    return Endpoint(
        name=row["name"],
        base_url=row["base_url"],
        preset=row["preset"] or defaults.preset,
        allow_routing=bool(row["allow_routing"]),
        prices=prices,
        connect_timeout_s=row["connect_timeout_s"] or defaults.connect_timeout_s,
        read_timeout_s=row["read_timeout_s"] or defaults.read_timeout_s,
    )
