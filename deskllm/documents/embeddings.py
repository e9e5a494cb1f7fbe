"""The embedding model in an engine process of its own, beside the chat model's.

It is the same engine (llama.cpp's pooling, `Embed` requests) as the API's /v1/embeddings, but
its own process with its own model: indexing a folder never waits on, or slows the KV cache of,
a chat.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from deskllm.documents.embedding_model import default_embedding_model
from deskllm.engine.client import EngineClient
from deskllm.engine.domain import LoadParams

BATCH_TEXTS = 16  # texts per Embed request: few enough that a cancel is heard soon


class EmbeddingEngine:
    def __init__(self, model_path: Path | str | None = None, n_threads: int = 0) -> None:
        self.model_path = Path(model_path) if model_path else default_embedding_model()
        if not self.model_path.is_file():
            raise FileNotFoundError(
                f"the embedding model {self.model_path} is missing: download it again, or "
                "re-index the collection with another embedding model"
            )
        self.client = EngineClient()
        try:
            # F16 and F32 weights are never repacked: the extra-buffer probe has nothing to test.
            params = LoadParams(str(self.model_path), n_threads=n_threads, use_extra_bufts=False)
            self.loaded = self.client.load(params)
            self.dims = len(self.client.embed(["dimensions"]).vectors[0])
        except BaseException:
            self.client.close()
            raise
        self.tokens = 0  # tokens read in all, for the speed readout

    @property
    def name(self) -> str:
        return self.model_path.name

    def embed(self, texts: Sequence[str]) -> list[tuple[float, ...]]:
        vectors: list[tuple[float, ...]] = []
        for i in range(0, len(texts), BATCH_TEXTS):
            result = self.client.embed(list(texts[i : i + BATCH_TEXTS]), truncate=True)
            vectors.extend(result.vectors)
            self.tokens += result.prompt_tokens
        return vectors

    def close(self) -> None:
        self.client.close()

    def __enter__(self) -> EmbeddingEngine:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
