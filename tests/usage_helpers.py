"""Stored replies for the usage tests (store, CLI, GUI): real rows in a real SQLite file, each
kind of cost source on two days, shaped as the engine and the router store them."""

from __future__ import annotations

import datetime
import time
from dataclasses import dataclass

from sqlite_utils import Database

from deskllm.remote.endpoint import Endpoint, ModelPrice
from deskllm.store.conversations import ConversationStore
from deskllm.store.remote_endpoints import EndpointRegistry

MODEL_PATH = "/models/local-model.Q4_K_M.gguf"
MODEL = "local-model.Q4_K_M.gguf"
TARIFF = 0.30  # per kWh
WATTS = 40.0
PRICE = ModelPrice(input_per_mtok=2.5, output_per_mtok=10.0)


def local_noon(day: datetime.date) -> float:
    return time.mktime(datetime.datetime.combine(day, datetime.time(12)).timetuple())


@dataclass(frozen=True)
class Seeded:
    old: str  # 40 days ago: outside the last 30 days
    first: str  # yesterday
    second: str  # today


def add_reply(store: ConversationStore, conversation: str, day: datetime.date, model: str,
              status: str = "complete", **metrics) -> None:  # fmt: skip
    message = store.add_message(conversation, "assistant", "reply", status=status, model=model,
                                metrics=metrics)  # fmt: skip
    store.db["messages"].update(message.id, {"created_at": local_noon(day)})


def seed(db: Database, today: datetime.date | None = None) -> Seeded:
    """Yesterday: local replies with measured joules (2), joules the engine estimated from a
    watts figure, no joules but a measured time (3 s + 20 tokens at 2 tok/s = 13 s), and no
    figure at all. Today: one local reply with measured joules and one remote reply, both
    placed by the router. 40 days ago: one local reply with measured joules."""
    today = today or datetime.date.today()
    yesterday, old = today - datetime.timedelta(days=1), today - datetime.timedelta(days=40)
    store = ConversationStore(db)
    chat = store.create("usage").id
    EndpointRegistry(db).add(Endpoint("desk", "http://127.0.0.1:9/v1", prices={"big": PRICE}))
    store.add_message(chat, "user", "a question")  # not a reply: never counted
    add_reply(store, chat, yesterday, MODEL_PATH, prompt_tokens=100, generated_tokens=50,
              joules=7200.0, energy_source="rapl", ttft_s=1.0, tg_tps=10.0)  # fmt: skip
    add_reply(store, chat, yesterday, MODEL_PATH, prompt_tokens=50, generated_tokens=25,
              joules=3600.0, energy_source="rapl+nvml", ttft_s=1.0, tg_tps=10.0)  # fmt: skip
    add_reply(store, chat, yesterday, MODEL_PATH, prompt_tokens=10, generated_tokens=10,
              joules=1800.0, energy_source="estimated", ttft_s=1.0, tg_tps=10.0)  # fmt: skip
    add_reply(store, chat, yesterday, MODEL_PATH, prompt_tokens=30, generated_tokens=21,
              ttft_s=3.0, tg_tps=2.0)  # fmt: skip
    add_reply(store, chat, yesterday, MODEL_PATH, prompt_tokens=5, generated_tokens=0)
    add_reply(store, chat, yesterday, MODEL_PATH, status="streaming", prompt_tokens=999)
    add_reply(store, chat, today, MODEL_PATH, prompt_tokens=20, generated_tokens=20,
              joules=360.0, energy_source="rapl", route_reason="local", engine="local",
              ttft_s=0.5, tg_tps=10.0)  # fmt: skip
    add_reply(store, chat, today, "desk/big", prompt_tokens=1000, generated_tokens=100,
              engine="desk", route_reason="uncertain", ttft_s=0.4, tg_tps=50.0)  # fmt: skip
    add_reply(store, chat, old, MODEL_PATH, prompt_tokens=7, generated_tokens=7,
              joules=36.0, energy_source="rapl", ttft_s=0.1, tg_tps=10.0)  # fmt: skip
    return Seeded(old.isoformat(), yesterday.isoformat(), today.isoformat())


def kwh_cost(joules: float, tariff: float = TARIFF) -> float:
    return joules / 3.6e6 * tariff
