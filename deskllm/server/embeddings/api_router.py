"""POST /v1/embeddings."""

from __future__ import annotations

from fastapi import APIRouter, Request

from deskllm.server.embeddings.protocol import EmbeddingList, EmbeddingRequest
from deskllm.server.embeddings.serving import EmbeddingServing

router = APIRouter()


@router.post("/v1/embeddings", response_model=EmbeddingList)
async def embeddings(body: EmbeddingRequest, request: Request) -> EmbeddingList:
    serving: EmbeddingServing = request.app.state.embeddings
    await request.app.state.host.use(body.model)  # an installed model: loaded first
    job = serving.admit(body)  # before waiting: errors keep their status
    return await serving.complete(body, job)
