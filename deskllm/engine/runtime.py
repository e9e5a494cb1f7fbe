"""LlamaRuntime: one model and one context on llama.cpp's C API (through llama_cpp's ctypes).

The C API is used directly rather than `llama_cpp.Llama` because the app needs what that class
does not give: extra buffer types switched per machine, an abort callback for a long prompt,
llama.cpp's native sampler chain with no per-token Python work beyond the loop itself, and the
KV state of one sequence saved and restored without copying logits.
Runs only inside the engine worker process.
"""

from __future__ import annotations

import codecs
import ctypes
import functools
import logging
import re
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from deskllm.llamacpp import build

build.activate()  # the chosen llama.cpp build, before it is imported

import llama_cpp as L  # noqa: E402

from deskllm.engine.errors import EngineError  # noqa: E402, F401 (the worker imports it here)
from deskllm.engine.kv_cache import KvState  # noqa: E402
from deskllm.engine.protocol import LoadParams, Sampling  # noqa: E402

log = logging.getLogger("deskllm.engine")

KV_TYPE_IDS = {"f32": 0, "f16": 1, "q4_0": 2, "q8_0": 8}
_BUFFER_RE = re.compile(r"\b(\S+)\s+(model|KV|compute|output|RS) buffer size =\s+([\d.]+) MiB")

_backend_ready = False
_log_lines: list[str] = []


class Cancelled(Exception):
    pass


@ctypes.CFUNCTYPE(None, ctypes.c_int, ctypes.c_char_p, ctypes.c_void_p)
def _log_callback(level: int, text: bytes, _user: ctypes.c_void_p) -> None:
    # llama.cpp's own log: keep it off the terminal, keep buffer sizes for calibration.
    line = text.decode("utf-8", "replace").rstrip()
    if "buffer size" in line:
        _log_lines.append(line)
    if level == 2:  # GGML_LOG_LEVEL_ERROR... levels: 1 debug? keep errors visible in our log
        log.debug("llama.cpp: %s", line)


def _init_backend() -> None:
    global _backend_ready
    if not _backend_ready:
        L.llama_log_set(_log_callback, None)
        L.llama_backend_init()
        _load_dynamic_backends()
        _backend_ready = True


def _load_dynamic_backends() -> None:
    """Release builds load their backends (CPU variants, GPU) at run time."""
    from deskllm.llamacpp.libraries import load_dynamic_backends, load_libraries

    lib_dir = build.library_dir()
    if lib_dir is None:
        return
    try:
        ggml, _llama = load_libraries(lib_dir)
    except OSError:
        return
    load_dynamic_backends(ggml, lib_dir)


@dataclass
class PromptResult:
    cached: int  # tokens reused from the KV cache
    evaluated: int  # tokens evaluated now
    eval_s: float


class LlamaRuntime:
    def __init__(
        self,
        params: LoadParams,
        use_extra_bufts: bool,
        on_progress: Callable[[float], None] | None = None,
    ) -> None:
        _init_backend()
        _log_lines.clear()
        self.params = params
        self.cancel_flag = threading.Event()
        mparams = L.llama_model_default_params()
        mparams.n_gpu_layers = params.n_gpu_layers
        mparams.use_extra_bufts = use_extra_bufts

        def progress(fraction: float, _user: ctypes.c_void_p) -> bool:
            if on_progress:
                on_progress(float(fraction))
            return True

        self._progress_cb = L.llama_progress_callback(progress)  # keep alive while loading
        mparams.progress_callback = self._progress_cb
        self.model = L.llama_model_load_from_file(params.model_path.encode(), mparams)
        if not self.model:
            raise EngineError(
                f"llama.cpp could not load {params.model_path}: the file is not a model this "
                "engine can read (corrupt, truncated or an unsupported architecture)",
                kind="bad_model",
            )
        self.vocab = L.llama_model_get_vocab(self.model)
        self.n_vocab = L.llama_vocab_n_tokens(self.vocab)
        self.n_ctx_train = L.llama_model_n_ctx_train(self.model)
        cparams = L.llama_context_default_params()
        cparams.n_ctx = params.n_ctx
        cparams.n_batch = params.n_batch
        cparams.n_ubatch = params.n_batch
        cparams.n_seq_max = 1
        cparams.n_threads = params.n_threads
        cparams.n_threads_batch = params.n_threads
        cparams.type_k = KV_TYPE_IDS[params.kv_type]
        cparams.type_v = KV_TYPE_IDS[params.kv_type]
        cparams.flash_attn_type = (
            L.LLAMA_FLASH_ATTN_TYPE_ENABLED
            if params.flash_attn
            else L.LLAMA_FLASH_ATTN_TYPE_DISABLED
        )
        self.ctx = L.llama_init_from_model(self.model, cparams)
        if not self.ctx:
            L.llama_model_free(self.model)
            raise EngineError(
                f"llama.cpp could not create a context of {params.n_ctx} tokens for "
                f"{params.model_path} (not enough memory, or KV type {params.kv_type} without "
                "flash attention)",
                kind="bad_model",
            )
        self.n_ctx = L.llama_n_ctx(self.ctx)
        self.memory = L.llama_get_memory(self.ctx)
        self.tokens: list[int] = []  # what the KV cache of sequence 0 holds
        self.n_exact = 0  # leading cells that multi-token decodes computed (see eval_prompt)
        self.finish_reason = "stop"
        self.ticks = 0  # graph nodes run while reading a prompt: the heartbeat's progress
        self._abort_cb = L.ggml_abort_callback(self._abort_requested)
        self._piece_buf = ctypes.create_string_buffer(256)
        self._one = (L.llama_token * 1)()
        self.buffers = self._parse_buffers()

    # Metadata ---------------------------------------------------------------------------------
    def _parse_buffers(self) -> dict[str, float]:
        sizes: dict[str, float] = {}
        for line in _log_lines:
            m = _BUFFER_RE.search(line)
            if m:
                key = f"{m.group(1)} {m.group(2)}"
                sizes[key] = sizes.get(key, 0.0) + float(m.group(3)) * 1024 * 1024
        return sizes

    def _abort_requested(self, _data: ctypes.c_void_p) -> bool:
        """llama.cpp asks between graph nodes while a prompt is evaluated."""
        self.ticks += 1
        return self.cancel_flag.is_set()

    def chat_template(self) -> str | None:
        raw = L.llama_model_chat_template(self.model, None)
        return raw.decode("utf-8", "replace") if raw else None

    def token_text(self, token: int) -> str:
        raw = L.llama_vocab_get_text(self.vocab, token)
        return raw.decode("utf-8", "replace") if raw else ""

    @property
    def bos_text(self) -> str:
        bos = L.llama_vocab_bos(self.vocab)
        return self.token_text(bos) if bos >= 0 else ""

    @property
    def eos_text(self) -> str:
        eos = L.llama_vocab_eos(self.vocab)
        return self.token_text(eos) if eos >= 0 else ""

    def tokenize(self, text: str) -> list[int]:
        raw = text.encode("utf-8")
        add_bos = bool(L.llama_vocab_get_add_bos(self.vocab))
        if add_bos and self.bos_text and text.startswith(self.bos_text):
            add_bos = False  # the template already wrote BOS; a second one hurts quality
        n_max = len(raw) + 8
        buf = (L.llama_token * n_max)()
        n = L.llama_tokenize(self.vocab, raw, len(raw), buf, n_max, add_bos, True)
        if n < 0:
            buf = (L.llama_token * -n)()
            n = L.llama_tokenize(self.vocab, raw, len(raw), buf, -n, add_bos, True)
        return list(buf[:n])

    # KV state ---------------------------------------------------------------------------------
    def save_state(self) -> KvState:
        """The state of sequence 0, first trimmed to the cells computed by multi-token decodes
        (see eval_prompt), so that a restored conversation goes on exactly as a cold one."""
        if self.n_exact < len(self.tokens) and L.llama_memory_seq_rm(
            self.memory, 0, self.n_exact, -1
        ):
            del self.tokens[self.n_exact :]
        size = L.llama_state_seq_get_size(self.ctx, 0)
        buf = (ctypes.c_uint8 * size)()
        written = L.llama_state_seq_get_data(self.ctx, buf, size, 0)
        return KvState(tuple(self.tokens), bytes(memoryview(buf)[:written]))

    def state_problem(self, state: KvState) -> str | None:
        """Why `state` cannot be this context's (None: it can). Tokens come from a file: an id
        past the vocabulary would index past llama.cpp's tables on the next decode."""
        if len(state.tokens) > self.n_ctx:
            return f"{len(state.tokens)} tokens, more than the {self.n_ctx}-token context"
        bad = next((t for t in state.tokens if not 0 <= t < self.n_vocab), None)
        if bad is not None:
            return f"token id {bad} is outside the model's vocabulary of {self.n_vocab}"
        return None

    def restore_state(self, state: KvState) -> str | None:
        """Put `state` in sequence 0. Returns None, or why it was refused (then the context is
        empty)."""
        problem = self.state_problem(state)
        self.clear()
        if problem:
            return problem
        data = (ctypes.c_uint8 * len(state.data)).from_buffer_copy(state.data)
        if L.llama_state_seq_set_data(self.ctx, data, len(state.data), 0) == 0:
            L.llama_memory_clear(self.memory, True)
            return "llama.cpp refused the state data"
        # The data holds its own cell count: it must be the token list's, or the next prompt
        # would be matched against positions the cache does not have.
        n_cells = L.llama_memory_seq_pos_max(self.memory, 0) + 1
        if n_cells != len(state.tokens):
            L.llama_memory_clear(self.memory, True)
            return f"the state holds {n_cells} positions for {len(state.tokens)} tokens"
        self.tokens = list(state.tokens)
        self.n_exact = len(self.tokens)
        return None

    def clear(self) -> None:
        L.llama_memory_clear(self.memory, True)
        self.tokens = []
        self.n_exact = 0

    # Evaluation -------------------------------------------------------------------------------
    def _truncate_to(self, n: int) -> None:
        if n >= len(self.tokens):
            return
        if not L.llama_memory_seq_rm(self.memory, 0, n, -1):
            # Some caches (sliding-window, recurrent) cannot drop a tail: start over.
            self.clear()
            return
        del self.tokens[n:]
        self.n_exact = min(self.n_exact, n)

    def eval_prompt(self, prompt: list[int]) -> PromptResult:
        """Evaluate only what follows the longest common prefix with the KV cache.

        A reply after prefix reuse or a restore must be the reply of a cold evaluation. On the
        CPU, llama.cpp's one-token decode rounds differently from a multi-token one (past 256
        positions the logits differ by up to ~0.8), while multi-token decodes agree bit for bit
        however the prompt is cut. So only cells that multi-token decodes computed are reused
        (`n_exact`): a reply's tokens, decoded one by one, are read again with the next prompt,
        and no chunk but the last token is ever a single token."""
        lcp = 0
        limit = min(len(prompt), self.n_exact, len(self.tokens))
        while lcp < limit and prompt[lcp] == self.tokens[lcp]:
            lcp += 1
        if lcp == len(prompt):
            lcp -= 1  # the last prompt token must be evaluated again to get its logits
        if lcp > 0 and len(prompt) - lcp == 2:
            lcp -= 1  # read two tokens before the last, never one alone
        self._truncate_to(lcp)
        cached = len(self.tokens)
        todo = prompt[cached:]
        start = time.perf_counter()
        # The abort callback costs a Python call per graph node: only while evaluating a prompt.
        L.llama_set_abort_callback(self.ctx, self._abort_cb, None)
        try:
            # The last token goes alone: its logits then come out of the same one-token
            # decode whether the rest was cached or not, so a seed repeats its reply
            # (regenerate) instead of varying with how the prompt happened to be batched.
            step = max(self.params.n_batch, 4)  # a chunk of 1 borrows one from the one before
            head = todo[:-1]
            chunks = [head[i : i + step] for i in range(0, len(head), step)]
            if len(chunks) > 1 and len(chunks[-1]) == 1:
                chunks[-2:] = [chunks[-2][:-1], chunks[-2][-1:] + chunks[-1]]
            chunks.append(todo[-1:])
            for chunk in chunks:
                arr = (L.llama_token * len(chunk))(*chunk)
                rc = L.llama_decode(self.ctx, L.llama_batch_get_one(arr, len(chunk)))
                if rc != 0:
                    # Aborted or failed: keep only what was committed before this chunk.
                    L.llama_memory_seq_rm(self.memory, 0, len(self.tokens), -1)
                    self.n_exact = len(self.tokens)
                    if self.cancel_flag.is_set():
                        raise Cancelled()
                    raise EngineError(f"llama_decode failed ({rc}) while reading the prompt")
                self.tokens.extend(chunk)
        finally:
            L.llama_set_abort_callback(self.ctx, ggml_abort_none, None)
        self.n_exact = len(self.tokens) - 1  # all but the last token, read alone
        return PromptResult(cached, len(todo), time.perf_counter() - start)

    def settle(self, should_stop: Callable[[], bool], chunk: int = 64) -> int:
        """Read again, batched, the cells a reply left (decoded one token at a time), while
        the engine waits for the next request: the next turn then reuses them and still equals
        a cold evaluation (see eval_prompt), instead of reading the whole reply again before
        its first token. Stops between chunks when `should_stop()` (a request came in); what
        was not read again is read with the next prompt. Returns the tokens read."""
        start = self.n_exact
        tail = self.tokens[start:]
        if len(tail) < 2:
            return 0
        self._truncate_to(start)
        if len(self.tokens) != start:  # this cache cannot drop a tail: it started over
            return 0
        chunks = [tail[i : i + chunk] for i in range(0, len(tail), chunk)]
        if len(chunks[-1]) == 1:
            chunks.pop()  # never a single token alone: the next prompt reads it
        read = 0
        for part in chunks:
            if should_stop():
                break
            arr = (L.llama_token * len(part))(*part)
            if L.llama_decode(self.ctx, L.llama_batch_get_one(arr, len(part))) != 0:
                L.llama_memory_seq_rm(self.memory, 0, len(self.tokens), -1)
                break
            self.tokens.extend(part)
            self.n_exact = len(self.tokens)
            read += len(part)
        return read

    def eog_tokens(self) -> list[int]:
        """The vocabulary's end-of-generation tokens, looked up once per model: a call per
        vocabulary entry took 25 ms (110 ms for Gemma 3's 262k) before every ignore_eos reply,
        and in the batched engine every running stream waited that long."""
        eog = getattr(self, "_eog_tokens", None)
        if eog is None:
            eog = [t for t in range(self.n_vocab) if L.llama_vocab_is_eog(self.vocab, t)]
            self._eog_tokens = eog
        return eog

    def make_sampler(self, s: Sampling, history: list[int]) -> ctypes.c_void_p:
        chain = L.llama_sampler_chain_init(L.llama_sampler_chain_default_params())
        penalized = s.repeat_penalty != 1.0 or s.presence_penalty or s.frequency_penalty
        if penalized and s.repeat_last_n != 0:
            penalties = L.llama_sampler_init_penalties(
                self.n_vocab, s.repeat_last_n, s.repeat_penalty, s.frequency_penalty,
                s.presence_penalty,
            )  # fmt: skip
            # The window looks back into the prompt too, as llama.cpp's own tools do. Only
            # this sampler hears the prompt: a grammar would refuse its tokens.
            for token in history[-s.repeat_last_n :] if s.repeat_last_n > 0 else ():
                L.llama_sampler_accept(penalties, token)
            L.llama_sampler_chain_add(chain, penalties)
        if s.json_schema is not None:
            grammar = L.llama_sampler_init_grammar(
                self.vocab, grammar_of(s.json_schema).encode(), b"root"
            )
            if not grammar:
                L.llama_sampler_free(chain)
                raise EngineError("llama.cpp refused the grammar made from the JSON schema",
                                  "bad_request")  # fmt: skip
            L.llama_sampler_chain_add(chain, grammar)
        if s.ignore_eos:
            eog = self.eog_tokens()
            biases = (L.llama_logit_bias * len(eog))(
                *(L.llama_logit_bias(t, float("-inf")) for t in eog)
            )
            L.llama_sampler_chain_add(
                chain, L.llama_sampler_init_logit_bias(self.n_vocab, len(eog), biases)
            )
        if s.temperature <= 0:
            L.llama_sampler_chain_add(chain, L.llama_sampler_init_greedy())
        else:
            if s.top_k > 0:
                L.llama_sampler_chain_add(chain, L.llama_sampler_init_top_k(s.top_k))
            if s.top_p < 1.0:
                L.llama_sampler_chain_add(chain, L.llama_sampler_init_top_p(s.top_p, 1))
            if s.min_p > 0:
                L.llama_sampler_chain_add(chain, L.llama_sampler_init_min_p(s.min_p, 1))
            L.llama_sampler_chain_add(chain, L.llama_sampler_init_temp(s.temperature))
            seed = s.seed if s.seed >= 0 else 0xFFFFFFFF  # LLAMA_DEFAULT_SEED: random
            L.llama_sampler_chain_add(chain, L.llama_sampler_init_dist(seed))
        return chain

    def generate(self, sampling: Sampling, max_tokens: int) -> Iterator[tuple[int, str]]:
        """Yield (token, text piece) until end of generation, max_tokens, a full context or a
        cancel. The token sampled last is not evaluated: the next turn's prompt covers it."""
        chain = self.make_sampler(sampling, self.tokens)
        self.finish_reason = "length"
        decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        one, buf, ctx, vocab = self._one, self._piece_buf, self.ctx, self.vocab
        sample, is_eog, to_piece = (
            L.llama_sampler_sample,
            L.llama_vocab_is_eog,
            L.llama_token_to_piece,
        )
        decode, batch_one = L.llama_decode, L.llama_batch_get_one
        try:
            for _ in range(max_tokens):
                if self.cancel_flag.is_set():
                    raise Cancelled()
                token = sample(chain, ctx, -1)
                if is_eog(vocab, token):
                    self.finish_reason = "stop"
                    return
                n = to_piece(vocab, token, buf, 256, 0, False)
                piece = decoder.decode(buf.raw[:n]) if n > 0 else ""
                yield token, piece
                if len(self.tokens) >= self.n_ctx:
                    self.finish_reason = "context_full"
                    return
                one[0] = token
                rc = decode(ctx, batch_one(one, 1))
                if rc != 0:
                    raise EngineError(f"llama_decode failed ({rc}) while generating")
                self.tokens.append(token)
        finally:
            L.llama_sampler_free(chain)

    def token_logprob(self, token: int) -> float:
        """log p(token) under the logits it was just sampled from (raw: before penalties and
        temperature). Valid between generate()'s yield and its next step, which overwrites
        the logits."""
        import numpy as np

        logits = np.ctypeslib.as_array(L.llama_get_logits_ith(self.ctx, -1), (self.n_vocab,))
        top = float(logits.max())
        return float(logits[token]) - top - float(np.log(np.exp(logits - top).sum()))

    def token_detail(self, token: int, top_n: int, index: int = -1):
        """The TokenLogprob of `token` under the logits of batch position `index` (raw, as
        token_logprob), with the `top_n` most likely tokens. Valid until the next decode."""
        import numpy as np

        from deskllm.engine.token_logprobs import token_logprob

        logits = np.ctypeslib.as_array(L.llama_get_logits_ith(self.ctx, index), (self.n_vocab,))
        return token_logprob(logits, token, top_n, self.token_bytes)

    def token_bytes(self, token: int) -> bytes:
        """A token's text as the model's bytes (a piece of a UTF-8 character, for some)."""
        buf = ctypes.create_string_buffer(256)
        n = L.llama_token_to_piece(self.vocab, token, buf, 256, 0, False)
        return buf.raw[:n] if n > 0 else b""

    def close(self) -> None:
        if getattr(self, "ctx", None):
            L.llama_free(self.ctx)
            self.ctx = None
        if getattr(self, "model", None):
            L.llama_model_free(self.model)
            self.model = None


@functools.lru_cache(maxsize=32)
def grammar_of(json_schema: str) -> str:
    """The GBNF grammar of a JSON schema, by llama-cpp-python's converter (the one its own
    server uses). A schema it cannot convert is the request's fault."""
    from llama_cpp.llama_grammar import json_schema_to_gbnf

    try:
        return json_schema_to_gbnf(json_schema)
    except Exception as exc:  # the converter raises whatever its walk of the schema hits
        raise EngineError(f"the JSON schema cannot be turned into a grammar: {exc}",
                          "bad_request") from None  # fmt: skip


ggml_abort_none = ctypes.cast(None, L.ggml_abort_callback)
