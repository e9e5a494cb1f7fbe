"""Hybrid retrieval: BM25 and vector search over a conversation's collections, fused by
reciprocal rank, and the passages put into the prompt as numbered sources.

Reciprocal rank fusion (Cormack et al., 2009) needs no score calibration between BM25 and
cosine distance: a passage scores Σ 1/(60 + rank) over the lists it is in, so one found by
both beats one that is first in only one.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from deskllm.documents.store import Collection, DocumentStore, StoredChunk

RRF_K = 60
CANDIDATES = 40  # from each list, before fusion
TOP_K = 5


@dataclass(frozen=True)
class Hit:
    number: int  # the source's number in the prompt and under the reply, from 1
    chunk: StoredChunk
    score: float
    bm25_rank: int | None  # 1-based, None when that list did not have it
    vector_rank: int | None

    def label(self) -> str:
        """"notes/setup.md, p. 3 — Install › Linux" (the file, page and heading it is from)."""
        where = self.chunk.path
        if self.chunk.page is not None:
            where += f", p. {self.chunk.page}"
        if self.chunk.heading:
            where += f" — {self.chunk.heading}"
        return where

    def as_json(self) -> dict:
        c = self.chunk
        return {
            "number": self.number, "path": c.path, "page": c.page, "heading": c.heading,
            "start": c.start, "end": c.end, "text": c.text, "collection": c.collection,
            "score": round(self.score, 6), "bm25_rank": self.bm25_rank,
            "vector_rank": self.vector_rank,
        }  # fmt: skip


def fuse(ranked_lists: Sequence[Sequence[int]], k: int = RRF_K) -> list[tuple[int, float]]:
    """(id, score) best first: reciprocal rank fusion of several ranked id lists."""
    scores: dict[int, float] = {}
    for ranked in ranked_lists:
        for rank, item in enumerate(ranked, start=1):
            scores[item] = scores.get(item, 0.0) + 1.0 / (k + rank)
    return sorted(scores.items(), key=lambda kv: (-kv[1], kv[0]))


def search(
    store: DocumentStore,
    collections: Sequence[Collection],
    query: str,
    embed: Callable[[list[str]], list[tuple[float, ...]]] | None,
    top_k: int = TOP_K,
    mode: str = "hybrid",
) -> list[Hit]:
    """The best `top_k` passages for `query`. `mode`: "hybrid", "bm25" or "vector"."""
    lexical = store.bm25(collections, query, CANDIDATES) if mode != "vector" else []
    semantic: list[int] = []
    if mode != "bm25" and embed is not None and query.strip():
        semantic = store.nearest(collections, embed([query])[0], CANDIDATES)
    fused = fuse([lexical, semantic])[:top_k]
    chunks = store.chunks([cid for cid, _ in fused])
    bm25_rank = {cid: i for i, cid in enumerate(lexical, start=1)}
    vector_rank = {cid: i for i, cid in enumerate(semantic, start=1)}
    return [
        Hit(n, chunks[cid], score, bm25_rank.get(cid), vector_rank.get(cid))
        for n, (cid, score) in enumerate(fused, start=1)
        if cid in chunks
    ]


def sources_prompt(hits: Sequence[Hit]) -> str:
    """The passages as numbered sources, for the system prompt of the reply that uses them."""
    if not hits:
        return ""
    parts = [
        "Answer from these passages of the user's documents where they help, and cite each "
        "one you use by its number in square brackets, like [1]. If they do not hold the "
        "answer, say so.",
    ]
    for hit in hits:
        parts.append(f"[{hit.number}] {hit.label()}\n{hit.chunk.text.strip()}")
    return "\n\n".join(parts)
