"""A server you can leave running: `deskllm serve` under a mixed load for --minutes (20), its
engine killed now and then, stopped with SIGTERM and started again once, while a client writes
conversations through deskllm's own store as the window does. Prints one JSON object.

    .venv/bin/python bench/soak.py [--minutes 20] [--grace 10] [--clients 6] [--seed 0]
                                   [--model NAME_OR_PATH] [--threads 2] [--ctx 2048]

The server: `deskllm serve --parallel 4 --shutdown-grace GRACE --max-queue 32` on the starter
model (--model to change it), in a private DESKLLM_HOME on a free port (--max-queue: the burst
below queues 12 requests; the default 8 would answer some with 429). The run, in order:

  1. post_burst: the latency of a whole 16-token chat reply (ignore_eos) on the idle server,
     median of 3; then 3 times: 16 concurrent 64-token replies and, as soon as all have
     ended, the same 16-token reply again. Each probe's text begins with a fresh nonce, so
     no probe finds its prompt cached: otherwise an idle probe reads it from the cells the
     probe before it left, and one after a burst (whose replies took those cells) reads it
     anew, a cache miss rather than the stall this measures.
  2. --clients threads, each at seeded random intervals: streamed chat completions (raw SSE),
     whole ones (openai SDK), /v1/messages streamed and whole (anthropic SDK), /v1/completions
     whole (SDK) and streamed, /v1/embeddings (SDK), and bad requests (invalid JSON, an unknown
     model, max_tokens -5) whose 4xx is expected; 10% of the streams are left on purpose
     after their first text chunk or two. Every client retries a connection error, 503 and
     429 with a short backoff (up to 300 s), as real clients do. One more thread acts as the
     window: it creates conversations in the home's database with ConversationStore, commits
     each user message, streams the reply and writes it through a ReplyWriter (status
     complete, error or interrupted: 10% are stopped after the first text, like the Stop
     button), and keeps its own record of each conversation.
  3. At 10% of the run: clients paused, the server idle (/metrics: nothing running or queued,
     for 3 s, and its CPU settled), the server process's RSS, open fds and threads recorded.
  4. Every min(4, minutes/5) minutes: the engine process (the server's multiprocessing spawn
     child with the most memory) is SIGKILLed; the seconds until /health is ok again recorded.
  5. At 75% of the run: clients paused, server idle, resources recorded again; 4 streamed
     chat replies of 400 tokens started and each waited for until it has text; SIGTERM; the
     seconds until the process exits; each of the 4 must end with a finish_reason chunk
     ("shutdown" expected) and [DONE]; the server is started again on the same home and port
     while the clients go on (they retry until it answers).
  6. At the end: clients stopped, the server stopped, the database opened again.

Keys:
  duration_s                   seconds of the mixed load (step 2 to 6)
  requests                     HTTP requests that got a status (each retry counts)
  unexpected_5xx               responses >= 500 other than 503 (target 0)
  streams_without_final_event  streams answered 200 and not left on purpose that did not end
                               with their final event: OpenAI's a chunk with a finish_reason
                               (or an error event) and then [DONE]; Anthropic's message_stop
                               (or an error event) (target 0)
  conversations_damaged        conversations whose title or messages (role, text, status) in
                               the database differ from the window client's record (target 0;
                               `integrity_check` must also say ok)
  rss_growth                   server RSS at step 5 / at step 3 - 1 (target <= 0.05)
  fd_delta, threads_delta      the server's open fds and threads, step 5 - step 3 (target 0)
  post_burst_over_idle         median over the 3 bursts of the 16-token reply's latency
                               after a burst / its idle median (target <= 1.2)
  sigterm_exit_over_grace      seconds from SIGTERM to exit / GRACE (target <= (GRACE+2)/GRACE)
Extras: status_counts, by_kind (requests per kind of call), connection_errors, gave_up,
  unexpected_5xx_detail (the first few: seconds into the load, kind, status, body),
  unexpected_4xx (well-formed requests answered 4xx other than 429), bad_requests_not_4xx,
  streams (answered, final, ended_by_error_event, left_on_purpose, finish_reasons),
  missing_final (the first few such streams, why), engine_kills, engine_kill_at_s,
  engine_recovery_s (kill to /health ok), engine_restarts_seen (deskllm_engine_restarts_total
  of both lives, summed), health_seen (the /health states a 1 s poll saw), resources (start
  and end: rss, fds less the clients' open connections, all_fds, threads), sigterm_at_s,
  sigterm_exit_s, sigterm_returncode, sigterm_streams (each stream's finish_reason, [DONE],
  text chunks), conversations, integrity_check, post_burst (the probe's latencies idle and
  after each burst, and the server's prompt_ms and predicted_ms of each), grace_s, minutes,
  seed, cpu_count, load_avg_1m [start, end], home, errors (a step that failed), pass (every
  target met, the 4 shutdown streams final, integrity ok, no bad request answered otherwise
  than 4xx, an engine restart seen per kill, no step failed).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections import Counter
from pathlib import Path

import anthropic
import httpx2
import openai
import psutil
from serve import settle  # bench/serve.py: until the server's processes are idle

PARALLEL = 4
MAX_QUEUE = 32
RETRY_FOR_S = 300.0  # how long a client keeps retrying a refused request
START_TIMEOUT_S = 300.0
TIMEOUT = httpx2.Timeout(120.0, connect=10.0)
DISCONNECT_SHARE = 0.10
BURST, BURST_TOKENS, PROBE_TOKENS, ROUNDS = 16, 64, 16, 3
LONG_STREAMS, LONG_TOKENS = 4, 400
ENGINE_KILL_EVERY_S = 240.0
BAD_MODEL = "soak-no-such-model"
PROMPTS = [
    "Write a long story about a lighthouse.", "Describe a day at the beach.",
    "Explain how bread is made.", "Tell me about the history of trains.",
    "Write a poem about autumn leaves.", "Describe the life of a honeybee.",
    "Explain how a bicycle works.", "Tell a story about a lost cat.",
    "What is the capital of France?", "List three colours of the rainbow.",
    "Why is the sky blue?", "Give me a recipe for pancakes.",
]  # fmt: skip


class Retry(Exception):
    """Refused for now (503, 429, no connection): the client tries again."""


# The server ---------------------------------------------------------------------------------
def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    """`deskllm serve` in `home` on `port`; started again with the same arguments."""

    def __init__(self, home: Path, model: str, args: argparse.Namespace) -> None:
        self.home, self.port = home, free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.command = [
            sys.executable, "-m", "deskllm", "serve", "--model", model,
            "--port", str(self.port), "--ctx", str(args.ctx), "--threads", str(args.threads),
            "--parallel", str(PARALLEL), "--max-queue", str(MAX_QUEUE),
            "--shutdown-grace", f"{args.grace:g}",
        ]  # fmt: skip
        env = os.environ | {"DESKLLM_HOME": str(home), "HF_HUB_OFFLINE": "1"}
        env.pop("DESKLLM_API_KEY", None)  # a loopback server without a key
        self.env = env
        self.process: subprocess.Popen | None = None
        self.log = home / "serve.log"

    def start(self) -> None:
        with self.log.open("ab") as out:
            self.process = subprocess.Popen(self.command, env=self.env, stdout=out,
                                            stderr=subprocess.STDOUT)  # fmt: skip
        self.wait_healthy(START_TIMEOUT_S)

    def wait_healthy(self, timeout_s: float) -> float:
        """Seconds until /health answers 200; raises when the process ends or time is up."""
        start = time.monotonic()
        while time.monotonic() - start < timeout_s:
            if self.process.poll() is not None:
                raise RuntimeError(f"the server exited ({self.process.returncode}):\n"
                                   f"{self.log_tail()}")  # fmt: skip
            with contextlib.suppress(httpx2.HTTPError):
                if httpx2.get(self.url + "/health", timeout=5).status_code == 200:
                    return time.monotonic() - start
            time.sleep(0.2)
        raise RuntimeError(f"the server was not healthy in {timeout_s:g} s:\n{self.log_tail()}")

    def log_tail(self) -> str:
        return self.log.read_text(errors="replace")[-3000:]

    def stop(self) -> None:
        process = self.process
        if process is not None and process.poll() is None:
            process.terminate()
            try:
                process.wait(60)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()

    def engine(self) -> psutil.Process | None:
        """The engine: the multiprocessing spawn child (not the resource tracker), the one
        with the model in memory if a probe child runs beside it."""
        try:
            children = psutil.Process(self.process.pid).children(recursive=True)
        except psutil.NoSuchProcess:
            return None
        found = []
        for child in children:
            with contextlib.suppress(psutil.Error):
                if "spawn_main" in " ".join(child.cmdline()):
                    found.append((child.memory_info().rss, child))
        return max(found, key=lambda item: item[0])[1] if found else None

    def metrics(self) -> dict[str, float]:
        """The unlabelled figures of /metrics."""
        text = httpx2.get(self.url + "/metrics", timeout=10).text
        figures = {}
        for line in text.splitlines():
            parts = line.split()
            if len(parts) == 2 and not line.startswith("#") and "{" not in parts[0]:
                with contextlib.suppress(ValueError):
                    figures[parts[0]] = float(parts[1])
        return figures

    def wait_idle(self, quiet_s: float = 3.0, timeout_s: float = 300.0) -> None:
        """Until /health is ok and nothing has run or waited for `quiet_s`, then the CPU of
        the server and its engine settles (the engine's background work after replies)."""
        deadline = time.monotonic() + timeout_s
        quiet_since = None
        while time.monotonic() < deadline:
            try:
                healthy = httpx2.get(self.url + "/health", timeout=5).status_code == 200
                m = self.metrics()
                idle = healthy and m.get("deskllm_requests_running", 1) == 0 and m.get(
                    "deskllm_queue_length", 1) == 0  # fmt: skip
            except httpx2.HTTPError:
                idle = False
            now = time.monotonic()
            if not idle:
                quiet_since = None
            elif quiet_since is None:
                quiet_since = now
            elif now - quiet_since >= quiet_s:
                settle()
                return
            time.sleep(0.25)
        raise RuntimeError("the server did not go idle")

    def resources(self) -> dict[str, int]:
        """RSS, threads, and open fds less the clients' connections (kept alive between
        requests, or closing: their number says nothing about a leak; all_fds counts them)."""
        p = psutil.Process(self.process.pid)
        fds = p.num_fds()
        clients = sum(1 for c in p.net_connections("tcp")
                      if c.laddr and c.laddr.port == self.port and c.raddr)  # fmt: skip
        return {"rss": p.memory_info().rss, "fds": fds - clients, "all_fds": fds,
                "threads": p.num_threads()}


# What the clients saw -----------------------------------------------------------------------
class Stats:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.status = Counter()  # str(status) → count
        self.by_kind = Counter()
        self.requests = self.connection_errors = self.unexpected_5xx = 0
        self.unexpected_4xx = self.bad_not_4xx = 0
        self.gave_up = Counter()
        self.streams = Counter()  # answered, final, ended_by_error_event, left_on_purpose
        self.finish_reasons = Counter()
        self.missing_final: list[str] = []
        self.unexpected_5xx_detail: list[str] = []
        self.t0 = time.monotonic()  # set again when the mixed load starts

    def at(self) -> str:
        return f"{time.monotonic() - self.t0:.1f} s"

    def answered(self, kind: str, code: int, bad: bool = False, body: object = None) -> None:
        """Count a status (`body`: the answer, shown for an unexpected 5xx); raises Retry for
        503 and 429."""
        with self.lock:
            self.requests += 1
            self.status[str(code)] += 1
            self.by_kind[kind] += 1
            if code >= 500 and code != 503:
                self.unexpected_5xx += 1
                if len(self.unexpected_5xx_detail) < 20:
                    self.unexpected_5xx_detail.append(f"{self.at()}: {kind} {code} "
                                                      f"{str(body)[:300]}")  # fmt: skip
            if bad and not (400 <= code < 500 and code != 429) and code != 503:
                self.bad_not_4xx += 1
            if not bad and 400 <= code < 500 and code != 429:
                self.unexpected_4xx += 1
        if code in (429, 503):
            raise Retry

    def no_connection(self, kind: str) -> None:
        with self.lock:
            self.connection_errors += 1
        raise Retry

    def stream_end(self, kind: str, final: bool, error_event: bool, left: bool,
                   finish: str | None, why: str = "") -> None:  # fmt: skip
        with self.lock:
            self.streams["answered"] += 1
            if left:
                self.streams["left_on_purpose"] += 1
                return
            if finish:
                self.finish_reasons[finish] += 1
            if final:
                self.streams["final"] += 1
                if error_event:
                    self.streams["ended_by_error_event"] += 1
            else:
                self.streams["without_final_event"] += 1
                if len(self.missing_final) < 20:
                    self.missing_final.append(f"{self.at()}: {kind}: {why}")


def read_openai_sse(response: httpx2.Response, leave_after: int | None = None,
                    on_text=None) -> dict:  # fmt: skip
    """Read an OpenAI stream: finish (the last finish_reason), error (an error event), done
    ([DONE] came), chunks (text chunks), left (left after `leave_after` text chunks)."""
    out: dict = {"finish": None, "error": None, "done": False, "chunks": 0, "left": False}
    for line in response.iter_lines():
        if not line.startswith("data: "):
            continue
        data = line[6:]
        if data.strip() == "[DONE]":
            out["done"] = True
            break
        body = json.loads(data)
        if body.get("error"):
            out["error"] = body["error"]
            continue
        for choice in body.get("choices") or []:
            text = (choice.get("delta") or {}).get("content") or choice.get("text")
            if text:
                out["chunks"] += 1
                if on_text is not None:
                    on_text(text)
            if choice.get("finish_reason"):
                out["finish"] = choice["finish_reason"]
        if leave_after is not None and out["chunks"] >= leave_after:
            out["left"] = True
            break
    return out


class Soak:
    """What every client thread shares: the server, the counts, pausing and stopping."""

    def __init__(self, server: Server, model_id: str, seed: int) -> None:
        self.server, self.model_id, self.seed = server, model_id, seed
        self.stats = Stats()
        self.stopping = threading.Event()
        self._cond = threading.Condition()
        self._paused = False
        self._in_flight = 0

    @property
    def url(self) -> str:
        return self.server.url

    def enter(self) -> bool:
        """Wait while paused; False once stopping. Else the caller's request is in flight."""
        with self._cond:
            while self._paused and not self.stopping.is_set():
                self._cond.wait(0.5)
            if self.stopping.is_set():
                return False
            self._in_flight += 1
            return True

    def leave(self) -> None:
        with self._cond:
            self._in_flight -= 1
            self._cond.notify_all()

    def pause(self, timeout_s: float = 300.0) -> None:
        """No new requests; returns once every client's request has ended."""
        deadline = time.monotonic() + timeout_s
        with self._cond:
            self._paused = True
            while self._in_flight and time.monotonic() < deadline:
                self._cond.wait(0.5)
            if self._in_flight:
                raise RuntimeError("the clients did not pause")

    def resume(self) -> None:
        with self._cond:
            self._paused = False
            self._cond.notify_all()

    def with_retries(self, kind: str, attempt) -> bool:
        """attempt() until it raises no Retry; False if it never got through."""
        deadline = time.monotonic() + RETRY_FOR_S
        delay = 0.25
        while True:
            try:
                attempt()
                return True
            except Retry:
                pass
            if self.stopping.is_set():
                return False
            if time.monotonic() > deadline:
                with self.stats.lock:
                    self.stats.gave_up[kind] += 1
                return False
            time.sleep(delay * random.uniform(0.5, 1.5))
            delay = min(delay * 2, 4.0)


# The clients --------------------------------------------------------------------------------
class Client(threading.Thread):
    OPS = {  # name → weight
        "chat_stream": 25, "chat_whole": 15, "messages_stream": 12, "messages_whole": 10,
        "completions_whole": 6, "completions_stream": 4, "embeddings": 8,
        "bad_json": 4, "bad_model": 4, "bad_max_tokens": 4,
    }  # fmt: skip

    def __init__(self, soak: Soak, index: int) -> None:
        super().__init__(name=f"soak-client-{index}", daemon=True)
        self.soak, self.stats = soak, soak.stats
        self.rng = random.Random(f"{soak.seed}-{index}")
        self.http = httpx2.Client(timeout=TIMEOUT)
        self.oai = openai.OpenAI(base_url=soak.url + "/v1", api_key="soak", max_retries=0,
                                 timeout=TIMEOUT)  # fmt: skip
        self.ant = anthropic.Anthropic(base_url=soak.url, api_key="soak", max_retries=0,
                                       timeout=TIMEOUT)  # fmt: skip

    def run(self) -> None:
        names, weights = list(self.OPS), list(self.OPS.values())
        while self.soak.enter():
            try:
                name = self.rng.choices(names, weights)[0]
                getattr(self, name)()
            finally:
                self.soak.leave()
            self.soak.stopping.wait(self.rng.uniform(0.2, 2.0))
        self.http.close()

    def _prompt(self) -> list[dict]:
        return [{"role": "user", "content": self.rng.choice(PROMPTS)}]

    def _leave_after(self) -> int | None:
        return self.rng.randint(1, 2) if self.rng.random() < DISCONNECT_SHARE else None

    # OpenAI, raw SSE: the only way to see [DONE]
    def _raw_stream(self, kind: str, path: str, body: dict) -> None:
        leave_after = self._leave_after()

        def attempt() -> None:
            try:
                with self.http.stream("POST", self.soak.url + path, json=body) as r:
                    if r.status_code != 200:
                        self.stats.answered(kind, r.status_code, body=r.read())
                        return
                    self.stats.answered(kind, r.status_code)
                    try:
                        out = read_openai_sse(r, leave_after)
                    except (httpx2.HTTPError, json.JSONDecodeError) as exc:
                        self.stats.stream_end(kind, False, False, False, None, repr(exc))
                        return
                    final = out["done"] and (out["finish"] is not None or out["error"] is not None)
                    why = f"finish={out['finish']} error={out['error']} done={out['done']}"
                    self.stats.stream_end(kind, final, out["error"] is not None, out["left"],
                                          out["finish"], why)  # fmt: skip
            except httpx2.TransportError:
                self.stats.no_connection(kind)

        self.soak.with_retries(kind, attempt)

    def chat_stream(self) -> None:
        body = {"model": self.soak.model_id, "messages": self._prompt(), "stream": True,
                "max_tokens": self.rng.randint(8, 64)}  # fmt: skip
        if self.rng.random() < 0.5:
            body["user"] = f"soak-{self.rng.randint(0, 9)}"  # some users come back
        self._raw_stream("chat_stream", "/v1/chat/completions", body)

    def completions_stream(self) -> None:
        body = {"model": self.soak.model_id, "prompt": self.rng.choice(PROMPTS), "stream": True,
                "max_tokens": self.rng.randint(8, 64)}  # fmt: skip
        self._raw_stream("completions_stream", "/v1/completions", body)

    # The SDKs
    def _sdk(self, kind: str, call, sdk, bad: bool = False) -> None:
        def attempt() -> None:
            try:
                raw = call()
            except sdk.APIStatusError as exc:
                self.stats.answered(kind, exc.status_code, bad, exc.body)
                return
            except sdk.APIConnectionError:
                self.stats.no_connection(kind)
            self.stats.answered(kind, raw.status_code, bad)
            raw.parse()

        self.soak.with_retries(kind, attempt)

    def chat_whole(self) -> None:
        messages, tokens = self._prompt(), self.rng.randint(8, 64)
        self._sdk("chat_whole", lambda: self.oai.chat.completions.with_raw_response.create(
            model=self.soak.model_id, messages=messages, max_tokens=tokens), openai)  # fmt: skip

    def completions_whole(self) -> None:
        prompt, tokens = self.rng.choice(PROMPTS), self.rng.randint(8, 64)
        self._sdk("completions_whole", lambda: self.oai.completions.with_raw_response.create(
            model=self.soak.model_id, prompt=prompt, max_tokens=tokens), openai)  # fmt: skip

    def embeddings(self) -> None:
        texts = self.rng.sample(PROMPTS, self.rng.randint(1, 3))
        self._sdk("embeddings", lambda: self.oai.embeddings.with_raw_response.create(
            model=self.soak.model_id, input=texts), openai)  # fmt: skip

    def messages_whole(self) -> None:
        messages, tokens = self._prompt(), self.rng.randint(8, 64)
        self._sdk("messages_whole", lambda: self.ant.messages.with_raw_response.create(
            model=self.soak.model_id, messages=messages, max_tokens=tokens), anthropic)  # fmt: skip

    def messages_stream(self) -> None:
        kind, leave_after = "messages_stream", self._leave_after()
        messages, max_tokens = self._prompt(), self.rng.randint(8, 64)

        def attempt() -> None:
            try:
                stream = self.ant.messages.create(model=self.soak.model_id, messages=messages,
                                                  max_tokens=max_tokens, stream=True)  # fmt: skip
            except anthropic.APIStatusError as exc:
                self.stats.answered(kind, exc.status_code, body=exc.body)
                return
            except anthropic.APIConnectionError:
                self.stats.no_connection(kind)
            self.stats.answered(kind, stream.response.status_code)
            final = error_event = left = False
            deltas, stop, why = 0, None, "no message_stop"
            try:
                for event in stream:
                    if event.type == "content_block_delta":
                        deltas += 1
                    elif event.type == "message_delta":
                        stop = event.delta.stop_reason
                    elif event.type == "message_stop":
                        final = True
                    if leave_after is not None and deltas >= leave_after and not final:
                        left = True
                        break
            except anthropic.APIStatusError as exc:  # an `error` event
                final = error_event = True
                why = str(exc)
            except Exception as exc:  # noqa: BLE001 - a cut stream, whatever raised it
                why = repr(exc)
            finally:
                stream.close()
            self.stats.stream_end(kind, final, error_event, left, stop, why)

        self.soak.with_retries(kind, attempt)

    # Bad requests: 4xx expected
    def bad_json(self) -> None:
        kind = "bad_json"

        def attempt() -> None:
            try:
                r = self.http.post(self.soak.url + "/v1/chat/completions",
                                   content=b'{"model": "x", "messages": [',
                                   headers={"Content-Type": "application/json"})  # fmt: skip
            except httpx2.TransportError:
                self.stats.no_connection(kind)
            self.stats.answered(kind, r.status_code, bad=True, body=r.text)

        self.soak.with_retries(kind, attempt)

    def bad_model(self) -> None:
        messages = self._prompt()
        self._sdk("bad_model", lambda: self.ant.messages.with_raw_response.create(
            model=BAD_MODEL, messages=messages, max_tokens=16), anthropic, bad=True)  # fmt: skip

    def bad_max_tokens(self) -> None:
        messages = self._prompt()
        self._sdk("bad_max_tokens", lambda: self.oai.chat.completions.with_raw_response.create(
            model=self.soak.model_id, messages=messages, max_tokens=-5), openai,
            bad=True)  # fmt: skip


class Window(threading.Thread):
    """Writes conversations as the window does: ConversationStore in the home's database, the
    user's message committed first, the reply written while it streams (ReplyWriter)."""

    def __init__(self, soak: Soak, db_path: Path) -> None:
        super().__init__(name="soak-window", daemon=True)
        self.soak, self.stats, self.db_path = soak, soak.stats, db_path
        self.rng = random.Random(f"{soak.seed}-window")
        self.http = httpx2.Client(timeout=TIMEOUT)
        self.records: dict[str, dict] = {}  # conversation id → {"title", "messages"}
        self.failure: str | None = None

    def run(self) -> None:
        from deskllm.store import ConversationStore, open_database

        db = open_database(self.db_path)  # the connection belongs to this thread
        store = ConversationStore(db)
        try:
            while not self.soak.stopping.is_set():
                conv = store.create(title="New chat", model=self.soak.model_id)
                record = self.records[conv.id] = {"title": "New chat", "messages": []}
                for _ in range(self.rng.randint(1, 4)):
                    if not self.soak.enter():
                        break
                    try:
                        self.turn(store, conv.id, record)
                    finally:
                        self.soak.leave()
                    self.soak.stopping.wait(self.rng.uniform(0.3, 2.0))
        except Exception as exc:  # noqa: BLE001 - reported in the JSON
            self.failure = repr(exc)
        finally:
            db.close()
            self.http.close()

    def turn(self, store, cid: str, record: dict) -> None:
        kind = "window_stream"
        text = self.rng.choice(PROMPTS)
        store.add_message(cid, "user", text)
        record["messages"].append(("user", text, "complete"))
        history = [{"role": m.role, "content": m.content} for m in store.messages(cid)
                   if m.content]  # fmt: skip
        sampling = {"max_tokens": self.rng.randint(8, 64)}
        writer = store.begin_reply(cid, self.soak.model_id, sampling)
        leave_after = 1 if self.rng.random() < DISCONNECT_SHARE else None
        body = {"model": self.soak.model_id, "messages": history, "stream": True,
                "user": cid, **sampling}  # fmt: skip
        outcome = ["error"]  # stays so when every try was refused

        def attempt() -> None:
            try:
                with self.http.stream("POST", self.soak.url + "/v1/chat/completions",
                                      json=body) as r:  # fmt: skip
                    if r.status_code != 200:
                        self.stats.answered(kind, r.status_code, body=r.read())
                        return
                    self.stats.answered(kind, r.status_code)
                    try:
                        out = read_openai_sse(r, leave_after, writer.append)
                    except (httpx2.HTTPError, json.JSONDecodeError) as exc:
                        self.stats.stream_end(kind, False, False, False, None, repr(exc))
                        outcome[0] = "interrupted"
                        return
                    final = out["done"] and (out["finish"] is not None or out["error"] is not None)
                    why = f"finish={out['finish']} error={out['error']} done={out['done']}"
                    self.stats.stream_end(kind, final, out["error"] is not None, out["left"],
                                          out["finish"], why)  # fmt: skip
                    if out["left"]:
                        outcome[0] = "interrupted"  # the Stop button
                    elif out["error"] is not None:
                        outcome[0] = "error"
                    else:
                        outcome[0] = "complete" if final else "interrupted"
            except httpx2.TransportError:
                self.stats.no_connection(kind)

        self.soak.with_retries(kind, attempt)
        writer.finish(outcome[0])
        record["messages"].append(("assistant", writer.text, outcome[0]))
        if record["title"] == "New chat":
            title = text[:40]
            store.update(cid, title=title)
            record["title"] = title


def check_conversations(db_path: Path, records: dict[str, dict]) -> tuple[str, int]:
    """integrity_check's answer and the conversations that differ from their record."""
    from deskllm.store import ConversationStore, open_database

    db = open_database(db_path)
    try:
        integrity = "; ".join(str(row[0]) for row in db.execute("PRAGMA integrity_check"))
        store = ConversationStore(db)
        damaged = 0
        for cid, record in records.items():
            if not store.exists(cid):
                damaged += 1
                continue
            stored = [(m.role, m.content, m.status) for m in store.messages(cid)]
            if store.get(cid).title != record["title"] or stored != record["messages"]:
                damaged += 1
    finally:
        db.close()
    return integrity, damaged


class HealthWatch(threading.Thread):
    """The /health states seen, polled every second."""

    def __init__(self, soak: Soak) -> None:
        super().__init__(name="soak-health", daemon=True)
        self.soak, self.seen = soak, Counter()

    def run(self) -> None:
        while not self.soak.stopping.wait(1.0):
            try:
                r = httpx2.get(self.soak.url + "/health", timeout=5)
                self.seen[r.json().get("status", str(r.status_code))] += 1
            except (httpx2.HTTPError, ValueError):
                self.seen["down"] += 1


# Steps --------------------------------------------------------------------------------------
def chat_body(model_id: str, tokens: int, prompt: str, stream: bool = False) -> dict:
    return {"model": model_id, "messages": [{"role": "user", "content": prompt}],
            "max_tokens": tokens, "ignore_eos": True, "temperature": 0, "stream": stream,
            "user": uuid.uuid4().hex}  # fmt: skip


def post_burst(soak: Soak) -> dict:
    """The 16-token reply's latency idle (median of 3) and right after each of 3 bursts."""
    url, stats = soak.url, soak.stats
    prompt = PROMPTS[8]  # after a fresh nonce each time (see the module's docstring)

    timings: dict[str, list] = {"idle": [], "after_burst": []}

    def probe(phase: str | None = None) -> float:
        start = time.perf_counter()
        r = httpx2.post(url + "/v1/chat/completions", timeout=TIMEOUT,
                        json=chat_body(soak.model_id, PROBE_TOKENS,
                                       f"[{uuid.uuid4().hex[:8]}] {prompt}"))  # fmt: skip
        elapsed = time.perf_counter() - start
        stats.answered("burst_probe", r.status_code, body=r.text)
        tokens = r.json()["usage"]["completion_tokens"]
        if tokens != PROBE_TOKENS:
            raise RuntimeError(f"the probe got {tokens} tokens, not {PROBE_TOKENS}")
        if phase is not None:  # the server's own figures: prompt_ms, predicted_ms
            t = r.json().get("timings") or {}
            timings[phase].append({k: t.get(k) for k in ("prompt_ms", "predicted_ms")})
        return elapsed

    def one(i: int) -> None:
        r = httpx2.post(url + "/v1/chat/completions", timeout=TIMEOUT,
                        json=chat_body(soak.model_id, BURST_TOKENS, PROMPTS[i % 8]))  # fmt: skip
        with contextlib.suppress(Retry):
            stats.answered("burst", r.status_code, body=r.text)

    probe()  # warm
    idle = []
    for _ in range(3):
        settle()
        idle.append(probe("idle"))
    after = []
    for _ in range(ROUNDS):
        settle()
        threads = [threading.Thread(target=one, args=(i,)) for i in range(BURST)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        after.append(probe("after_burst"))
    idle_med = statistics.median(idle)
    ratio = statistics.median(a / idle_med for a in after)
    return {"post_burst_over_idle": ratio, "idle_s": idle, "after_burst_s": after,
            "server_timings_ms": timings}  # fmt: skip


def kill_engine(server: Server) -> float:
    """SIGKILL the engine; seconds until /health is ok again."""
    server.wait_healthy(120)
    engine = None
    deadline = time.monotonic() + 60
    while engine is None and time.monotonic() < deadline:
        engine = server.engine()
        if engine is None:
            time.sleep(0.5)
    if engine is None:
        raise RuntimeError("no engine process found under the server")
    engine.send_signal(signal.SIGKILL)
    start = time.monotonic()
    with contextlib.suppress(psutil.Error):
        engine.wait(10)
    return time.monotonic() - start + server.wait_healthy(180)


def long_stream(soak: Soak, out: dict) -> None:
    """A 400-token streamed chat reply kept until the server ends it; `out` gets text
    (an event once text came), finish, done, chunks, error."""
    body = chat_body(soak.model_id, LONG_TOKENS, PROMPTS[0], stream=True)

    def attempt() -> None:
        try:
            with httpx2.stream("POST", soak.url + "/v1/chat/completions", json=body,
                               timeout=TIMEOUT) as r:  # fmt: skip
                if r.status_code != 200:
                    soak.stats.answered("shutdown_stream", r.status_code, body=r.read())
                    return
                soak.stats.answered("shutdown_stream", r.status_code)
                try:
                    out.update(read_openai_sse(r, on_text=lambda _t: out["text"].set()))
                except (httpx2.HTTPError, json.JSONDecodeError) as exc:
                    out["exception"] = repr(exc)
        except httpx2.TransportError:
            soak.stats.no_connection("shutdown_stream")

    soak.with_retries("shutdown_stream", attempt)
    out["ended"] = True
    out["text"].set()  # never leave the waiter hanging


def sigterm_and_restart(soak: Soak, grace: float) -> dict:
    """With 4 streams open: SIGTERM, the exit time, the streams' ends, a fresh start."""
    server = soak.server
    runs = [{"text": threading.Event()} for _ in range(LONG_STREAMS)]
    threads = [threading.Thread(target=long_stream, args=(soak, run), daemon=True)
               for run in runs]  # fmt: skip
    for t in threads:
        t.start()
    for run in runs:
        if not run["text"].wait(180):
            raise RuntimeError("a long stream got no text in 180 s")
    if any(run.get("ended") for run in runs):
        raise RuntimeError(f"a long stream ended before the SIGTERM: {runs}")
    result_at = round(time.monotonic() - soak.stats.t0, 1)
    start = time.monotonic()
    server.process.send_signal(signal.SIGTERM)
    soak.resume()  # the clients go on, and retry while the server is away
    try:
        server.process.wait(grace + 60)
        exit_s = time.monotonic() - start
    except subprocess.TimeoutExpired:
        server.process.kill()
        server.process.wait()
        exit_s = None
    for t in threads:
        t.join(30)
    streams = [{"finish": run.get("finish"), "done": run.get("done"),
                "error": run.get("error"), "chunks": run.get("chunks"),
                "exception": run.get("exception")} for run in runs]  # fmt: skip
    final = sum(1 for s in streams if s["done"] and (s["finish"] or s["error"]))
    returncode = server.process.returncode
    server.start()
    return {"sigterm_at_s": result_at, "sigterm_exit_s": exit_s,
            "sigterm_returncode": returncode,
            "sigterm_streams": streams, "sigterm_streams_final": final}  # fmt: skip


def private_home() -> Path:
    """A fresh DESKLLM_HOME with the crash-safe probe's cached answer of the user's home."""
    from deskllm import paths

    probes = paths.probe_cache_dir()
    home = Path(tempfile.mkdtemp(prefix="deskllm-soak-"))
    if probes.is_dir():
        shutil.copytree(probes, home / "probes", dirs_exist_ok=True)
    return home


def run(args: argparse.Namespace, result: dict) -> None:
    from deskllm.catalog.starter import starter_model_path

    model = args.model or starter_model_path()
    if model is None:
        raise RuntimeError("the starter model is not installed; give --model")
    home = private_home()
    result["home"] = str(home)
    os.environ["DESKLLM_HOME"] = str(home)  # this process's store: the server's database
    from deskllm import paths

    server = Server(home, str(model), args)
    try:
        server.start()
        model_id = httpx2.get(server.url + "/v1/models", timeout=10).json()["data"][0]["id"]
        soak = Soak(server, model_id, args.seed)
        try:
            result["post_burst"] = post_burst(soak)
            result["post_burst_over_idle"] = result["post_burst"].pop("post_burst_over_idle")
            mixed_load(soak, args, paths.database_path(), result)
        finally:
            stats = soak.stats
            result |= {
                "requests": stats.requests, "unexpected_5xx": stats.unexpected_5xx,
                "streams_without_final_event": stats.streams["without_final_event"],
                "status_counts": dict(sorted(stats.status.items())),
                "by_kind": dict(sorted(stats.by_kind.items())),
                "connection_errors": stats.connection_errors, "gave_up": dict(stats.gave_up),
                "unexpected_4xx": stats.unexpected_4xx,
                "bad_requests_not_4xx": stats.bad_not_4xx,
                "streams": dict(stats.streams) | {"finish_reasons": dict(stats.finish_reasons)},
                "missing_final": stats.missing_final,
                "unexpected_5xx_detail": stats.unexpected_5xx_detail,
            }  # fmt: skip
    finally:
        server.stop()
        if not args.keep_home:
            shutil.rmtree(home, ignore_errors=True)


def mixed_load(soak: Soak, args: argparse.Namespace, db_path: Path, result: dict) -> None:
    """Steps 2 to 6 of the module's docstring; a step that fails ends the load early (the
    error is reported) and what was measured is still checked."""
    server, total_s = soak.server, args.minutes * 60
    kill_every = min(ENGINE_KILL_EVERY_S, total_s / 5)
    steps = [(0.10 * total_s, "resources_start"), (0.75 * total_s, "sigterm")]
    steps += [(k * kill_every, "kill") for k in range(1, 1000) if k * kill_every < total_s]
    steps.sort()
    watch = HealthWatch(soak)
    clients = [Client(soak, i) for i in range(args.clients)]
    window = Window(soak, db_path)
    kills, kill_at, recovery, restarts_first = 0, [], [], 0
    start = soak.stats.t0 = time.monotonic()
    for t in [watch, window, *clients]:
        t.start()
    try:
        for at, step in steps:
            time.sleep(max(0.0, start + at - time.monotonic()))
            if step == "kill":
                kill_at.append(round(time.monotonic() - start, 1))
                recovery.append(kill_engine(server))
                kills += 1
            elif step == "resources_start":
                soak.pause()
                server.wait_idle()
                result["resources"] = {"start": server.resources()}
                soak.resume()
            else:
                soak.pause()
                server.wait_idle()
                result.setdefault("resources", {})["end"] = server.resources()
                restarts_first = int(server.metrics().get("deskllm_engine_restarts_total", 0))
                result |= sigterm_and_restart(soak, args.grace)
        time.sleep(max(0.0, start + total_s - time.monotonic()))
    except Exception as exc:  # noqa: BLE001 - reported; the rest is still checked
        result["errors"].append(f"mixed load: {exc!r}")
    finally:
        soak.resume()
        soak.stopping.set()
        for t in [*clients, window, watch]:
            t.join(60)
        result["duration_s"] = time.monotonic() - start
        result["engine_kills"], result["engine_recovery_s"] = kills, recovery
        result["engine_kill_at_s"] = kill_at
        result["health_seen"] = dict(watch.seen)
    restarts_second = 0
    with contextlib.suppress(httpx2.HTTPError):
        restarts_second = int(server.metrics().get("deskllm_engine_restarts_total", 0))
    result["engine_restarts_seen"] = restarts_first + restarts_second
    if window.failure:
        result["errors"].append(f"window client: {window.failure}")
    if window.is_alive():
        result["errors"].append("the window client did not stop")
    else:
        integrity, damaged = check_conversations(db_path, window.records)
        result |= {"conversations": len(window.records), "conversations_damaged": damaged,
                   "integrity_check": integrity}  # fmt: skip
    res = result.get("resources", {})
    if "start" in res and "end" in res:
        result["rss_growth"] = res["end"]["rss"] / res["start"]["rss"] - 1
        result["fd_delta"] = res["end"]["fds"] - res["start"]["fds"]
        result["threads_delta"] = res["end"]["threads"] - res["start"]["threads"]
    if result.get("sigterm_exit_s") is not None:
        result["sigterm_exit_over_grace"] = result["sigterm_exit_s"] / args.grace

def verdict(result: dict, grace: float) -> bool:
    def at_most(key: str, limit: float) -> bool:
        return result.get(key) is not None and result[key] <= limit

    return (
        not result["errors"]
        and result.get("unexpected_5xx") == 0
        and result.get("streams_without_final_event") == 0
        and result.get("conversations_damaged") == 0
        and result.get("integrity_check") == "ok"
        and at_most("rss_growth", 0.05)
        and at_most("fd_delta", 0)
        and at_most("threads_delta", 0)
        and at_most("post_burst_over_idle", 1.2)
        and at_most("sigterm_exit_over_grace", (grace + 2) / grace)
        and result.get("sigterm_streams_final") == LONG_STREAMS
        and result.get("bad_requests_not_4xx") == 0
        and result.get("engine_restarts_seen", 0) >= result.get("engine_kills", 0)
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=20.0)
    parser.add_argument("--grace", type=float, default=10.0, help="--shutdown-grace, seconds")
    parser.add_argument("--clients", type=int, default=6)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--model", default=None, help="a .gguf path (default: the starter model)")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--ctx", type=int, default=2048, help="context of one slot")
    parser.add_argument("--keep-home", action="store_true",
                        help="keep the private DESKLLM_HOME (serve.log) afterwards")
    args = parser.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))  # still stop the server
    random.seed(args.seed)
    result: dict = {"minutes": args.minutes, "grace_s": args.grace, "clients": args.clients,
                    "seed": args.seed, "cpu_count": os.cpu_count(), "errors": []}  # fmt: skip
    load_start = os.getloadavg()[0]
    try:
        run(args, result)
    except Exception as exc:  # noqa: BLE001 - a failed step is reported in the JSON
        result["errors"].append(repr(exc))
    result["load_avg_1m"] = [load_start, os.getloadavg()[0]]
    keys = ["duration_s", "requests", "unexpected_5xx", "streams_without_final_event",
            "conversations_damaged", "rss_growth", "fd_delta", "threads_delta",
            "post_burst_over_idle", "sigterm_exit_over_grace"]  # fmt: skip
    ordered = {key: result.get(key) for key in keys}
    ordered["pass"] = verdict(result, args.grace)
    ordered |= {k: v for k, v in result.items() if k not in ordered}
    print(json.dumps(ordered, indent=2))
    return 0 if ordered["pass"] else 1


if __name__ == "__main__":
    sys.exit(main())
