"""The engine process's environment for a load: which devices the backends may see. ggml reads
these once per process, so a change needs a fresh worker (EngineClient._ensure_process)."""

from __future__ import annotations

from deskllm.engine.domain import LoadParams


def device_env(params: LoadParams) -> dict[str, str]:
    """GGML_VK_VISIBLE_DEVICES for the named Vulkan devices (CPU-type ones included when
    named), CUDA_VISIBLE_DEVICES for the named CUDA ones; nothing for ggml's own choice."""
    env: dict[str, str] = {}
    if params.vulkan_devices:
        env["GGML_VK_VISIBLE_DEVICES"] = params.vulkan_devices
    if params.cuda_devices:
        env["CUDA_VISIBLE_DEVICES"] = params.cuda_devices
    return env
