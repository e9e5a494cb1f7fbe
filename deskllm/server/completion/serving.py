"""Text completions: a raw prompt → one engine reply (no chat template) → an OpenAI
text_completion, or a stream of them. No HTTP here."""

from __future__ import annotations

import contextlib
import dataclasses
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable

from deskllm.engine.domain import Done, Error, Exited, Sampling, TextDelta, TokenLogprob
from deskllm.server import errors
from deskllm.server.chat_completion.serving import FINISH, common_sampling, timings, usage
from deskllm.server.completion.protocol import (
    Completion,
    CompletionChoice,
    CompletionLogprobs,
    CompletionRequest,
)
from deskllm.server.engine_queue import ChatRequest, Job
from deskllm.server.logprobs import completion_logprobs
from deskllm.server.model_host import ModelHost
from deskllm.server.models.serving import check_model, check_ready
from deskllm.server.replies import (
    cancel,
    conversation_id,
    engine_error,
    final_reply,
    sse,
    submit,
    utf8,
)


def prompt_text(req: CompletionRequest) -> str:
    """The one prompt: a string, or a list of one string (one choice per request here)."""
    prompt = req.prompt
    if isinstance(prompt, list):
        if len(prompt) != 1:
            raise errors.bad_request("Only one prompt per request is supported (a string or "
                                     "a list of one string).", param="prompt")  # fmt: skip
        prompt = prompt[0]
    if not prompt:
        raise errors.bad_request("The prompt is empty.", param="prompt")
    return utf8(prompt, "prompt")


def check_supported(req: CompletionRequest) -> None:
    if req.n not in (None, 1) or req.best_of not in (None, 1):
        raise errors.bad_request("Only n=1 and best_of=1 are supported.", param="n")
    if req.echo:
        raise errors.bad_request("echo is not supported.", param="echo")
    if req.suffix:
        raise errors.bad_request("suffix (fill in the middle) is not supported.", param="suffix")


def to_sampling(req: CompletionRequest, n_ctx: int) -> Sampling:
    """As chat's; `logprobs` N: every token's log-probability with the N most likely."""
    return dataclasses.replace(
        common_sampling(req, req.max_tokens, n_ctx),
        token_logprobs=req.logprobs is not None,
        top_logprobs=req.logprobs or 0,
    )


class CompletionServing:
    def __init__(self, host: ModelHost) -> None:
        self.host = host

    def admit(self, req: CompletionRequest) -> Job:
        """Check the request and queue it: raises ApiError (400, 404, 429, 503)."""
        target = self.host.target(req.model)
        check_ready(target)
        check_model(target, req.model)
        check_supported(req)
        request = ChatRequest(
            conversation_id(req.user), (), to_sampling(req, target.n_ctx),
            raw_prompt=prompt_text(req),
        )  # fmt: skip
        return submit(target, request)

    def _logprobs(self, req: CompletionRequest, entries, offset: int = 0):
        if req.logprobs is None:
            return None
        return CompletionLogprobs(**completion_logprobs(entries, offset))

    async def complete(
        self, job: Job, req: CompletionRequest, disconnected: Callable[[], Awaitable[bool]]
    ) -> Completion:
        """The whole reply; a client that goes away while it waits cancels it."""
        entries: list[TokenLogprob] = []
        final = await final_reply(
            self.host, job, disconnected, lambda delta: entries.extend(delta.logprobs)
        )
        choice = CompletionChoice(
            text=final.text,
            finish_reason=FINISH.get(final.finish_reason, "stop"),
            logprobs=self._logprobs(req, entries),
        )
        return Completion(
            id=f"cmpl-{uuid.uuid4().hex}", created=int(time.time()), model=job.owner.model_id,
            choices=[choice], usage=usage(final.metrics), timings=timings(final.metrics),
        )  # fmt: skip

    async def stream(self, req: CompletionRequest, job: Job) -> AsyncIterator[str]:
        """Server-sent events: text_completion chunks, the last with the finish reason, a
        usage chunk if asked, then `data: [DONE]`. Closing the generator cancels the reply."""
        chunk_id, created = f"cmpl-{uuid.uuid4().hex}", int(time.time())
        offset = 0

        def chunk(choices: list[CompletionChoice], **extra) -> str:
            body = Completion(id=chunk_id, created=created, model=job.owner.model_id,
                              choices=choices, **extra)  # fmt: skip
            return sse(body.model_dump(exclude_none=True))

        finished = False
        try:
            async for event in job.stream():
                if isinstance(event, TextDelta):
                    logprobs = self._logprobs(req, event.logprobs, offset)
                    offset += len(event.text)
                    yield chunk([CompletionChoice(text=event.text, logprobs=logprobs)])
                elif isinstance(event, Done):
                    finished = True
                    finish = FINISH.get(event.finish_reason, "stop")
                    yield chunk([CompletionChoice(text="", finish_reason=finish)])
                    if req.stream_options is not None and req.stream_options.include_usage:
                        yield chunk([], usage=usage(event.metrics), timings=timings(event.metrics))
                elif isinstance(event, Error | Exited):
                    finished = True
                    yield sse(engine_error(event).body())
            if not finished:
                finished = True
                yield sse(engine_error(None).body())
            yield "data: [DONE]\n\n"
        finally:
            if not finished:
                with contextlib.suppress(Exception):
                    cancel(job)
