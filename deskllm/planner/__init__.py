"""Memory estimates per quantization, fit classes, recommendations and calibration. Qt-free.

shape = model_shape(read_header(path))            # or a remote header
planner = FitPlanner(probe_hardware())
plan = planner.plan(shape, n_ctx=4096, kv_type="f16")
plan.fit, plan.n_gpu_layers, plan.estimate.ram_bytes, plan.tps_ceiling
"""

from deskllm.planner.fit import (
    FIT_CLASSES,
    FitPlan,
    FitPlanner,
    GpuTarget,
    LoadSettings,
    QuantPlan,
    Recommendation,
)
from deskllm.planner.memory import (
    Corrections,
    EstimateParams,
    MemoryEstimate,
    MemoryPart,
    estimate_memory,
)
from deskllm.planner.model_shape import ModelShape, model_shape

__all__ = [
    "FIT_CLASSES",
    "Corrections",
    "EstimateParams",
    "FitPlan",
    "FitPlanner",
    "GpuTarget",
    "LoadSettings",
    "MemoryEstimate",
    "MemoryPart",
    "ModelShape",
    "QuantPlan",
    "Recommendation",
    "estimate_memory",
    "model_shape",
]
