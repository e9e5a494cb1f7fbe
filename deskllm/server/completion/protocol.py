"""Request and response models of POST /v1/completions (OpenAI's legacy completions): a raw
text continued as it is, without the chat template."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from deskllm.server.chat_completion.protocol import StreamOptions, Timings, Usage


class CompletionRequest(BaseModel):
    model_config = ConfigDict(extra="allow")

    model: str
    prompt: str | list[str]
    # LM Studio's: seconds a model loaded on demand for this request stays after it (-1:
    # as long as the server runs); unset: the server's --keep-alive.
    ttl: int | None = Field(default=None, ge=-1)
    stream: bool = False
    stream_options: StreamOptions | None = None
    max_tokens: int | None = Field(default=16, ge=1)  # OpenAI's default; null: fill the context
    temperature: float | None = Field(default=None, ge=0.0, le=2.0)
    top_p: float | None = Field(default=None, ge=0.0, le=1.0)
    top_k: int | None = Field(default=None, ge=0, le=2**31 - 1)
    min_p: float | None = Field(default=None, ge=0.0, le=1.0)
    seed: int | None = Field(default=None, ge=-(2**63), le=2**64 - 1)
    stop: str | list[str] | None = None
    presence_penalty: float | None = Field(default=None, ge=-2.0, le=2.0)
    frequency_penalty: float | None = Field(default=None, ge=-2.0, le=2.0)
    logprobs: int | None = Field(default=None, ge=0, le=20)
    echo: bool = False
    n: int | None = Field(default=None, ge=1)
    best_of: int | None = Field(default=None, ge=1)
    suffix: str | None = None
    user: str | None = None
    repeat_penalty: float | None = Field(default=None, ge=0.0)
    ignore_eos: bool = False
    # deskllm's: this request's speculative decoding (unset: the server's --speculation).
    speculation: Literal["off", "auto", "ngram", "draft"] | None = None


class CompletionLogprobs(BaseModel):
    tokens: list[str]
    token_logprobs: list[float]
    top_logprobs: list[dict[str, float]]
    text_offset: list[int]


class CompletionChoice(BaseModel):
    index: int = 0
    text: str
    logprobs: CompletionLogprobs | None = None
    # "shutdown": the server stopped while it wrote (SIGTERM past --shutdown-grace)
    finish_reason: Literal["stop", "length", "shutdown"] | None = None


class Completion(BaseModel):
    id: str
    object: Literal["text_completion"] = "text_completion"
    created: int
    model: str
    choices: list[CompletionChoice]
    usage: Usage | None = None
    timings: Timings | None = None
    system_fingerprint: str | None = None
