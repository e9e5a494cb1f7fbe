"""Scheduler: the engine's one scheduler: one model, one llama.cpp context, N slots answering
N requests at once (one slot is N=1, not separate code).

Continuous batching as llama-server does it: each `step()` is one `llama_decode` holding one
token of every generating slot plus prompt chunks of the slots still reading their prompt
(chunked prefill: a long prompt never stalls the running streams for more than one step),
then every slot that asked for logits samples with its own sampler chain. With speculative
decoding a generating slot adds its draft to the step and keeps the drafted tokens its chain
agrees with (speculation.py, `_verify`). A request goes to the free slot whose cached tokens
share the longest prefix with its prompt, or one beside running slots that shares nearly as
much (slots.py).

The slots share one KV pool of n_slots × params.n_ctx cells (llama.cpp's unified cache, one
stream: every step is one pass over the weights whatever its slots): a conversation may grow
to `seq_limit` while others are short. Cells are promised by what a request will use, not by
slot: each running request is guaranteed its prompt and its max_tokens (one that leaves
max_tokens out, the larger of its fair share and its prompt plus half a share: `_guarantee`);
a request waits until the pool can promise that, and what running requests hold or were
promised never exceeds the pool. Past its guarantee a reply grows into cells nobody was
promised and ends ("context_full") only where the next cell would break another's promise: a
running reply is never cut for another within its guarantee. Finished slots keep their cells
for the next turn or a shared prefix; when the pool is short of room, the least recently used
of them go to the conversation state cache (kv_cache.py, RAM then disk) and are freed. Before
a slot's cells are overwritten by another conversation they are saved there too, and a
request whose conversation has a saved state longer than any free slot's match is restored
into a slot instead of reading its prompt again.

The model, its context, tokenizer and sampler chain are LlamaModel's (llama_model.py). Runs
only inside the engine worker process.
"""

from __future__ import annotations

import codecs
import ctypes
import dataclasses
import hashlib
import logging
import time
from collections import Counter, deque
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from deskllm.engine.domain import LoadParams, Sampling, TokenLogprob
from deskllm.engine.draft_model import DRAFT_MODEL_MOST, DraftModel
from deskllm.engine.errors import EngineError
from deskllm.engine.kv_cache import (
    KvState,
    KvStateCache,
    delete_conversation_states,
    make_guard,
    model_identity,
)
from deskllm.engine.llama_model import L, LlamaModel
from deskllm.engine.slots import (
    SLOT_SIMILARITY,
    CellLedger,
    Slot,
    SlotChoice,
    choose_slot,
    common_prefix,
    continues,
    restore_target,
    reusable,
    share_budget,
)
from deskllm.engine.speculation import (
    MAX_DRAFT,
    NEAR_TIE_LOGITS,
    AcceptanceByOrder,
    DraftPolicy,
    NgramIndex,
    StepCosts,
)
from deskllm.engine.stop_strings import StopMatcher
from deskllm.engine.thread_governor import (
    FIXED_THREADS,
    OtherLoad,
    ThreadChoice,
    ThreadGovernor,
)
from deskllm.llamacpp import build

log = logging.getLogger("deskllm.engine")

REREAD_STEP_TOKENS = 64  # a finished reply's tokens read again per idle step
# Finished replies are read again only once no reply has ended for this long: a client that
# sends its next request as soon as a reply ends (a script, an agent, a burst's stragglers)
# would otherwise find both cores busy with that reading while its request crosses the HTTP
# server, and wait for it (measured: 35 ms first tokens became 45-90 ms back to back).
REREAD_AFTER_S = 0.2
# A prompt prefix worth taking from another slot by reference (or waiting for, while a running
# request reads it): fewer tokens are read again, which costs about as much as the copy.
MIN_SHARED_PREFIX = 16
DECODE_ABORTED = 2  # llama_decode's answer when its abort callback stopped it


@dataclass
class SlotRun:
    """One request in the runtime, waiting or in a slot. Times are perf_counter seconds."""

    request_id: int
    prompt: list[int]
    sampling: Sampling
    submitted: float
    conversation: str | None = None  # the key its slot's state is saved under
    slot: Slot | None = None
    feed: list[int] = field(default_factory=list)  # tokens to decode; one: it wants logits
    sampler: ctypes.c_void_p | None = None
    matcher: StopMatcher | None = None
    decoder: codecs.IncrementalDecoder | None = None
    max_tokens: int = 0
    cached: int = 0  # prompt tokens whose cells the slot kept (or a restored state gave)
    restored_from: str | None = None  # "ram" | "disk": its conversation's state was restored
    generated: int = 0
    admitted: float | None = None  # when it got its slot
    prefill_done: float | None = None
    first_token: float | None = None
    last_token: float | None = None
    intervals: list[float] = field(default_factory=list)  # seconds between tokens
    logprobs: list[float] = field(default_factory=list)  # Sampling.logprobs: the first N
    n_past: int = 0  # tokens in its slot's context (kept when it ended)
    guaranteed: int = 0  # pool cells promised to it (its slot's tokens included)
    # A running request reading the same prompt prefix, and how many of its tokens this one
    # will take by reference once they are read (it reads nothing before).
    follows: SlotRun | None = None
    follow_n: int = 0
    cancelled: bool = False
    batch_index: int = -1  # where its logits are in this step's output
    # Text to go on with in place of its next sampled token, and its tokens (force_text).
    forced: tuple[list[int], str] | None = None
    # Speculative decoding (None: off for it): its tokens so far, indexed for drafts; how
    # long its drafts are; this step's draft; and whether its next step decodes alone (a
    # near-tie found in a verification is decided by a one-token decode).
    drafter: NgramIndex | None = None
    policy: DraftPolicy | None = None
    draft: list[int] = field(default_factory=list)
    plain_next: bool = False

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
    drafted: bool = False  # its token was drafted and the model accepted it


class Scheduler(LlamaModel):
    def __init__(
        self,
        params: LoadParams,
        n_slots: int,
        use_extra_bufts: bool,
        on_progress: Callable[[float], None] | None = None,
    ) -> None:
        """The pool holds n_slots × `params.n_ctx` cells (`n_ctx`), shared."""
        super().__init__(params, use_extra_bufts, on_progress, n_slots)
        self.share = max(self.n_ctx // n_slots, 1)  # one slot's fair share of the pool
        self.evictions = 0  # idle slots emptied (for room, or _clear_idle), for the figures
        self.ledger = CellLedger()  # which pool cells each slot's tokens are
        # Prompts that took a prefix from another slot or another conversation's saved state,
        # for the figures.
        self.prefix_hits = 0
        self.prefix_tokens = 0  # the tokens they took
        self.slots = [Slot(i) for i in range(n_slots)]
        self.waiting: deque[SlotRun] = deque()
        self.running: dict[int, SlotRun] = {}  # by request id, in admission order
        self.clock = 0  # scheduler ticks, for choosing among equal slots
        self.steps = 0  # llama_decode calls: the heartbeat's progress
        self._batch = L.llama_batch_init(self.n_batch, 0, 1)
        self.ticks = 0  # graph nodes run while reading prompts: the heartbeat's progress
        # Prompt progress inside a step: the chunks the running step reads (by request id),
        # the tick count it began at, and the graph nodes of the last whole chunk step (how
        # far through a step the ticks are). `_stopping`: a reading request was cancelled,
        # the step stops at the next node.
        self._chunk_sizes: dict[int, int] = {}
        self._ticks_before = 0
        self.nodes_per_step = 0
        self._stopping = False
        self._tick_cb = L.ggml_abort_callback(self._tick)
        self._no_cb = ctypes.cast(None, L.ggml_abort_callback)
        # Whether a request waits to be admitted (the worker's inbox): reading finished
        # replies again gives way to it in the middle of a decode.
        self.interrupt: Callable[[], bool] = lambda: False
        self._yield_cb = L.ggml_abort_callback(lambda _data: bool(self.interrupt()))
        self.rereads_yielded = 0  # re-reads stopped for a request, for the figures
        self.ended_at = 0.0  # when a reply last ended (finished replies are read after it)
        # Called with a request when it gets its slot (the worker starts its energy span).
        self.on_admitted: Callable[[SlotRun], None] | None = None
        self.kv_disk_dir = Path(params.kv_disk_dir) if params.kv_disk_dir else None
        self.state_cache = self._make_state_cache()
        self.save_seconds: list[float] = []  # each slot state saved, for the figures
        self._other_load: OtherLoad | None = None
        self.governor = self._make_governor()
        # Draft-model speculation: the draft loads beside the model, its pool as large.
        self.draft_model: DraftModel | None = None
        if params.draft_model_path:
            try:
                self.draft_model = DraftModel(params.draft_model_path, self.vocab, n_slots,
                                              self.n_ctx, params.n_threads, use_extra_bufts)
            except EngineError:
                self.close()  # the model, its context and the load figures' thread
                raise
        self.step_costs = StepCosts()  # decode seconds by size, for "auto" speculation
        self.acceptance = AcceptanceByOrder()  # and how often drafts are taken
        self._try_deadline = 0.0  # when a step trying another thread count is stopped
        self._try_cb = L.ggml_abort_callback(
            lambda _data: time.perf_counter() > self._try_deadline
        )

    def _make_governor(self) -> ThreadGovernor | None:
        """Automatic threads: the measured best count to begin with, up to the physical
        cores (or that count where it is more)."""
        params = self.params
        if not params.adapt_threads:
            return None  # the user's fixed count
        import psutil

        cores = psutil.cpu_count(logical=False) or 1
        self._other_load = OtherLoad()
        return ThreadGovernor(params.n_threads, max(cores, params.n_threads), self._other_load)

    def _make_state_cache(self) -> KvStateCache | None:
        """The conversation state cache. A sequence's state in a one-stream (unified) cache
        does not depend on the pool's size or the slot count: a state saved by the window
        restores into a server's slot and back (one longer than `seq_limit` is refused)."""
        params = self.params
        if params.kv_ram_budget_mb <= 0 and params.kv_disk_budget_mb <= 0:
            return None  # nothing would be kept: saving would only cost time
        guard = make_guard(
            model=model_identity(params.model_path),
            kv_type=params.kv_type,
            flash_attn=params.flash_attn,
            template=hashlib.sha256((self.chat_template() or "").encode()).hexdigest(),
            build=build.build_id(),
            kv="unified",
        )
        return KvStateCache(guard, params.kv_ram_budget_mb << 20, self.kv_disk_dir,
                            params.kv_disk_budget_mb << 20, max_tokens=self.seq_limit)  # fmt: skip

    # Requests ---------------------------------------------------------------------------------
    def submit(
        self,
        request_id: int,
        prompt: list[int],
        sampling: Sampling,
        conversation: str | None = None,
    ) -> SlotRun:
        """Queue a request (a tokenized prompt that fits one slot); it gets a slot in a step.
        `conversation`: the key of its KV state in the state cache (None: not saved)."""
        if not prompt:
            raise EngineError("the prompt is empty")
        run = SlotRun(request_id, prompt, sampling, time.perf_counter(), conversation)
        self.waiting.append(run)
        return run

    def cancel(self, request_id: int) -> None:
        """Stop a request; its StepOutput(finish="cancelled") comes with the next step."""
        for run in (*self.waiting, *self.running.values()):
            if run.request_id == request_id:
                run.cancelled = True

    def force_text(self, request_id: int, text: str) -> None:
        """Make a running reply go on with `text` as if the model had written it, in place of
        its next sampled token (a reasoning budget closing the thinking block)."""
        run = self.running.get(request_id)
        if run is not None and not run.cancelled:
            run.forced = (self.tokenize(text, add_bos=False), text)

    def stop_soon(self, request_id: int) -> None:
        """From another thread (the worker's reader): a cancel of a request that is reading
        its prompt stops the running step at once instead of at its end (a chunk of a long
        prompt may take seconds); Cancel itself still comes through the inbox."""
        if request_id in self._chunk_sizes:
            self._stopping = True

    def prompt_read(self) -> list[tuple[SlotRun, int]]:
        """Requests still reading their prompt, each with how many of its tokens are in its
        slot (those it found cached included). Inside a step, a chunk counts by the share of
        its graph nodes run. Safe to call from another thread (a snapshot)."""
        sizes, before, nodes = dict(self._chunk_sizes), self._ticks_before, self.nodes_per_step
        part = min((self.ticks - before) / nodes, 1.0) if nodes and sizes else 0.0
        read = []
        for run in list(self.running.values()):
            slot = run.slot
            if slot is None or run.first_token is not None or run.cancelled:
                continue
            done = len(slot.tokens) + int(sizes.get(run.request_id, 0) * part)
            read.append((run, min(done, len(run.prompt))))
        return read

    @property
    def busy(self) -> bool:
        """Requests to answer, or a finished reply's cells to read again."""
        return bool(self.waiting or self.running) or any(s.unread for s in self.slots)

    def wait_s(self) -> float | None:
        """How long the engine may wait for a request before it steps: 0 with requests to
        answer, the time left before finished replies are read again, None with nothing to
        do."""
        if self.waiting or self.running:
            return 0.0
        if not any(s.unread for s in self.slots):
            return None
        return max(0.0, self.ended_at + REREAD_AFTER_S - time.perf_counter())

    def _admit(self, outputs: list[StepOutput]) -> None:
        for run in [r for r in self.waiting if r.cancelled]:
            self.waiting.remove(run)
            outputs.append(StepOutput(run, finish="cancelled"))
        while self.waiting:
            run = self.waiting[0]
            run.guaranteed = self._guarantee(run)
            if self._committed() + run.guaranteed > self.n_ctx:
                return  # waits for cells; nothing overtakes it, so it is never starved
            choice = choose_slot(self.slots, run.prompt)
            if choice is None:
                return
            self.waiting.popleft()
            try:
                run.sampler = self.make_sampler(run.sampling, run.prompt)
            except EngineError as exc:
                outputs.append(StepOutput(run, finish="error", error=exc))
                continue
            slot, reused = self._place(run, choice)
            if reused < len(slot.tokens) and not L.llama_memory_seq_rm(
                self.memory, slot.index, reused, -1
            ):
                L.llama_memory_seq_rm(self.memory, slot.index, 0, -1)  # cannot cut: start over
                reused = 0
            self.ledger.cut(slot, reused)
            slot.n_exact = min(slot.n_exact, reused)
            slot.unread.clear()  # what the prompt shares of them it reads anyway
            if run.restored_from is None:
                reused = self._share_prefix(run, slot, reused)
            slot.request_id = run.request_id
            slot.conversation = run.conversation
            run.admitted = time.perf_counter()
            run.slot, run.cached, run.feed = slot, reused, run.prompt[reused:]
            run.max_tokens = max(min(run.sampling.max_tokens, self.seq_limit - len(run.prompt)), 1)
            run.matcher = StopMatcher(tuple(run.sampling.stop))
            run.decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
            mode = run.sampling.speculation or self.params.speculation
            # "auto" with a draft model loaded: the load chose it (measured to pay).
            if mode in ("draft", "auto") and self.draft_model is not None:
                run.drafter = self.draft_model.drafter(slot.index, run.prompt)
                run.policy = DraftPolicy(most=DRAFT_MODEL_MOST)
            elif mode != "off":  # "draft" without a draft model loaded: n-gram drafts
                run.drafter, run.policy = NgramIndex(run.prompt), DraftPolicy(mode == "auto")
            self.running[run.request_id] = run
            if self.on_admitted is not None:
                self.on_admitted(run)

    # The pool ---------------------------------------------------------------------------------
    def _guarantee(self, run: SlotRun) -> int:
        """The cells promised to `run`: its prompt and max_tokens where it names a reply that
        fits the context; a reply of "whatever is left" (max_tokens left out: the whole
        context) is promised the larger of the fair share and its prompt plus half a share, so
        it does not hold the pool alone, and grows past that into free cells."""
        n_prompt = len(run.prompt)
        wants = n_prompt + run.sampling.max_tokens
        if wants < self.seq_limit:
            return wants
        return min(self.seq_limit, max(self.share, n_prompt + self.share // 2))

    def _committed(self) -> int:
        """Cells running requests hold or were promised, whichever is more."""
        return sum(max(r.guaranteed, len(r.slot.tokens)) for r in self.running.values())

    def held(self) -> int:
        """Cells in use: every slot's, a shared prefix once (a finished slot keeps its cells
        for reuse)."""
        return self.ledger.used

    def _make_room(self, cells: int, keep: tuple[Slot, ...] = ()) -> bool:
        """Free finished slots' cells, least recently used first (saved to the state cache
        first), until `cells` more fit the pool. Slots in `keep` stay. False: not enough."""
        while self.held() + cells > self.n_ctx:
            idle = [s for s in self.slots if s.free and s.tokens and s not in keep]
            if not idle:
                return False
            self._evict(min(idle, key=lambda s: s.last_used))
        return True

    def _evict(self, slot: Slot) -> None:
        """Save a finished slot's cells to the state cache and free them."""
        self._save_before_overwrite(slot)
        L.llama_memory_seq_rm(self.memory, slot.index, 0, -1)
        self.ledger.cut(slot, 0)
        slot.unread.clear()
        slot.n_exact = 0
        slot.conversation = None
        self.evictions += 1

    def _clear_idle(self) -> None:
        """Finished slots' cells out of the pool, into the state cache, least recently used
        first, while they outnumber the running requests' (prompts counted whole). Without
        flash attention every step reads the cells of the pool's whole used span, idle
        conversations' too: after 8 starter-model chats of 140 tokens a lone stream ran
        25-40% slower. llama-server clears idle slots on every new task the same way
        (--cache-idle-slots). A conversation that comes back is restored from the cache (a
        copy) or, where its key is not its own (two slots of one key), kept in its slot."""
        if self.state_cache is None or not self.running:
            return
        running = {cell for run in self.running.values() for cell in run.slot.cells}
        wanted = sum(max(len(run.prompt), len(run.slot.tokens)) for run in self.running.values())
        keys = Counter(s.conversation for s in self.slots)
        idle = sorted((s for s in self.slots
                       if s.free and s.tokens and s.conversation and keys[s.conversation] == 1),
                      key=lambda s: s.last_used)  # fmt: skip
        for slot in idle:
            if self.held() - len(running) <= wanted:
                return
            self._evict(slot)

    def _over_promise(self, decoding: list[SlotRun]) -> list[SlotRun]:
        """Of the replies past their guarantee, those whose next cell would break a promise
        to another request (they end with context_full); the others take free cells."""
        committed, cut = self._committed(), []
        for run in decoding:
            if len(run.slot.tokens) >= run.guaranteed:
                if committed + 1 > self.n_ctx:
                    cut.append(run)
                else:
                    committed += 1
        return cut

    # Shared prefixes --------------------------------------------------------------------------
    def _share_prefix(self, run: SlotRun, slot: Slot, reused: int) -> int:
        """Give `run`'s slot (holding `reused` prompt tokens) the longest prefix of its prompt
        another slot holds, running or finished, by reference (llama_memory_seq_cp: the same
        cells, not read again nor stored twice). Where a running request is still reading a
        longer common prefix, `run` follows it: it reads nothing until that prefix is read,
        then takes it (see _still_following). Returns the prompt tokens the slot now holds."""
        best, source = reused, None
        for other in self.slots:
            if other is not slot and other.n_exact >= best + MIN_SHARED_PREFIX:
                n = self._shareable(other, run.prompt)
                if n >= best + MIN_SHARED_PREFIX:
                    best, source = n, other
        for leader in self.running.values():  # one still reading more of it: wait for that
            if leader is run or leader.slot is None or leader.follows is not None:
                continue
            n = reusable(common_prefix(leader.prompt, run.prompt), len(run.prompt))
            ahead = max(best, leader.slot.n_exact, run.follow_n)
            if n >= ahead + MIN_SHARED_PREFIX:
                run.follows, run.follow_n = leader, n
        if run.follows is not None:
            return reused
        return self._take_prefix(run, slot, source, best) if source is not None else reused

    def _shareable(self, source: Slot, prompt: list[int]) -> int:
        """Prompt tokens `source`'s cells give: only cells a cold read makes (n_exact)."""
        return reusable(min(common_prefix(source.tokens, prompt), source.n_exact), len(prompt))

    def _take_prefix(self, run: SlotRun, slot: Slot, source: Slot, n: int) -> int:
        if slot.tokens:
            L.llama_memory_seq_rm(self.memory, slot.index, 0, -1)
            self.ledger.cut(slot, 0)
        L.llama_memory_seq_cp(self.memory, source.index, slot.index, 0, n)
        self.ledger.share(source, slot, n)
        slot.n_exact = n
        self.prefix_hits += 1
        self.prefix_tokens += n
        return n

    def _still_following(self, run: SlotRun) -> bool:
        """Whether `run` waits for the prefix its leader reads. Once the leader has read it
        (or ended), `run` takes what the leader's slot holds of it and reads the rest."""
        leader = run.follows
        if leader is None:
            return False
        slot = leader.slot
        if leader.request_id in self.running and slot.n_exact < run.follow_n:
            return True
        run.follows = None
        n = self._shareable(slot, run.prompt) if slot is not None else 0
        if n > len(run.slot.tokens):
            n = self._take_prefix(run, run.slot, slot, n)
            run.cached, run.feed = n, run.prompt[n:]
        return False

    # Conversation states ----------------------------------------------------------------------
    def _place(self, run: SlotRun, choice: SlotChoice) -> tuple[Slot, int]:
        """The slot `run` takes and how many prompt tokens it reuses: `choice`, or the least
        recently used free slot with the conversation's saved state restored into it when that
        state shares a longer prefix. Cells about to be overwritten are saved first."""
        slot, reused = choice.slot, choice.reused
        if slot.unread and not self.running and continues(slot, run.prompt):
            # Its own last reply, not read again yet, goes on in this prompt: read now (the
            # same tokens the prompt would read; nothing else waits for them). A prompt that
            # does not go on from it (another request, a regenerated reply) does not wait
            # for that reading: before, it waited wherever both had no conversation key.
            while slot.unread:
                self._read_again(slot, self.n_batch)
            reused = reusable(common_prefix(slot.tokens, run.prompt), len(run.prompt))
        found = self._saved_state(run, reused)
        if found is not None:
            state, where, lcp = found
            target = restore_target(self.slots)
            if target.conversation != run.conversation:
                self._save_before_overwrite(target)
            # The chosen slot may give its cells up too: the restored state replaces them.
            if not self._make_room(len(state.tokens) - len(target.tokens), keep=(target,)):
                # The pool is promised to running replies: the prompt is read instead.
                return slot, (reused if slot.tokens else 0)
            problem = self._restore(target, state)
            if problem is None:
                run.restored_from = where
                return target, lcp
            self.state_cache.drop(run.conversation, f"not restored: {problem}")
            return slot, (0 if target is slot or not slot.tokens else reused)
        if (reused < len(slot.tokens) or slot.unread) and slot.conversation != run.conversation:
            self._save_before_overwrite(slot)  # the conversation's own later turn supersedes it
        return slot, reused

    def _save_before_overwrite(self, slot: Slot) -> None:
        """Save the cells of a slot another conversation takes. A reply not read again yet
        is not read for it: a request never waits for that (the lowest-priority work), so
        the state keeps the cells before it and the conversation's next turn reads it."""
        if self.state_cache is None or slot.conversation is None:
            return
        self.save_slot(slot)

    def _saved_state(self, run: SlotRun, reused: int) -> tuple[KvState, str, int] | None:
        """The conversation's saved state, where it was and the prompt tokens it gives, when
        that is more than the `reused` a free slot gives."""
        want = len(run.prompt) - 1  # the last prompt token is read again for its logits
        if self.state_cache is None or reused >= want:
            return None
        own = None
        # Its newest cells are in a slot: a saved state is older (and, on disk, would be read
        # for nothing at every turn).
        if run.conversation is not None and not any(
            s.conversation == run.conversation for s in self.slots
        ):
            own = self.state_cache.get(run.conversation)
        if own is not None:
            state, where = own
            lcp = reusable(common_prefix(state.tokens, run.prompt), len(run.prompt))
            if lcp > reused:
                return state, where, lcp
        # Another conversation's state that begins as this prompt does (idle slots go to the
        # cache: _clear_idle), where it gives more than the slots can (_share_prefix) and a
        # fair share of what it holds (restoring copies all of it; the rest is then cut).
        found = self.state_cache.longest_prefix(run.prompt)
        if found is None:
            return None
        state, shared = found
        lcp = reusable(shared, len(run.prompt))
        live = max((self._shareable(s, run.prompt) for s in self.slots), default=0)
        if lcp > max(reused, live) and lcp >= SLOT_SIMILARITY * len(state.tokens):
            self.prefix_hits += 1
            self.prefix_tokens += lcp
            return state, "ram", lcp
        return None

    def save_slot(self, slot: Slot) -> None:
        """Put the slot's cells in the state cache under the conversation that left them.
        Runs between steps: every stream waits for it (see save_seconds)."""
        if self.state_cache is None or slot.conversation is None or not slot.n_exact:
            return
        started = time.perf_counter()
        self._keep_exact(slot)  # only cells a cold read makes (a free slot has no others)
        size = L.llama_state_seq_get_size(self.ctx, slot.index)
        # One buffer, never copied (a state is ~23 KB a token for the starter model): a
        # bytearray's fresh pages are not zeroed again as a ctypes array's would be.
        data: bytearray | None = bytearray(size)
        written = L.llama_state_seq_get_data(
            self.ctx, (ctypes.c_uint8 * size).from_buffer(data), size, slot.index
        )
        del data[written:]
        try:
            self.state_cache.put(slot.conversation, KvState(tuple(slot.tokens), data))
        except OSError as exc:  # a full or read-only disk: the conversation is read again
            log.warning("could not save the KV state of %s: %s", slot.conversation, exc)
        self.save_seconds.append(time.perf_counter() - started)

    def _restore(self, slot: Slot, state: KvState) -> str | None:
        """Put `state` in the slot's sequence. Returns None, or why it was refused (then the
        slot is empty)."""
        self.ledger.cut(slot, 0)
        slot.unread.clear()
        slot.n_exact = 0
        slot.conversation = None
        L.llama_memory_seq_rm(self.memory, slot.index, 0, -1)
        if len(state.tokens) > self.seq_limit:
            return f"{len(state.tokens)} tokens, more than the {self.seq_limit}-token context"
        bad = next((t for t in state.tokens if not 0 <= t < self.n_vocab), None)
        if bad is not None:  # tokens come from a file: one past the vocabulary would crash
            return f"token id {bad} is outside the model's vocabulary of {self.n_vocab}"
        data = bytearray(state.data)  # llama.cpp's ctypes call takes it without a copy
        buf = (ctypes.c_uint8 * len(data)).from_buffer(data)
        if L.llama_state_seq_set_data(self.ctx, buf, len(data), slot.index) == 0:
            L.llama_memory_seq_rm(self.memory, slot.index, 0, -1)
            return "llama.cpp refused the state data"
        # Its cells must be the token list's, or the prompt would be matched against
        # positions the slot does not have.
        n_cells = L.llama_memory_seq_pos_max(self.memory, slot.index) + 1
        if n_cells != len(state.tokens):
            L.llama_memory_seq_rm(self.memory, slot.index, 0, -1)
            return f"the state holds {n_cells} positions for {len(state.tokens)} tokens"
        self.ledger.grow(slot, state.tokens)
        slot.n_exact = len(slot.tokens)  # saved states hold only cells a cold read makes
        return None

    def forget(self, conversation: str) -> None:
        """Drop a (deleted) conversation's states: the cache's, the disk's, and the cells of
        free slots it left; a running reply of it goes on but is not saved."""
        if self.state_cache is not None:
            self.state_cache.discard(conversation)
        for slot in self.slots:
            if slot.conversation == conversation:
                slot.conversation = None
                if slot.request_id is None:
                    L.llama_memory_seq_rm(self.memory, slot.index, 0, -1)
                    self.ledger.cut(slot, 0)
                    slot.unread.clear()
                    slot.n_exact = 0
        if self.kv_disk_dir is not None:
            delete_conversation_states(self.kv_disk_dir, conversation)

    def save_all(self) -> None:
        """Every slot's cells into the cache and the cache to disk (unload, shutdown). Slots
        used last go last: of two holding one conversation, the newer state is kept."""
        if self.state_cache is None:
            return
        # A short reply not read again yet (REREAD_AFTER_S had not passed: the window's
        # server started right after it) is read now, so its state is whole; long ones are
        # left (a shutdown that cut streams would wait seconds for them).
        for slot in self.slots:
            if slot.free and 0 < len(slot.unread) <= REREAD_STEP_TOKENS:
                self._read_again(slot, REREAD_STEP_TOKENS)
        for slot in sorted(self.slots, key=lambda s: (s.free, s.last_used)):
            self.save_slot(slot)
        try:
            self.state_cache.flush_to_disk()
        except OSError as exc:
            log.warning("could not write the KV states to disk: %s", exc)

    def conversations(self) -> tuple[str, ...]:
        """The conversations whose KV state is kept: in a slot, in RAM or on disk."""
        kept = dict.fromkeys(s.conversation for s in self.slots if s.conversation is not None)
        if self.state_cache is not None:
            kept.update(dict.fromkeys(self.state_cache.keys()))
        return tuple(kept)

    # Reading a reply's cells again ----------------------------------------------------------
    def _keep_exact(self, slot: Slot) -> list[int]:
        """Drop the slot's cells past `n_exact`; returns their tokens."""
        tail = slot.tokens[slot.n_exact :]
        if tail and not L.llama_memory_seq_rm(self.memory, slot.index, slot.n_exact, -1):
            L.llama_memory_seq_rm(self.memory, slot.index, 0, -1)  # cannot cut: start over
            tail, slot.n_exact = [], 0
        self.ledger.cut(slot, slot.n_exact)
        return tail

    def _read_again(self, slot: Slot, limit: int, yielding: bool = False) -> None:
        """Read up to `limit` of the slot's unread tokens, alone in one decode. `yielding`:
        stop in the middle of it when a request comes (its cells are dropped; read later)."""
        take = share_budget(0, [len(slot.unread)], limit)[0]  # never leaves one alone
        if take < 2 or not self._make_room(take, keep=(slot,)):  # the next prompt reads them
            slot.unread.clear()
            return
        chunk = slot.unread[:take]
        pos = len(slot.tokens)
        for i, token in enumerate(chunk):
            self._add(i, token, pos + i, slot.index, False)
        self._batch.n_tokens = take
        if yielding:
            L.llama_set_abort_callback(self.ctx, self._yield_cb, None)
        try:
            rc = self._decode(self._batch, take, own_callback=yielding)
        finally:
            if yielding:
                L.llama_set_abort_callback(self.ctx, self._no_cb, None)
        self.steps += 1
        if rc != 0:
            L.llama_memory_seq_rm(self.memory, slot.index, pos, -1)
            if rc == DECODE_ABORTED:
                self.rereads_yielded += 1  # its tokens stay unread: the next idle step
            else:
                slot.unread.clear()
            return
        if slot.n_exact == pos:
            slot.n_exact += take
        self.ledger.grow(slot, chunk)
        del slot.unread[:take]
        if len(slot.unread) < 2:
            slot.unread.clear()

    def _release(self, run: SlotRun) -> None:
        self.running.pop(run.request_id, None)
        if run.sampler is not None:
            L.llama_sampler_free(run.sampler)
            run.sampler = None
        if run.slot is not None:
            run.n_past = len(run.slot.tokens)
            self.clock += 1
            run.slot.request_id = None
            run.slot.last_used = self.clock
            # Its reply (and prompt's last token) were decoded one token a step: read them
            # again, batched, once no request runs, so they can be reused.
            tail = self._keep_exact(run.slot)
            run.slot.unread = tail if len(tail) > 1 else []
            self.ended_at = time.perf_counter()

    # One step ---------------------------------------------------------------------------------
    def step(self) -> list[StepOutput]:
        """Admit waiting requests, decode one batch, sample. Returns what each request got."""
        outputs: list[StepOutput] = []
        for run in [r for r in self.running.values() if r.cancelled]:
            self._release(run)
            outputs.append(StepOutput(run, finish="cancelled"))
        n_running = len(self.running)
        self._admit(outputs)
        if len(self.running) > n_running:  # admitting only adds
            self._clear_idle()
        runs = list(self.running.values())
        if not runs:
            # Finished replies' cells are read again only in steps of their own: in a
            # request's step they would turn its one-token decodes into multi-token ones,
            # and its reply would no longer be a lone request's.
            slot = next((s for s in self.slots if s.unread), None)
            if slot is not None and not self.wait_s():
                self._read_again(slot, REREAD_STEP_TOKENS, yielding=True)
            return outputs
        decoding = [r for r in runs if len(r.feed) == 1]
        for run in self._over_promise(decoding):
            decoding.remove(run)
            runs.remove(run)
            outputs.append(self._finish(run, "context_full", run.matcher.flush()))
        prefilling = [r for r in runs if len(r.feed) > 1 and not self._still_following(r)]
        n_decoding = len(decoding) + self._draft(decoding)
        # A prompt's last token is read alone, like a generated one, so a reply's logits do
        # not depend on how its prompt happened to be batched (a seed repeats its reply).
        shares = share_budget(n_decoding, [len(r.feed) - 1 for r in prefilling], self.n_batch)
        chunks = [(run, run.feed[:share]) for run, share in zip(prefilling, shares, strict=True)
                  if share]  # fmt: skip
        # In slot order, each slot's tokens together: a stable layout (with one KV stream
        # llama.cpp runs the whole batch in one pass over the weights, whatever its order).
        planned = [(run, [run.feed[0], *run.draft], True) for run in decoding]
        planned += [(run, chunk, False) for run, chunk in chunks]
        planned.sort(key=lambda item: item[0].slot.index)
        batch, n = self._batch, 0
        for run, tokens, wants_logits in planned:
            if wants_logits:
                run.batch_index = n
            pos = len(run.slot.tokens)
            for i, token in enumerate(tokens):
                n = self._add(n, token, pos + i, run.slot.index, wants_logits)
        if n == 0:
            return outputs
        # Within the promises every cell fits once finished slots give theirs up.
        self._make_room(n, keep=tuple(run.slot for run, _, _ in planned))
        batch.n_tokens = n
        # A step reading prompt chunks may take seconds on a slow machine: llama.cpp's
        # callback between graph nodes shows the heartbeat it is still working (a Python
        # call per node: only in such steps).
        if chunks:
            if any(run.cancelled for run, _ in chunks):
                return outputs  # cancelled before the step began: the next step ends it
            self._ticks_before = self.ticks
            self._chunk_sizes = {run.request_id: len(chunk) for run, chunk in chunks}
            L.llama_set_abort_callback(self.ctx, self._tick_cb, None)
        started = time.perf_counter()
        try:
            rc = self._decode(batch, n, own_callback=bool(chunks))
        finally:
            if chunks:
                L.llama_set_abort_callback(self.ctx, self._no_cb, None)
                self._chunk_sizes = {}
        stopped, self._stopping = self._stopping, False
        self.steps += 1
        if rc == DECODE_ABORTED and stopped:
            # A reading request was cancelled: llama.cpp dropped what the step wrote, the
            # cancel ends it with the next step and the others run that step again.
            for run, _, _ in planned:
                L.llama_memory_seq_rm(self.memory, run.slot.index, len(run.slot.tokens), -1)
            return outputs
        if chunks:
            self.nodes_per_step = self.ticks - self._ticks_before
        elif rc == 0:  # a step of tokens that all want logits: what a draft's step is
            self.step_costs.record(n, time.perf_counter() - started)
        if rc != 0:
            error = EngineError(f"llama_decode failed ({rc}) with {len(runs)} streams")
            for run in runs:  # drop what this step may have written
                L.llama_memory_seq_rm(self.memory, run.slot.index, len(run.slot.tokens), -1)
                self._release(run)
                outputs.append(StepOutput(run, finish="error", error=error))
            return outputs
        now = time.perf_counter()
        for run, chunk in chunks:
            slot = run.slot
            if len(chunk) > 1 and slot.n_exact == len(slot.tokens):
                slot.n_exact += len(chunk)  # a multi-token decode: what a cold read makes
            self.ledger.grow(slot, chunk)
            del run.feed[: len(chunk)]
        for run in decoding:
            if run.draft:
                outputs.extend(self._verify(run, now))
            else:
                self.ledger.grow(run.slot, [run.feed.pop()])
                outputs.append(self._sample(run, now))
        return outputs

    # Speculative decoding ---------------------------------------------------------------------
    def _draft(self, decoding: list[SlotRun]) -> int:
        """Each decoding run's draft for this step (speculation.py), within its max_tokens,
        the cells promised to it, the sequence limit and the step's batch. Returns the drafted
        tokens in all."""
        room = self.n_batch - len(decoding)
        tokens, n = float(len(decoding)), len(decoding)  # each writes one token at least
        for run in decoding:
            run.draft = []
            if run.drafter is None or run.forced is not None or run.cancelled:
                continue
            if run.plain_next:
                run.plain_next = False
                continue
            held = len(run.slot.tokens)
            policy = run.policy
            limit = min(MAX_DRAFT if policy.auto else policy.limit(),
                        run.max_tokens - run.generated - 1, run.guaranteed - held - 1,
                        self.seq_limit - held - 2, room)  # fmt: skip
            draft = run.drafter.propose(limit) if limit > 0 else []
            if draft and policy.auto:
                prior = self.acceptance.prior(run.drafter.order)
                draft = draft[: policy.best(len(draft), tokens, n, self.step_costs, prior)]
            if draft:
                run.draft = draft
                room -= len(run.draft)
                n += len(run.draft)
                tokens += policy.expected(len(run.draft)) - 1
        return n - len(decoding)

    def _verify(self, run: SlotRun, now: float) -> list[StepOutput]:
        """Sample the drafted positions in order with the run's own chain, up to the first
        token that differs from the draft (rejection sampling with a one-token draft: the
        model's distribution, and the chain hears the same tokens as without a draft). The
        cells of drafted tokens past it are dropped; the sampled ones go out as one output
        each. A greedy pick nearer a tie than NEAR_TIE_LOGITS is not taken from a batched
        decode: that position is decoded again alone next step."""
        fed, draft, base = run.feed[0], run.draft, run.batch_index
        greedy = run.sampling.temperature <= 0
        picks: list[int] = []
        accepted = 0
        for i in range(len(draft) + 1):
            if greedy:
                token, gap = self.pick_greedy(run.sampler, base + i)
                if gap < NEAR_TIE_LOGITS:
                    run.plain_next = True  # the chain has not heard it: decided alone
                    break
                L.llama_sampler_accept(run.sampler, token)
            else:
                token = L.llama_sampler_sample(run.sampler, self.ctx, base + i)
            picks.append(token)
            if i == len(draft) or token != draft[i] or L.llama_vocab_is_eog(self.vocab, token):
                break
            accepted += 1
        run.policy.record(len(draft), accepted)
        self.acceptance.record(run.drafter.order, accepted, int(accepted < len(draft)))
        written = [fed, *draft]
        keep = len(picks)  # cells of `fed` and the accepted drafts
        pos = len(run.slot.tokens)
        L.llama_memory_seq_rm(self.memory, run.slot.index, pos + keep, -1)
        self.ledger.grow(run.slot, written[:keep])
        run.draft = []
        if not picks:
            return []  # the first position was a near-tie: `fed` is decoded alone next step
        outputs = []
        for i, token in enumerate(picks):
            run.batch_index = base + i
            run.feed.clear()  # only the last token taken is fed to the next step
            out = self._take(run, token, now)
            if i < accepted:
                out = dataclasses.replace(out, drafted=True)
            outputs.append(out)
            if out.finish is not None:
                break
        return outputs

    def _decode(self, batch, n: int, own_callback: bool = False) -> int:
        """llama_decode, timed for Automatic threads: the count may change before the step and
        after it. A step that tries another count is stopped once it runs clearly slower than
        the count it is tried against (a contended core can stall it for seconds), and runs
        again at that count: llama.cpp drops what a stopped decode wrote. `own_callback`: the
        caller set an abort callback of its own (no try runs in such a step)."""
        governor = self.governor
        if governor is None:
            return L.llama_decode(self.ctx, batch)
        self._set_threads(governor.before_step(n, own_callback), "the CPU figures")
        limit = governor.try_limit()
        if limit is not None:
            self._try_deadline = time.perf_counter() + limit
            L.llama_set_abort_callback(self.ctx, self._try_cb, None)
        started = time.perf_counter()
        try:
            rc = L.llama_decode(self.ctx, batch)
        finally:
            if limit is not None:
                L.llama_set_abort_callback(self.ctx, self._no_cb, None)
        if rc == DECODE_ABORTED and limit is not None:
            self._set_threads(governor.abandon(), "a try ran clearly slower")
            started = time.perf_counter()
            rc = L.llama_decode(self.ctx, batch)
        if rc == 0:
            self._set_threads(governor.observe(n, time.perf_counter() - started), "step times")
        return rc

    def _set_threads(self, n_threads: int | None, why: str) -> None:
        if n_threads is not None:
            L.llama_set_n_threads(self.ctx, n_threads, n_threads)
            if self.draft_model is not None:
                self.draft_model.set_threads(n_threads)
            log.debug("threads → %d (%s; others %.2f)", n_threads, why, self.governor.others)

    @property
    def threads(self) -> ThreadChoice:
        """The compute threads running, of how many, and why (for the readouts)."""
        if self.governor is not None:
            return self.governor.choice
        n = self.params.n_threads
        return ThreadChoice(n, n, FIXED_THREADS)

    def _tick(self, _data: ctypes.c_void_p) -> bool:
        self.ticks += 1
        return self._stopping  # a reading request was cancelled (stop_soon)

    def _add(self, n: int, token: int, pos: int, seq: int, logits: bool) -> int:
        batch = self._batch
        batch.token[n] = token
        batch.pos[n] = pos
        batch.n_seq_id[n] = 1
        batch.seq_id[n][0] = seq
        batch.logits[n] = logits
        return n + 1

    def _sample(self, run: SlotRun, now: float) -> StepOutput:
        return self._take(run, L.llama_sampler_sample(run.sampler, self.ctx, run.batch_index),
                          now)  # fmt: skip

    def _take(self, run: SlotRun, token: int, now: float) -> StepOutput:
        """The sampled `token` (accepted by the run's chain) as the reply's next text, or
        its end; a token the reply goes on with is fed to the next step."""
        if run.prefill_done is None:
            run.prefill_done = now
        if run.first_token is None:
            run.first_token = now
        else:
            run.intervals.append(now - run.last_token)
        run.last_token = now
        if run.forced is not None:
            return self._forced(run)
        if L.llama_vocab_is_eog(self.vocab, token):
            return self._finish(run, "stop", run.matcher.flush())
        run.generated += 1
        n = L.llama_token_to_piece(self.vocab, token, self._piece_buf, 256, 0,
                                   self.render_special)  # fmt: skip
        piece = run.decoder.decode(self._piece_buf.raw[:n]) if n > 0 else ""
        s = run.sampling
        if len(run.logprobs) < s.logprobs:
            run.logprobs.append(self.token_logprob(token, run.batch_index))
        lp = self.token_detail(token, s.top_logprobs, run.batch_index) if s.token_logprobs else None
        text, stopped = run.matcher.feed(piece)
        if stopped:
            return self._finish(run, "stop", text, run.matcher.matched, lp, piece)
        if run.generated >= run.max_tokens:
            return self._finish(run, "length", text + run.matcher.flush(), None, lp, piece)
        if len(run.slot.tokens) >= self.seq_limit:
            return self._finish(run, "context_full", text + run.matcher.flush(), None, lp, piece)
        run.feed.append(token)  # decoded with the next step; a finished reply leaves it out
        if run.drafter is not None:
            run.drafter.extend([token])
        return StepOutput(run, text, logprob=lp, piece=piece)

    def _forced(self, run: SlotRun) -> StepOutput:
        """The forced text in place of the token just sampled: fed to the model next step,
        sent as the reply's text (stop strings and limits apply as to any)."""
        tokens, piece = run.forced
        run.forced = None
        if run.sampling.json_schema is None:  # a grammar would refuse them (and abort)
            for token in tokens:  # the penalties count them as written
                L.llama_sampler_accept(run.sampler, token)
        run.generated += len(tokens)
        text, stopped = run.matcher.feed(piece)
        if stopped:
            return self._finish(run, "stop", text, run.matcher.matched, None, piece)
        if run.generated >= run.max_tokens:
            return self._finish(run, "length", text + run.matcher.flush(), None, None, piece)
        run.feed.extend(tokens)
        if run.drafter is not None:
            run.drafter.extend(tokens)
        return StepOutput(run, text, piece=piece)

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
        if getattr(self, "_other_load", None) is not None:
            self._other_load.close()  # its sampling thread
        for run in list(self.running.values()):
            self._release(run)
        if getattr(self, "ctx", None):
            self.save_all()
        if getattr(self, "_batch", None) is not None:
            L.llama_batch_free(self._batch)
            self._batch = None
        if getattr(self, "draft_model", None) is not None:
            self.draft_model.close()
        super().close()
