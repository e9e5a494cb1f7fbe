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
# Models trained with a task prefix before each text (query, document), by GGUF architecture:
# without them their retrieval is measurably worse (their model cards).
PREFIXES = {
    "nomic-bert": ("search_query: ", "search_document: "),
    "nomic-bert-moe": ("search_query: ", "search_document: "),
    "gemma-embedding": ("task: search result | query: ", "title: none | text: "),
}
# Architectures made for embeddings (Discover's downloads, the collection's model menu).
EMBEDDING_ARCHITECTURES = frozenset(
    {"bert", "nomic-bert", "nomic-bert-moe", "jina-bert-v2", "jina-bert-v3", "gemma-embedding",
     "modern-bert", "neo-bert", "t5encoder"}
)  # fmt: skip


def architecture_of(path: Path) -> str:
    from deskllm.gguf.header import GgufError, read_header

    try:
        return read_header(path).architecture
    except GgufError:
        return "unknown"


def collection_model(embedding_model: str) -> Path:
    """The GGUF a collection was indexed with (its vectors only match that model's): the
    bundled model is stored by its name, another by its path."""
    default = default_embedding_model()
    if embedding_model in (default.name, str(default)):
        return default
    return Path(embedding_model)


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
        self.query_prefix, self.document_prefix = PREFIXES.get(
            architecture_of(self.model_path), ("", "")
        )

    @property
    def name(self) -> str:
        return self.model_path.name

    def embed(self, texts: Sequence[str]) -> list[tuple[float, ...]]:
        """Passages' vectors (with the model's document prefix)."""
        return self._embed([self.document_prefix + t for t in texts])

    def embed_query(self, texts: Sequence[str]) -> list[tuple[float, ...]]:
        """Questions' vectors (with the model's query prefix)."""
        return self._embed([self.query_prefix + t for t in texts])

    def _embed(self, texts: Sequence[str]) -> list[tuple[float, ...]]:
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
