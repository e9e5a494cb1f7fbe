"""Token and cost usage per day, engine and model, from the stored replies (`deskllm usage`).

Tokens are the figures every reply stores (prompt_tokens, generated_tokens); a remote reply's
cost is its tokens at the price set for that endpoint's model (`deskllm remote price`), priced
when asked. A local reply's cost is not measured: there is no measured energy figure yet, so it
is null with cost_source "none", never a made-up number.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import PurePath
from typing import Any

from sqlite_utils import Database

from deskllm.store.remote_endpoints import EndpointRegistry

LOCAL = "local"

_REPLIES = """
with replies as (
  select date(created_at, 'unixepoch', 'localtime') as day,
         coalesce(json_extract(metrics, '$.engine'), 'local') as engine,
         deskllm_usage_model(coalesce(json_extract(metrics, '$.engine'), 'local'), model)
           as model,
         coalesce(json_extract(metrics, '$.prompt_tokens'), 0) as prompt_tokens,
         coalesce(json_extract(metrics, '$.generated_tokens'), 0) as completion_tokens,
         json_extract(metrics, '$.route_reason') as route_reason
  from messages
  where role = 'assistant' and status in ('complete', 'interrupted') and json_valid(metrics)
    and (:since is null or date(created_at, 'unixepoch', 'localtime') >= :since)
)
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


def usage(db: Database, since: str | None = None) -> Usage:
    """Usage since `since` (YYYY-MM-DD, inclusive; None: everything stored)."""
    db.register_function(model_name, name="deskllm_usage_model", deterministic=True,
                         replace=True)  # fmt: skip
    params = {"since": since}
    grouped = db.execute(
        _REPLIES
        + """
        select day, engine, model, count(*), sum(prompt_tokens), sum(completion_tokens)
        from replies group by day, engine, model order by day, engine, model""",
        params,
    ).fetchall()
    routed, local = db.execute(
        _REPLIES
        + """
        select count(*), coalesce(sum(engine = 'local'), 0) from replies
        where route_reason is not null""",
        params,
    ).fetchone()
    registry = EndpointRegistry(db)
    rows = []
    for day, engine, model, requests, prompt, completion in grouped:
        cost, source = None, "none"
        if engine != LOCAL:
            endpoint = registry.find(engine)
            price = endpoint.prices.get(model) if endpoint else None
            if price is not None:
                cost = (prompt * price.input_per_mtok + completion * price.output_per_mtok) / 1e6
                source = "price"
        rows.append(UsageRow(day, engine, model, requests, prompt, completion, cost, source))
    return Usage(since, rows, local / routed if routed else None)
