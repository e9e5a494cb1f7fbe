"""Presets for the servers people point deskllm at: each is only a default address and a
note. Anything that speaks OpenAI's /v1/chat/completions works with the generic one."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class EndpointPreset:
    name: str
    default_url: str  # "" when there is no sensible default (the user gives one)
    notes: str
    # Whether the server takes llama.cpp's sampling fields (top_k, min_p, repeat_penalty)
    # besides OpenAI's; OpenAI's own API refuses fields it does not know.
    sampling_extensions: bool = True


PRESETS: dict[str, EndpointPreset] = {
    p.name: p
    for p in (
        EndpointPreset(
            "llama-server",
            "http://127.0.0.1:8080/v1",
            "llama.cpp's llama-server (-np for parallel slots; /health is 503 while loading)",
        ),
        EndpointPreset(
            "vllm", "http://127.0.0.1:8000/v1", "vLLM's `vllm serve` (--api-key to require a key)"
        ),
        EndpointPreset(
            "ollama",
            "http://127.0.0.1:11434/v1",
            "Ollama's OpenAI-compatible /v1 routes (no key needed)",
        ),
        EndpointPreset("lmstudio", "http://127.0.0.1:1234/v1", "LM Studio's local server"),
        EndpointPreset(
            "deskllm",
            "http://127.0.0.1:8383/v1",
            "another machine's `deskllm serve` (--api-key off loopback)",
        ),
        EndpointPreset(
            "openai", "", "any OpenAI-compatible server; give its URL", sampling_extensions=False
        ),
    )  # fmt: skip
}
DEFAULT_PRESET = "openai"
