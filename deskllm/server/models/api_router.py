"""GET /v1/models."""

from __future__ import annotations

import asyncio

from fastapi import APIRouter, Request

from deskllm.server.models.protocol import ModelList
from deskllm.server.models.serving import model_list
from deskllm.server.openapi import MODELS_RESPONSES

router = APIRouter()


@router.get("/v1/models", response_model=ModelList, responses=MODELS_RESPONSES)
async def list_models(request: Request) -> ModelList:
    return await asyncio.to_thread(model_list, request.app.state.host)  # reads the library
