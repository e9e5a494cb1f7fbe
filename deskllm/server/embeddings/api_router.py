"""POST /v1/embeddings."""

from __future__ import annotations

from fastapi import APIRouter, Request

from deskllm.server.embeddings.protocol import EmbeddingList, EmbeddingRequest
from deskllm.server.embeddings.serving import EmbeddingServing
from deskllm.server.model_host import keep_alive
from deskllm.server.models.serving import check_local_only
from deskllm.server.openapi import EMBEDDINGS_RESPONSES

router = APIRouter()


@router.post("/v1/embeddings", response_model=EmbeddingList, responses=EMBEDDINGS_RESPONSES)
async def embeddings(body: EmbeddingRequest, request: Request) -> EmbeddingList:
    serving: EmbeddingServing = request.app.state.embeddings
    # An installed model is loaded first (kept `ttl` seconds after, where the request says).
    backend = await request.app.state.host.use(body.model, keep_alive(body.ttl))
    check_local_only(body.model, backend)
    job = serving.admit(body)  # before waiting: errors keep their status
    return await serving.complete(body, job)
