"""The two passes of a quality check, each in its own throwaway process (like the engine's
worker: llama.cpp may abort or be killed there without taking the caller with it, and the
model's memory goes back to the system when the process ends).

  reference pass: tokenize the text, evaluate it in chunks of n_ctx tokens, store the
                  log-probabilities of every scored position (deskllm.measure.logprobs)
  candidate pass: evaluate the same tokens, compare each scored position with the stored row

Both drive llama.cpp's C API through LlamaModel (the engine's own load: extra buffer
types as the crash-safe probe decided) and evaluate each chunk as llama-perplexity does: a
fresh KV cache, the first token replaced by BOS where the model adds one, logits for the
second half. Messages to the parent: ("progress", chunk, chunks), ("done", payload),
("error", text).
"""

from __future__ import annotations

import ctypes
import resource
import shutil
import signal
from collections.abc import Iterator
from multiprocessing.connection import Connection
from pathlib import Path

import numpy as np

from deskllm.engine.domain import LoadParams
from deskllm.measure import logprobs


def run_pass(conn: Connection, kind: str, params: LoadParams, args: dict) -> None:
    """The child's entry point: `kind` "reference" or "candidate"."""
    # Ctrl+C reaches the whole process group: the parent decides, and ends this process.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        if kind == "reference":
            payload = _reference(conn, params, args["text"], args["n_ctx"], Path(args["out"]))
        else:
            payload = _candidate(conn, params, Path(args["base"]))
        payload["peak_rss_bytes"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
        conn.send(("done", payload))
    except Exception as exc:  # the parent reports it; a crash it learns from the exit code
        conn.send(("error", str(exc) or type(exc).__name__))
    finally:
        conn.close()


class _Evaluator:
    """One model and context; evaluates a chunk, yielding the logits of its scored part."""

    def __init__(self, params: LoadParams) -> None:
        from deskllm.engine.llama_model import LlamaModel

        self.rt = LlamaModel(params, bool(params.use_extra_bufts))
        import llama_cpp as L

        self.L = L
        self.n_batch = params.n_batch
        self.batch = L.llama_batch_init(self.n_batch, 0, 1)
        vocab = self.rt.vocab
        self.bos = L.llama_vocab_bos(vocab) if L.llama_vocab_get_add_bos(vocab) else None

    def tokenize(self, text: str) -> list[int]:
        """As llama-perplexity: special tokens added (BOS), special text not parsed."""
        L, raw = self.L, text.encode("utf-8")
        n_max = len(raw) + 8
        buf = (L.llama_token * n_max)()
        n = L.llama_tokenize(self.rt.vocab, raw, len(raw), buf, n_max, True, False)
        if n < 0:
            buf = (L.llama_token * -n)()
            n = L.llama_tokenize(self.rt.vocab, raw, len(raw), buf, -n, True, False)
        return list(buf[:n])

    def scored_logits(self, chunk: np.ndarray) -> Iterator[np.ndarray]:
        """Logits (rows, n_vocab) float32 of positions first_scored … n_ctx-2, in order."""
        L, rt, batch = self.L, self.rt, self.batch
        n_ctx = len(chunk)
        first = logprobs.first_scored(n_ctx)
        tokens = [int(t) for t in chunk]
        if self.bos is not None:
            tokens[0] = self.bos
        L.llama_memory_clear(rt.memory, True)
        for start in range(0, n_ctx, self.n_batch):
            part = tokens[start : start + self.n_batch]
            outputs = 0
            for k, token in enumerate(part):
                pos = start + k
                batch.token[k] = token
                batch.pos[k] = pos
                batch.n_seq_id[k] = 1
                batch.seq_id[k][0] = 0
                batch.logits[k] = pos >= first
                outputs += pos >= first
            batch.n_tokens = len(part)
            rc = L.llama_decode(rt.ctx, batch)
            if rc != 0:
                raise RuntimeError(f"llama_decode failed ({rc})")
            if outputs:
                ptr = L.llama_get_logits(rt.ctx)
                flat = np.ctypeslib.as_array(
                    ctypes.cast(ptr, ctypes.POINTER(ctypes.c_float)),
                    shape=(outputs * rt.n_vocab,),
                )
                rows = flat.reshape(outputs, rt.n_vocab).copy()
                if start + len(part) == n_ctx:
                    rows = rows[:-1]  # the last position predicts past the chunk
                yield rows

    def close(self) -> None:
        self.L.llama_batch_free(self.batch)
        self.rt.close()


def _reference(conn: Connection, params: LoadParams, text: str, n_ctx: int, out: Path) -> dict:
    ev = _Evaluator(params)
    try:
        tokens = np.asarray(ev.tokenize(text), dtype=np.int32)
        n_chunk = len(tokens) // n_ctx
        if n_chunk < 1:
            raise ValueError(
                f"the text is {len(tokens)} tokens, less than one chunk of {n_ctx}: use a "
                "longer text or a smaller --ctx"
            )
        need = n_chunk * logprobs.scored_per_chunk(n_ctx) * logprobs.row_width(ev.rt.n_vocab) * 2
        free = shutil.disk_usage(out.parent).free
        if need > free:
            raise ValueError(
                f"the reference's log-probabilities need {need / 2**20:,.0f} MiB in "
                f"{out.parent} and {free / 2**20:,.0f} MiB are free: use a shorter text"
            )
        with open(out, "wb") as f:
            logprobs.write_header(f, n_ctx, ev.rt.n_vocab, tokens)
            for i in range(n_chunk):
                chunk = tokens[i * n_ctx : (i + 1) * n_ctx]
                for rows in ev.scored_logits(chunk):
                    f.write(logprobs.compact_log_probs(rows).tobytes())
                conn.send(("progress", i + 1, n_chunk))
        return {"text_tokens": len(tokens), "chunks": n_chunk, "n_vocab": ev.rt.n_vocab}
    finally:
        ev.close()


def _candidate(conn: Connection, params: LoadParams, base: Path) -> dict:
    header = logprobs.read_header(base)
    ev = _Evaluator(params)
    try:
        if ev.rt.n_vocab != header.n_vocab:
            raise ValueError(
                f"the model's vocabulary has {ev.rt.n_vocab} tokens and the reference's "
                f"{header.n_vocab}: they are not the same model"
            )
        n_ctx, first = header.n_ctx, logprobs.first_scored(header.n_ctx)
        parts = []
        for i in range(header.n_chunk):
            chunk = header.tokens[i * n_ctx : (i + 1) * n_ctx]
            base_rows = logprobs.chunk_rows(base, header, i)
            done = 0  # scored per batch: a long context's logits are never held at once
            for logits in ev.scored_logits(chunk):
                n = len(logits)
                truth = chunk[first + 1 + done : first + 1 + done + n]
                parts.append(logprobs.score_rows(logits, base_rows[done : done + n], truth))
                done += n
            conn.send(("progress", i + 1, header.n_chunk))
        scores = logprobs.TokenScores.concat(parts)
        return {"scores": scores}
    finally:
        ev.close()
