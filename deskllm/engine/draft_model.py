"""Draft-model speculation: a smaller model of the same family proposes the next tokens, the
main model verifies them in its step's one decode (scheduler.py `_verify`, the same path as
n-gram drafts, so greedy replies keep their near-tie rule and sampled ones their
distribution).

The draft model has its own llama.cpp context, one sequence per slot of the main one. Each
sequence is kept level with its slot lazily: before proposing, the draft drops what it holds
past the prefix it shares with the slot's tokens and reads the rest (a prompt, a restored
conversation, another reply in the slot), so nothing that moves the main slot's cells has
to tell it. It proposes greedily and stops where its own best token is less likely than
P_MIN (llama-server's --draft-p-min): a draft the main model would likely refuse costs a
verification position for nothing.
"""

from __future__ import annotations

import ctypes
from dataclasses import dataclass

from deskllm.engine.errors import EngineError, ErrorKind
from deskllm.engine.llama_model import L, free_model

DRAFT_MODEL_MOST = 16  # tokens a draft model proposes at most (llama-server's --draft-max)
P_MIN = 0.75  # the draft's own probability of its token under which it stops proposing
# As llama.cpp's speculative example: vocabularies may differ by a few added tokens at the
# end; the tokens from CHECK_FROM on are compared by text.
MAX_VOCAB_DIFFERENCE = 128
CHECK_FROM = 5
VOCAB_KINDS = {1: "SentencePiece (SPM)", 2: "byte-pair (BPE)", 3: "WordPiece (WPM)",
               4: "Unigram (UGM)", 5: "RWKV", 6: "PLaMo-2"}  # llama_vocab_type  # fmt: skip


@dataclass(frozen=True)
class VocabFacts:
    """What makes two models' token ids mean the same text."""

    kind: int  # llama_vocab_type: SPM, BPE, WPM, UGM...
    n_tokens: int
    bos: int
    eos: int
    add_bos: bool
    texts: tuple[bytes, ...]  # each token's text, for the ids both models have

    @classmethod
    def of(cls, vocab: ctypes.c_void_p) -> VocabFacts:
        n = L.llama_vocab_n_tokens(vocab)
        return cls(
            kind=L.llama_vocab_type(vocab),
            n_tokens=n,
            bos=L.llama_vocab_bos(vocab),
            eos=L.llama_vocab_eos(vocab),
            add_bos=bool(L.llama_vocab_get_add_bos(vocab)),
            texts=tuple(L.llama_vocab_get_text(vocab, i) or b"" for i in range(n)),
        )


def draft_refusal(main: VocabFacts, draft: VocabFacts) -> str | None:
    """Why `draft` cannot propose tokens for `main` (None: it can): its token ids must be
    the main model's, the special ones included."""
    if draft.kind != main.kind:
        return (f"its tokenizer is {VOCAB_KINDS.get(draft.kind, draft.kind)}, the model's "
                f"{VOCAB_KINDS.get(main.kind, main.kind)}")  # fmt: skip
    if abs(draft.n_tokens - main.n_tokens) > MAX_VOCAB_DIFFERENCE:
        return (f"its vocabulary has {draft.n_tokens:,} tokens, the model's {main.n_tokens:,}: "
                "not the same family")  # fmt: skip
    if (draft.bos, draft.eos, draft.add_bos) != (main.bos, main.eos, main.add_bos):
        return (f"its special tokens differ (BOS {draft.bos}, EOS {draft.eos}; the model's "
                f"BOS {main.bos}, EOS {main.eos})")  # fmt: skip
    for i in range(CHECK_FROM, min(draft.n_tokens, main.n_tokens)):
        if draft.texts[i] != main.texts[i]:
            return (f"token {i} is {draft.texts[i]!r} in it and {main.texts[i]!r} in the "
                    "model: another vocabulary")  # fmt: skip
    return None


class DraftModel:
    """The draft: `path` loaded with a context of `n_ctx` cells for `n_slots` sequences."""

    def __init__(self, path: str, main_vocab: ctypes.c_void_p, n_slots: int, n_ctx: int,
                 n_threads: int, use_extra_bufts: bool) -> None:  # fmt: skip
        mparams = L.llama_model_default_params()
        mparams.n_gpu_layers = 0
        mparams.use_extra_bufts = use_extra_bufts
        self.path = path
        self.model = L.llama_model_load_from_file(path.encode(), mparams)
        if not self.model:
            raise EngineError(f"llama.cpp could not load the draft model {path}",
                              ErrorKind.BAD_MODEL)  # fmt: skip
        self.vocab = L.llama_model_get_vocab(self.model)
        why = draft_refusal(VocabFacts.of(main_vocab), VocabFacts.of(self.vocab))
        if why is not None:
            self.close()
            raise EngineError(f"{path} cannot be the draft model: {why}", ErrorKind.BAD_MODEL)
        self.n_vocab = L.llama_vocab_n_tokens(self.vocab)
        cparams = L.llama_context_default_params()
        cparams.n_ctx = n_ctx
        cparams.n_batch = cparams.n_ubatch = 512
        cparams.n_seq_max = n_slots
        cparams.kv_unified = True
        cparams.n_threads = cparams.n_threads_batch = n_threads
        self.ctx = L.llama_init_from_model(self.model, cparams)
        if not self.ctx:
            self.close()
            raise EngineError(f"llama.cpp could not create a context of {n_ctx} tokens for "
                              f"the draft model {path}", ErrorKind.BAD_MODEL)  # fmt: skip
        self.n_batch = L.llama_n_batch(self.ctx)
        self.memory = L.llama_get_memory(self.ctx)
        self._batch = L.llama_batch_init(self.n_batch, 0, 1)
        self.held: list[list[int]] = [[] for _ in range(n_slots)]  # each sequence's tokens

    def set_threads(self, n_threads: int) -> None:
        L.llama_set_n_threads(self.ctx, n_threads, n_threads)

    def propose(self, seq: int, tokens: list[int], limit: int) -> list[int]:
        """Up to `limit` tokens the draft expects after `tokens` (the slot's whole sequence,
        the token this step feeds included), greedily, stopping where it is unsure."""
        if limit <= 0 or not tokens:
            return []
        held = self.held[seq]
        shared = 0
        for a, b in zip(held, tokens[:-1], strict=False):  # the last is read with logits
            if a != b:
                break
            shared += 1
        if shared < len(held):
            L.llama_memory_seq_rm(self.memory, seq, shared, -1)
            del held[shared:]
        draft: list[int] = []
        pending = tokens[shared:]
        while len(draft) < limit:
            if not self._read(seq, pending):
                break
            token, p = self._best()
            if p < P_MIN:
                break
            draft.append(token)
            pending = [token]
        return draft

    def _read(self, seq: int, tokens: list[int]) -> bool:
        """Decode `tokens` into `seq` in batches, logits for the last one only."""
        held = self.held[seq]
        for start in range(0, len(tokens), self.n_batch):
            chunk = tokens[start : start + self.n_batch]
            batch, pos = self._batch, len(held)
            for i, token in enumerate(chunk):
                batch.token[i] = token
                batch.pos[i] = pos + i
                batch.n_seq_id[i] = 1
                batch.seq_id[i][0] = seq
                batch.logits[i] = start + i == len(tokens) - 1
            batch.n_tokens = len(chunk)
            if L.llama_decode(self.ctx, batch) != 0 and not self._retry_alone(seq, pos):
                return False  # no room in the draft's cells: no draft this step
            held.extend(chunk)
        return True

    def _retry_alone(self, seq: int, pos: int) -> bool:
        """The pool is full (other slots' sequences fill it): drop them (each is read again
        when its slot drafts next) and decode the batch again."""
        L.llama_memory_seq_rm(self.memory, seq, pos, -1)
        for other, held in enumerate(self.held):
            if other != seq and held:
                L.llama_memory_seq_rm(self.memory, other, 0, -1)
                held.clear()
        if L.llama_decode(self.ctx, self._batch) == 0:
            return True
        L.llama_memory_seq_rm(self.memory, seq, pos, -1)
        return False

    def _best(self) -> tuple[int, float]:
        """The draft's greedy token after the last read, and its probability."""
        import numpy as np

        logits = np.ctypeslib.as_array(L.llama_get_logits_ith(self.ctx, -1), (self.n_vocab,))
        token = int(logits.argmax())
        top = logits[token]
        return token, float(1.0 / np.exp(logits - top).sum())

    def drafter(self, seq: int, tokens: list[int]) -> ModelDrafter:
        return ModelDrafter(self, seq, tokens)

    def close(self) -> None:
        if getattr(self, "_batch", None) is not None:
            L.llama_batch_free(self._batch)
            self._batch = None
        free_model(self)


class ModelDrafter:
    """A request's drafts from the draft model, as NgramIndex gives n-gram ones: the
    request's sequence so far (`extend` as it grows) and `propose`."""

    order = -1  # its drafts' kind for the engine's acceptance figures (n-grams: match length)

    def __init__(self, model: DraftModel, seq: int, tokens: list[int]) -> None:
        self.model, self.seq, self.tokens = model, seq, list(tokens)
        self.started = False

    def extend(self, tokens: list[int]) -> None:
        self.tokens.extend(tokens)

    def propose(self, limit: int) -> list[int]:
        if not self.started:
            # The reply's first token goes out before the draft reads the prompt (as
            # llama-server does): a long prompt would otherwise wait for both models.
            self.started = True
            return []
        return self.model.propose(self.seq, self.tokens, limit)
