"""Request and response models of POST /v1/messages, mirroring Anthropic's Messages API (the
fields deskllm acts on; others are accepted and ignored)."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field


class TextBlock(BaseModel):
    model_config = ConfigDict(extra="allow")  # cache_control, citations: accepted, no effect

    type: Literal["text"] = "text"
    text: str


class ThinkingBlock(BaseModel):
    """A reasoning model's thinking: in an answer, first; in assistant turns sent back it is
    accepted and not given to the model again (the chat template leaves it out)."""

    model_config = ConfigDict(extra="allow")

    type: Literal["thinking"] = "thinking"
    thinking: str
    signature: str = ""  # Anthropic signs its own; a local model's thinking has nothing to sign


class ToolUseBlock(BaseModel):
    """A call the assistant made: in an answer, and in the assistant turns sent back."""

    model_config = ConfigDict(extra="allow")

    type: Literal["tool_use"] = "tool_use"
    id: str
    name: str
    input: dict


class ToolResultBlock(BaseModel):
    """A user turn's answer to one call."""

    model_config = ConfigDict(extra="allow")

    type: Literal["tool_result"] = "tool_result"
    tool_use_id: str
    content: str | list[TextBlock] = ""
    is_error: bool = False

    def text(self) -> str:
        text = (
            self.content
            if isinstance(self.content, str)
            else "".join(block.text for block in self.content)
        )
        return f"Error: {text}" if self.is_error else text


ContentBlock = Annotated[TextBlock | ThinkingBlock | ToolUseBlock | ToolResultBlock,
                         Field(discriminator="type")]


class MessageParam(BaseModel):
    role: Literal["user", "assistant"]
    content: str | list[ContentBlock]

    def text(self) -> str:
        if isinstance(self.content, str):
            return self.content
        return "".join(block.text for block in self.content if isinstance(block, TextBlock))

    def blocks(self, kind: type) -> list:
        return (
            [b for b in self.content if isinstance(b, kind)]
            if isinstance(self.content, list)
            else []
        )


class ToolParam(BaseModel):
    model_config = ConfigDict(extra="allow")  # cache_control: accepted, no effect

    name: str = Field(min_length=1)
    description: str | None = None
    input_schema: dict


class ToolChoice(BaseModel):
    model_config = ConfigDict(extra="allow")

    type: Literal["auto", "any", "tool", "none"]
    name: str | None = None
    disable_parallel_tool_use: bool | None = None  # True: only the reply's first call


class ThinkingParam(BaseModel):
    """`thinking`: {"type": "enabled", "budget_tokens": N} or {"type": "disabled"}."""

    model_config = ConfigDict(extra="allow")

    type: Literal["enabled", "disabled", "adaptive"]
    budget_tokens: int | None = Field(default=None, ge=1)


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
    tools: list[ToolParam] | None = None
    tool_choice: ToolChoice | None = None
    thinking: ThinkingParam | None = None
    ignore_eos: bool = False  # deskllm's extension, as in chat completions: benchmarks, tests

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


# "shutdown": the server stopped while it wrote (SIGTERM past --shutdown-grace).
StopReason = Literal["end_turn", "max_tokens", "stop_sequence", "tool_use", "shutdown"]


class Message(BaseModel):
    id: str
    type: Literal["message"] = "message"
    role: Literal["assistant"] = "assistant"
    content: list[ThinkingBlock | TextBlock | ToolUseBlock]
    model: str
    stop_reason: StopReason | None
    stop_sequence: str | None = None
    usage: MessagesUsage
