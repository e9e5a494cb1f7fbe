"""GET /health (200 once the model is loaded, 503 before) and GET /metrics (Prometheus)."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, PlainTextResponse

from deskllm.server.model_host import HostState

router = APIRouter()


@router.get("/health")
async def health(request: Request) -> JSONResponse:
    host = request.app.state.host
    if host.state == HostState.READY:
        return JSONResponse({"status": "ok"})
    body = {"status": str(host.state)}
    if host.state == HostState.LOADING and host.loading_id:
        body["model"] = host.loading_id  # the model being loaded
    if host.failure:
        body["error"] = host.failure
    return JSONResponse(body, status_code=503, headers={"Retry-After": "5"})


@router.get("/metrics", response_class=PlainTextResponse)
async def metrics(request: Request) -> PlainTextResponse:
    host = request.app.state.host
    text = request.app.state.metrics.render(
        waiting=host.queue.waiting, running=host.queue.running,
        ready=host.state == HostState.READY,
    )  # fmt: skip
    return PlainTextResponse(text, media_type="text/plain; version=0.0.4")
