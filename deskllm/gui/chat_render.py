"""Text for the chat view, Qt-free: a message split into prose and fenced code blocks (Qt
renders the prose Markdown itself), the notes under a message and its figures."""

from __future__ import annotations

import re
from dataclasses import dataclass

from deskllm.store.conversations import Message
from deskllm.store.export import DECISION_WORDS

ROLE_TITLES = {"user": "You", "assistant": "Assistant", "system": "System", "tool": "Tool"}
# CommonMark: a fence is 3+ backticks or tildes, indented by at most 3 spaces.
_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})\s*([^`\s]*)[^`]*$")


@dataclass(frozen=True)
class Block:
    """A run of a message: "prose" (Markdown) or "code" (the text inside a fence)."""

    kind: str
    text: str
    lang: str = ""


def split_blocks(text: str) -> list[Block]:
    """Prose and fenced code blocks in order. A fence still open at the end (a reply being
    written) is a code block up to the end, so code shows as code while it streams."""
    blocks: list[Block] = []
    prose: list[str] = []
    code: list[str] | None = None
    fence, lang = "", ""
    for line in text.split("\n"):
        if code is None:
            match = _FENCE.match(line)
            if match:
                _flush_prose(blocks, prose)
                fence, lang, code = match.group(1), match.group(2), []
            else:
                prose.append(line)
        elif _closes(line, fence):
            blocks.append(Block("code", "\n".join(code), lang))
            code = None
        else:
            code.append(line)
    if code is not None:
        blocks.append(Block("code", "\n".join(code), lang))
    _flush_prose(blocks, prose)
    return blocks


def _closes(line: str, fence: str) -> bool:
    stripped = line.strip()
    return (
        len(line) - len(line.lstrip(" ")) <= 3
        and stripped.startswith(fence)
        and set(stripped) == {fence[0]}
    )


def _flush_prose(blocks: list[Block], lines: list[str]) -> None:
    """Prose goes in one block per paragraph: while a reply streams only its last paragraph
    changes, so only that one is laid out again, however long the reply grows. An indented
    paragraph (a list item's continuation) stays with the one before it."""
    paragraphs: list[str] = []
    for part in re.split(r"\n[ \t]*\n", "\n".join(lines)):
        part = part.strip("\n")
        if not part.strip():
            continue
        if paragraphs and part[:1] in (" ", "\t"):
            paragraphs[-1] += "\n\n" + part
        else:
            paragraphs.append(part)
    blocks.extend(Block("prose", p) for p in paragraphs)
    lines.clear()


def status_note(message: Message) -> str:
    """Why a reply is not complete, in plain words ("" when it is)."""
    error = message.metrics.get("error")
    if message.status == "interrupted" and message.metrics.get("finish_reason") == "cancelled":
        # The user's own Stop: not an accident ("Interrupted" is kept for crashes and exits).
        if not message.content:
            return "Stopped before the reply began (while the prompt was read). Regenerate it."
        return "Stopped: you stopped the reply here. Continue it or regenerate it."
    if message.status == "interrupted":
        why = f" ({error})" if error else ""
        return f"Interrupted{why}: the reply was cut off. Continue it or regenerate it."
    if message.status == "error":
        return f"Error: {error or 'the reply failed'}"
    return ""


def dropped_note(metrics: dict) -> str:
    """The note shown when old turns were left out to fit the context ("" when none were)."""
    dropped = metrics.get("dropped_messages") or 0
    if not dropped:
        return ""
    words = "1 older message was" if dropped == 1 else f"{dropped} older messages were"
    size = f" of {metrics['n_ctx']} tokens" if metrics.get("n_ctx") else ""
    return f"{words} left out to fit the context{size}; the model did not see them."


def tools_note(metrics: dict) -> str:
    """MCP servers that could not start for this turn, and a turn stopped at the step limit
    ("" when neither)."""
    failures = metrics.get("tool_failures") or {}
    notes = [f"The tool server {name} could not start ({why}); the reply was written without "
             "its tools." for name, why in failures.items()]  # fmt: skip
    if steps := metrics.get("tool_step_limit"):
        notes.append(f"The model kept calling tools: the turn was stopped after {steps} "
                     "replies (Settings: tool steps per turn).")  # fmt: skip
    return "\n".join(notes)


def tool_result_title(metrics: dict) -> str:
    """The line above a tool's result: the tool, its server, what the user decided, how long
    it took and whether it failed or was cut."""
    where = f" ({metrics['server']})" if metrics.get("server") else ""
    parts = [f"{metrics.get('tool', 'tool')}{where}"]
    if decision := DECISION_WORDS.get(metrics.get("decision") or ""):
        parts.append(decision)
    if metrics.get("decision") != "deny":
        if metrics.get("is_error"):
            parts.append("failed")
        if metrics.get("seconds") is not None:
            parts.append(f"{metrics['seconds']:.2f} s")
        if metrics.get("truncated"):
            parts.append("output cut")
    return "Result of " + " · ".join(parts)


# Why a routed reply went remote, in words (the router's route_reason).
ROUTE_REASONS = {
    "asked": "you asked for it",
    "context": "the conversation did not fit the local model's context",
    "uncertain": "the local model was unsure",
    "local_failed": "the local model failed",
}


def route_note(metrics: dict, model: str | None = None) -> str:
    """Where a reply was written when it left this computer: the endpoint's name, the model
    (the router's figures name it, else the message's `model`) and why; a local reply that
    fell back from a remote one says that ("" otherwise)."""
    engine = metrics.get("engine")
    if engine and engine != "local":
        answered = metrics.get("model") or model
        model = f" ({answered})" if answered else ""
        reason = metrics.get("route_reason")
        why = f": {ROUTE_REASONS.get(reason, reason)}" if reason else ""
        return f"Sent to remote endpoint {engine}{model}{why}."
    if metrics.get("route_notice"):
        return f"Answered on this computer: {metrics['route_notice']}."
    return ""


def metrics_line(metrics: dict) -> str:
    """One line of figures for a finished reply."""
    parts = []
    if metrics.get("generated_tokens"):
        parts.append(f"{metrics['generated_tokens']} tokens")
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
    if metrics.get("device"):
        parts.append(metrics["device"])
    if metrics.get("joules_per_token") is not None:
        parts.append(energy_per_token(metrics))
    return " · ".join(parts)


def energy_per_token(metrics: dict) -> str:
    """The energy per token as "0.42 J/token", with "est." when the joules come from the
    user's watts figure rather than a counter ("" when unknown)."""
    per_token = metrics.get("joules_per_token")
    if per_token is None:
        return ""
    estimated = " est." if metrics.get("energy_source") == "estimated" else ""
    return f"{per_token:.3g} J/token{estimated}"


def metrics_details(metrics: dict) -> str:
    """Every figure of a finished reply, one per line (the tooltip of its figures line)."""
    rows = [
        ("Finish reason", metrics.get("finish_reason")),
        ("Generated", _fmt(metrics.get("generated_tokens"), "{} tokens")),
        ("Decode speed", _fmt(metrics.get("tg_tps"), "{:.1f} tokens/s")),
        ("Time to first token", _fmt(metrics.get("ttft_s"), "{:.3f} s")),
        ("Prompt", _fmt(metrics.get("prompt_tokens"), "{} tokens")),
        ("  from the cache", _fmt(metrics.get("cached_tokens"), "{} tokens")),
        ("  evaluated", _fmt(metrics.get("evaluated_tokens"), "{} tokens")),
        ("  cache restored from", metrics.get("restored_from")),
        ("Prompt speed", _fmt(metrics.get("pp_tps"), "{:.0f} tokens/s")),
        ("Inter-token p50 / p95", _latency(metrics)),
        ("Context", _context(metrics)),
        ("Engine RAM", _fmt(metrics.get("rss_bytes"), "{}", mib)),
        ("VRAM", _fmt(metrics.get("vram_bytes"), "{}", mib)),
        ("Device", metrics.get("device")),
        ("Engine", metrics.get("engine")),
        ("Route", metrics.get("route_reason")),
        ("Energy", _energy(metrics)),
        ("  per token", energy_per_token(metrics)),
        ("  power prompt / decode", _power(metrics)),
    ]
    lines = [f"{name}: {value}" for name, value in rows if value not in (None, "")]
    lines += [f"Warning: {w}" for w in metrics.get("warnings") or ()]
    return "\n".join(lines)


def mib(value: float) -> str:
    return f"{value / 2**20:,.0f} MiB"


def _fmt(value, pattern: str, convert=None) -> str | None:
    if value is None:
        return None
    return pattern.format(convert(value) if convert else value)


def _latency(metrics: dict) -> str | None:
    p50, p95 = metrics.get("itl_p50_ms"), metrics.get("itl_p95_ms")
    return None if p50 is None or p95 is None else f"{p50:.1f} / {p95:.1f} ms"


def _context(metrics: dict) -> str | None:
    if not metrics.get("n_ctx"):
        return None
    return f"{metrics.get('n_past', 0)} of {metrics['n_ctx']} tokens"


def _energy(metrics: dict) -> str | None:
    if metrics.get("joules") is None:
        return None
    source = metrics.get("energy_source")
    how = "estimated from the watts in settings" if source == "estimated" else f"measured, {source}"
    return f"{metrics['joules']:.3g} J ({how})"


def _power(metrics: dict) -> str | None:
    prompt, decode = metrics.get("watts_prompt"), metrics.get("watts_decode")
    if prompt is None and decode is None:
        return None
    return " / ".join("–" if w is None else f"{w:.1f} W" for w in (prompt, decode))
