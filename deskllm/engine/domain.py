"""The app's domain types, the words every layer speaks: how to load a model (LoadParams), how
to sample (Sampling), a conversation's messages (ChatMessage), and what a reply says (Event:
its text, figures, end or error). A local engine, a remote endpoint and the router all answer
in these; the pipe messages between the engine client and its worker are in protocol.py.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from deskllm.engine.errors import ErrorKind


@dataclass(frozen=True)
class LoadParams:
    """How to load a model. n_ctx 0: the model's training context capped at DEFAULT_CTX_CAP."""

    model_path: str
    n_ctx: int = 0
    n_threads: int = 0  # 0: physical cores
    # Automatic threads: n_threads is where the engine starts, and it changes the count between
    # steps to how busy the machine is (thread_governor). Set where n_threads was 0.
    adapt_threads: bool = False
    n_batch: int = 512
    n_gpu_layers: int = 0
    gpu_auto: bool = False  # let the planner choose n_gpu_layers for this machine
    # With gpu_auto, after `deskllm bench --suite`: the fastest measured configuration by
    # "decode" or "prompt" speed is loaded (deskllm.loader); the engine ignores it.
    auto_metric: str = "decode"
    kv_type: str = "f16"  # f16 | q8_0 | q4_0 (quantized V needs flash_attn)
    flash_attn: bool = False
    use_extra_bufts: bool | None = None  # None: decided by the crash-safe probe
    kv_ram_budget_mb: int = 512
    kv_disk_budget_mb: int = 2048
    kv_disk_dir: str = ""
    # Vulkan physical device indices llama.cpp may use ("0", "0,1"). None: ggml's own choice,
    # which skips CPU-type devices (llvmpipe); naming one is how a user chooses it.
    vulkan_devices: str | None = None
    # CUDA device indices the engine may use ("1"; CUDA_VISIBLE_DEVICES): with several GPUs
    # llama.cpp otherwise splits the layers across all of them. None: every one.
    cuda_devices: str | None = None
    # The user's watts figure for machines without a readable energy counter (0: none): a
    # reply's joules are then this times the seconds, labelled "estimated".
    energy_watts: float = 0.0
    # Speculative decoding (speculation.py): "off", "ngram" (draft from the sequence itself),
    # "auto" (n-gram drafts while they pay; the draft model where one is loaded: the loader
    # chose it from the benchmark) or "draft" (draft_model_path proposes).
    speculation: str = "off"
    # A smaller model of the same family that proposes tokens (draft_model.py); "": none.
    draft_model_path: str = ""


@dataclass(frozen=True)
class Sampling:
    temperature: float = 0.7
    top_p: float = 0.95
    top_k: int = 40
    min_p: float = 0.05
    repeat_penalty: float = 1.1
    repeat_last_n: int = 64  # the window of the three penalties, prompt included
    presence_penalty: float = 0.0  # OpenAI's: minus this from a token seen at all
    frequency_penalty: float = 0.0  # OpenAI's: minus this times a token's count
    seed: int = -1  # -1: random
    max_tokens: int = 512
    stop: tuple[str, ...] = ()
    ignore_eos: bool = False  # benchmarks: generate exactly max_tokens
    # A JSON schema (as JSON text) the reply must follow: a grammar constrains every token.
    # '{"type": "object"}' is OpenAI's json_object.
    json_schema: str | None = None
    # Record the log-probability of each sampled token under the model's own distribution
    # (before penalties and temperature) for the first N tokens: Metrics.token_logprobs.
    # The router reads them as the reply's uncertainty; 0 costs nothing.
    logprobs: int = 0
    # Every sampled token's TokenLogprob (the API's `logprobs`), with the `top_logprobs` most
    # likely tokens at its place, sent with the TextDelta that carries its text.
    token_logprobs: bool = False
    top_logprobs: int = 0
    # Reasoning models: `think` "off", "on", or an effort "low" | "medium" | "high", given to
    # the chat template (enable_thinking, reasoning_effort); None: the template's default.
    # `reasoning_budget` tokens of thinking (0: no limit), after which the block is closed
    # and the model answers. `split_reasoning` False leaves the thinking in the text.
    think: str | None = None
    reasoning_budget: int = 0
    split_reasoning: bool = True
    # This request's speculative decoding ("off" | "ngram" | "auto" | "draft": the load's
    # draft model, n-gram drafts where none is loaded); None: the load's.
    speculation: str | None = None

    @classmethod
    def from_dict(cls, data: dict[str, Any] | None) -> Sampling:
        data = dict(data or {})
        if "stop" in data:
            data["stop"] = tuple(data["stop"])
        known = cls.__dataclass_fields__
        return cls(**{k: v for k, v in data.items() if k in known})


@dataclass(frozen=True)
class ChatMessage:
    role: str
    content: str
    # Tool use (the API's tools): an assistant turn's calls as JSON text (a list of OpenAI
    # tool calls), and a tool turn's answer to one call.
    tool_calls_json: str | None = None
    tool_call_id: str | None = None
    name: str | None = None


@dataclass(frozen=True)
class LoadProgress:
    fraction: float  # 0..1


@dataclass(frozen=True)
class Loaded:
    model_path: str
    n_ctx: int  # the KV pool: every slot's cells
    n_ctx_train: int
    n_gpu_layers: int
    use_extra_bufts: bool
    chat_template_source: str  # "model" | "fallback"
    warnings: tuple[str, ...]
    load_s: float
    rss_bytes: int
    buffers: dict[str, float]  # llama.cpp's "<name> buffer size = X MiB", in bytes
    devices: tuple[str, ...]
    n_ctx_seq: int = 0  # the longest conversation, in tokens (0: n_ctx)
    # A reasoning model's markers (open, close), from its template and vocabulary; None: not
    # a reasoning model.
    reasoning_markers: tuple[str, str] | None = None

    @property
    def conversation_ctx(self) -> int:
        return self.n_ctx_seq or self.n_ctx


@dataclass(frozen=True)
class TokenLogprob:
    """One token's log-probability under the model's own distribution (raw logits: before
    penalties, grammar and temperature), with the most likely tokens at its place."""

    token: str
    bytes: bytes
    logprob: float
    top: tuple[TokenLogprob, ...] = ()


@dataclass(frozen=True)
class TextDelta:
    request_id: int
    text: str
    # Sampling.token_logprobs: the tokens whose text starts in this delta (tokens of a stop
    # string that ended the reply are not sent).
    logprobs: tuple[TokenLogprob, ...] = ()
    reasoning: bool = False  # a reasoning model's thinking, not its answer


@dataclass(frozen=True)
class PromptProgress:
    """How far a long prompt has been read, before its first token (as llama-server's
    `prompt_progress`): `total` prompt tokens, `cache` of them already in the KV cache,
    `processed` read so far (cache included), in `seconds` since it got its slot."""

    request_id: int
    total: int
    cache: int
    processed: int
    seconds: float

    @property
    def fraction(self) -> float:
        to_read = self.total - self.cache
        return (self.processed - self.cache) / to_read if to_read > 0 else 1.0

    @property
    def eta_s(self) -> float | None:
        """Seconds left at the speed so far (None until some tokens are read)."""
        read = self.processed - self.cache
        if read <= 0 or self.seconds <= 0:
            return None
        return (self.total - self.processed) * self.seconds / read

    def describe(self) -> str:
        """"1,531 of 3,531 prompt tokens read (43%), about 40 s left"."""
        text = (f"{self.processed:,} of {self.total:,} prompt tokens read "
                f"({self.fraction:.0%})")  # fmt: skip
        eta = self.eta_s
        if eta is not None:
            text += f", about {eta:.0f} s left" if eta < 90 else f", about {eta / 60:.0f} min left"
        return text


@dataclass(frozen=True)
class Metrics:
    """Live figures for one reply. Times in seconds, speeds in tokens/s, memory in bytes."""

    request_id: int
    ttft_s: float | None = None
    prompt_tokens: int = 0
    cached_tokens: int = 0  # prompt tokens already in the KV cache (not evaluated)
    evaluated_tokens: int = 0  # prompt tokens evaluated for this reply
    restored_from: str | None = None  # "ram" | "disk" when the KV state was restored
    pp_tps: float | None = None
    generated_tokens: int = 0
    tg_tps: float | None = None
    itl_p50_ms: float | None = None
    itl_p95_ms: float | None = None
    n_past: int = 0  # tokens in context
    n_ctx: int = 0
    rss_bytes: int = 0
    vram_bytes: int | None = None
    device: str = "CPU"
    engine: str = "local"  # which engine answered: "local", or a remote endpoint's name
    # Energy of the finished reply (None while it streams, or where nothing measures it).
    joules: float | None = None  # prompt + decode
    joules_per_token: float | None = None  # decode joules / generated tokens
    watts_prompt: float | None = None
    watts_decode: float | None = None
    energy_source: str | None = None  # "rapl" | "nvml" | "rapl+nvml" | "estimated" | None
    # Compute threads at the last step, of how many Automatic may use (equal where fixed),
    # and why.
    n_threads: int = 0
    max_threads: int = 0
    threads_reason: str = ""
    token_logprobs: tuple[float, ...] = ()  # Sampling.logprobs: the first N sampled tokens'
    # Speculative decoding: tokens drafted, those the model accepted, and the decodes that
    # verified drafts (llama-server's timings.draft_n and draft_n_accepted).
    draft_n: int = 0
    draft_n_accepted: int = 0
    draft_passes: int = 0
    # The finished reply's text the accepted drafts wrote: [start, end) character spans of
    # the last `drafted_of` characters of the reply (a continued reply's text before them is
    # not counted), for the window's "Colour drafted text". Empty for a split thinking reply.
    drafted_spans: tuple[tuple[int, int], ...] = ()
    drafted_of: int = 0


@dataclass(frozen=True)
class Done:
    request_id: int
    finish_reason: str  # stop | length | cancelled
    text: str
    metrics: Metrics
    dropped_messages: int = 0  # old turns left out to fit the context
    warnings: tuple[str, ...] = ()
    stop_string: str | None = None  # the caller's stop string that ended it, if one did
    # A reasoning model's thinking (not in `text`), its tokens and seconds (None: none).
    reasoning: str = ""
    reasoning_tokens: int = 0
    reasoning_s: float | None = None


@dataclass(frozen=True)
class Embeddings:
    """The answer to Embed: one vector per text, in order."""

    request_id: int
    vectors: tuple[tuple[float, ...], ...]
    prompt_tokens: int


@dataclass(frozen=True)
class Error:
    request_id: int | None
    reason: str
    kind: ErrorKind = ErrorKind.ERROR


@dataclass(frozen=True)
class StatusReport:
    loaded: bool
    model_path: str | None
    n_ctx: int
    busy: bool
    cached_conversations: tuple[str, ...]
    rss_bytes: int
    # Finished replies' tokens still to be read again for the state cache: the engine's
    # lowest-priority work, done while no request runs.
    unread_tokens: int = 0
    # The KV pool the slots share: cells in it, cells in use (finished slots' kept for reuse
    # included), and how often finished slots' cells were freed for room.
    kv_cells: int = 0
    kv_cells_used: int = 0
    kv_evictions: int = 0
    # Prompts that took a prefix another slot holds by reference, and the tokens they took.
    prefix_hits: int = 0
    prefix_tokens: int = 0
    # Compute threads running, of how many Automatic may use, and why ("" where unloaded).
    n_threads: int = 0
    max_threads: int = 0
    threads_reason: str = ""


@dataclass(frozen=True)
class Exited:
    """The worker process ended without being asked to (crash, kill, out of memory), or was
    ended because it stopped answering (kind HUNG)."""

    reason: str
    exitcode: int | None
    request_id: int | None = None
    kind: ErrorKind = ErrorKind.EXITED


Event = (
    LoadProgress
    | Loaded
    | TextDelta
    | PromptProgress
    | Metrics
    | Done
    | Embeddings
    | Error
    | StatusReport
    | Exited
)
