"""Ollama's API requests (https://github.com/ollama/ollama/blob/main/docs/api.md), as its
clients send them. Fields deskllm does not act on are still accepted where Ollama would
ignore them too (`options` it does not know); the ones it cannot honour are refused by the
serving code with a reason."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field


class _Lenient(BaseModel):
    model_config = ConfigDict(extra="ignore")


class OllamaFunction(_Lenient):
    name: str
    arguments: dict[str, Any] | str = Field(default_factory=dict)


class OllamaToolCall(_Lenient):
    function: OllamaFunction
    id: str | None = None


class OllamaMessage(_Lenient):
    role: str
    content: str | None = ""
    thinking: str | None = None
    images: list[str] | None = None
    tool_calls: list[OllamaToolCall] | None = None
    tool_name: str | None = None
    tool_call_id: str | None = None


# Ollama's keep_alive: a duration ("5m", "1h30m", "300ms"), seconds as a number, 0 or -1.
KeepAlive = str | float | int | None


class _Generation(_Lenient):
    model: str = Field(min_length=1)
    stream: bool = True  # Ollama streams unless told not to
    format: str | dict[str, Any] | None = None  # "json", or a JSON schema
    options: dict[str, Any] | None = None
    keep_alive: KeepAlive = None
    think: bool | str | None = None


class OllamaChatRequest(_Generation):
    messages: list[OllamaMessage] = Field(default_factory=list)
    tools: list[dict[str, Any]] | None = None


class OllamaGenerateRequest(_Generation):
    prompt: str | None = None
    system: str | None = None
    suffix: str | None = None
    template: str | None = None
    context: list[int] | None = None
    raw: bool = False
    images: list[str] | None = None


class OllamaEmbedRequest(_Lenient):
    model: str = Field(min_length=1)
    input: str | list[str]
    truncate: bool = True
    options: dict[str, Any] | None = None
    keep_alive: KeepAlive = None
    dimensions: int | None = None


class OllamaEmbeddingsRequest(_Lenient):
    """The older /api/embeddings: one prompt, one vector."""

    model: str = Field(min_length=1)
    prompt: str
    options: dict[str, Any] | None = None
    keep_alive: KeepAlive = None


class OllamaModelRequest(_Lenient):
    """/api/show and /api/delete: `model` (older clients send `name`)."""

    model: str | None = None
    name: str | None = None
    verbose: bool = False  # accepted; the vocabulary arrays are null either way

    def target(self) -> str:
        return self.model or self.name or ""


class OllamaPullRequest(_Lenient):
    model: str | None = None
    name: str | None = None
    stream: bool = True
    insecure: bool = False

    def target(self) -> str:
        return self.model or self.name or ""
