"""Embeddings: texts → the engine's pooled, unit-length vectors → an OpenAI list. They wait
in the same queue as the replies. No HTTP here."""

from __future__ import annotations

import base64
import struct

from deskllm.engine.domain import Embeddings, Error, Exited
from deskllm.engine.errors import ErrorKind
from deskllm.server import errors
from deskllm.server.embeddings.protocol import (
    MAX_INPUTS,
    Embedding,
    EmbeddingList,
    EmbeddingRequest,
    EmbeddingUsage,
)
from deskllm.server.engine_queue import EmbedRequest, Job
from deskllm.server.model_host import ModelHost
from deskllm.server.models.serving import check_model, check_ready
from deskllm.server.replies import engine_error, submit, utf8


def texts_of(req: EmbeddingRequest) -> tuple[str, ...]:
    """The inputs: a string or a list of strings, none empty (token arrays are not taken)."""
    texts = [req.input] if isinstance(req.input, str) else req.input
    if not texts:
        raise errors.bad_request("input is empty.", param="input")
    if len(texts) > MAX_INPUTS:
        raise errors.bad_request(f"At most {MAX_INPUTS} inputs per request.", param="input")
    for i, text in enumerate(texts):
        if not text:
            raise errors.bad_request(f"input[{i}] is empty.", param="input")
    return tuple(utf8(t, "input") for t in texts)


def encoded(vector: tuple[float, ...], fmt: str) -> list[float] | str:
    if fmt == "base64":
        return base64.b64encode(struct.pack(f"<{len(vector)}f", *vector)).decode()
    return list(vector)


class EmbeddingServing:
    def __init__(self, host: ModelHost) -> None:
        self.host = host

    def admit(self, req: EmbeddingRequest) -> Job:
        """Check the request and queue it: raises ApiError (400, 404, 429, 503)."""
        target = self.host.target(req.model)
        check_ready(target)
        check_model(target, req.model)
        if req.dimensions is not None:
            raise errors.bad_request("dimensions is not supported: the model's own size is "
                                     "returned.", param="dimensions")  # fmt: skip
        return submit(target, EmbedRequest(texts_of(req)))

    async def complete(self, req: EmbeddingRequest, job: Job) -> EmbeddingList:
        final = None
        while (event := await job.get()) is not None:
            if isinstance(event, Embeddings | Error | Exited):
                final = event
        if isinstance(final, Error) and final.kind in (ErrorKind.CONTEXT, ErrorKind.BAD_REQUEST):
            code = "context_length_exceeded" if final.kind == ErrorKind.CONTEXT else None
            raise errors.bad_request(final.reason, param="input", code=code)
        if not isinstance(final, Embeddings):
            raise engine_error(final)
        data = [
            Embedding(index=i, embedding=encoded(v, req.encoding_format))
            for i, v in enumerate(final.vectors)
        ]
        usage = EmbeddingUsage(prompt_tokens=final.prompt_tokens, total_tokens=final.prompt_tokens)
        return EmbeddingList(data=data, model=job.owner.model_id, usage=usage)
