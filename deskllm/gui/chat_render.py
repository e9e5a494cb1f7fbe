"""Conversation → Markdown for the chat view (Qt renders the Markdown itself)."""

from __future__ import annotations

from deskllm.store.conversations import Message

_ROLE_TITLES = {"user": "You", "assistant": "Assistant", "system": "System"}
_STATUS_NOTES = {
    "interrupted": "*(interrupted — the reply was stopped or the engine ended; regenerate to "
    "try again)*",
    "error": "*(error)*",
}


def message_markdown(message: Message, streaming_text: str | None = None) -> str:
    text = streaming_text if streaming_text is not None else message.content
    parts = [f"**{_ROLE_TITLES.get(message.role, message.role)}**", "", text or "…"]
    note = _STATUS_NOTES.get(message.status)
    if streaming_text is None and note:
        error = message.metrics.get("error")
        parts += ["", note + (f" {error}" if error else "")]
    if message.metrics.get("dropped_messages"):
        parts += ["", f"*({message.metrics['dropped_messages']} old messages were left out to "
                  "fit the context)*"]
    return "\n".join(parts)


def conversation_markdown(messages: list[Message], streaming: dict[int, str]) -> str:
    """`streaming` maps a message id to the text received so far for it."""
    blocks = [message_markdown(m, streaming.get(m.id)) for m in messages if m.role != "system"]
    return "\n\n---\n\n".join(blocks)


def metrics_line(metrics: dict) -> str:
    """One line of figures for a reply or the live status bar."""
    parts = []
    if metrics.get("tg_tps"):
        parts.append(f"{metrics['tg_tps']:.1f} tok/s")
    if metrics.get("ttft_s") is not None:
        parts.append(f"TTFT {metrics['ttft_s'] * 1000:.0f} ms")
    if metrics.get("prompt_tokens"):
        parts.append(
            f"prompt {metrics['prompt_tokens']} ({metrics.get('cached_tokens', 0)} cached, "
            f"{metrics.get('evaluated_tokens', 0)} evaluated)"
        )
    if metrics.get("n_ctx"):
        parts.append(f"context {metrics.get('n_past', 0)}/{metrics['n_ctx']}")
    if metrics.get("rss_bytes"):
        parts.append(f"RAM {metrics['rss_bytes'] / 2**20:.0f} MiB")
    if metrics.get("vram_bytes"):
        parts.append(f"VRAM {metrics['vram_bytes'] / 2**20:.0f} MiB")
    if metrics.get("device"):
        parts.append(metrics["device"])
    return " · ".join(parts)
