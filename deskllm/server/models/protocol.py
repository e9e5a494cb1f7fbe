"""Response models of GET /v1/models, mirroring OpenAI's schema."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel


class ModelCard(BaseModel):
    id: str
    object: Literal["model"] = "model"
    created: int
    owned_by: str = "deskllm"
    context_length: int  # llama-server and LM Studio report it too
    loaded: bool = False  # the model the server holds now; a request naming another loads it


class ModelList(BaseModel):
    object: Literal["list"] = "list"
    data: list[ModelCard]
