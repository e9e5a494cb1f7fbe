"""The benchmark suite: one model in every configuration this machine and engine build offer,
measured through the app's own engine, and the fastest chosen (`deskllm bench --suite`).

Configurations: the CPU with 1 … physical-core threads; each non-CPU device of the engine
(CPU-type ones such as Mesa llvmpipe only when allowed) with every layer the planner says
fits, and with half of them; the CPU with all threads and with half of them first, the
reliable baseline the others are compared with. Each is loaded with ModelLoader and first
measured briefly (a short prompt, then decoding for DECODE_WINDOW_S of wall-clock time at
most): one HOPELESS_FACTOR times slower than the best brief figure so far stops there,
abandoned with its reason, and so does one that gives no first token within HOPELESS_FACTOR
times the best one's time to first token (its engine is ended: llama.cpp cannot stop inside
a prompt batch). The others run LocalScore-style prompt + generation shapes; their mean
speeds and TTFT are the configuration's figures, and with the user's tariff its cost per
million generated tokens.
A full measurement still running BUDGET_FACTOR times later than the best finished one had
finished the same shape is stopped (its engine ended) and abandoned too: the backstop for
brief figures that misled (under load from other work they come closer together).
The chosen configuration's decode speed is then measured again at a few context depths
(tokens already in the KV cache), as attention reads the whole cache for every token.
Last, the chosen configuration is measured with speculative decoding (speculation_stage: off,
n-gram drafts, each installed model that can draft for it), and the Automatic speculation
setting follows that choice.
No rule predicts which configuration wins on a machine (the same llvmpipe device was 1.6x
faster than the CPU on one VM of a kind and 90x slower on another), so the automatic load
follows this measurement (see deskllm.loader).
"""

from __future__ import annotations

import math
import statistics
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from sqlite_utils import Database

from deskllm.engine.client import EngineClient
from deskllm.engine.domain import ChatMessage, Done, LoadParams, Metrics, Sampling, TextDelta
from deskllm.engine.errors import EngineError
from deskllm.gguf.header import read_header
from deskllm.hardware.energy_cost import LocalCostRates, bench_cost_per_mtok
from deskllm.hardware.report import HardwareReport
from deskllm.loader import ModelLoader
from deskllm.measure.speculation_stage import measure_speculation
from deskllm.planner.bench_choice import (
    BUDGET_FACTOR,
    BUDGET_FLOOR_S,
    HOPELESS_FACTOR,
    ConfigFigures,
    abandon_reason,
    best_of,
    choose,
    first_token_reason,
    over_budget_reason,
    shape_deadlines,
)
from deskllm.planner.fit import FitPlanner
from deskllm.planner.measured_configs import (
    config_label,
    cuda_devices_of,
    current_keys,
    vulkan_devices_of,
)

# (prompt tokens, generated tokens): LocalScore's shapes, a short reply to a long prompt, a
# long reply to a long prompt and a long reply to a short one.
SHAPES = ((1024, 16), (2048, 256), (384, 1152))
QUICK_DIVISOR = 8  # --quick: every shape 8x smaller (seconds on a small VM, same keys)
N_CTX = 4096  # holds the largest shape with its chat template
QUICK_N_CTX = 1024
PROBE_PROMPT_TOKENS = 32
PROBE_TOKENS = 16
# A brief measurement decodes for this long after its first token at most, tokens out or
# not: its rate is over wall-clock time, so a device 100x slower trips within seconds.
DECODE_WINDOW_S = 1.5
FIRST_TOKEN_FLOOR_S = 3.0  # the least a brief prompt is given for its first token
# Decode speed against context depth, for the chosen configuration: tokens in the KV cache
# before decoding starts, and the tokens decoded at each depth.
DEPTHS = (0, 512, 1024, 2048)
QUICK_DEPTHS = (0, 128, 256, 512)
DEPTH_TOKENS = 64
QUICK_DEPTH_TOKENS = 16
TEMPLATE_MARGIN = 64  # the chat template's own tokens and the note that makes a prompt fresh
_TEXT = (
    "the lighthouse keeper wrote in her log every evening the wind's direction the colour "
    "of the sea the ships that passed and the birds that rested on the gallery rail over the "
    "years the entries grew longer and she began to add the small things as well"
)
_WORDS = _TEXT.split(" ")

Progress = Callable[[str], None]


class SuiteCancelled(Exception):
    """The suite was cancelled (BenchSuite.cancel); nothing is stored."""


class NoFirstToken(Exception):
    """A brief measurement's prompt took too long: the engine was ended."""

    def __init__(self, seconds: float) -> None:
        super().__init__(f"no token after {seconds:.1f} s")
        self.seconds = seconds


@dataclass(frozen=True)
class SuiteConfig:
    """One way to run the model here."""

    id: str  # "cpu-2t", "vulkan0-31l"
    backend: str  # "CPU" or the engine device's backend ("Vulkan", "CUDA", "Metal")
    device: str  # the engine device ("CPU", "Vulkan0")
    description: str  # the device's own name ("llvmpipe (LLVM 15.0.6, 256 bits)")
    n_threads: int
    n_gpu_layers: int

    def as_dict(self) -> dict[str, Any]:
        return dict(
            id=self.id, backend=self.backend, device=self.device, description=self.description,
            n_threads=self.n_threads, n_gpu_layers=self.n_gpu_layers,
        )  # fmt: skip

    def params(self, base: LoadParams) -> LoadParams:
        """`base` loaded this way: its threads, its layers, only its device visible (a named
        Vulkan device; one CUDA device of several)."""
        config = self.as_dict()
        return replace(base, n_threads=self.n_threads, n_gpu_layers=self.n_gpu_layers,
                       vulkan_devices=vulkan_devices_of(config),
                       cuda_devices=cuda_devices_of(config))  # fmt: skip


@dataclass(frozen=True)
class ShapeResult:
    prompt_tokens: int
    generated_tokens: int
    pp_tps: float | None
    tg_tps: float | None
    ttft_s: float | None
    joules_per_token: float | None
    bound: bool = False  # tg_tps is an upper bound: the reply was cut off before 2 tokens
    energy_source: str | None = None  # Metrics.energy_source: "rapl", "estimated", ...


def suite_configs(
    report: HardwareReport,
    planner_for: Callable[[str | None], FitPlanner],
    header: Any,
    n_ctx: int,
    allow_cpu_devices: bool = False,
) -> tuple[list[SuiteConfig], list[str]]:
    """Every configuration to measure, in the order that finds the likely best first, and the
    devices left out with why. The CPU with all threads and with half of them come first: the
    baseline the devices' brief figures are compared with. Under load from other work all
    threads compete with it (18x slower than one thread on a busy 2-core VM), and a slow
    baseline gives a hopeless device 10x that long. Then the devices, then the other threads."""
    physical = report.cpu.cores_physical or report.cpu.cores_logical or 1
    cpu = [SuiteConfig(f"cpu-{t}t", "CPU", "CPU", report.cpu.name, t, 0)
           for t in range(physical, 0, -1)]  # fmt: skip
    devices: list[SuiteConfig] = []
    skipped: list[str] = []
    for engine in report.engine.devices:
        if engine.type == "cpu":
            continue
        target = next((t for t in report.offload_targets if t.engine_device == engine.name), None)
        cpu_type = target.type == "cpu" if target else False
        label = f"{engine.name} ({engine.description})"
        if cpu_type and not allow_cpu_devices:
            skipped.append(f"{label}: a CPU-type device, measured only with --allow-cpu-devices")
            continue
        try:
            plan = planner_for(engine.name).plan(header, n_ctx)
        except ValueError as exc:
            skipped.append(f"{label}: {exc}")
            continue
        if plan.n_gpu_layers == 0:
            skipped.append(f"{label}: not one layer fits its free memory ({plan.reason})")
            continue
        levels = sorted({plan.n_gpu_layers, plan.n_gpu_layers // 2} - {0}, reverse=True)
        for layers in levels:
            devices.append(
                SuiteConfig(f"{engine.name.lower()}-{layers}l", engine.backend or engine.name,
                            engine.name, engine.description, physical, layers)
            )  # fmt: skip
    baseline = [c for c in cpu if c.n_threads in (physical, physical // 2)]
    rest = [c for c in cpu if c not in baseline]
    return baseline + devices + rest, skipped


def depth_points(depths: tuple[int, ...], n_ctx: int, generated: int) -> list[int]:
    """The depths that leave room in `n_ctx` for the chat template and `generated` tokens."""
    return [d for d in depths if d + TEMPLATE_MARGIN + generated <= n_ctx]


def score(pp_tps: float | None, tg_tps: float | None, ttft_s: float | None) -> float | None:
    """LocalScore-style: the geometric mean of prompt tok/s, decode tok/s and 1000 / TTFT in
    ms, times 10 (higher is better)."""
    if not (pp_tps and tg_tps and ttft_s):
        return None
    return round(10 * math.cbrt(pp_tps * tg_tps * (1.0 / ttft_s)), 1)


class BenchSuite:
    """Runs the suite for one model file. `cancel()` from any thread stops it (run() raises
    SuiteCancelled); `on_progress` gets a line of text at each step."""

    def __init__(
        self,
        model_path: str,
        *,
        quick: bool = False,
        allow_cpu_devices: bool = False,
        metric: str = "decode",
        db: Database | None = None,
        hardware: HardwareReport | None = None,
        on_progress: Progress | None = None,
        base_params: LoadParams | None = None,
        cost_rates: LocalCostRates | None = None,
        budget_factor: float = BUDGET_FACTOR,
        budget_floor_s: float = BUDGET_FLOOR_S,
        speculation: bool = True,
        drafts: list[str] | None = None,
    ) -> None:
        """`cost_rates`: the user's tariff and watts (deskllm.loader.params
        .cost_rates_from_settings); None leaves every cost unknown. `budget_factor`,
        `budget_floor_s`: the full measurement's time budget (bench_choice.shape_deadlines).
        `speculation`: measure the chosen configuration with speculative decoding too
        (speculation_stage), with n-gram drafts and each of `drafts` (None: the installed
        models that can draft for it, where there is a `db`)."""
        self.model_path = str(Path(model_path))
        self.quick = quick
        self.allow_cpu_devices = allow_cpu_devices
        self.metric = metric
        self.cost_rates = cost_rates
        self.budget_factor = budget_factor
        self.budget_floor_s = budget_floor_s
        self.speculation = speculation
        self.drafts = drafts
        self.db = db
        self._hardware = hardware
        self._progress = on_progress or (lambda _line: None)
        self.n_ctx = QUICK_N_CTX if quick else N_CTX
        self.depth_tokens = QUICK_DEPTH_TOKENS if quick else DEPTH_TOKENS
        self.depths = depth_points(QUICK_DEPTHS if quick else DEPTHS, self.n_ctx, self.depth_tokens)
        self.shapes = tuple(
            (max(1, pp // QUICK_DIVISOR), max(2, tg // QUICK_DIVISOR)) if quick else (pp, tg)
            for pp, tg in SHAPES
        )
        # The prompt cache would only cost time here: every request is a new prompt.
        self.base = replace(
            base_params or LoadParams(self.model_path),
            model_path=self.model_path, n_ctx=self.n_ctx, gpu_auto=False,
            kv_ram_budget_mb=0, kv_disk_budget_mb=0,
        )  # fmt: skip
        self._cancelled = threading.Event()
        self._client: EngineClient | None = None
        self._words_per_token: float | None = None
        self._overhead_tokens = 0.0

    @property
    def cancelled(self) -> bool:
        return self._cancelled.is_set()

    def cancel(self) -> None:
        self._cancelled.set()
        client = self._client
        if client is not None:
            client.cancel()

    # The run ----------------------------------------------------------------------------------
    def run(self) -> dict[str, Any]:
        report = self._hardware = self._hardware or _probe()
        header = read_header(Path(self.model_path))

        def planner_for(device: str | None) -> FitPlanner:
            return FitPlanner(report, target=device, use_extra_bufts=self.base.use_extra_bufts)

        configs, skipped = suite_configs(
            report, planner_for, header, self.n_ctx, self.allow_cpu_devices
        )
        for line in skipped:
            self._progress(f"left out: {line}")
        keys = current_keys()
        results: list[dict[str, Any]] = []
        briefs: list[ConfigFigures] = []
        finished: list[ConfigFigures] = []  # the fully measured, with their times
        with EngineClient() as client:
            self._client = client
            try:
                for index, config in enumerate(configs, start=1):
                    self._check()
                    label = config_label(config.as_dict())
                    self._progress(f"[{index}/{len(configs)}] {config.id}: {label}")
                    row = self._measure(client, config, briefs, finished)
                    device = config.device if config.n_gpu_layers else None
                    ceiling = planner_for(device).tps_ceiling(
                        header, self.n_ctx, self.base.kv_type, config.n_gpu_layers
                    )
                    row["ceiling_tps"] = _rounded(ceiling)
                    share = row["tg_tps"] / ceiling if ceiling and row["tg_tps"] else None
                    row["ceiling_share"] = round(share, 3) if share else None
                    results.append(row)
                    self._progress(f"    {_summary(row)}")
                figures = [
                    ConfigFigures(r["id"], config_label(r), r["tg_tps"], r["pp_tps"], r["status"])
                    for r in results
                ]
                chosen = choose(figures, self.metric)
                depth_tps, speculation = [], None
                if chosen:
                    winner = next(c for c in configs if c.id == chosen[0].id)
                    reload = results[-1]["id"] != winner.id
                    depth_tps = self._depth_curve(client, winner, reload)
                    if self.speculation:
                        speculation = self._speculation(client, winner)
            finally:
                self._client = None
        by_id = {r["id"]: r for r in results}
        return dict(
            model=self.model_path,
            configs=results,
            chosen=({"id": chosen[0].id, "reason": chosen[1]} if chosen
                    else {"id": None, "reason": "no configuration was measured in full"}),
            ceiling_tps=by_id[chosen[0].id]["ceiling_tps"] if chosen else None,
            machine=keys.machine,
            engine_build=keys.engine_build,
            hardware=f"{report.cpu.name}, {report.cpu.cores_physical or '?'} cores",
            metric=self.metric,
            quick=self.quick,
            n_ctx=self.n_ctx,
            shapes=[list(s) for s in self.shapes],
            skipped=skipped,
            depth_tps=depth_tps,
            depth_tokens=self.depth_tokens,
            speculation=speculation,
        )  # fmt: skip

    def _measure(
        self,
        client: EngineClient,
        config: SuiteConfig,
        briefs: list[ConfigFigures],
        finished: list[ConfigFigures],
    ) -> dict[str, Any]:
        row: dict[str, Any] = config.as_dict() | dict(
            pp_tps=None, tg_tps=None, ttft_s=None, score=None, joules_per_token=None,
            status="failed", abandoned=None, error=None, seconds=None, shapes=[],
            cost_per_mtok=None, cost_source="none", load_seconds=None, measure_seconds=None,
        )  # fmt: skip
        started = time.perf_counter()
        loaded_at: float | None = None
        params = config.params(self.base)
        conversation = uuid.uuid4().hex  # one per configuration: no KV state is switched
        try:
            ModelLoader(client, db=self.db, hardware=self._hardware).load(params)
            loaded_at = time.perf_counter()
            if self._words_per_token is None:
                self._calibrate(client, conversation)
            best = best_of(briefs, self.metric)
            try:
                brief = self._probe(client, conversation, best)
            except NoFirstToken as exc:
                row.update(status="abandoned", abandoned=first_token_reason(exc.seconds, best))
                return row
            under = "under " if brief.bound else ""
            self._progress(f"    brief: decode {under}{_fmt(brief.tg_tps)} tok/s, "
                           f"TTFT {_fmt(brief.ttft_s, 2)} s")  # fmt: skip
            figures = ConfigFigures(config.id, config_label(row), brief.tg_tps, brief.pp_tps,
                                    bound=brief.bound, ttft_s=brief.ttft_s)  # fmt: skip
            reason = abandon_reason(figures, best, self.metric)
            briefs.append(figures)
            brief_row = dict(pp_tps=_rounded(brief.pp_tps), tg_tps=_rounded(brief.tg_tps),
                             ttft_s=_rounded(brief.ttft_s, 3))  # fmt: skip
            if reason is not None:
                row.update(brief_row, status="abandoned", abandoned=reason)
                return row
            best_finished = best_of(finished, self.metric)
            deadlines = shape_deadlines(best_finished, self.budget_factor, self.budget_floor_s)
            shapes, ends, late = self._shapes_within(client, conversation, deadlines)
            if late is not None:
                assert best_finished is not None
                reason = over_budget_reason(late, deadlines[late], best_finished)
                row.update(brief_row, status="abandoned", abandoned=reason)
                return row
            row.update(_aggregate(shapes), status="measured")
            finished.append(replace(figures, tg_tps=row["tg_tps"], pp_tps=row["pp_tps"],
                                    bound=False, shape_ends_s=tuple(ends)))  # fmt: skip
            cost, source = bench_cost_per_mtok(
                row["joules_per_token"], _energy_source(shapes), row["tg_tps"], self.cost_rates
            )
            row.update(cost_per_mtok=_rounded(cost, 6), cost_source=source)
        except EngineError as exc:
            self._check()  # a cancel ends the reply with an error: say cancelled, not failed
            row["error"] = str(exc)
        finally:
            ended = time.perf_counter()
            row["seconds"] = round(ended - started, 2)
            if loaded_at is not None:
                row["load_seconds"] = round(loaded_at - started, 2)
                row["measure_seconds"] = round(ended - loaded_at, 2)
        return row

    def _shapes_within(
        self, client: EngineClient, conversation: str, deadlines: tuple[float, ...]
    ) -> tuple[list[ShapeResult], list[float], int | None]:
        """The shapes, the seconds at which each was done, and the index of the first one not
        done by its deadline (None: all in time). A late one's engine is ended wherever it is
        (a prompt batch too); the next load starts a fresh one."""
        lock = threading.Lock()
        state: dict[str, Any] = {"done": False, "late": None}
        started = time.perf_counter()
        shapes: list[ShapeResult] = []
        ends: list[float] = []
        for index, (pp, tg) in enumerate(self.shapes):
            self._check()
            timer = None
            if index < len(deadlines):
                left = deadlines[index] - (time.perf_counter() - started)
                if left <= 0:
                    return shapes, ends, index

                def trip(index: int = index) -> None:
                    with lock:
                        if not state["done"]:
                            state["late"] = index
                            client.kill()

                timer = threading.Timer(left, trip)
                timer.daemon = True
                state["done"] = False
                timer.start()
            try:
                shapes.append(self._shape(client, conversation, pp, tg))
            except EngineError:
                if state["late"] is None:
                    raise
            finally:
                with lock:
                    state["done"] = True
                if timer is not None:
                    timer.cancel()
            self._check()
            if state["late"] is not None:
                return shapes, ends, state["late"]
            ends.append(time.perf_counter() - started)
        return shapes, ends, None

    def _depth_curve(
        self, client: EngineClient, config: SuiteConfig, reload: bool
    ) -> list[dict[str, Any]]:
        """Decode tok/s of `config` at each of self.depths tokens already in the KV cache:
        [{depth (the prompt's tokens as the engine counted them), tg_tps}]. An engine error
        leaves the curve empty (said in the progress): the configurations' figures stand."""
        self._progress(f"decode speed against context depth, {config.id}:")
        points: list[dict[str, Any]] = []
        try:
            if reload:
                params = config.params(self.base)
                ModelLoader(client, db=self.db, hardware=self._hardware).load(params)
            conversation = uuid.uuid4().hex
            for depth in self.depths:
                self._check()
                done = self._ask(client, conversation, depth, self.depth_tokens)
                m = done.metrics
                points.append(dict(depth=m.prompt_tokens, tg_tps=_rounded(m.tg_tps)))
                self._progress(f"    depth {m.prompt_tokens}: {_fmt(m.tg_tps)} tok/s")
        except EngineError as exc:
            self._check()
            self._progress(f"    failed: {exc}")
            return []
        return points

    def _speculation(self, client: EngineClient, config: SuiteConfig) -> dict[str, Any]:
        """The speculation stage on `config` (speculation_stage.measure_speculation)."""
        drafts = self.drafts
        if drafts is None:
            drafts = []
            if self.db is not None:
                from deskllm.store import ModelLibrary

                drafts = [m.path for m in ModelLibrary(self.db).draft_candidates(self.model_path)]
        self._progress(f"speculative decoding, {config.id}: n-gram drafts"
                       + "".join(f", draft model {Path(d).name}" for d in drafts))  # fmt: skip
        loader = ModelLoader(client, db=self.db, hardware=self._hardware)
        return measure_speculation(client, loader.load, config.params(self.base), drafts,
                                   quick=self.quick, progress=self._progress,
                                   check=self._check)  # fmt: skip

    # Requests -----------------------------------------------------------------------------------
    def _ask(
        self,
        client: EngineClient,
        conversation: str,
        prompt_tokens: int,
        max_tokens: int,
        decode_limit_s: float | None = None,
        first_token_limit_s: float | None = None,
    ) -> Done:
        """One reply to a fresh prompt of about `prompt_tokens` tokens. `decode_limit_s`: cancel
        it that long after its first token (the figures so far are the result);
        `first_token_limit_s`: end the engine if no token has come by then (llama.cpp cannot
        stop inside a prompt batch) and raise NoFirstToken."""
        text = f"Note {uuid.uuid4().hex}. " + self._filler(prompt_tokens)
        sampling = Sampling(temperature=0.0, repeat_penalty=1.0, max_tokens=max_tokens,
                            ignore_eos=True)  # fmt: skip
        lock = threading.Lock()
        state = {"finished": False, "first": False, "killed": False}

        def stop() -> None:
            with lock:  # never a Cancel after this reply ended: it would stop the next one
                if not state["finished"]:
                    client.cancel()

        def kill() -> None:
            with lock:
                if not state["finished"] and not state["first"]:
                    state["killed"] = True
                    client.kill()

        timers: list[threading.Timer] = []

        def start_timer(seconds: float, fn: Callable[[], None]) -> None:
            timer = threading.Timer(seconds, fn)
            timer.daemon = True
            timers.append(timer)
            timer.start()

        started = time.perf_counter()
        reply = client.chat(conversation, [ChatMessage("user", text)], sampling)
        try:
            if first_token_limit_s is not None:
                start_timer(first_token_limit_s, kill)
            for event in reply.events():
                first = isinstance(event, TextDelta) or (
                    isinstance(event, Metrics) and event.generated_tokens > 0
                )
                if first and not state["first"]:
                    with lock:
                        state["first"] = True
                    if decode_limit_s is not None:
                        start_timer(decode_limit_s, stop)
        finally:
            with lock:
                state["finished"] = True
            for timer in timers:
                timer.cancel()
        self._check()
        if state["killed"]:
            raise NoFirstToken(time.perf_counter() - started)
        if reply.done is None:
            raise reply.error or EngineError("the reply ended without a result")
        return reply.done

    def _calibrate(self, client: EngineClient, conversation: str) -> None:
        """Tokens per filler word for this model's tokenizer, and the chat template's own."""
        self._words_per_token, self._overhead_tokens = 1.0, 0.0
        short = self._ask(client, conversation, 40, 1).metrics.prompt_tokens
        long = self._ask(client, conversation, 200, 1).metrics.prompt_tokens
        tokens_per_word = max(0.1, (long - short) / 160)
        self._words_per_token = 1.0 / tokens_per_word
        self._overhead_tokens = max(0.0, short - 40 * tokens_per_word)

    def _filler(self, tokens: int) -> str:
        words = max(1, round((tokens - self._overhead_tokens) * (self._words_per_token or 1.0)))
        return " ".join(_WORDS[i % len(_WORDS)] for i in range(words))

    def _probe(
        self, client: EngineClient, conversation: str, best: ConfigFigures | None
    ) -> ShapeResult:
        """A short prompt and a few tokens: DECODE_WINDOW_S of decoding at most (the engine's
        rate is tokens over the wall-clock time since the first), and, once there is a best
        so far, HOPELESS_FACTOR times its time to first token (FIRST_TOKEN_FLOOR_S at least)
        for the prompt, after which the engine is ended (NoFirstToken). A reply cut off
        before its second token bounds the decode speed: under one token in the time it
        waited for it."""
        limit = None
        if best is not None and best.ttft_s:
            limit = max(FIRST_TOKEN_FLOOR_S, HOPELESS_FACTOR * best.ttft_s)
        started = time.perf_counter()
        done = self._ask(client, conversation, PROBE_PROMPT_TOKENS, PROBE_TOKENS,
                         decode_limit_s=DECODE_WINDOW_S, first_token_limit_s=limit)  # fmt: skip
        elapsed = time.perf_counter() - started
        result = _shape_result(done)
        if result.tg_tps is None:
            waited = elapsed - (done.metrics.ttft_s or 0.0)
            result = replace(result, tg_tps=1.0 / max(waited, 0.1), bound=True)
        return result

    def _shape(self, client: EngineClient, conversation: str, pp: int, tg: int) -> ShapeResult:
        result = _shape_result(self._ask(client, conversation, pp, tg))
        self._progress(
            f"    pp {result.prompt_tokens} + tg {result.generated_tokens}: "
            f"{_fmt(result.pp_tps)} / {_fmt(result.tg_tps)} tok/s, TTFT {_fmt(result.ttft_s, 2)} s"
        )
        return result

    def _check(self) -> None:
        if self._cancelled.is_set():
            raise SuiteCancelled("the benchmark was cancelled")


def _probe() -> HardwareReport:
    from deskllm.hardware import probe_hardware

    return probe_hardware(bandwidth=True)  # the ceiling needs the (cached) bandwidth


def _shape_result(done: Done) -> ShapeResult:
    m = done.metrics
    return ShapeResult(m.prompt_tokens, m.generated_tokens, m.pp_tps, m.tg_tps, m.ttft_s,
                       m.joules_per_token, energy_source=m.energy_source)  # fmt: skip


def _mean(values: list[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return statistics.fmean(known) if known else None


def _energy_source(shapes: list[ShapeResult]) -> str | None:
    """The shapes' energy source: a sensor's when every measured shape had one."""
    sources = {s.energy_source for s in shapes if s.joules_per_token is not None}
    if not sources:
        return None
    return "estimated" if "estimated" in sources or None in sources else sources.pop()


def _aggregate(shapes: list[ShapeResult]) -> dict[str, Any]:
    pp = _mean([s.pp_tps for s in shapes])
    tg = _mean([s.tg_tps for s in shapes])
    ttft = _mean([s.ttft_s for s in shapes])
    return dict(
        pp_tps=_rounded(pp),
        tg_tps=_rounded(tg),
        ttft_s=_rounded(ttft, 3),
        score=score(pp, tg, ttft),
        joules_per_token=_rounded(_mean([s.joules_per_token for s in shapes]), 4),
        shapes=[
            dict(prompt_tokens=s.prompt_tokens, generated_tokens=s.generated_tokens,
                 pp_tps=_rounded(s.pp_tps), tg_tps=_rounded(s.tg_tps),
                 ttft_s=_rounded(s.ttft_s, 3))
            for s in shapes
        ],
    )  # fmt: skip


def _rounded(value: float | None, digits: int = 2) -> float | None:
    return round(value, digits) if value is not None else None


def _fmt(value: float | None, digits: int = 1) -> str:
    return "?" if value is None else f"{value:.{digits}f}"


def _summary(row: dict[str, Any]) -> str:
    if row["status"] == "abandoned":
        split = ""
        if row.get("load_seconds") is not None:
            split = f": load {row['load_seconds']:.1f} s, measuring {row['measure_seconds']:.1f} s"
        return f"{row['abandoned']} ({row['seconds']:.1f} s{split})"
    if row["status"] == "failed":
        return f"failed: {row['error']}"
    share = f", {row['ceiling_share']:.0%} of the ceiling" if row.get("ceiling_share") else ""
    return (
        f"prompt {_fmt(row['pp_tps'])} tok/s, decode {_fmt(row['tg_tps'])} tok/s{share}, "
        f"TTFT {_fmt(row['ttft_s'], 2)} s, score {_fmt(row['score'])} ({row['seconds']:.1f} s)"
    )
