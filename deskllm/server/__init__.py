"""A local OpenAI-compatible API server over the one engine (`deskllm serve`).

Laid out like vLLM's OpenAI entrypoint: one folder per endpoint with `protocol.py` (pydantic
models mirroring OpenAI's schema), `serving.py` (request → engine calls → response, no HTTP)
and `api_router.py` (thin FastAPI routes). `errors.py` builds every error in OpenAI's shape.
The engine answers `--parallel N` requests at once (its slots; 1 by default), and
`engine_queue.EngineQueue` admits them and queues the rest.
"""

from deskllm.server.app import create_app
from deskllm.server.config import ServerConfig
from deskllm.server.model_host import ModelHost

__all__ = ["ModelHost", "ServerConfig", "create_app"]
