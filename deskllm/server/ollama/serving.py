"""Ollama's generation endpoints (/api/chat, /api/generate, /api/embed, /api/embeddings) on
the same engine queue as the OpenAI and Anthropic routes. Each request is put into the OpenAI
request it means and admitted by that API's serving code (checks, sampling, tools, grammar:
one place for all three APIs); its events are written back in Ollama's shapes: NDJSON lines
while streaming (Ollama streams unless `stream: false`), durations in nanoseconds. No HTTP
here."""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import UTC, datetime
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from deskllm.engine.domain import Done, Error, Exited, Metrics, TextDelta
from deskllm.engine.tool_calls import ParsedReply, ToolCallStream
from deskllm.server import errors
from deskllm.server.chat_completion.protocol import ChatCompletionRequest
from deskllm.server.chat_completion.serving import FINISH, ChatCompletionServing
from deskllm.server.chat_completion.tool_choice import NO_TOOLS, ToolPlan
from deskllm.server.completion.protocol import CompletionRequest
from deskllm.server.completion.serving import CompletionServing
from deskllm.server.durations import parse_duration
from deskllm.server.embeddings.protocol import EmbeddingRequest
from deskllm.server.embeddings.serving import EmbeddingServing
from deskllm.server.engine_queue import Job
from deskllm.server.extra_model import ExtraModel
from deskllm.server.model_host import ModelHost
from deskllm.server.models.serving import check_model, check_ready
from deskllm.server.ollama.protocol import (
    KeepAlive,
    OllamaChatRequest,
    OllamaEmbeddingsRequest,
    OllamaEmbedRequest,
    OllamaGenerateRequest,
    OllamaMessage,
)
from deskllm.server.replies import answering_model, cancel, engine_error, final_reply

# Ollama's options that map to deskllm's sampling, by the OpenAI field they become. The rest
# (num_ctx, num_gpu, num_thread, mirostat, ...) are the server's settings here, or unknown to
# llama.cpp's sampler chain as deskllm builds it: ignored, as Ollama ignores unknown options.
_OPTIONS = {"temperature": "temperature", "top_p": "top_p", "top_k": "top_k", "min_p": "min_p",
            "repeat_penalty": "repeat_penalty", "presence_penalty": "presence_penalty",
            "frequency_penalty": "frequency_penalty", "seed": "seed", "stop": "stop"}  # fmt: skip
NDJSON = "application/x-ndjson"
_Request = TypeVar("_Request", bound=BaseModel)


def model_name(name: str) -> str:
    """Ollama clients add the default tag to a name without one: `NAME:latest` is NAME."""
    return name.removesuffix(":latest")


def keep_alive_s(value: KeepAlive) -> float | None:
    """Ollama's keep_alive in seconds (negative: keep; None: the server's default). Raises
    ApiError (400) for what is not a duration."""
    try:
        return parse_duration(value)
    except ValueError:
        raise errors.bad_request(f"keep_alive {value!r} is not a duration (e.g. 5m, 1h, 30s, "
                                 "0 to unload, -1 to keep).", param="keep_alive") from None


def check_think(req: OllamaChatRequest | OllamaGenerateRequest,
                target: ModelHost | ExtraModel) -> None:  # fmt: skip
    """`think` on a model that does not reason is refused, as Ollama refuses it."""
    if req.think in (None, False, "false", "none"):
        return
    if req.think not in (True, "true", "low", "medium", "high"):
        raise errors.bad_request(f"think {req.think!r}: use true, false, low, medium or high.",
                                 param="think")  # fmt: skip
    loaded = target.client.loaded
    if loaded is not None and loaded.reasoning_markers is None:
        raise errors.bad_request(f"{req.model!r} does not support thinking.", param="think")


def think_fields(think: bool | str | None) -> dict:
    """Ollama's `think` as the OpenAI request's fields."""
    if think in (None, ""):
        return {}
    if think in (False, "false", "none"):
        return {"chat_template_kwargs": {"enable_thinking": False}}
    if think in ("low", "medium", "high"):
        return {"reasoning_effort": think}
    return {"chat_template_kwargs": {"enable_thinking": True}}


def openai_fields(req: OllamaChatRequest | OllamaGenerateRequest, n_ctx: int) -> dict:
    """Sampling options and `format` as OpenAI request fields."""
    fields: dict[str, Any] = {"stream": req.stream, **think_fields(req.think)}
    for key, value in (req.options or {}).items():
        if key in _OPTIONS and value is not None:
            fields[_OPTIONS[key]] = value
    predict = (req.options or {}).get("num_predict")
    if isinstance(predict, int) and predict > 0:  # -1: no limit, -2: fill the context
        fields["max_tokens"] = min(predict, n_ctx) if n_ctx else predict
    fmt = req.format
    if fmt == "json":
        fields["response_format"] = {"type": "json_object"}
    elif isinstance(fmt, dict):
        fields["response_format"] = {"type": "json_schema",
                                     "json_schema": {"name": "format", "schema": fmt}}  # fmt: skip
    elif fmt not in (None, ""):
        raise errors.bad_request(f"format {fmt!r}: use \"json\" or a JSON schema.",
                                 param="format")  # fmt: skip
    return fields


def openai_messages(messages: list[OllamaMessage]) -> list[dict]:
    """Ollama's turns as OpenAI's: tool calls get ids (Ollama's have none) and each tool turn
    answers the first call still open with its tool_name (else the first open call). A
    turn's `thinking` is not sent back."""
    turns: list[dict] = []
    open_calls: list[tuple[str, str]] = []  # (id, name), not yet answered
    for i, m in enumerate(messages):
        if m.images:
            raise errors.bad_request(f"messages[{i}]: images are not supported: the models this "
                                     "server runs read text only.", param="images")  # fmt: skip
        turn: dict[str, Any] = {"role": m.role, "content": m.content or ""}
        if m.role == "assistant" and m.tool_calls:
            calls = []
            for call in m.tool_calls:
                call_id = call.id or f"call_{len(turns)}_{len(calls)}"
                args = call.function.arguments
                calls.append({"id": call_id, "type": "function", "function": {
                    "name": call.function.name,
                    "arguments": args if isinstance(args, str) else json.dumps(args)}})  # fmt: skip
                open_calls.append((call_id, call.function.name))
            turn["tool_calls"] = calls
        if m.role == "tool":
            match = next((c for c in open_calls if c[1] == m.tool_name), None)
            match = match or (open_calls[0] if open_calls else None)
            if m.tool_call_id:
                turn["tool_call_id"] = m.tool_call_id
            elif match is not None:
                turn["tool_call_id"] = match[0]
            else:
                turn["tool_call_id"] = f"call_{m.tool_name or i}"
            open_calls = [c for c in open_calls if c[0] != turn["tool_call_id"]]
            if m.tool_name:
                turn["name"] = m.tool_name
        turns.append(turn)
    return turns


def _validated(cls: type[_Request], data: dict) -> _Request:
    try:
        return cls.model_validate(data)
    except ValidationError as exc:
        problem = exc.errors()[0]
        where = ".".join(str(p) for p in problem.get("loc", ()))
        where = {"max_tokens": "options.num_predict"}.get(where, where)
        raise errors.bad_request(f"{where}: {problem.get('msg', 'invalid value')}",
                                 param=where or None) from None  # fmt: skip


def now_rfc3339() -> str:
    return datetime.now(UTC).isoformat(timespec="microseconds").replace("+00:00", "Z")


def durations(m: Metrics, started: float) -> dict[str, int]:
    """Ollama's figures: counts, and durations in nanoseconds."""
    ns = 1_000_000_000
    return {
        "total_duration": int((time.monotonic() - started) * ns),
        "load_duration": 0,
        "prompt_eval_count": m.prompt_tokens,
        "prompt_eval_duration": int(m.evaluated_tokens / m.pp_tps * ns) if m.pp_tps else 0,
        "eval_count": m.generated_tokens,
        "eval_duration": int(m.generated_tokens / m.tg_tps * ns) if m.tg_tps else 0,
    }


def tool_calls(parsed: ParsedReply) -> list[dict]:
    """Calls as Ollama gives them: arguments as an object (given whole where the model's
    arguments are not one)."""
    return [{"id": f"call_{uuid.uuid4().hex[:24]}",
             "function": {"index": i, "name": call.name, "arguments": call.arguments_object()}}
            for i, call in enumerate(parsed.calls)]  # fmt: skip


def ndjson(body: dict) -> str:
    return json.dumps(body, ensure_ascii=False) + "\n"


class _Shape:
    """How a piece of reply text is written: a chat message, or generate's `response`."""

    def __init__(self, chat: bool) -> None:
        self.chat = chat

    def text(self, text: str, calls: list[dict] | None = None, thinking: str = "") -> dict:
        if not self.chat:
            return {"response": text, **({"thinking": thinking} if thinking else {})}
        message: dict[str, Any] = {"role": "assistant", "content": text}
        if thinking:
            message["thinking"] = thinking
        if calls:
            message["tool_calls"] = calls
        return {"message": message}


class OllamaServing:
    def __init__(self, host: ModelHost, chat: ChatCompletionServing,
                 completion: CompletionServing, embeddings: EmbeddingServing) -> None:  # fmt: skip
        self.host = host
        self.chat_serving = chat
        self.completion_serving = completion
        self.embeddings = embeddings

    # Admission --------------------------------------------------------------------------------
    def admit_chat(self, req: OllamaChatRequest, backend) -> tuple[Job, ToolPlan]:
        check_think(req, self.host.target(model_name(req.model)))
        keep_alive_s(req.keep_alive)
        fields = openai_fields(req, self.host.target(model_name(req.model)).n_ctx)
        openai = _validated(ChatCompletionRequest, {
            "model": model_name(req.model), "messages": openai_messages(req.messages),
            "tools": req.tools or None, **fields})  # fmt: skip
        return self.chat_serving.admit(openai, backend)

    def admit_generate(self, req: OllamaGenerateRequest, backend) -> tuple[Job, ToolPlan]:
        check_think(req, self.host.target(model_name(req.model)))
        keep_alive_s(req.keep_alive)
        for field, value, why in (
            ("suffix", req.suffix, "fill in the middle is not supported"),
            ("context", req.context, "the token context of an earlier reply is not kept; "
                                     "send the conversation to /api/chat"),
            ("template", req.template, "the model's own chat template is used; send raw: true "
                                       "with the whole prompt instead"),
            ("images", req.images, "the models this server runs read text only"),
        ):  # fmt: skip
            if value:
                raise errors.bad_request(f"{field}: {why}.", param=field)
        name = model_name(req.model)
        fields = openai_fields(req, self.host.target(name).n_ctx)
        if req.raw:
            if backend is not None:
                raise errors.bad_request(f"raw prompts need a local model; {name!r} answers chat "
                                         "only.", param="raw")  # fmt: skip
            if "response_format" in fields:
                raise errors.bad_request("format needs the chat template: leave raw out.",
                                         param="format")  # fmt: skip
            fields.pop("response_format", None)
            completion = _validated(CompletionRequest,
                                    {"model": name, "prompt": req.prompt or "", **fields})
            return self.completion_serving.admit(completion), NO_TOOLS
        messages = [{"role": "system", "content": req.system}] if req.system else []
        messages.append({"role": "user", "content": req.prompt or ""})
        openai = _validated(ChatCompletionRequest, {"model": name, "messages": messages, **fields})
        return self.chat_serving.admit(openai, backend)

    # Replies ----------------------------------------------------------------------------------
    async def whole(self, job: Job, plan: ToolPlan, *, chat: bool, started: float,
                    disconnected: Callable[[], Awaitable[bool]]) -> dict:  # fmt: skip
        final = await final_reply(self.host, job, disconnected)
        parsed = plan.read(final.text)
        shape = _Shape(chat)
        return {
            "model": answering_model(self.host, job),
            "created_at": now_rfc3339(),
            **shape.text(parsed.content or "", tool_calls(parsed), final.reasoning),
            "done": True,
            "done_reason": FINISH.get(final.finish_reason, "stop"),
            **durations(final.metrics, started),
        }

    async def stream(self, job: Job, plan: ToolPlan, *, chat: bool,
                     started: float) -> AsyncIterator[str]:  # fmt: skip
        """NDJSON: a line per piece of text, tool calls whole in one line, then the `done`
        line with the figures; an engine failure is an `{"error": ...}` line (Ollama's
        clients raise it). Closing the generator (client gone) cancels the reply."""
        shape = _Shape(chat)
        model = answering_model(self.host, job)
        calls = ToolCallStream(plan.names, plan.forced) if plan.parse_calls else None

        def line(body: dict, done: bool = False) -> str:
            return ndjson({"model": model, "created_at": now_rfc3339(), **body, "done": done})

        finished = False
        try:
            async for event in job.stream():
                if isinstance(event, TextDelta) and event.reasoning:
                    if event.text:
                        yield line(shape.text("", thinking=event.text))
                elif isinstance(event, TextDelta):
                    text = calls.feed(event.text) if calls is not None else event.text
                    if text:
                        yield line(shape.text(text))
                elif isinstance(event, Done):
                    finished = True
                    if calls is not None:
                        parsed = plan.limit(calls.finish())
                        if parsed.content:
                            yield line(shape.text(parsed.content))
                        if parsed.calls:
                            yield line(shape.text("", tool_calls(parsed)))
                    yield line({**shape.text(""),
                                "done_reason": FINISH.get(event.finish_reason, "stop"),
                                **durations(event.metrics, started)}, done=True)  # fmt: skip
                elif isinstance(event, Error | Exited):
                    finished = True
                    yield ndjson({"error": engine_error(event).message})
            if not finished:
                finished = True
                yield ndjson({"error": engine_error(None).message})
        finally:
            if not finished:
                with contextlib.suppress(Exception):
                    cancel(job)

    async def load_only(self, name: str, keep_alive: float | None, *, chat: bool) -> dict:
        """Ollama's answer to a request with nothing to say (no prompt, no messages): the
        model is loaded (`done_reason` "load"), or with keep_alive 0 unloaded ("unload"):
        clients use it to load a model ahead or to free its memory. The served model is
        pinned: asked to unload, it says so (400)."""
        name = model_name(name)
        host = self.host
        if keep_alive == 0:
            if host.serves(name):
                raise errors.bad_request(f"{name!r} is the model this server serves: it stays "
                                         "loaded.", param="keep_alive")  # fmt: skip
            reason = "unload"
            unloaded = await asyncio.to_thread(host.unload, name)
            if not unloaded and (host.installed is None
                                 or await asyncio.to_thread(host.installed.find, name) is None):
                check_model(host, name)  # 404 for a name no installed model has
        else:
            reason = "load"
            await host.use(name, keep_alive)
            target = host.target(name)
            check_ready(target)
            check_model(target, name)
        return {"model": name, "created_at": now_rfc3339(), **_Shape(chat).text(""),
                "done": True, "done_reason": reason}  # fmt: skip

    # Embeddings -------------------------------------------------------------------------------
    async def embed(self, req: OllamaEmbedRequest, started: float) -> dict:
        keep_alive_s(req.keep_alive)
        openai = _validated(EmbeddingRequest, {"model": model_name(req.model),
                                               "input": req.input,
                                               "dimensions": req.dimensions})  # fmt: skip
        job = self.embeddings.admit(openai)
        result = await self.embeddings.complete(openai, job)
        return {
            "model": result.model,
            "embeddings": [item.embedding for item in result.data],
            "total_duration": int((time.monotonic() - started) * 1e9),
            "load_duration": 0,
            "prompt_eval_count": result.usage.prompt_tokens,
        }

    async def embeddings_legacy(self, req: OllamaEmbeddingsRequest) -> dict:
        keep_alive_s(req.keep_alive)
        openai = _validated(EmbeddingRequest, {"model": model_name(req.model),
                                               "input": req.prompt})  # fmt: skip
        job = self.embeddings.admit(openai)
        result = await self.embeddings.complete(openai, job)
        return {"embedding": result.data[0].embedding}
