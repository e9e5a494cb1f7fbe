"""Embedder: pooled, normalised embeddings from the loaded model (the API's /v1/embeddings).

A second llama.cpp context on the same weights, made on the first request: its own small KV
cache (cleared before each text), so embedding never disturbs the chat context's cached
conversation. Pooling is the model's own (CLS, last token, mean) where its file names one,
else the mean over the text's tokens (a chat model's). Runs only inside the engine worker.
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable, Sequence

from deskllm.engine.errors import EngineError, ErrorKind
from deskllm.engine.llama_model import L

MAX_EMBED_CTX = 2048  # tokens of one text; the context's KV cache is sized for this


class Embedder:
    def __init__(self, model: ctypes.c_void_p, n_ctx: int, n_threads: int) -> None:
        self.model = model
        self.n_ctx = max(16, min(n_ctx, MAX_EMBED_CTX))
        self.n_embd = L.llama_model_n_embd(model)
        self.ctx = self._context(n_threads, L.LLAMA_POOLING_TYPE_UNSPECIFIED)
        if L.llama_pooling_type(self.ctx) == L.LLAMA_POOLING_TYPE_NONE:
            L.llama_free(self.ctx)  # a chat model: its file names no pooling
            self.ctx = self._context(n_threads, L.LLAMA_POOLING_TYPE_MEAN)
        if L.llama_pooling_type(self.ctx) == L.LLAMA_POOLING_TYPE_RANK:
            self.close()
            raise EngineError("this model is a reranker: it gives scores, not embeddings",
                              ErrorKind.BAD_REQUEST)  # fmt: skip
        self.batch = L.llama_batch_init(self.n_ctx, 0, 1)

    def _context(self, n_threads: int, pooling: int) -> ctypes.c_void_p:
        cparams = L.llama_context_default_params()
        cparams.n_ctx = cparams.n_batch = cparams.n_ubatch = self.n_ctx  # one text, one batch
        cparams.n_seq_max = 1
        cparams.n_threads = cparams.n_threads_batch = n_threads
        cparams.embeddings = True
        cparams.pooling_type = pooling
        ctx = L.llama_init_from_model(self.model, cparams)
        if not ctx:
            raise EngineError(f"llama.cpp could not create a {self.n_ctx}-token context for "
                              "embeddings (not enough memory?)")  # fmt: skip
        return ctx

    def embed(self, tokens: list[int]) -> list[float]:
        """The unit-length pooled embedding of one tokenized text."""
        import numpy as np

        if not tokens:
            raise EngineError("an input is empty", ErrorKind.BAD_REQUEST)
        if len(tokens) > self.n_ctx:
            raise EngineError(
                f"an input is {len(tokens)} tokens; embeddings take at most {self.n_ctx}",
                ErrorKind.CONTEXT,
            )
        L.llama_memory_clear(L.llama_get_memory(self.ctx), True)
        batch = self.batch
        for i, token in enumerate(tokens):
            batch.token[i], batch.pos[i], batch.n_seq_id[i] = token, i, 1
            batch.seq_id[i][0] = 0
            batch.logits[i] = True
        batch.n_tokens = len(tokens)
        rc = L.llama_decode(self.ctx, batch)
        if rc != 0:
            raise EngineError(f"llama_decode failed ({rc}) while embedding")
        raw = L.llama_get_embeddings_seq(self.ctx, 0)
        if not raw:
            raise EngineError("llama.cpp gave no pooled embedding for this model")
        vector = np.ctypeslib.as_array(raw, (self.n_embd,)).astype(np.float64)
        norm = float(np.linalg.norm(vector))
        return (vector / norm if norm > 0 else vector).tolist()

    def embed_texts(
        self, texts: Sequence[str], tokenize: Callable[[str], list[int]], truncate: bool = False
    ) -> tuple[tuple[tuple[float, ...], ...], int]:
        """Each text's embedding, tokenized with the model's `tokenize`, and the tokens read in
        all. `truncate`: a text longer than the window is cut to it (its end is not read)."""
        tokenized = [tokenize(text) for text in texts]
        if truncate:
            tokenized = [tokens[: self.n_ctx] for tokens in tokenized]
        vectors = tuple(tuple(self.embed(tokens)) for tokens in tokenized)
        return vectors, sum(len(tokens) for tokens in tokenized)

    def close(self) -> None:
        if getattr(self, "batch", None) is not None:
            L.llama_batch_free(self.batch)
            self.batch = None
        if getattr(self, "ctx", None):
            L.llama_free(self.ctx)
            self.ctx = None
