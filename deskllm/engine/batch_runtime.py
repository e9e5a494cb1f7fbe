"""BatchRuntime: one model, one llama.cpp context, N slots answering N requests at once.

Continuous batching as llama-server does it: each `step()` is one `llama_decode` holding one
token of every generating slot plus prompt chunks of the slots still reading their prompt
(chunked prefill: a long prompt never stalls the running streams for more than one step),
then every slot that asked for logits samples with its own sampler chain. A request goes to
the free slot whose cached tokens share the longest prefix with its prompt (slots.py).

The KV cache is not unified: each slot owns `n_ctx_seq` cells (the per-slot context), so one
long conversation cannot starve the others. Loads like LlamaRuntime (same model params, the
probe's extra-buffer answer) and reuses its tokenizer and sampler chain. Runs only inside the
batch worker process.
"""

from __future__ import annotations

import codecs
import ctypes
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

from deskllm.llamacpp import build

build.activate()  # the chosen llama.cpp build, before it is imported

import llama_cpp as L  # noqa: E402

from deskllm.engine import runtime as single  # noqa: E402
from deskllm.engine.errors import EngineError  # noqa: E402
from deskllm.engine.protocol import LoadParams, Sampling, TokenLogprob  # noqa: E402
from deskllm.engine.slots import Slot, choose_slot, share_budget  # noqa: E402
from deskllm.engine.stop_strings import StopMatcher  # noqa: E402


@dataclass
class SlotRun:
    """One request in the runtime, waiting or in a slot. Times are perf_counter seconds."""

    request_id: int
    prompt: list[int]
    sampling: Sampling
    submitted: float
    slot: Slot | None = None
    feed: list[int] = field(default_factory=list)  # tokens to decode; one: it wants logits
    sampler: ctypes.c_void_p | None = None
    matcher: StopMatcher | None = None
    decoder: codecs.IncrementalDecoder | None = None
    max_tokens: int = 0
    cached: int = 0  # prompt tokens whose cells the slot kept
    generated: int = 0
    admitted: float | None = None  # when it got its slot
    prefill_done: float | None = None
    first_token: float | None = None
    last_token: float | None = None
    intervals: list[float] = field(default_factory=list)  # seconds between tokens
    cancelled: bool = False
    batch_index: int = -1  # where its logits are in this step's output

    @property
    def evaluated(self) -> int:
        return len(self.prompt) - self.cached


@dataclass(frozen=True)
class StepOutput:
    """What one request got from a step: text to send (may be empty) and, once it ended, why
    (stop | length | context_full | cancelled | error)."""

    run: SlotRun
    text: str = ""
    finish: str | None = None
    stop_string: str | None = None
    error: EngineError | None = None
    # Sampling.token_logprobs: the sampled token's entry and its whole text (before stop
    # strings), for the worker's LogprobTrail.
    logprob: TokenLogprob | None = None
    piece: str = ""


class BatchRuntime:
    # The single-stream runtime's tokenizer, template and sampler chain, shared as they are.
    chat_template = single.LlamaRuntime.chat_template
    token_text = single.LlamaRuntime.token_text
    bos_text = single.LlamaRuntime.bos_text
    eos_text = single.LlamaRuntime.eos_text
    tokenize = single.LlamaRuntime.tokenize
    token_detail = single.LlamaRuntime.token_detail
    token_bytes = single.LlamaRuntime.token_bytes
    make_sampler = single.LlamaRuntime.make_sampler
    _parse_buffers = single.LlamaRuntime._parse_buffers

    def __init__(
        self,
        params: LoadParams,
        n_slots: int,
        use_extra_bufts: bool,
        on_progress: Callable[[float], None] | None = None,
    ) -> None:
        """`params.n_ctx` is the context of one slot; the context holds n_slots of them."""
        single._init_backend()
        single._log_lines.clear()
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
                kind="bad_model",
            )
        self.vocab = L.llama_model_get_vocab(self.model)
        self.n_vocab = L.llama_vocab_n_tokens(self.vocab)
        self.n_ctx_train = L.llama_model_n_ctx_train(self.model)
        cparams = L.llama_context_default_params()
        cparams.n_ctx = params.n_ctx * n_slots
        cparams.n_batch = params.n_batch
        cparams.n_ubatch = params.n_batch
        cparams.n_seq_max = n_slots
        cparams.kv_unified = False  # each slot its own n_ctx cells
        cparams.n_threads = params.n_threads
        cparams.n_threads_batch = params.n_threads
        cparams.type_k = single.KV_TYPE_IDS[params.kv_type]
        cparams.type_v = single.KV_TYPE_IDS[params.kv_type]
        cparams.flash_attn_type = (
            L.LLAMA_FLASH_ATTN_TYPE_ENABLED
            if params.flash_attn
            else L.LLAMA_FLASH_ATTN_TYPE_DISABLED
        )
        self.ctx = L.llama_init_from_model(self.model, cparams)
        if not self.ctx:
            L.llama_model_free(self.model)
            self.model = None
            raise EngineError(
                f"llama.cpp could not create a context of {n_slots} × {params.n_ctx} tokens "
                f"for {params.model_path} (not enough memory, or KV type {params.kv_type} "
                "without flash attention)",
                kind="bad_model",
            )
        self.n_ctx = L.llama_n_ctx(self.ctx)  # all slots' cells
        self.n_ctx_seq = L.llama_n_ctx_seq(self.ctx)  # one slot's
        self.n_batch = L.llama_n_batch(self.ctx)
        self.memory = L.llama_get_memory(self.ctx)
        self.slots = [Slot(i) for i in range(n_slots)]
        self.waiting: deque[SlotRun] = deque()
        self.running: dict[int, SlotRun] = {}  # by request id, in admission order
        self.clock = 0  # scheduler ticks, for choosing among equal slots
        self.steps = 0  # llama_decode calls: the heartbeat's progress
        self._batch = L.llama_batch_init(self.n_batch, 0, 1)
        self._piece_buf = ctypes.create_string_buffer(256)
        self.buffers = self._parse_buffers()

    # Requests ---------------------------------------------------------------------------------
    def submit(self, request_id: int, prompt: list[int], sampling: Sampling) -> SlotRun:
        """Queue a request (a tokenized prompt that fits one slot); it gets a slot in a step."""
        if not prompt:
            raise EngineError("the prompt is empty")
        run = SlotRun(request_id, prompt, sampling, time.perf_counter())
        self.waiting.append(run)
        return run

    def cancel(self, request_id: int) -> None:
        """Stop a request; its StepOutput(finish="cancelled") comes with the next step."""
        for run in (*self.waiting, *self.running.values()):
            if run.request_id == request_id:
                run.cancelled = True

    @property
    def busy(self) -> bool:
        return bool(self.waiting or self.running)

    def _admit(self, outputs: list[StepOutput]) -> None:
        for run in [r for r in self.waiting if r.cancelled]:
            self.waiting.remove(run)
            outputs.append(StepOutput(run, finish="cancelled"))
        while self.waiting:
            run = self.waiting[0]
            choice = choose_slot(self.slots, run.prompt)
            if choice is None:
                return
            self.waiting.popleft()
            try:
                run.sampler = self.make_sampler(run.sampling, run.prompt)
            except EngineError as exc:
                outputs.append(StepOutput(run, finish="error", error=exc))
                continue
            slot, reused = choice.slot, choice.reused
            if reused < len(slot.tokens) and not L.llama_memory_seq_rm(
                self.memory, slot.index, reused, -1
            ):
                L.llama_memory_seq_rm(self.memory, slot.index, 0, -1)  # cannot cut: start over
                reused = 0
            del slot.tokens[reused:]
            slot.request_id = run.request_id
            run.admitted = time.perf_counter()
            run.slot, run.cached, run.feed = slot, reused, run.prompt[reused:]
            run.max_tokens = max(min(run.sampling.max_tokens, self.n_ctx_seq - len(run.prompt)), 1)
            run.matcher = StopMatcher(tuple(run.sampling.stop))
            run.decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
            self.running[run.request_id] = run

    def _release(self, run: SlotRun) -> None:
        self.running.pop(run.request_id, None)
        if run.sampler is not None:
            L.llama_sampler_free(run.sampler)
            run.sampler = None
        if run.slot is not None:
            self.clock += 1
            run.slot.request_id = None
            run.slot.last_used = self.clock

    # One step ---------------------------------------------------------------------------------
    def step(self) -> list[StepOutput]:
        """Admit waiting requests, decode one batch, sample. Returns what each request got."""
        outputs: list[StepOutput] = []
        for run in [r for r in self.running.values() if r.cancelled]:
            self._release(run)
            outputs.append(StepOutput(run, finish="cancelled"))
        self._admit(outputs)
        runs = list(self.running.values())
        decoding = [r for r in runs if len(r.feed) == 1]
        prefilling = [r for r in runs if len(r.feed) > 1]
        # A prompt's last token is read alone, like a generated one: the single-stream
        # engine does the same, so a lone request decodes exactly as it would there.
        shares = share_budget(len(decoding), [len(r.feed) - 1 for r in prefilling], self.n_batch)
        batch, n = self._batch, 0
        for run in decoding:
            run.batch_index = n
            n = self._add(n, run.feed[0], len(run.slot.tokens), run.slot.index, True)
        chunks: list[tuple[SlotRun, list[int]]] = []
        for run, share in zip(prefilling, shares, strict=True):
            if share:
                chunk = run.feed[:share]
                chunks.append((run, chunk))
                pos = len(run.slot.tokens)
                for i, token in enumerate(chunk):
                    n = self._add(n, token, pos + i, run.slot.index, False)
        if n == 0:
            return outputs
        batch.n_tokens = n
        rc = L.llama_decode(self.ctx, batch)
        self.steps += 1
        if rc != 0:
            error = EngineError(f"llama_decode failed ({rc}) with {len(runs)} streams")
            for run in runs:  # drop what this step may have written
                L.llama_memory_seq_rm(self.memory, run.slot.index, len(run.slot.tokens), -1)
                self._release(run)
                outputs.append(StepOutput(run, finish="error", error=error))
            return outputs
        now = time.perf_counter()
        for run, chunk in chunks:
            run.slot.tokens.extend(chunk)
            del run.feed[: len(chunk)]
        for run in decoding:
            run.slot.tokens.append(run.feed.pop())
            outputs.append(self._sample(run, now))
        return outputs

    def _add(self, n: int, token: int, pos: int, seq: int, logits: bool) -> int:
        batch = self._batch
        batch.token[n] = token
        batch.pos[n] = pos
        batch.n_seq_id[n] = 1
        batch.seq_id[n][0] = seq
        batch.logits[n] = logits
        return n + 1

    def _sample(self, run: SlotRun, now: float) -> StepOutput:
        if run.prefill_done is None:
            run.prefill_done = now
        token = L.llama_sampler_sample(run.sampler, self.ctx, run.batch_index)
        if run.first_token is None:
            run.first_token = now
        else:
            run.intervals.append(now - run.last_token)
        run.last_token = now
        if L.llama_vocab_is_eog(self.vocab, token):
            return self._finish(run, "stop", run.matcher.flush())
        run.generated += 1
        n = L.llama_token_to_piece(self.vocab, token, self._piece_buf, 256, 0, False)
        piece = run.decoder.decode(self._piece_buf.raw[:n]) if n > 0 else ""
        s = run.sampling
        lp = self.token_detail(token, s.top_logprobs, run.batch_index) if s.token_logprobs else None
        text, stopped = run.matcher.feed(piece)
        if stopped:
            return self._finish(run, "stop", text, run.matcher.matched, lp, piece)
        if run.generated >= run.max_tokens:
            return self._finish(run, "length", text + run.matcher.flush(), None, lp, piece)
        if len(run.slot.tokens) >= self.n_ctx_seq:
            return self._finish(run, "context_full", text + run.matcher.flush(), None, lp, piece)
        run.feed.append(token)  # decoded with the next step; a finished reply leaves it out
        return StepOutput(run, text, logprob=lp, piece=piece)

    def _finish(
        self,
        run: SlotRun,
        reason: str,
        text: str,
        stop: str | None = None,
        logprob: TokenLogprob | None = None,
        piece: str = "",
    ) -> StepOutput:
        self._release(run)
        return StepOutput(run, text, reason, stop, logprob=logprob, piece=piece)

    def close(self) -> None:
        for run in list(self.running.values()):
            self._release(run)
        if getattr(self, "_batch", None) is not None:
            L.llama_batch_free(self._batch)
            self._batch = None
        if getattr(self, "ctx", None):
            L.llama_free(self.ctx)
            self.ctx = None
        if getattr(self, "model", None):
            L.llama_model_free(self.model)
            self.model = None
