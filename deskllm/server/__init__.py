"""A local OpenAI-compatible API server over the one engine (`deskllm serve`).

Laid out like vLLM's OpenAI entrypoint: one folder per endpoint with `protocol.py` (pydantic
models mirroring OpenAI's schema), `serving.py` (request → engine calls → response, no HTTP)
and `api_router.py` (thin FastAPI routes). `errors.py` builds every error in OpenAI's shape.
The engine answers one request at a time; `engine_queue.EngineQueue` queues the rest. With
`--parallel N` the batched engine answers up to N at once (`batch_queue.BatchEngineQueue`).
"""

from deskllm.server.app import create_app
from deskllm.server.config import ServerConfig
from deskllm.server.model_host import ModelHost

__all__ = ["ModelHost", "ServerConfig", "create_app"]
