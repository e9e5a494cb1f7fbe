"""The engine worker process: owns llama.cpp, answers one request at a time.

A reader thread takes requests off the pipe so that Cancel and Status are seen while the main
thread is busy decoding; everything else is queued for the main thread.
"""

from __future__ import annotations

import hashlib
import logging
import os
import queue
import threading
import time
from multiprocessing.connection import Connection
from pathlib import Path

import psutil

from deskllm.engine.chat_template import ChatTemplate, TemplateRefused
from deskllm.engine.kv_cache import (
    KvStateCache,
    delete_conversation_states,
    make_guard,
    model_identity,
)
from deskllm.engine.load_defaults import resolve_params
from deskllm.engine.protocol import (
    Cancel,
    Chat,
    ChatMessage,
    Done,
    Embed,
    Embeddings,
    Error,
    Forget,
    Heartbeat,
    Load,
    Loaded,
    LoadProgress,
    Metrics,
    Shutdown,
    Status,
    StatusReport,
    TextDelta,
    Unload,
)
from deskllm.engine.raw_prompt import fit_raw_prompt
from deskllm.engine.stop_strings import StopMatcher
from deskllm.engine.token_logprobs import LogprobTrail
from deskllm.engine.tool_prompt import tools_of
from deskllm.gguf.header import GgufError, read_header
from deskllm.hardware.energy import EnergyMeter, EnergyReading, reply_energy
from deskllm.hardware.nvml_process import NvmlProcessMemory
from deskllm.llamacpp import build

log = logging.getLogger("deskllm.engine")

METRICS_INTERVAL_S = 0.25
HEARTBEAT_S = 1.0
# Text goes out at most this often (the first piece at once): every message wakes the app's
# process, which on a machine with few cores takes a core from llama.cpp's threads. 30 ms is
# still faster than the GUI repaints.
TEXT_INTERVAL_S = 0.03


def _percentile(sorted_values: list[float], q: float) -> float | None:
    if not sorted_values:
        return None
    return sorted_values[min(len(sorted_values) - 1, int(q * len(sorted_values)))]


class Worker:
    def __init__(self, conn: Connection) -> None:
        self.conn = conn
        self.send_lock = threading.Lock()
        self.requests: queue.Queue = queue.Queue()
        self.runtime = None
        self.embedder = None  # made on the first Embed (a second context on the model)
        self.template: ChatTemplate | None = None
        self.cache: KvStateCache | None = None
        self.current_conversation: str | None = None
        self.kv_disk_dir: Path | None = None  # kept after an unload: Forget still cleans it
        self.busy = False
        self.device = "CPU"
        self.vram: NvmlProcessMemory | None = None
        self.energy = EnergyMeter()  # replaced at load by the machine's counters
        self.process = psutil.Process()
        self.cancel_flag = threading.Event()
        self.in_request = False  # a request is being handled: the client waits for an answer
        self.sent = 0  # events sent: the heartbeat's sign of progress

    def send(self, event: object) -> None:
        with self.send_lock:
            self.conn.send(event)
            self.sent += 1

    def heartbeat(self) -> None:
        """While a request is handled, tell the client every HEARTBEAT_S that the worker is
        still making progress: events went out, or llama.cpp ran graph nodes (the runtime's
        tick count). A worker stuck without progress goes silent, and the client ends it."""
        seen = None
        while True:
            time.sleep(HEARTBEAT_S)
            if not self.in_request:
                seen = None
                continue
            progress = (self.sent, getattr(self.runtime, "ticks", 0))
            if progress != seen:
                seen = progress
                with self.send_lock:
                    self.conn.send(Heartbeat())

    # Reader thread ----------------------------------------------------------------------------
    def read_requests(self) -> None:
        while True:
            try:
                request = self.conn.recv()
            except (EOFError, OSError):
                self.requests.put(Shutdown())  # the app went away: end quietly
                return
            if isinstance(request, Cancel):
                self.cancel_flag.set()
            elif isinstance(request, Status):
                self.send(self.status())
            else:
                if isinstance(request, Chat):
                    # Cleared here, in the pipe's order, not when the reply starts: a Stop sent
                    # while the engine still finished other work must not be lost.
                    self.cancel_flag.clear()
                self.requests.put(request)

    def status(self) -> StatusReport:
        return StatusReport(
            loaded=self.runtime is not None,
            model_path=self.runtime.params.model_path if self.runtime else None,
            n_ctx=self.runtime.n_ctx if self.runtime else 0,
            busy=self.busy,
            cached_conversations=tuple(self.cache.keys()) if self.cache else (),
            rss_bytes=self.process.memory_info().rss,
        )

    # Main loop --------------------------------------------------------------------------------
    def run(self) -> None:
        threading.Thread(target=self.read_requests, name="engine-reader", daemon=True).start()
        threading.Thread(target=self.heartbeat, name="engine-heartbeat", daemon=True).start()
        while True:
            request = self.requests.get()
            if isinstance(request, Shutdown):
                self.unload()
                return
            self.in_request = True
            try:
                if isinstance(request, Load):
                    self.load(request)
                elif isinstance(request, Chat):
                    self.chat(request)
                    if self.runtime is not None:
                        # Idle time after the reply: make its cells reusable for the next turn.
                        self.runtime.settle(lambda: not self.requests.empty())
                elif isinstance(request, Unload):
                    self.unload()
                    self.send(self.status())
                elif isinstance(request, Embed):
                    self.embed(request)
                elif isinstance(request, Forget):
                    self.forget(request.conversation_id)  # no answer: the client does not wait
            except Exception as exc:  # report, never die silently: the client waits for an event
                kind = getattr(exc, "kind", None)
                if kind is None:  # not one of ours: a bug worth its traceback
                    log.exception("engine request failed")
                    kind = "error"
                else:
                    log.info("request refused (%s): %s", kind, exc)
                request_id = getattr(request, "request_id", None)
                self.send(Error(request_id, str(exc), kind=kind))
            finally:
                self.in_request = False

    def load(self, request: Load) -> None:
        from deskllm.engine.runtime import LlamaRuntime

        try:
            # Checked again here: the file may have changed since the loader looked, and
            # llama.cpp aborts the process on some malformed files instead of failing. Before
            # unloading: a bad file leaves the loaded model as it was.
            header = read_header(Path(request.params.model_path))
        except GgufError as exc:
            self.send(Error(None, str(exc), kind="bad_model"))
            return
        self.unload()
        params = resolve_params(request.params, header.context_length)
        started = time.perf_counter()
        last = [0.0]

        def on_progress(fraction: float) -> None:
            if fraction - last[0] >= 0.05 or fraction >= 1.0:
                last[0] = fraction
                self.send(LoadProgress(fraction))

        self.runtime = runtime = LlamaRuntime(params, bool(params.use_extra_bufts), on_progress)
        runtime.cancel_flag = self.cancel_flag
        source = runtime.chat_template()
        self.template = ChatTemplate(source, runtime.bos_text, runtime.eos_text)
        guard = make_guard(
            model=model_identity(params.model_path),
            n_ctx=runtime.n_ctx,
            kv_type=params.kv_type,
            flash_attn=params.flash_attn,
            template=hashlib.sha256((source or "").encode()).hexdigest(),
            build=build.build_id(),
        )
        disk_dir = Path(params.kv_disk_dir) if params.kv_disk_dir else None
        self.cache = KvStateCache(
            guard,
            params.kv_ram_budget_mb << 20,
            disk_dir,
            params.kv_disk_budget_mb << 20,
            max_tokens=runtime.n_ctx,
        )
        self.kv_disk_dir = disk_dir
        self.current_conversation = None
        self.device = _device_name(runtime.buffers)
        self.vram = NvmlProcessMemory() if params.n_gpu_layers != 0 else None
        self.energy = EnergyMeter.for_this_machine(
            params.energy_watts, gpu=params.n_gpu_layers != 0
        )
        warnings = (self.template.warning,) if self.template.warning else ()
        self.send(
            Loaded(
                model_path=params.model_path,
                n_ctx=runtime.n_ctx,
                n_ctx_train=runtime.n_ctx_train,
                n_gpu_layers=params.n_gpu_layers,
                use_extra_bufts=bool(params.use_extra_bufts),
                chat_template_source=self.template.source,
                warnings=warnings,
                load_s=time.perf_counter() - started,
                rss_bytes=self.process.memory_info().rss,
                buffers=runtime.buffers,
                devices=(self.device,),
            )
        )

    def unload(self) -> None:
        if self.runtime is None:
            return
        if self.cache is not None:
            if self.current_conversation and self.runtime.tokens:
                self.cache.put(self.current_conversation, self.runtime.save_state())
            self.cache.flush_to_disk()
        if self.embedder is not None:
            self.embedder.close()
            self.embedder = None
        self.runtime.close()
        self.runtime = None
        self.cache = None
        self.current_conversation = None

    def embed(self, request: Embed) -> None:
        """Embeddings in the second context; the chat context and its cache are untouched."""
        from deskllm.engine.embedder import Embedder

        if self.runtime is None:
            self.send(Error(request.request_id, "no model is loaded", kind="no_model"))
            return
        runtime = self.runtime
        if self.embedder is None:
            self.embedder = Embedder(runtime.model, runtime.n_ctx, runtime.params.n_threads)
        vectors, total = self.embedder.embed_texts(request.texts, runtime.tokenize)
        self.send(Embeddings(request.request_id, vectors, total))

    # Chat -------------------------------------------------------------------------------------
    def switch_to(self, conversation_id: str) -> str | None:
        """Keep the KV state of the conversation left; restore the one entered if cached."""
        runtime, cache = self.runtime, self.cache
        if conversation_id == self.current_conversation:
            return None
        if self.current_conversation and runtime.tokens:
            cache.put(self.current_conversation, runtime.save_state())
        self.current_conversation = conversation_id
        found = cache.get(conversation_id)
        if found is None:
            return None
        state, where = found
        problem = runtime.restore_state(state)
        if problem is None:
            return where
        # Names the file (if any) and why; the prompt is then evaluated from scratch.
        cache.drop(conversation_id, f"not restored: {problem}")
        return None

    def forget(self, conversation_id: str) -> None:
        """Drop a deleted conversation's KV state: RAM, the context itself, every disk file."""
        if self.cache is not None:
            self.cache.discard(conversation_id)
        if self.current_conversation == conversation_id:
            self.runtime.clear()  # else unload would save it again
            self.current_conversation = None
        if self.kv_disk_dir:
            delete_conversation_states(self.kv_disk_dir, conversation_id)

    def fit_prompt(
        self,
        messages: list[ChatMessage],
        max_tokens: int,
        continue_reply: bool = False,
        drop_old_turns: bool = True,
        tools: list[dict] | None = None,
    ):
        """Render and tokenize; drop the oldest turns (never the system prompt or the last
        message, nor the question of a reply being continued) until the prompt and room for
        the reply fit the context."""
        runtime = self.runtime
        reserve = min(max_tokens, runtime.n_ctx // 2)
        dropped = 0
        kept = 2 if continue_reply else 1
        while True:
            rendered = self.template.render(messages, continue_reply=continue_reply, tools=tools)
            tokens = runtime.tokenize(rendered.text)
            if len(tokens) + reserve <= runtime.n_ctx:
                return tokens, dropped, rendered.warning
            droppable = [i for i, m in enumerate(messages[:-kept]) if m.role != "system"]
            if not drop_old_turns:
                from deskllm.engine.runtime import EngineError

                raise EngineError(
                    f"the conversation is {len(tokens)} tokens; with {reserve} kept for the "
                    f"reply it does not fit the {runtime.n_ctx}-token context",
                    kind="context",
                )
            if not droppable:
                from deskllm.engine.runtime import EngineError

                raise EngineError(
                    f"the conversation's last message is {len(tokens)} tokens; with {reserve} "
                    f"kept for the reply it does not fit the {runtime.n_ctx}-token context. "
                    "Shorten the message or load the model with a larger context.",
                    kind="context",
                )
            i = droppable[0]
            del messages[i]
            dropped += 1
            # Keep turns alternating: a reply whose question was dropped goes too.
            if i < len(messages) - 1 and messages[i].role == "assistant":
                del messages[i]
                dropped += 1

    def chat(self, request: Chat) -> None:
        from deskllm.engine.runtime import Cancelled, grammar_of

        rid = request.request_id
        if self.runtime is None:
            self.send(Error(rid, "no model is loaded", kind="no_model"))
            return
        if request.sampling.json_schema is not None:
            grammar_of(request.sampling.json_schema)  # a bad schema fails before any work
        runtime = self.runtime
        self.busy = True
        started = time.perf_counter()
        sampling = request.sampling
        generated: list[str] = []
        intervals: list[float] = []
        logprobs: list[float] = []  # Sampling.logprobs: the first N sampled tokens'
        state = {
            "ttft": None,
            "pp_tps": None,
            "prompt": 0,
            "cached": 0,
            "evaluated": 0,
            "restored": None,
            "n_gen": 0,
            "decode_start": None,
        }
        energy: dict = {}  # the finished reply's figures (reply_energy)
        phases: dict[str, object] = {}  # "prompt" / "decode": open span, then EnergyReading

        def metrics() -> Metrics:
            n_gen = state["n_gen"]
            decode_s = time.perf_counter() - state["decode_start"] if state["decode_start"] else 0
            ordered = sorted(intervals)
            p50, p95 = _percentile(ordered, 0.5), _percentile(ordered, 0.95)
            return Metrics(
                request_id=rid,
                ttft_s=state["ttft"],
                prompt_tokens=state["prompt"],
                cached_tokens=state["cached"],
                evaluated_tokens=state["evaluated"],
                restored_from=state["restored"],
                pp_tps=state["pp_tps"],
                generated_tokens=n_gen,
                tg_tps=(n_gen - 1) / decode_s if n_gen > 1 and decode_s > 0 else None,
                itl_p50_ms=p50 * 1000 if p50 is not None else None,
                itl_p95_ms=p95 * 1000 if p95 is not None else None,
                n_past=len(runtime.tokens),
                n_ctx=runtime.n_ctx,
                rss_bytes=self.process.memory_info().rss,
                vram_bytes=self.vram.read() if self.vram else None,
                device=self.device,
                **energy,
                token_logprobs=tuple(logprobs),
            )

        pending: list[str] = []
        trail = LogprobTrail()  # Sampling.token_logprobs: entries waiting for their text
        sent = [0]  # characters of text sent

        def send_pending() -> None:
            if pending:
                text = "".join(pending)
                sent[0] += len(text)
                self.send(TextDelta(rid, text, trail.take(sent[0])))
                pending.clear()

        finish = "stop"
        dropped = 0
        warnings: list[str] = []
        matcher = StopMatcher(())  # replaced once the prompt is read
        try:
            state["restored"] = self.switch_to(request.conversation_id)
            if request.continue_reply and (
                not request.messages or request.messages[-1].role != "assistant"
            ):
                self.send(Error(rid, "there is no assistant reply to continue", kind="error"))
                return
            try:
                if request.raw_prompt is not None:
                    tokens, warning = fit_raw_prompt(
                        runtime.tokenize, request.raw_prompt, sampling.max_tokens, runtime.n_ctx
                    ), None  # fmt: skip
                else:
                    tokens, dropped, warning = self.fit_prompt(
                        list(request.messages), sampling.max_tokens, request.continue_reply,
                        request.drop_old_turns, tools_of(request),
                    )  # fmt: skip
            except TemplateRefused as exc:
                self.send(Error(rid, str(exc), kind="template"))
                return
            if warning:
                warnings.append(warning)
            if dropped:
                warnings.append(f"{dropped} old messages were left out to fit the context")
            state["prompt"] = len(tokens)
            phases["prompt"] = self.energy.start()
            result = runtime.eval_prompt(tokens)
            phases["prompt"] = self.energy.stop(phases["prompt"])
            phases["decode"] = self.energy.start()
            state["cached"], state["evaluated"] = result.cached, result.evaluated
            if result.evaluated and result.eval_s > 0:
                state["pp_tps"] = result.evaluated / result.eval_s
            self.send(metrics())
            matcher = StopMatcher(tuple(sampling.stop))
            max_tokens = min(sampling.max_tokens, runtime.n_ctx - len(runtime.tokens))
            last_metrics = last_token = time.perf_counter()
            last_text = 0.0
            for token, piece in runtime.generate(sampling, max_tokens):
                now = time.perf_counter()
                if len(logprobs) < sampling.logprobs:
                    logprobs.append(runtime.token_logprob(token))
                    if len(logprobs) == sampling.logprobs:
                        self.send(metrics())  # the router decides on these before text
                if state["ttft"] is None:
                    state["ttft"] = now - started
                    state["decode_start"] = now
                else:
                    intervals.append(now - last_token)
                last_token = now
                state["n_gen"] += 1
                if sampling.token_logprobs:
                    trail.add(runtime.token_detail(token, sampling.top_logprobs), piece)
                text, stopped = matcher.feed(piece)
                if text:
                    generated.append(text)
                    pending.append(text)
                    if now - last_text >= TEXT_INTERVAL_S:
                        last_text = now
                        send_pending()
                if stopped:
                    break
                if now - last_metrics >= METRICS_INTERVAL_S:
                    last_metrics = now
                    self.energy.sample()  # catches a counter's wrap on a long reply
                    self.send(metrics())
            else:
                finish = runtime.finish_reason
                tail = matcher.flush()
                if tail:
                    generated.append(tail)
                    pending.append(tail)
        except Cancelled:
            finish = "cancelled"
        finally:
            self.busy = False
            for name, phase in phases.items():
                if not isinstance(phase, EnergyReading):  # still open: cancelled or failed
                    phases[name] = self.energy.stop(phase)
        energy.update(reply_energy(phases.get("prompt"), phases.get("decode"), state["n_gen"]))
        send_pending()
        self.send(
            Done(
                request_id=rid,
                finish_reason=finish,
                text="".join(generated),
                metrics=metrics(),
                dropped_messages=dropped,
                warnings=tuple(warnings),
                stop_string=matcher.matched if finish == "stop" else None,
            )
        )


def _device_name(buffers: dict[str, float]) -> str:
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


def worker_main(
    conn: Connection, log_level: int = logging.WARNING, env: dict[str, str] | None = None
) -> None:
    """Entry point of the engine process (multiprocessing spawn target). `env` is applied
    before llama.cpp is loaded: ggml reads some settings once per process."""
    os.environ.update(env or {})
    logging.basicConfig(level=log_level, format="%(levelname)s %(name)s[engine]: %(message)s")
    Worker(conn).run()
