"""What to tell a user before a chat with tools."""

from __future__ import annotations

SMALL_FOR_TOOLS = 3e9  # parameters; below it, models seldom pick tools and arguments well


def small_model_note(model_path: str) -> str | None:
    """Said before a chat with tools on a small model: it may call the wrong tool or none."""
    from deskllm.gguf.header import GgufError, read_header

    try:
        n = read_header(model_path).n_params
    except GgufError:
        return None
    if not n or n >= SMALL_FOR_TOOLS:
        return None
    size = f"{n / 1e9:.1f}B" if n >= 1e9 else f"{n / 1e6:.0f}M"
    return (f"this model has {size} parameters; models this small often call the wrong tool, "
            "with wrong arguments, or none (7B and larger do much better)")
