"""LlamaModel: one model and one llama.cpp context on the C API (through llama_cpp's ctypes),
with its tokenizer, chat template and sampler chain. The scheduler (scheduler.py) is built on
it; the quality check, the extra-buffer probe and the decode benchmark use it bare.

The C API is used directly rather than `llama_cpp.Llama` because the engine needs what that
class does not give: extra buffer types switched per machine, one sequence per slot in one
context, llama.cpp's native sampler chain with no per-token Python work beyond the loop
itself, and the KV state of one sequence saved and restored without copying logits.
Runs only inside an engine (or measuring) child process.
"""

from __future__ import annotations

import ctypes
import functools
import logging
import re
from collections.abc import Callable

from deskllm.llamacpp import build

build.activate()  # the chosen llama.cpp build, before it is imported

import llama_cpp as L  # noqa: E402

from deskllm.engine.domain import LoadParams, Sampling, TokenLogprob  # noqa: E402
from deskllm.engine.errors import EngineError, ErrorKind  # noqa: E402

log = logging.getLogger("deskllm.engine")

KV_TYPE_IDS = {"f32": 0, "f16": 1, "q4_0": 2, "q8_0": 8}
_BUFFER_RE = re.compile(r"\b(\S+)\s+(model|KV|compute|output|RS) buffer size =\s+([\d.]+) MiB")

_backend_ready = False
_log_lines: list[str] = []


@ctypes.CFUNCTYPE(None, ctypes.c_int, ctypes.c_char_p, ctypes.c_void_p)
def _log_callback(level: int, text: bytes, _user: ctypes.c_void_p) -> None:
    # llama.cpp's own log: keep it off the terminal, keep buffer sizes for calibration.
    line = text.decode("utf-8", "replace").rstrip()
    if "buffer size" in line:
        _log_lines.append(line)
    if level == 2:
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


class LlamaModel:
    """`params`' model with one context for `n_slots` sequences: one KV pool of
    n_slots × `params.n_ctx` cells that they all share (llama.cpp's unified cache), so a
    conversation may grow past its share while others are short; the scheduler decides who
    gets cells (scheduler.py). `seq_limit` is the longest conversation: the pool, up to the
    model's trained context (or `params.n_ctx` where that asks for more)."""

    def __init__(
        self,
        params: LoadParams,
        use_extra_bufts: bool,
        on_progress: Callable[[float], None] | None = None,
        n_slots: int = 1,
    ) -> None:
        _init_backend()
        _log_lines.clear()
        self.params = params
        self.n_slots = n_slots
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
                ErrorKind.BAD_MODEL,
            )
        self.vocab = L.llama_model_get_vocab(self.model)
        self.n_vocab = L.llama_vocab_n_tokens(self.vocab)
        self.n_ctx_train = L.llama_model_n_ctx_train(self.model)
        cparams = L.llama_context_default_params()
        cparams.n_ctx = params.n_ctx * n_slots
        cparams.n_batch = params.n_batch
        cparams.n_ubatch = params.n_batch
        cparams.n_seq_max = n_slots
        cparams.kv_unified = True  # one pool: a conversation is not capped at its share
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
            self.model = None
            slots = f"{n_slots} × " if n_slots > 1 else ""
            raise EngineError(
                f"llama.cpp could not create a context of {slots}{params.n_ctx} tokens for "
                f"{params.model_path} (not enough memory, or KV type {params.kv_type} without "
                "flash attention)",
                ErrorKind.BAD_MODEL,
            )
        self.n_ctx = L.llama_n_ctx(self.ctx)  # the pool: all slots' cells
        self.seq_limit = min(self.n_ctx, max(params.n_ctx, self.n_ctx_train or params.n_ctx))
        self.n_batch = L.llama_n_batch(self.ctx)
        self.memory = L.llama_get_memory(self.ctx)
        self._piece_buf = ctypes.create_string_buffer(256)
        # Control tokens written out in replies: a harmony model's (gpt-oss) frame its
        # messages with them, and the engine reads the frames (deskllm.engine.harmony).
        self.render_special = False
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

    def tokenize(self, text: str, add_bos: bool | None = None) -> list[int]:
        """`text`'s tokens, special tokens written out parsed as such. `add_bos` None: BOS
        first where the model wants one and the text does not start with it."""
        raw = text.encode("utf-8")
        if add_bos is None:
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

    def clear(self) -> None:
        """Empty every sequence's cells."""
        L.llama_memory_clear(self.memory, True)

    # Sampling ---------------------------------------------------------------------------------
    def eog_tokens(self) -> list[int]:
        """The vocabulary's end-of-generation tokens, looked up once per model: a call per
        vocabulary entry took 25 ms (110 ms for Gemma 3's 262k) before every ignore_eos reply,
        and every running stream waited that long."""
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
                                  ErrorKind.BAD_REQUEST)  # fmt: skip
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

    def pick_greedy(self, sampler: ctypes.c_void_p, index: int) -> tuple[int, float]:
        """The token llama_sampler_sample would give a greedy chain at batch position `index`
        (not yet accepted by the chain: llama_sampler_accept it once taken), with the gap
        between the two best logits after the chain's penalties, biases and grammar: how near
        a tie the pick was (speculation.py)."""
        import numpy as np

        data = getattr(self, "_candidates", None)
        if data is None:
            data = np.zeros(self.n_vocab, dtype=[("id", "<i4"), ("logit", "<f4"), ("p", "<f4")])
            self._candidates = data
            self._ids = np.arange(self.n_vocab, dtype=np.int32)
        data["id"] = self._ids  # the chain may have reordered them
        data["logit"] = self._logits(index)
        data["p"] = 0.0
        array = L.llama_token_data_array(
            data.ctypes.data_as(ctypes.POINTER(L.llama_token_data)), self.n_vocab, -1, False
        )
        L.llama_sampler_apply(sampler, ctypes.byref(array))
        selected = array.selected
        token = int(data["id"][selected])
        if array.size < 2:
            return token, float("inf")
        # The runner-up: the greatest logit but the pick's (a masked max, ~20× quicker than a
        # partition of a 262k vocabulary; this runs for every drafted position).
        logits = data["logit"][: array.size]
        top = logits[selected]
        logits[selected] = -np.inf
        second = logits.max()
        logits[selected] = top
        return token, float(top - second) if np.isfinite(second) else float("inf")

    def _logits(self, index: int):
        import numpy as np

        return np.ctypeslib.as_array(L.llama_get_logits_ith(self.ctx, index), (self.n_vocab,))

    def token_logprob(self, token: int, index: int = -1) -> float:
        """log p(token) under the logits of batch position `index` (raw: before penalties and
        temperature), for the router's uncertainty check. Valid until the next decode."""
        import numpy as np

        logits = self._logits(index)
        top = float(logits.max())
        return float(logits[token]) - top - float(np.log(np.exp(logits - top).sum()))

    def token_detail(self, token: int, top_n: int, index: int = -1) -> TokenLogprob:
        """The TokenLogprob of `token` under the logits of batch position `index` (raw, as
        token_logprob), with the `top_n` most likely tokens. Valid until the next decode."""
        from deskllm.engine.token_logprobs import token_logprob

        return token_logprob(self._logits(index), token, top_n, self.token_bytes)

    def token_bytes(self, token: int) -> bytes:
        """A token's text as the model's bytes (a piece of a UTF-8 character, for some)."""
        buf = ctypes.create_string_buffer(256)
        n = L.llama_token_to_piece(self.vocab, token, buf, 256, 0, False)
        return buf.raw[:n] if n > 0 else b""

    def close(self) -> None:
        free_model(self)


def free_model(owner: object) -> None:
    """Free `owner`'s llama.cpp context and model (`ctx`, `model`), once."""
    if getattr(owner, "ctx", None):
        L.llama_free(owner.ctx)
        owner.ctx = None
    if getattr(owner, "model", None):
        L.llama_model_free(owner.model)
        owner.model = None


@functools.lru_cache(maxsize=32)
def grammar_of(json_schema: str) -> str:
    """The GBNF grammar of a JSON schema, by llama-cpp-python's converter (the one its own
    server uses). A schema it cannot convert is the request's fault."""
    from llama_cpp.llama_grammar import json_schema_to_gbnf

    try:
        return json_schema_to_gbnf(json_schema)
    except Exception as exc:  # the converter raises whatever its walk of the schema hits
        raise EngineError(f"the JSON schema cannot be turned into a grammar: {exc}",
                          ErrorKind.BAD_REQUEST) from None  # fmt: skip


def device_name(buffers: dict[str, float]) -> str:
    """Where the weights are, from llama.cpp's own buffer report ("Vulkan0 model", ...)."""
    names = {key.split(" ")[0] for key in buffers if key.endswith(" model")}
    gpus = sorted(n for n in names if not n.startswith("CPU") and not n.endswith("_Host"))
    if not gpus:
        return "CPU"
    try:
        from deskllm.llamacpp.libraries import device_descriptions

        described = device_descriptions()
    except Exception:  # the readout is informational; never fail a load over it
        described = {}
    return ", ".join(described.get(n, n) for n in gpus)
