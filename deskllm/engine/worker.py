"""The engine process: one Scheduler answering every request, one slot or many.

A reader thread puts every request on a queue (Status it answers itself, so the app can ask
while the engine decodes); the main thread takes what arrived between two steps (new chats,
cancels, loads), then runs one step of the scheduler and sends every request's events, each
tagged with its request id, as one StepEvents message. While nothing runs it sleeps on the
queue. A heartbeat thread tells the client it is alive while it makes progress.
"""

from __future__ import annotations

import itertools
import logging
import os
import queue
import threading
import time
from dataclasses import dataclass, field, replace
from multiprocessing.connection import Connection
from pathlib import Path

import psutil

from deskllm.engine.chat_template import ChatTemplate, TemplateRefused
from deskllm.engine.domain import (
    ChatMessage,
    Done,
    Embeddings,
    Error,
    Loaded,
    LoadProgress,
    Metrics,
    PromptProgress,
    StatusReport,
    TextDelta,
)
from deskllm.engine.errors import EngineError, ErrorKind
from deskllm.engine.harmony import HarmonyStream, is_harmony
from deskllm.engine.load_defaults import resolve_params
from deskllm.engine.protocol import (
    Cancel,
    Chat,
    Embed,
    Forget,
    Heartbeat,
    Load,
    Shutdown,
    Status,
    StepEvents,
    Unload,
)
from deskllm.engine.raw_prompt import fit_raw_prompt
from deskllm.engine.reasoning import Part, ReasoningMarkers, ReasoningSplitter, markers_of
from deskllm.engine.token_logprobs import LogprobTrail
from deskllm.engine.tool_prompt import tools_of
from deskllm.gguf.header import GgufError, read_header
from deskllm.hardware.energy import EnergyMeter, EnergyReading, EnergySpan, reply_energy
from deskllm.hardware.nvml_process import NvmlProcessMemory

log = logging.getLogger("deskllm.engine")

HEARTBEAT_S = 1.0
METRICS_INTERVAL_S = 0.25
# Text goes out at most this often per reply (the first piece at once): every message wakes
# the app's process, which on a machine with few cores takes a core from llama.cpp's threads.
# 30 ms is still faster than the GUI repaints.
TEXT_INTERVAL_S = 0.03
# A prompt that takes longer than this to read shows how far it is, this often (in the
# middle of a step too: one chunk of a long prompt takes seconds on a slow machine).
PROGRESS_INTERVAL_S = 0.5


def _percentile(sorted_values: list[float], q: float) -> float | None:
    if not sorted_values:
        return None
    return sorted_values[min(len(sorted_values) - 1, int(q * len(sorted_values)))]


@dataclass
class ReplyState:
    """What the worker keeps of one reply besides the scheduler's SlotRun."""

    received: float
    dropped: int = 0
    warnings: list[str] = field(default_factory=list)
    trail: LogprobTrail = field(default_factory=LogprobTrail)  # Sampling.token_logprobs
    sent: int = 0  # characters of text sent
    text: list[str] = field(default_factory=list)
    pending: list[str] = field(default_factory=list)
    last_text: float = 0.0
    last_metrics: float = 0.0
    logprobs_sent: bool = False  # Sampling.logprobs: the Metrics carrying them went out
    # Energy: the prompt phase from when it got a slot, the decode phase from its first token.
    prompt_span: EnergySpan | EnergyReading | None = None
    decode_span: EnergySpan | EnergyReading | None = None
    # A reasoning model's reply: its splitter, the thinking and answer apart, thinking tokens
    # and when the thinking began and ended; `budget_closed` once the budget closed it.
    splitter: ReasoningSplitter | None = None
    reasoning: list[str] = field(default_factory=list)
    answer: list[str] = field(default_factory=list)
    reasoning_tokens: int = 0
    reasoning_from: float | None = None
    reasoning_to: float | None = None
    budget_closed: bool = False
    split: bool = True  # False: the thinking stays in the text (Sampling.split_reasoning)
    parts: list[Part] = field(default_factory=list)  # split, not sent yet
    harmony: HarmonyStream | None = None  # a gpt-oss reply's frames, read as they come
    written: int = 0  # characters in `text`
    drafted: list[tuple[int, int]] = field(default_factory=list)  # spans accepted drafts wrote


class Worker:
    def __init__(self, conn: Connection) -> None:
        self.conn = conn
        self.send_lock = threading.Lock()
        self.inbox: queue.Queue = queue.Queue()
        self.runtime = None  # the Scheduler of the loaded model
        self.embedder = None  # made on the first Embed (a second context on the model)
        self.template: ChatTemplate | None = None
        self.markers: ReasoningMarkers | None = None  # a reasoning model's
        self.last_prompt = ""  # the last rendered chat prompt (does it open the thinking?)
        self.replies: dict[int, ReplyState] = {}
        self.process = psutil.Process()
        self.device = "CPU"
        self.vram: NvmlProcessMemory | None = None
        self.energy = EnergyMeter()  # replaced at load by the machine's counters
        self.kv_disk_dir: Path | None = None  # kept after an unload: Forget still cleans it
        self.working = False  # loading, or replies in flight: the client waits for events
        # A reply or an embedding waits in the inbox: the engine's background work (reading
        # finished replies again) stops for it. Unload and Shutdown let it finish: the states
        # they save are whole then.
        self.request_waiting = threading.Event()
        self.sent = 0
        self.sampled_at = 0.0  # the energy counters were last read (a reply's spans go on)

    def send(self, event: object) -> None:
        with self.send_lock:
            self.conn.send(event)
            self.sent += 1

    def heartbeat(self) -> None:
        """Beat while work makes progress (events out, or steps run); silent when stuck, and
        the client ends a worker that stays silent while it owes an answer."""
        seen = None
        while True:
            time.sleep(HEARTBEAT_S)
            if not self.working:
                seen = None
                continue
            runtime = self.runtime
            progress = (self.sent, getattr(runtime, "steps", 0), getattr(runtime, "ticks", 0))
            if progress != seen:
                seen = progress
                with self.send_lock:
                    self.conn.send(Heartbeat())

    def report_progress(self) -> None:
        """PromptProgress of every request still reading its prompt, every half second once
        it has read for that long. Under the send lock: a request's progress never follows
        its first text (the step sets the first token before it sends)."""
        while True:
            time.sleep(PROGRESS_INTERVAL_S)
            runtime = self.runtime
            if runtime is None or not self.working:
                continue
            with self.send_lock:
                now = time.perf_counter()
                events = []
                for run, read in runtime.prompt_read():
                    state = self.replies.get(run.request_id)
                    if state is None or now - state.received < PROGRESS_INTERVAL_S:
                        continue
                    # Seconds since it got its slot: the speed it reads at, for the ETA.
                    events.append(PromptProgress(run.request_id, len(run.prompt), run.cached,
                                                 read, now - run.admitted))  # fmt: skip
                if events:
                    self.conn.send(StepEvents(tuple(events)))
                    self.sent += 1

    def read_requests(self) -> None:
        while True:
            try:
                request = self.conn.recv()
            except (EOFError, OSError):
                self.inbox.put(Shutdown())  # the client went away: end quietly
                return
            if isinstance(request, Status):
                self.send(self.status())
            else:
                if isinstance(request, Chat | Embed):
                    self.request_waiting.set()
                elif isinstance(request, Cancel) and self.runtime is not None:
                    self.runtime.stop_soon(request.request_id)  # a prompt being read stops now
                self.inbox.put(request)

    def status(self) -> StatusReport:
        runtime = self.runtime
        return StatusReport(
            loaded=runtime is not None,
            model_path=runtime.params.model_path if runtime else None,
            n_ctx=runtime.seq_limit if runtime else 0,
            busy=bool(self.replies),
            cached_conversations=runtime.conversations() if runtime else (),
            rss_bytes=self.process.memory_info().rss,
            unread_tokens=sum(len(s.unread) for s in runtime.slots) if runtime else 0,
            kv_cells=runtime.n_ctx if runtime else 0,
            kv_cells_used=runtime.held() if runtime else 0,
            kv_evictions=runtime.evictions if runtime else 0,
            prefix_hits=runtime.prefix_hits if runtime else 0,
            prefix_tokens=runtime.prefix_tokens if runtime else 0,
            **(self.threads() if runtime else {}),
        )

    def threads(self) -> dict:
        """The readouts' thread figures (StatusReport's and Metrics' fields)."""
        choice = self.runtime.threads
        return {"n_threads": choice.n_threads, "max_threads": choice.max_threads,
                "threads_reason": choice.reason}  # fmt: skip

    # Main loop --------------------------------------------------------------------------------
    def run(self) -> None:
        threading.Thread(target=self.read_requests, name="engine-reader", daemon=True).start()
        threading.Thread(target=self.heartbeat, name="engine-heartbeat", daemon=True).start()
        threading.Thread(target=self.report_progress, name="engine-progress",
                         daemon=True).start()  # fmt: skip
        while True:
            # None: nothing to do but wait; 0: step now; else the time before finished
            # replies are read again (a request that comes meanwhile goes first).
            wait = None if self.runtime is None else self.runtime.wait_s()
            self.request_waiting.clear()  # what comes from here on sets it again
            try:
                request = self.inbox.get(block=wait != 0, timeout=wait or None)
                while True:
                    if isinstance(request, Shutdown):
                        self.unload()
                        return
                    self.handle(request)
                    request = self.inbox.get_nowait()
            except queue.Empty:
                pass
            if self.runtime is not None and self.runtime.busy:
                self.working = True
                self.step()
            self.working = bool(self.replies)

    def handle(self, request: object) -> None:
        try:
            if isinstance(request, Load):
                self.working = True
                self.load(request)
            elif isinstance(request, Chat):
                self.admit(request)
            elif isinstance(request, Embed):
                self.embed(request)
            elif isinstance(request, Cancel) and self.runtime is not None:
                self.runtime.cancel(request.request_id)
            elif isinstance(request, Forget):
                self.forget(request.conversation_id)  # no answer: the client does not wait
            elif isinstance(request, Unload):
                self.unload()
                self.send(self.status())
        except Exception as exc:  # report, never die silently: the client waits for an event
            kind = getattr(exc, "kind", None)
            if kind is None:  # not one of ours: a bug worth its traceback
                log.exception("engine request failed")
                kind = ErrorKind.ERROR
            else:
                log.info("request refused (%s): %s", kind, exc)
            request_id = getattr(request, "request_id", None)
            self.replies.pop(request_id, None)
            self.send(Error(request_id, str(exc), kind=kind))

    def load(self, request: Load) -> None:
        from deskllm.engine.llama_model import device_name
        from deskllm.engine.scheduler import Scheduler

        try:
            # Checked again here: the file may have changed since the loader looked, and
            # llama.cpp aborts the process on some malformed files instead of failing. Before
            # unloading: a bad file leaves the loaded model as it was.
            header = read_header(Path(request.params.model_path))
        except GgufError as exc:
            self.send(Error(None, str(exc), kind=ErrorKind.BAD_MODEL))
            return
        self.unload()
        params = resolve_params(request.params, header.context_length)
        started = time.perf_counter()
        last = [0.0]

        def on_progress(fraction: float) -> None:
            if fraction - last[0] >= 0.05 or fraction >= 1.0:
                last[0] = fraction
                self.send(LoadProgress(fraction))

        runtime = Scheduler(params, request.n_slots, bool(params.use_extra_bufts), on_progress)
        runtime.on_admitted = self.on_admitted
        runtime.interrupt = self.request_waiting.is_set
        self.runtime = runtime
        self.kv_disk_dir = runtime.kv_disk_dir
        self.template = ChatTemplate(runtime.chat_template(), runtime.bos_text, runtime.eos_text)
        bare = len(runtime.tokenize(""))  # BOS, where the model adds one
        self.markers = markers_of(runtime.chat_template(),
                                  lambda text: len(runtime.tokenize(text)) == bare + 1)
        # gpt-oss: its replies' control tokens are written out and read as its frames.
        self.harmony = is_harmony(runtime.chat_template())
        runtime.render_special = self.harmony
        self.device = device_name(runtime.buffers)
        gpu = params.n_gpu_layers != 0
        self.vram = NvmlProcessMemory() if gpu else None
        self.energy = EnergyMeter.for_this_machine(params.energy_watts, gpu=gpu)
        warnings = (self.template.warning,) if self.template.warning else ()
        self.send(
            Loaded(
                model_path=params.model_path,
                n_ctx=runtime.n_ctx,
                n_ctx_seq=runtime.seq_limit,
                n_ctx_train=runtime.n_ctx_train,
                n_gpu_layers=params.n_gpu_layers,
                use_extra_bufts=bool(params.use_extra_bufts),
                chat_template_source=self.template.source,
                warnings=warnings,
                load_s=time.perf_counter() - started,
                rss_bytes=self.process.memory_info().rss,
                buffers=runtime.buffers,
                devices=(self.device,),
                reasoning_markers=(self.markers.open, self.markers.close) if self.markers else None,
            )
        )

    def unload(self) -> None:
        """Free the model; its slots' KV states go to the state cache and disk first."""
        if self.runtime is None:
            return
        for rid in list(self.replies):
            self.send(Error(rid, "the model was unloaded", kind=ErrorKind.NO_MODEL))
        self.replies.clear()
        if self.embedder is not None:
            self.embedder.close()
            self.embedder = None
        self.runtime.close()
        self.runtime = None

    def forget(self, conversation_id: str) -> None:
        """Drop a deleted conversation's KV states (cache, slots, disk files)."""
        if self.runtime is not None:
            self.runtime.forget(conversation_id)
            return
        from deskllm import paths
        from deskllm.engine.kv_cache import delete_conversation_states

        delete_conversation_states(self.kv_disk_dir or paths.kv_cache_dir(), conversation_id)

    def embed(self, request: Embed) -> None:
        """Embeddings in a second context, between two steps (the streams wait that long)."""
        from deskllm.engine.embedder import Embedder

        if self.runtime is None:
            self.send(Error(request.request_id, "no model is loaded", kind=ErrorKind.NO_MODEL))
            return
        runtime = self.runtime
        if self.embedder is None:
            self.embedder = Embedder(runtime.model, runtime.params.n_ctx, runtime.params.n_threads)
        vectors, total = self.embedder.embed_texts(
            request.texts, runtime.tokenize, request.truncate
        )
        self.send(Embeddings(request.request_id, vectors, total))

    # Chat -------------------------------------------------------------------------------------
    def fit_prompt(
        self,
        messages: list[ChatMessage],
        max_tokens: int,
        continue_reply: bool,
        drop_old_turns: bool = True,
        tools: list[dict] | None = None,
        think: str | None = None,
    ) -> tuple[list[int], int, str | None]:
        """Render and tokenize; drop the oldest turns (never the system prompt or the last
        message, nor the question of a reply being continued) until the prompt and room for
        the reply fit one conversation's context (seq_limit)."""
        n_ctx = self.runtime.seq_limit
        reserve = min(max_tokens, n_ctx // 2)
        dropped = 0
        kept = 2 if continue_reply else 1
        while True:
            rendered = self.template.render(messages, continue_reply=continue_reply, tools=tools,
                                            think=think)  # fmt: skip
            self.last_prompt = rendered.text
            tokens = self.runtime.tokenize(rendered.text)
            if len(tokens) + reserve <= n_ctx:
                return tokens, dropped, rendered.warning
            droppable = [i for i, m in enumerate(messages[:-kept]) if m.role != "system"]
            if not drop_old_turns:
                raise EngineError(
                    f"the conversation is {len(tokens)} tokens; with {reserve} kept for the "
                    f"reply it does not fit the {n_ctx}-token context",
                    ErrorKind.CONTEXT,
                )
            if not droppable:
                raise EngineError(
                    f"the conversation's last message is {len(tokens)} tokens; with {reserve} "
                    f"kept for the reply it does not fit the {n_ctx}-token context. "
                    "Shorten the message or load the model with a larger context.",
                    ErrorKind.CONTEXT,
                )
            i = droppable[0]
            del messages[i]
            dropped += 1
            # Keep turns alternating: a reply whose question was dropped goes too.
            if i < len(messages) - 1 and messages[i].role == "assistant":
                del messages[i]
                dropped += 1

    def admit(self, request: Chat) -> None:
        rid = request.request_id
        if self.runtime is None:
            self.send(Error(rid, "no model is loaded", kind=ErrorKind.NO_MODEL))
            return
        if request.sampling.json_schema is not None:
            from deskllm.engine.llama_model import grammar_of

            grammar_of(request.sampling.json_schema)  # a bad schema fails before any work
        if request.continue_reply and (
            not request.messages or request.messages[-1].role != "assistant"
        ):
            self.send(Error(rid, "there is no assistant reply to continue"))
            return
        state = ReplyState(time.perf_counter())
        state.harmony = HarmonyStream() if self.harmony else None
        try:
            if request.raw_prompt is not None:
                tokens, warning = fit_raw_prompt(
                    self.runtime.tokenize, request.raw_prompt, request.sampling.max_tokens,
                    self.runtime.seq_limit,
                ), None  # fmt: skip
            else:
                tokens, state.dropped, warning = self.fit_prompt(
                    list(request.messages), request.sampling.max_tokens, request.continue_reply,
                    request.drop_old_turns, tools_of(request), request.sampling.think,
                )  # fmt: skip
                if self.markers is not None:  # tracked for the budget even when not split
                    opens = ReasoningSplitter.prompt_opens(self.last_prompt, self.markers)
                    state.splitter = ReasoningSplitter(self.markers, opens)
                    state.split = request.sampling.split_reasoning
        except TemplateRefused as exc:
            self.send(Error(rid, str(exc), kind=ErrorKind.TEMPLATE))
            return
        if warning:
            state.warnings.append(warning)
        if state.dropped:
            state.warnings.append(f"{state.dropped} old messages were left out to fit the context")
        self.replies[rid] = state
        self.runtime.submit(rid, tokens, request.sampling, request.conversation_id)

    def on_admitted(self, run) -> None:
        """A request got its slot: its prompt's energy is counted from now."""
        state = self.replies.get(run.request_id)
        if state is not None:
            state.prompt_span = self.energy.start()

    def step(self) -> None:
        now = time.perf_counter()
        events: list = []  # sent as one message once the step is done
        outputs = self.runtime.step()
        if outputs and now - self.sampled_at >= METRICS_INTERVAL_S:
            self.sampled_at = now
            self.energy.sample()  # catches a counter's wrap on a long reply
        for out in outputs:
            rid = out.run.request_id
            state = self.replies.get(rid)
            if state is None:
                continue
            if isinstance(state.prompt_span, EnergySpan) and out.run.first_token is not None:
                state.prompt_span = self.energy.stop(state.prompt_span)
                state.decode_span = self.energy.start()
            want = out.run.sampling.logprobs
            if want and not state.logprobs_sent and len(out.run.logprobs) >= want:
                state.logprobs_sent = True  # the router decides on these before any text
                self.take_text(rid, state, events)
                events.append(self.metrics(out.run, state))
            if out.logprob is not None:
                state.trail.add(out.logprob, out.piece)
            splitter = state.splitter
            if splitter is not None and splitter.inside and out.piece and not state.budget_closed:
                budget = out.run.sampling.reasoning_budget if out.finish is None else 0
                self.count_reasoning(rid, state, budget)
            text = out.text
            if state.harmony is not None:
                text = state.harmony.feed(text) + (state.harmony.finish() if out.finish else "")
            if text:
                if out.drafted and state.harmony is None:
                    note_drafted(state.drafted, state.written, len(text))
                state.written += len(text)
                state.text.append(text)
                state.pending.append(text)
                if splitter is not None:  # at once: the count above needs where it is
                    state.parts.extend(splitter.feed(text))
                    if splitter.closed and state.reasoning_to is None:
                        state.reasoning_to = now
            if out.finish is not None:
                self.replies.pop(rid)
                self.take_text(rid, state, events, final=True)
                if out.error is not None:
                    self.close_energy(state)
                    events.append(Error(rid, str(out.error), kind=out.error.kind))
                    continue
                energy = self.close_energy(state, out.run.generated)
                split = state.splitter is not None and state.split
                metrics = self.metrics(out.run, state, energy)
                if state.drafted and not split:  # spans of the text as sent
                    metrics = replace(metrics, drafted_spans=tuple(state.drafted),
                                      drafted_of=state.written)  # fmt: skip
                events.append(
                    Done(
                        request_id=rid,
                        finish_reason=out.finish,
                        text="".join(state.answer) if split else "".join(state.text),
                        reasoning="".join(state.reasoning).strip(),
                        reasoning_tokens=state.reasoning_tokens,
                        reasoning_s=(state.reasoning_to or time.perf_counter())
                        - state.reasoning_from if state.reasoning_from is not None else None,
                        metrics=metrics,
                        dropped_messages=state.dropped,
                        warnings=tuple(state.warnings),
                        stop_string=out.stop_string,
                    )
                )
                continue
            if state.pending and (now - state.last_text >= TEXT_INTERVAL_S):
                state.last_text = now
                self.take_text(rid, state, events)
            if now - state.last_metrics >= METRICS_INTERVAL_S:
                state.last_metrics = now
                events.append(self.metrics(out.run, state))
        if events:
            self.send(StepEvents(tuple(events)))

    def close_energy(self, state: ReplyState, generated: int = 0) -> dict:
        """Stop a finished reply's open energy spans; its Metrics' energy fields. Replies
        that ran together each count the machine's energy over their own time."""
        for name in ("prompt_span", "decode_span"):
            span = getattr(state, name)
            if isinstance(span, EnergySpan):
                setattr(state, name, self.energy.stop(span))
        return reply_energy(state.prompt_span, state.decode_span, generated)

    def count_reasoning(self, rid: int, state: ReplyState, budget: int) -> None:
        """A token of thinking; at the budget the block is closed for the model (its close
        marker fed as if it had written it), and it answers."""
        state.reasoning_tokens += 1
        if state.reasoning_from is None:
            state.reasoning_from = time.perf_counter()
        if budget and state.reasoning_tokens >= budget and not state.budget_closed:
            state.budget_closed = True
            markers = state.splitter.markers
            self.runtime.force_text(rid, markers.model_close or f"\n{markers.close}\n\n")

    def take_text(self, rid: int, state: ReplyState, events: list, final: bool = False) -> None:
        """Send the text held for a reply: a reasoning model's as thinking and answer deltas
        (`final`: with what its splitter held back)."""
        text = "".join(state.pending)
        state.pending.clear()
        parts, state.parts = state.parts, []
        if state.splitter is not None and final:
            parts += state.splitter.finish()
        if state.splitter is None or not state.split:  # sent as written
            if text:
                state.sent += len(text)
                events.append(TextDelta(rid, text, state.trail.take(state.sent)))
            return
        for reasoning, group in itertools.groupby(parts, key=lambda p: p.reasoning):
            group = list(group)
            piece = "".join(p.text for p in group)
            state.sent += sum(p.consumed for p in group)
            (state.reasoning if reasoning else state.answer).append(piece)
            logprobs = state.trail.take(state.sent)
            if piece or logprobs:
                events.append(TextDelta(rid, piece, logprobs, reasoning=reasoning))

    def metrics(self, run, state: ReplyState, energy: dict | None = None) -> Metrics:
        """Figures of one reply. TTFT counts from when the worker received the request (the
        wait for a free slot included); pp_tps from when it got its slot."""
        first, last = run.first_token, run.last_token
        pp_s = (run.prefill_done - run.admitted) if run.prefill_done and run.admitted else None
        ordered = sorted(run.intervals)
        p50, p95 = _percentile(ordered, 0.5), _percentile(ordered, 0.95)
        return Metrics(
            request_id=run.request_id,
            ttft_s=first - state.received if first is not None else None,
            prompt_tokens=len(run.prompt),
            cached_tokens=run.cached,
            restored_from=run.restored_from,
            evaluated_tokens=run.evaluated if run.slot is not None else 0,
            pp_tps=run.evaluated / pp_s if pp_s and run.evaluated else None,
            generated_tokens=run.generated,
            tg_tps=(run.generated - 1) / (last - first)
            if run.generated > 1 and last and first and last > first
            else None,
            itl_p50_ms=p50 * 1000 if p50 is not None else None,
            itl_p95_ms=p95 * 1000 if p95 is not None else None,
            n_past=run.n_past or (len(run.slot.tokens) if run.slot is not None else 0),
            n_ctx=self.runtime.seq_limit,
            rss_bytes=self.process.memory_info().rss,
            vram_bytes=self.vram.read() if self.vram else None,
            device=self.device,
            # Sampling.logprobs go out whole (or with Done): the router reads the first N
            token_logprobs=tuple(run.logprobs)
            if energy is not None or len(run.logprobs) >= run.sampling.logprobs
            else (),
            draft_n=run.policy.drafted if run.policy else 0,
            draft_n_accepted=run.policy.accepted if run.policy else 0,
            draft_passes=run.policy.passes if run.policy else 0,
            **(energy or {}),
            **self.threads(),
        )


def worker_main(
    conn: Connection, log_level: int = logging.WARNING, env: dict[str, str] | None = None
) -> None:
    """Entry point of the engine process (multiprocessing spawn target). `env` is applied
    before llama.cpp is loaded: ggml reads some settings once per process."""
    os.environ.update(env or {})
    logging.basicConfig(level=log_level, format="%(levelname)s %(name)s[engine]: %(message)s")
    Worker(conn).run()


def note_drafted(spans: list[tuple[int, int]], start: int, length: int) -> None:
    """Add [start, start + length) to `spans`, joined to the last span where they touch."""
    if spans and spans[-1][1] == start:
        spans[-1] = (spans[-1][0], start + length)
    else:
        spans.append((start, start + length))
