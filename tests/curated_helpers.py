"""A curated-catalog repo on the local fake Hub (tests/hub_server.py), for refresh tests."""

from __future__ import annotations

REPO = "bartowski/Qwen2.5-0.5B-Instruct-GGUF"
STEM = "Qwen2.5-0.5B-Instruct"


def serve_curated_repo(hub, quant_ladder) -> None:
    """One curated repo on the fake Hub with two of its quants (the starter model's ladder
    under the curated file names) and a README."""
    hub.add_repo(REPO, {
        f"{STEM}-Q4_K_M.gguf": quant_ladder["Q4_K_M"],
        f"{STEM}-Q8_0.gguf": quant_ladder["Q8_0"],
        "README.md": b"# Qwen2.5 0.5B Instruct GGUF\n",
    })  # fmt: skip
