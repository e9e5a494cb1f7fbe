"""GET /health (200 `ok` while the model is loaded and its engine runs; 503 `loading`,
`restarting` with the cause, `stopping` or `error`) and GET /metrics (Prometheus)."""

from __future__ import annotations

import asyncio

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, PlainTextResponse

from deskllm.server.model_host import HostState
from deskllm.server.openapi import HEALTH_RESPONSES, METRICS_RESPONSES

router = APIRouter()


@router.get("/health", responses=HEALTH_RESPONSES)
async def health(request: Request) -> JSONResponse:
    host = request.app.state.host
    state, cause = host.state, host.restart_cause
    body: dict[str, str] = {}
    if state == HostState.READY and host.client.params is not None and not host.client.alive:
        # Dead between a crash and the restart (the watcher's, or the next request's).
        state, cause = HostState.RESTARTING, host.client.death_cause
    if state == HostState.READY:
        if host.loading_id is not None:  # a model loads on demand; its requests wait
            return JSONResponse({"status": "ok", "loading": [host.loading_id]})
        return JSONResponse({"status": "ok"})
    body["status"] = str(state)
    if state == HostState.LOADING and host.loading_id:
        body["model"] = host.loading_id  # the model being loaded
    if state == HostState.RESTARTING:
        body["cause"] = cause or "the engine stopped"
    if state == HostState.FAILED and host.failure:
        body["error"] = host.failure
    return JSONResponse(body, status_code=503, headers={"Retry-After": "5"})


@router.get("/metrics", response_class=PlainTextResponse, responses=METRICS_RESPONSES)
async def metrics(request: Request) -> PlainTextResponse:
    host = request.app.state.host
    engine = await asyncio.to_thread(host.client.status)  # a pipe round trip: off the loop
    extras = host.loaded_extras()
    queues = [host.queue] + [e.queue for e in extras]
    text = request.app.state.metrics.render(
        waiting=sum(q.waiting for q in queues), running=sum(q.running for q in queues),
        ready=host.state == HostState.READY,
        restarts=host.client.restarts + sum(e.client.restarts for e in extras), kv=engine,
        models=(int(host.client.loaded is not None) + len(extras),
                int(host.loading_id is not None and host.state == HostState.READY),
                len(host.evictions)),
    )  # fmt: skip
    return PlainTextResponse(text, media_type="text/plain; version=0.0.4")
