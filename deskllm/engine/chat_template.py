"""Render a model's chat template safely.

Templates are code from the internet (CVE-2024-34359 was a template escaping Jinja). They run in
Jinja's immutable sandbox, with a time limit and an output size limit; a template that fails
falls back to ChatML with a warning instead of breaking the chat.
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass
from typing import Any

from jinja2 import TemplateError
from jinja2.exceptions import SecurityError
from jinja2.sandbox import ImmutableSandboxedEnvironment

from deskllm.engine.protocol import ChatMessage

MAX_OUTPUT_CHARS = 4_000_000
MAX_RENDER_S = 2.0

CHATML = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)


class TemplateRefused(ValueError):
    """The template tried something the sandbox forbids; it is never used."""


class _Deadline(Exception):
    pass


@dataclass(frozen=True)
class RenderedPrompt:
    text: str
    source: str  # "model" | "fallback"
    warning: str | None


def _raise_exception(message: str) -> None:
    raise TemplateError(message)


class _LimitedSandbox(ImmutableSandboxedEnvironment):
    """The immutable sandbox, plus size checks on `*` and `**`: `{{ 'x' * 10**10 }}` would
    otherwise allocate gigabytes before the output limit could see it."""

    intercepted_binops = frozenset(["*", "**"])

    def call_binop(self, context: Any, operator: str, left: Any, right: Any) -> Any:
        if operator == "**" and isinstance(right, int) and abs(right) > 64:
            raise TemplateError(f"exponent {right} is too large for a chat template")
        if operator == "*":
            for seq, times in ((left, right), (right, left)):
                if (
                    isinstance(seq, str | list | tuple)
                    and isinstance(times, int)
                    and len(seq) * times > MAX_OUTPUT_CHARS
                ):
                    raise TemplateError("a repeated string or list is too large")
        return super().call_binop(context, operator, left, right)


class ChatTemplate:
    """A compiled chat template with a ChatML fallback."""

    def __init__(self, source: str | None, bos_token: str = "", eos_token: str = "") -> None:
        self.env = _LimitedSandbox(
            trim_blocks=True, lstrip_blocks=True, autoescape=False
        )
        self.env.globals["raise_exception"] = _raise_exception
        self.env.filters["tojson"] = _tojson
        self.bos_token = bos_token
        self.eos_token = eos_token
        self.warning: str | None = None
        self.template = None
        self.fallback = self.env.from_string(CHATML)
        if not source:
            self.warning = "the model has no chat template; using ChatML"
            return
        try:
            self.template = self.env.from_string(source)
        except TemplateError as exc:
            self.warning = f"the model's chat template does not compile ({exc}); using ChatML"

    @property
    def source(self) -> str:
        return "model" if self.template is not None else "fallback"

    def render(self, messages: list[ChatMessage] | tuple[ChatMessage, ...]) -> RenderedPrompt:
        context = {
            "messages": [{"role": m.role, "content": m.content} for m in messages],
            "add_generation_prompt": True,
            "bos_token": self.bos_token,
            "eos_token": self.eos_token,
        }
        if self.template is not None:
            try:
                text = _render_limited(self.template, context)
                return RenderedPrompt(text, "model", None)
            except SecurityError as exc:
                raise TemplateRefused(
                    f"the model's chat template tried to escape the sandbox ({exc}); it was not run"
                ) from None
            except TemplateRefused:
                raise
            except _Deadline:
                warning = f"the chat template ran longer than {MAX_RENDER_S:.0f} s; using ChatML"
            except Exception as exc:  # a template is untrusted code: any failure means fallback
                warning = f"the chat template failed ({type(exc).__name__}: {exc}); using ChatML"
        else:
            warning = self.warning
        return RenderedPrompt(_render_limited(self.fallback, context), "fallback", warning)


def _tojson(value: Any, indent: int | None = None) -> str:
    import json

    return json.dumps(value, indent=indent, ensure_ascii=False)


def _render_limited(template: Any, context: dict[str, Any]) -> str:
    """Render with a wall-clock limit (a trace hook checks the deadline in template code) and an
    output-size limit, so a looping or exploding template cannot hang or flood the engine."""
    deadline = time.monotonic() + MAX_RENDER_S
    size = 0
    parts = []

    def tracer(frame: Any, event: str, arg: Any) -> Any:
        if time.monotonic() > deadline:
            raise _Deadline()
        return tracer

    previous = sys.gettrace()
    sys.settrace(tracer)
    try:
        for chunk in template.generate(**context):
            size += len(chunk)
            if size > MAX_OUTPUT_CHARS:
                raise TemplateError(f"output longer than {MAX_OUTPUT_CHARS} characters")
            parts.append(chunk)
    finally:
        sys.settrace(previous)
    return "".join(parts)
