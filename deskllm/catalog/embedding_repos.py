"""Popular embedding models as GGUF, offered in Discover for the documents' collections (the
bundled all-MiniLM-L6-v2 is small and English-only; these read longer passages or more
languages). Each is a public Hugging Face repo; Discover plans and downloads it like any other.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class EmbeddingRepo:
    repo_id: str
    name: str
    dims: int
    about: str


EMBEDDING_REPOS = (
    EmbeddingRepo("nomic-ai/nomic-embed-text-v1.5-GGUF", "nomic-embed-text v1.5", 768,
                  "English; passages up to 8,192 tokens"),
    EmbeddingRepo("CompendiumLabs/bge-small-en-v1.5-gguf", "bge-small-en v1.5", 384,
                  "English; small and fast"),
    EmbeddingRepo("ggml-org/embeddinggemma-300M-GGUF", "EmbeddingGemma 300M", 768,
                  "over 100 languages"),
)  # fmt: skip
