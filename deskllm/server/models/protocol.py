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
    loaded: bool = False  # loaded now; a request naming another installed model loads it
    # Loaded models only: RAM the planner counted for it, its slots, and seconds until an
    # idle model is unloaded (null: never — the served model is pinned).
    memory_bytes: int | None = None
    slots: int | None = None
    keep_alive_left_s: float | None = None
    pinned: bool | None = None


class ModelList(BaseModel):
    object: Literal["list"] = "list"
    data: list[ModelCard]
