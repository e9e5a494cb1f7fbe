"""Request and response models of POST /v1/messages, mirroring Anthropic's Messages API (the
fields deskllm acts on; others are accepted and ignored)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field


class TextBlock(BaseModel):
    model_config = ConfigDict(extra="allow")  # cache_control, citations: accepted, no effect

    type: Literal["text"] = "text"
    text: str


class MessageParam(BaseModel):
    role: Literal["user", "assistant"]
    content: str | list[TextBlock]

    def text(self) -> str:
        if isinstance(self.content, str):
            return self.content
        return "".join(block.text for block in self.content)


class Metadata(BaseModel):
    model_config = ConfigDict(extra="allow")

    user_id: str | None = None


class MessagesRequest(BaseModel):
    model_config = ConfigDict(extra="allow")

    model: str
    max_tokens: int = Field(ge=1)  # required by Anthropic's API, so by this one too
    messages: list[MessageParam] = Field(min_length=1)
    system: str | list[TextBlock] | None = None
    stop_sequences: list[str] | None = None
    stream: bool = False
    temperature: float | None = Field(default=None, ge=0.0, le=1.0)
    top_p: float | None = Field(default=None, ge=0.0, le=1.0)
    top_k: int | None = Field(default=None, ge=0, le=2**31 - 1)
    metadata: Metadata | None = None
    tools: list[dict] | None = None
    tool_choice: dict | None = None

    def system_text(self) -> str:
        if self.system is None:
            return ""
        if isinstance(self.system, str):
            return self.system
        return "".join(block.text for block in self.system)


class MessagesUsage(BaseModel):
    input_tokens: int
    output_tokens: int
    cache_read_input_tokens: int | None = None
    cache_creation_input_tokens: int | None = None


StopReason = Literal["end_turn", "max_tokens", "stop_sequence"]


class Message(BaseModel):
    id: str
    type: Literal["message"] = "message"
    role: Literal["assistant"] = "assistant"
    content: list[TextBlock]
    model: str
    stop_reason: StopReason | None
    stop_sequence: str | None = None
    usage: MessagesUsage
