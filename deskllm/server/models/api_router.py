"""GET /v1/models."""

from __future__ import annotations

from fastapi import APIRouter, Request

from deskllm.server.models.protocol import ModelList
from deskllm.server.models.serving import model_list

router = APIRouter()


@router.get("/v1/models", response_model=ModelList)
async def list_models(request: Request) -> ModelList:
    return model_list(request.app.state.host)
