"""Figures for GET /metrics, in Prometheus' text format (written here: a few counters and one
histogram need no library)."""

from __future__ import annotations

import threading
import time
from collections import Counter, deque
from dataclasses import dataclass

from deskllm.engine.domain import Done, StatusReport
from deskllm.remote.router import RoutedMetrics

TTFT_BUCKETS_S = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)


RECENT_REPLIES = 200
LOG_LINES = 500


@dataclass(frozen=True)
class ReplyRecord:
    """One finished reply, for the Server panel's table."""

    at: float  # time.time() when it finished
    prompt_tokens: int
    cached_tokens: int
    generated_tokens: int
    ttft_s: float | None
    tg_tps: float | None
    finish_reason: str


class ServerMetrics:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.recent: deque[ReplyRecord] = deque(maxlen=RECENT_REPLIES)
        self._log: deque[tuple[int, str]] = deque(maxlen=LOG_LINES)
        self._log_seq = 0
        self.requests: Counter[tuple[str, int]] = Counter()  # (path, status) → count
        self.replies: Counter[str] = Counter()  # finish reason → count
        self.routes: Counter[tuple[str, str]] = Counter()  # (engine, route reason) → count
        self.prompt_tokens = 0
        self.cached_tokens = 0
        self.completion_tokens = 0
        self.draft_tokens = 0  # speculative decoding: drafted, and of them accepted
        self.draft_accepted = 0
        self._ttft_counts = [0] * len(TTFT_BUCKETS_S)
        self._ttft_sum = 0.0
        self._ttft_n = 0

    def count_request(self, path: str, status: int) -> None:
        with self._lock:
            self.requests[(path, status)] += 1
            self._add_line(f"{path} {status}")

    def note(self, line: str) -> None:
        """A line for the log (server started, stopped, a model loaded...)."""
        with self._lock:
            self._add_line(line)

    def _add_line(self, line: str) -> None:
        self._log_seq += 1
        self._log.append((self._log_seq, f"{time.strftime('%H:%M:%S')} {line}"))

    def log_since(self, seq: int) -> list[tuple[int, str]]:
        """Log lines numbered after `seq` (each line's number is its first item)."""
        with self._lock:
            return [item for item in self._log if item[0] > seq]

    def recent_replies(self) -> list[ReplyRecord]:
        with self._lock:
            return list(self.recent)

    def count_done(self, done: Done) -> None:
        m = done.metrics
        with self._lock:
            self.replies[done.finish_reason] += 1
            self.recent.append(ReplyRecord(time.time(), m.prompt_tokens, m.cached_tokens,
                                           m.generated_tokens, m.ttft_s, m.tg_tps,
                                           done.finish_reason))  # fmt: skip
            if isinstance(m, RoutedMetrics):  # `auto`: where it went and why, in the log too
                self.routes[(m.engine, m.route_reason)] += 1
                score = f", score {m.route_score:.2f}" if m.route_score is not None else ""
                self._add_line(f"auto: answered by {m.engine} ({m.model}): {m.route_reason}"
                               f"{score}")  # fmt: skip
            elif m.engine != "local":  # a remote model asked by name
                self.routes[(m.engine, "asked")] += 1
            self.prompt_tokens += m.prompt_tokens
            self.cached_tokens += m.cached_tokens
            self.completion_tokens += m.generated_tokens
            self.draft_tokens += m.draft_n
            self.draft_accepted += m.draft_n_accepted
            ttft_s = m.ttft_s
            if ttft_s is not None:
                self._ttft_sum += ttft_s
                self._ttft_n += 1
                for i, bound in enumerate(TTFT_BUCKETS_S):
                    if ttft_s <= bound:
                        self._ttft_counts[i] += 1

    def render(self, waiting: int, running: int, ready: bool, restarts: int = 0,
               kv: StatusReport | None = None, models: tuple[int, int, int] = (1, 0, 0)) -> str:
        """The Prometheus text. `kv`: the engine's status, whose KV pool figures it gives (None:
        no engine runs). `models`: models loaded, loads on demand under way (requests wait
        for them), and models unloaded to make room for another."""
        with self._lock:
            lines = [
                "# HELP deskllm_requests_total HTTP requests answered, by path and status.",
                "# TYPE deskllm_requests_total counter",
            ]
            for (path, status), n in sorted(self.requests.items()):
                lines.append(f'deskllm_requests_total{{path="{path}",status="{status}"}} {n}')
            lines += [
                "# HELP deskllm_replies_total Engine replies, by finish reason.",
                "# TYPE deskllm_replies_total counter",
            ]
            for reason, n in sorted(self.replies.items()):
                lines.append(f'deskllm_replies_total{{finish_reason="{reason}"}} {n}')
            lines += [
                "# HELP deskllm_routed_total Replies of `auto` and remote models, by the engine"
                " that answered and why.",
                "# TYPE deskllm_routed_total counter",
            ]
            for (engine, reason), n in sorted(self.routes.items()):
                lines.append(f'deskllm_routed_total{{engine="{engine}",reason="{reason}"}} {n}')
            lines += [
                "# HELP deskllm_tokens_total Tokens processed, by kind.",
                "# TYPE deskllm_tokens_total counter",
                f'deskllm_tokens_total{{kind="prompt"}} {self.prompt_tokens}',
                f'deskllm_tokens_total{{kind="prompt_cached"}} {self.cached_tokens}',
                f'deskllm_tokens_total{{kind="completion"}} {self.completion_tokens}',
                f'deskllm_tokens_total{{kind="draft"}} {self.draft_tokens}',
                f'deskllm_tokens_total{{kind="draft_accepted"}} {self.draft_accepted}',
                "# HELP deskllm_queue_length Requests waiting for the engine.",
                "# TYPE deskllm_queue_length gauge",
                f"deskllm_queue_length {waiting}",
                "# HELP deskllm_requests_running Requests the engine is answering.",
                "# TYPE deskllm_requests_running gauge",
                f"deskllm_requests_running {running}",
                "# HELP deskllm_model_ready 1 once the model is loaded.",
                "# TYPE deskllm_model_ready gauge",
                f"deskllm_model_ready {int(ready)}",
                "# HELP deskllm_models_loaded Models loaded: the served one and those loaded "
                "on demand beside it.",
                "# TYPE deskllm_models_loaded gauge",
                f"deskllm_models_loaded {models[0]}",
                "# HELP deskllm_models_loading Models being loaded for a request that waits.",
                "# TYPE deskllm_models_loading gauge",
                f"deskllm_models_loading {models[1]}",
                "# HELP deskllm_model_evictions_total Idle models unloaded to make room for "
                "another.",
                "# TYPE deskllm_model_evictions_total counter",
                f"deskllm_model_evictions_total {models[2]}",
                "# HELP deskllm_engine_restarts_total Engines started again after one died "
                "(crash, kill, hang).",
                "# TYPE deskllm_engine_restarts_total counter",
                f"deskllm_engine_restarts_total {restarts}",
                "# HELP deskllm_kv_cells Cells of the KV pool the slots share, by state (used "
                "includes finished conversations' cells kept for reuse).",
                "# TYPE deskllm_kv_cells gauge",
                f'deskllm_kv_cells{{state="used"}} {kv.kv_cells_used if kv else 0}',
                f'deskllm_kv_cells{{state="free"}} '
                f"{kv.kv_cells - kv.kv_cells_used if kv else 0}",
                "# HELP deskllm_kv_evictions_total Finished conversations' cells freed for room "
                "or to keep the pool's span short (their state kept in the state cache).",
                "# TYPE deskllm_kv_evictions_total counter",
                f"deskllm_kv_evictions_total {kv.kv_evictions if kv else 0}",
                "# HELP deskllm_prefix_hits_total Prompts that took a prefix another slot holds"
                " (its cells shared, not read again) or another conversation's saved state"
                " holds (restored), and the tokens they took.",
                "# TYPE deskllm_prefix_hits_total counter",
                f"deskllm_prefix_hits_total {kv.prefix_hits if kv else 0}",
                "# TYPE deskllm_prefix_tokens_total counter",
                f"deskllm_prefix_tokens_total {kv.prefix_tokens if kv else 0}",
                "# HELP deskllm_ttft_seconds Time to first token, from the engine's start on "
                "the request.",
                "# TYPE deskllm_ttft_seconds histogram",
            ]
            for bound, n in zip(TTFT_BUCKETS_S, self._ttft_counts, strict=True):
                lines.append(f'deskllm_ttft_seconds_bucket{{le="{bound}"}} {n}')
            lines += [
                f'deskllm_ttft_seconds_bucket{{le="+Inf"}} {self._ttft_n}',
                f"deskllm_ttft_seconds_sum {self._ttft_sum}",
                f"deskllm_ttft_seconds_count {self._ttft_n}",
            ]
        return "\n".join(lines) + "\n"
