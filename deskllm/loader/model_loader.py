"""ModelLoader: the one way any part of the app loads a model.

    loader = ModelLoader(client, db=db)
    loaded = loader.load(params_from_settings(settings, path), on_progress)

Each load: read the header (a bad file is refused before llama.cpp sees it) → fill the
defaults that depend on the model and machine → plan against this machine's hardware report,
corrected by what earlier loads measured (automatic GPU offload takes the planner's layers; a
load that cannot fit is refused with the numbers) → decide llama.cpp's extra buffer types
with the crash-safe probe → EngineClient.load → record how far the estimate was from what
llama.cpp allocated, so the next plan is closer.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

from sqlite_utils import Database

from deskllm.engine.client import EngineClient
from deskllm.engine.domain import Loaded, LoadParams
from deskllm.engine.errors import EngineError, ErrorKind
from deskllm.engine.load_defaults import resolve_params
from deskllm.gguf.header import GgufError, GgufHeader, read_header
from deskllm.hardware.report import HardwareReport
from deskllm.planner.fit import FitPlan, FitPlanner
from deskllm.planner.memory import Corrections

log = logging.getLogger("deskllm.loader")

HardwareSource = Callable[[], HardwareReport | None]


@dataclass(frozen=True)
class LoadCheck:
    """What the loader decided before loading: the params sent to the engine, the planner's
    plan for them (None without a hardware report) and the calibration it applied."""

    params: LoadParams
    plan: FitPlan | None
    corrections: Corrections
    measured: str | None = None  # why a benchmark's configuration was taken (gpu_auto)
    speculation: str | None = None  # what Automatic speculation took from the benchmark, why


def _this_machine_hardware() -> HardwareReport | None:
    from deskllm.planner.machine import current_hardware

    return current_hardware()


class ModelLoader:
    """Loads models into one EngineClient. `db` (the app's database, opened in the calling
    thread) holds the calibration records: without it loads are neither recorded nor
    corrected. `hardware` plans for another report than this machine's (tests, profiles).
    `slots`: sequences the context holds (the engine's slots), each of `n_ctx` tokens, so the
    plan counts `slots` × n_ctx of KV cache, and the engine is loaded with that many (None:
    the client's own slot count).
    """

    def __init__(
        self,
        client: EngineClient,
        *,
        db: Database | None = None,
        hardware: HardwareReport | HardwareSource | None = None,
        probe_model: str | None = None,
        slots: int | None = None,
        reserve: Callable[[], int] | None = None,
    ) -> None:
        self.client = client
        # RAM that other engines of the app will take beside this model (the documents'
        # embedding models that are not running yet): the plan leaves it free.
        self.reserve = reserve
        self._slots = slots
        self.db = db
        if isinstance(hardware, HardwareReport):
            report = hardware
            self._hardware: HardwareSource = lambda: report
        else:
            self._hardware = hardware or _this_machine_hardware
        self._probe_model = probe_model
        self.last_check: LoadCheck | None = None

    @property
    def slots(self) -> int:
        return self._slots if self._slots is not None else getattr(self.client, "n_slots", 1)

    @slots.setter
    def slots(self, slots: int) -> None:
        self._slots = slots

    def check(self, params: LoadParams, header: GgufHeader | None = None) -> LoadCheck:
        """Resolve `params` for this model and machine without loading: raises EngineError
        (BAD_MODEL, TOO_BIG) when the load would fail or cannot fit."""
        path = Path(params.model_path)
        auto_threads = params.n_threads <= 0
        if header is None:
            try:
                header = read_header(path)
            except GgufError as exc:
                raise EngineError(str(exc), ErrorKind.BAD_MODEL) from None
        params = resolve_params(replace(params, model_path=str(path)), header.context_length)
        if params.use_extra_bufts is None:
            params = replace(params, use_extra_bufts=self._extra_bufts_work(params))
        report = self._reserved(self._hardware())
        if report is None:
            return LoadCheck(replace(params, gpu_auto=False), None, Corrections())
        speculation, beside = None, None
        if params.speculation == "auto":
            params, speculation, beside = self._measured_speculation(params, report)
        if params.draft_model_path:
            report = beside or self._beside_draft(report, params)
        corrections = self._corrections(header.architecture)
        planner = FitPlanner(
            report, use_extra_bufts=params.use_extra_bufts, corrections=lambda _a: corrections
        )
        plan = planner.plan(header, params.n_ctx * self.slots, params.kv_type)
        measured = None
        if params.gpu_auto:
            measured = self._measured(
                params, auto_threads, lambda p: self._refusal(planner, header, p) is None
            )
            if measured is not None:
                params = measured[0]
            else:
                layers = plan.n_gpu_layers if plan.fit in ("gpu", "partial") else 0
                params = replace(params, n_gpu_layers=layers, gpu_auto=False)
        reason = self._refusal(planner, header, params)
        if reason:
            raise EngineError(f"{path.name} {reason}", ErrorKind.TOO_BIG)
        return LoadCheck(params, plan, corrections, measured[1] if measured else None,
                         speculation)  # fmt: skip

    def slots_that_fit(self, params: LoadParams, most: int) -> int:
        """The most slots of `params.n_ctx` tokens each (1 to `most`) whose KV caches fit beside
        the model the way one slot's does: no fewer layers on the GPU, and not refused. 1
        without a hardware report or when even one does not fit (the load says why)."""
        try:
            header = read_header(Path(params.model_path))
        except GgufError as exc:
            raise EngineError(str(exc), ErrorKind.BAD_MODEL) from None
        params = resolve_params(params, header.context_length)
        report = self._reserved(self._hardware())
        if report is None or report.memory.available_bytes <= 0:
            return 1
        corrections = self._corrections(header.architecture)
        planner = FitPlanner(report, use_extra_bufts=bool(params.use_extra_bufts),
                             corrections=lambda _a: corrections)  # fmt: skip
        one = planner.plan(header, params.n_ctx, params.kv_type)
        for n in range(most, 1, -1):
            plan = planner.plan(header, params.n_ctx * n, params.kv_type)
            same_place = plan.fit == one.fit and plan.n_gpu_layers >= one.n_gpu_layers
            layers = plan.n_gpu_layers if params.gpu_auto else params.n_gpu_layers
            refused = planner.refusal(header, replace(params, n_ctx=params.n_ctx * n,
                                                      n_gpu_layers=layers))  # fmt: skip
            if same_place and refused is None:
                return n
        return 1

    def _beside_draft(self, report: HardwareReport, params: LoadParams) -> HardwareReport:
        """The machine as the model sees it once its draft model is loaded (on the CPU, a pool
        as large as the model's): less the draft's RAM. Raises TOO_BIG, with the numbers,
        where the draft alone does not fit."""
        path = Path(params.draft_model_path)
        try:
            header = read_header(path)
        except GgufError as exc:
            raise EngineError(f"the draft model: {exc}", ErrorKind.BAD_MODEL) from None
        corrections = self._corrections(header.architecture)
        planner = FitPlanner(report, use_extra_bufts=bool(params.use_extra_bufts),
                             corrections=lambda _a: corrections)  # fmt: skip
        draft = replace(params, model_path=str(path), n_gpu_layers=0, gpu_auto=False,
                        kv_type="f16", flash_attn=False)  # its context's: llama.cpp's defaults
        reason = self._refusal(planner, header, draft)
        if reason:
            raise EngineError(f"the draft model {path.name} {reason}", ErrorKind.TOO_BIG)
        needs = planner.estimate(header, params.n_ctx * self.slots).ram_bytes
        memory = report.memory
        if memory.available_bytes <= 0:
            return report
        left = max(1, memory.available_bytes - needs)
        return replace(report, memory=replace(memory, available_bytes=left))

    def _measured_speculation(
        self, params: LoadParams, report: HardwareReport
    ) -> tuple[LoadParams, str | None, HardwareReport | None]:
        """Automatic speculation as `deskllm bench --suite` chose it for this model file on
        this machine and build (speculation_stage): a draft model, n-gram drafts while they
        pay ("auto" as it is) or none, and why; with a draft, the machine as the model sees it
        beside it (_beside_draft, not worked out again). Without a measurement, or where the
        measured draft is gone or no longer fits beside the model, "auto" stays n-gram
        drafts."""
        from deskllm.planner.measured_configs import current_keys, stored_suite

        if self.db is None:
            return params, None, None
        try:
            result = stored_suite(self.db, current_keys(), params.model_path)
            chosen = ((result or {}).get("speculation") or {}).get("chosen")
        except Exception:  # a damaged record must not stop a load
            log.warning("benchmark results unreadable; speculation as without them",
                        exc_info=True)  # fmt: skip
            return params, None, None
        if not chosen:
            return params, None, None
        why = f"{chosen['label']} ({chosen['reason']}; deskllm bench --suite)"
        if chosen["mode"] == "off":
            return replace(params, speculation="off"), why, None
        draft = chosen.get("draft")
        if chosen["mode"] != "draft" or not draft:
            return params, why, None
        if not Path(draft).is_file():
            return params, f"n-gram drafts: the measured draft model {draft} is gone", None
        with_draft = replace(params, speculation="draft", draft_model_path=draft)
        try:
            beside = self._beside_draft(report, with_draft)
        except EngineError as exc:
            return params, f"n-gram drafts: {exc}", None
        return with_draft, why, beside

    def _reserved(self, report: HardwareReport | None) -> HardwareReport | None:
        reserve = self.reserve() if self.reserve is not None else 0
        if report is None or reserve <= 0 or report.memory.available_bytes <= 0:
            return report
        available = max(1, report.memory.available_bytes - reserve)
        return replace(report, memory=replace(report.memory, available_bytes=available))

    def _refusal(self, planner: FitPlanner, header: GgufHeader, params: LoadParams) -> str | None:
        if planner.hardware.memory.available_bytes <= 0:
            return None  # nothing known to check against
        return planner.refusal(header, replace(params, n_ctx=params.n_ctx * self.slots))

    def _measured(
        self, params: LoadParams, auto_threads: bool, fits: Callable[[LoadParams], bool]
    ) -> tuple[LoadParams, str] | None:
        """The fastest configuration `deskllm bench --suite` measured for this model file on
        this machine and engine build that fits now, as params, and why; None without one.
        Threads come from it only when the user left them automatic."""
        if self.db is None or params.vulkan_devices is not None or params.cuda_devices:
            return None  # no store, or the user named the device
        from deskllm.planner.bench_choice import choose
        from deskllm.planner.measured_configs import (
            cuda_devices_of,
            current_keys,
            figures,
            stored_suite,
            vulkan_devices_of,
        )

        try:
            result = stored_suite(self.db, current_keys(), params.model_path)
        except Exception:  # a damaged record must not stop a load: plan as without one
            log.warning("benchmark results unreadable; planning without them", exc_info=True)
            return None
        if result is None:
            return None
        by_id = {c["id"]: c for c in result["configs"]}

        def as_params(config_id: str) -> LoadParams:
            config = by_id[config_id]
            return replace(
                params,
                n_gpu_layers=config["n_gpu_layers"],
                vulkan_devices=vulkan_devices_of(config),
                cuda_devices=cuda_devices_of(config),
                n_threads=config["n_threads"] if auto_threads else params.n_threads,
                adapt_threads=params.adapt_threads or auto_threads,
                gpu_auto=False,
            )

        metric = params.auto_metric if params.auto_metric in ("decode", "prompt") else "decode"
        chosen = choose(figures(result), metric, lambda c: fits(as_params(c.id)))
        if chosen is None:
            return None
        return as_params(chosen[0].id), chosen[1]

    def load(
        self, params: LoadParams, on_progress: Callable[[float], None] | None = None
    ) -> Loaded:
        """Check, load and record (see the module docstring). Raises EngineError."""
        try:
            header = read_header(Path(params.model_path))
        except GgufError as exc:
            raise EngineError(str(exc), ErrorKind.BAD_MODEL) from None
        check = self.check(params, header)
        self.last_check = check
        loaded = self.client.load(check.params, on_progress, n_slots=self.slots)
        self._record(header, check.params, loaded)
        return loaded

    def _extra_bufts_work(self, params: LoadParams) -> bool:
        from deskllm.catalog.starter import starter_model_path
        from deskllm.engine.extra_bufts_probe import extra_bufts_work

        starter = self._probe_model or starter_model_path()
        return extra_bufts_work(str(starter) if starter else params.model_path)

    def _corrections(self, architecture: str) -> Corrections:
        if self.db is None:
            return Corrections()
        from deskllm.planner.calibration import corrections_for, this_machine

        try:
            return corrections_for(self.db, this_machine(), architecture)
        except Exception:  # a damaged record must not stop a load: plan uncorrected
            log.warning("calibration records unreadable; planning uncorrected", exc_info=True)
            return Corrections()

    def _record(self, header: GgufHeader, params: LoadParams, loaded: Loaded) -> None:
        """Tell the planner how far its estimate was from this load; never fails the load."""
        if self.db is None:
            return
        from deskllm.planner.calibration import record_load

        try:
            record_load(self.db, header, params, loaded)
        except Exception:
            log.warning("load of %s not recorded for calibration", loaded.model_path,
                        exc_info=True)  # fmt: skip
