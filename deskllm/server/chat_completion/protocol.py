"""Request and response models of POST /v1/chat/completions, mirroring OpenAI's schema (the
fields deskllm acts on; others are accepted and ignored, as OpenAI's own API does with
fields it does not know)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field


class TextPart(BaseModel):
    type: Literal["text"]
    text: str


class FunctionCallParam(BaseModel):
    name: str
    arguments: str = "{}"  # JSON text


class ToolCallParam(BaseModel):
    """A call in an assistant turn of the history."""

    model_config = ConfigDict(extra="allow")

    id: str
    type: Literal["function"] = "function"
    function: FunctionCallParam


class ChatMessageParam(BaseModel):
    model_config = ConfigDict(extra="allow")

    role: Literal["system", "developer", "user", "assistant", "tool", "function"]
    content: str | list[TextPart] | None = None
    name: str | None = None
    tool_calls: list[ToolCallParam] | None = None  # assistant turns
    tool_call_id: str | None = None  # tool turns: the call answered

    def text(self) -> str:
        if self.content is None:
            return ""
        if isinstance(self.content, str):
            return self.content
        return "".join(part.text for part in self.content)


class StreamOptions(BaseModel):
    include_usage: bool = False


class JsonSchemaFormat(BaseModel):
    model_config = ConfigDict(extra="allow")

    name: str = "response"
    schema_: dict | None = Field(default=None, alias="schema")
    strict: bool | None = None


class ResponseFormat(BaseModel):
    model_config = ConfigDict(extra="allow")

    type: Literal["text", "json_object", "json_schema"] = "text"
    json_schema: JsonSchemaFormat | None = None


class FunctionDefinition(BaseModel):
    model_config = ConfigDict(extra="allow")

    name: str = Field(pattern=r"^[A-Za-z0-9_-]{1,64}$")
    description: str | None = None
    parameters: dict | None = None  # a JSON schema of the arguments
    strict: bool | None = None


class ToolParam(BaseModel):
    type: Literal["function"]
    function: FunctionDefinition


class NamedFunction(BaseModel):
    name: str


class NamedToolChoice(BaseModel):
    type: Literal["function"]
    function: NamedFunction


class ChatCompletionRequest(BaseModel):
    model_config = ConfigDict(extra="allow")

    model: str
    messages: list[ChatMessageParam] = Field(min_length=1)
    stream: bool = False
    stream_options: StreamOptions | None = None
    temperature: float | None = Field(default=None, ge=0.0, le=2.0)
    top_p: float | None = Field(default=None, ge=0.0, le=1.0)
    top_k: int | None = Field(default=None, ge=0, le=2**31 - 1)
    min_p: float | None = Field(default=None, ge=0.0, le=1.0)
    seed: int | None = Field(default=None, ge=-(2**63), le=2**64 - 1)
    stop: str | list[str] | None = None
    max_tokens: int | None = Field(default=None, ge=1)
    max_completion_tokens: int | None = Field(default=None, ge=1)
    presence_penalty: float | None = Field(default=None, ge=-2.0, le=2.0)
    frequency_penalty: float | None = Field(default=None, ge=-2.0, le=2.0)
    n: int | None = Field(default=None, ge=1)
    logprobs: bool | None = None
    top_logprobs: int | None = Field(default=None, ge=0, le=20)
    response_format: ResponseFormat | None = None
    tools: list[ToolParam] | None = None
    tool_choice: Literal["none", "auto", "required"] | NamedToolChoice | None = None
    parallel_tool_calls: bool | None = None
    user: str | None = None
    # Extensions that llama-server and vLLM accept too.
    repeat_penalty: float | None = Field(default=None, ge=0.0)
    ignore_eos: bool = False
    # deskllm's: this request's speculative decoding (unset: the server's --speculation).
    speculation: Literal["off", "auto", "ngram", "draft"] | None = None
    # llama-server's: while a long prompt is read, stream chunks carrying `prompt_progress`.
    return_progress: bool = False
    # LM Studio's: seconds a model loaded on demand for this request stays after it (-1:
    # as long as the server runs); unset: the server's --keep-alive.
    ttl: int | None = Field(default=None, ge=-1)
    # Reasoning models. OpenAI's reasoning_effort; llama-server's reasoning_format ("none"
    # leaves the thinking in content), reasoning_budget (tokens; -1 no limit, 0 no thinking)
    # and chat_template_kwargs (enable_thinking is read).
    reasoning_effort: Literal["none", "minimal", "low", "medium", "high"] | None = None
    reasoning_format: Literal["none", "auto", "deepseek", "deepseek-legacy"] | None = None
    reasoning_budget: int | None = Field(default=None, ge=-1)
    chat_template_kwargs: dict[str, Any] | None = None


class Usage(BaseModel):
    prompt_tokens: int
    completion_tokens: int
    total_tokens: int
    prompt_tokens_details: dict[str, int]


class Timings(BaseModel):
    """llama-server's per-response figures: milliseconds, and tokens/s."""

    cache_n: int
    prompt_n: int
    prompt_ms: float
    prompt_per_second: float | None
    predicted_n: int
    predicted_ms: float
    predicted_per_second: float | None
    # Speculative decoding: tokens drafted and those the model accepted (0: none drafted).
    draft_n: int = 0
    draft_n_accepted: int = 0


class PromptProgressBody(BaseModel):
    """llama-server's `prompt_progress`: prompt tokens in all, found in the cache, read so
    far (the cached ones included), and milliseconds since reading began."""

    total: int
    cache: int
    processed: int
    time_ms: float


class TopLogprob(BaseModel):
    token: str
    logprob: float
    bytes: list[int] | None


class TokenLogprob(TopLogprob):
    top_logprobs: list[TopLogprob]


class ChoiceLogprobs(BaseModel):
    content: list[TokenLogprob] | None
    refusal: list[TokenLogprob] | None = None


class FunctionCall(BaseModel):
    name: str
    arguments: str  # JSON text


class ToolCall(BaseModel):
    id: str
    type: Literal["function"] = "function"
    function: FunctionCall


class AssistantMessage(BaseModel):
    role: Literal["assistant"] = "assistant"
    content: str | None
    # A reasoning model's thinking, apart from the answer (llama-server's and DeepSeek's name).
    reasoning_content: str | None = None
    tool_calls: list[ToolCall] | None = None


class Choice(BaseModel):
    index: int = 0
    message: AssistantMessage
    finish_reason: str
    logprobs: ChoiceLogprobs | None = None


class ChatCompletion(BaseModel):
    id: str
    object: Literal["chat.completion"] = "chat.completion"
    created: int
    model: str
    choices: list[Choice]
    usage: Usage
    timings: Timings | None = None
    system_fingerprint: str | None = None


class DeltaToolCall(ToolCall):
    index: int


class Delta(BaseModel):
    role: Literal["assistant"] | None = None
    content: str | None = None
    reasoning_content: str | None = None
    tool_calls: list[DeltaToolCall] | None = None


class ChunkChoice(BaseModel):
    index: int = 0
    delta: Delta
    finish_reason: str | None = None
    logprobs: ChoiceLogprobs | None = None


class ChatCompletionChunk(BaseModel):
    id: str
    object: Literal["chat.completion.chunk"] = "chat.completion.chunk"
    created: int
    model: str
    choices: list[ChunkChoice]
    usage: Usage | None = None
    timings: Timings | None = None
    prompt_progress: PromptProgressBody | None = None
