"""Request and response models of POST /v1/embeddings, mirroring OpenAI's schema."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

MAX_INPUTS = 2048  # OpenAI's limit on inputs per request


class EmbeddingRequest(BaseModel):
    model_config = ConfigDict(extra="allow")

    model: str
    # LM Studio's: seconds a model loaded on demand for this request stays after it (-1:
    # as long as the server runs); unset: the server's --keep-alive.
    ttl: int | None = Field(default=None, ge=-1)
    input: str | list[str] = Field(union_mode="left_to_right")
    encoding_format: Literal["float", "base64"] = "float"
    dimensions: int | None = Field(default=None, ge=1)
    user: str | None = None


class Embedding(BaseModel):
    object: Literal["embedding"] = "embedding"
    index: int
    embedding: list[float] | str  # base64: little-endian float32s


class EmbeddingUsage(BaseModel):
    prompt_tokens: int
    total_tokens: int


class EmbeddingList(BaseModel):
    object: Literal["list"] = "list"
    data: list[Embedding]
    model: str
    usage: EmbeddingUsage
