"""Token and cost usage per day, engine and model, from the stored replies (`deskllm usage`,
the Usage view).

Tokens are the figures every reply stores (prompt_tokens, generated_tokens). A remote reply's
cost is its tokens at the price set for that endpoint's model (`deskllm remote price`), priced
when asked. A local reply's cost is its energy × the tariff (`local_reply_cost`): joules a
counter measured, joules the engine estimated from a watts figure, or the user's watts × the
reply's measured seconds; with no tariff or no figure it is null, never a made-up number.
Local replies of one day and model whose costs come from different sources are separate rows,
so a row's cost is never part measured and part estimated.
"""

from __future__ import annotations

import datetime
from dataclasses import asdict, dataclass
from pathlib import PurePath
from typing import Any

from sqlite_utils import Database

from deskllm.hardware.energy_cost import LocalCostRates, local_reply_cost
from deskllm.store.remote_endpoints import EndpointRegistry

LOCAL = "local"

_REPLIES = """
select date(created_at, 'unixepoch', 'localtime') as day,
       coalesce(json_extract(metrics, '$.engine'), 'local') as engine,
       model,
       coalesce(json_extract(metrics, '$.prompt_tokens'), 0),
       coalesce(json_extract(metrics, '$.generated_tokens'), 0),
       json_extract(metrics, '$.route_reason'),
       json_extract(metrics, '$.joules'),
       json_extract(metrics, '$.energy_source'),
       json_extract(metrics, '$.ttft_s'),
       json_extract(metrics, '$.tg_tps')
from messages
where role = 'assistant' and status in ('complete', 'interrupted') and json_valid(metrics)
  and (:since is null or date(created_at, 'unixepoch', 'localtime') >= :since)
order by created_at
"""


@dataclass(frozen=True)
class UsageRow:
    day: str  # YYYY-MM-DD, local time
    engine: str  # "local" or an endpoint's name
    model: str
    requests: int
    prompt_tokens: int
    completion_tokens: int
    cost: float | None
    cost_source: str  # measured | price | estimated | none
    cost_per_mtok: float | None  # cost per million tokens (prompt + completion)

    @property
    def local(self) -> bool:
        return self.engine == LOCAL

    @property
    def tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens


@dataclass(frozen=True)
class Usage:
    since: str | None
    rows: list[UsageRow]
    local_share: float | None  # of the replies the router placed, the share kept local

    def as_json(self) -> dict[str, Any]:
        return {"since": self.since, "rows": [asdict(r) for r in self.rows],
                "local_share": self.local_share}  # fmt: skip


def model_name(engine: str, model: str | None) -> str:
    """What a row calls the model: a local file's name; a remote model without its endpoint
    (the row's engine names that)."""
    if not model:
        return "unknown"
    if engine == LOCAL:
        return PurePath(model).name
    return model.split("/", 1)[1] if "/" in model else model


def reply_seconds(ttft_s: float | None, generated: int, tg_tps: float | None) -> float | None:
    """How long a reply took, from its measured figures: time to the first token, then the
    other tokens at the measured decode speed (the engine's tg_tps counts the tokens after the
    first). None when the time to the first token is unknown."""
    if ttft_s is None:
        return None
    decode = (generated - 1) / tg_tps if generated > 1 and tg_tps else 0.0
    return ttft_s + decode


def usage(db: Database, since: str | None = None, rates: LocalCostRates | None = None) -> Usage:
    """Usage since `since` (YYYY-MM-DD, inclusive; None: everything stored). `rates`: the
    user's tariff and watts (None: none set, so local costs are null)."""
    rates = rates or LocalCostRates()
    endpoints = _Endpoints(EndpointRegistry(db))
    totals: dict[tuple[str, str, str, str], list[Any]] = {}  # key → [requests, p, c, cost]
    routed = kept_local = 0
    for row in db.execute(_REPLIES, {"since": since}).fetchall():
        day, engine, model, prompt, completion, reason, joules, energy, ttft, tg_tps = row
        name = model_name(engine, model)
        if engine == LOCAL:
            seconds = reply_seconds(ttft, completion, tg_tps)
            cost, source = local_reply_cost(joules, energy, seconds, rates)
        else:
            cost, source = endpoints.cost(engine, name, prompt, completion)
        entry = totals.setdefault((day, engine, name, source), [0, 0, 0, 0.0])
        entry[0] += 1
        entry[1] += prompt
        entry[2] += completion
        entry[3] += cost or 0.0
        if reason is not None:
            routed += 1
            kept_local += engine == LOCAL
    rows = []
    for (day, engine, name, source), (requests, prompt, completion, cost) in sorted(totals.items()):
        known = None if source == "none" else cost
        tokens = prompt + completion
        per_mtok = known * 1e6 / tokens if known is not None and tokens else None
        rows.append(UsageRow(day, engine, name, requests, prompt, completion, known, source,
                             per_mtok))  # fmt: skip
    return Usage(since, rows, kept_local / routed if routed else None)


@dataclass(frozen=True)
class DayTokens:
    day: str
    local: int  # prompt + completion tokens answered on this machine
    remote: int  # ... and by remote endpoints


def tokens_per_day(
    rows: list[UsageRow], first: str | None = None, last: str | None = None
) -> list[DayTokens]:
    """Tokens per day, local and remote, in day order (the Usage view's chart). With `first`
    and/or `last` (YYYY-MM-DD), every day from the first (else the earliest row's) to the last
    (else the latest row's) is listed, days without replies as zeros: a period's chart keeps
    its time axis instead of one wide bar per day that had replies."""
    days: dict[str, list[int]] = {}
    for row in rows:
        day = days.setdefault(row.day, [0, 0])
        day[0 if row.local else 1] += row.tokens
    if days and (first or last):
        start = datetime.date.fromisoformat(first or min(days))
        end = datetime.date.fromisoformat(last or max(days))
        for offset in range((end - start).days + 1):
            days.setdefault((start + datetime.timedelta(days=offset)).isoformat(), [0, 0])
    return [DayTokens(day, local, remote) for day, (local, remote) in sorted(days.items())]


def per_model(rows: list[UsageRow]) -> list[UsageRow]:
    """The rows summed over their days, per engine, model and cost source (day: the first
    day with a reply). Costs of one source add up; "none" stays null."""
    merged: dict[tuple[str, str, str], UsageRow] = {}
    for row in sorted(rows, key=lambda r: r.day):
        key = (row.engine, row.model, row.cost_source)
        old = merged.get(key)
        if old is None:
            merged[key] = row
            continue
        cost = None if old.cost is None or row.cost is None else old.cost + row.cost
        tokens = old.tokens + row.tokens
        merged[key] = UsageRow(
            old.day, row.engine, row.model, old.requests + row.requests,
            old.prompt_tokens + row.prompt_tokens, old.completion_tokens + row.completion_tokens,
            cost, row.cost_source, cost * 1e6 / tokens if cost is not None and tokens else None,
        )  # fmt: skip
    return [merged[key] for key in sorted(merged)]


class _Endpoints:
    """Each endpoint looked up once per report."""

    def __init__(self, registry: EndpointRegistry) -> None:
        self.registry = registry
        self.found: dict[str, Any] = {}

    def cost(
        self, engine: str, model: str, prompt: int, completion: int
    ) -> tuple[float | None, str]:
        if engine not in self.found:
            self.found[engine] = self.registry.find(engine)
        endpoint = self.found[engine]
        price = endpoint.prices.get(model) if endpoint else None
        if price is None:
            return None, "none"
        cost = (prompt * price.input_per_mtok + completion * price.output_per_mtok) / 1e6
        return cost, "price"
