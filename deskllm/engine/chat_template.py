"""Render a model's chat template safely.

Templates are code from the internet (CVE-2024-34359 was a template escaping Jinja). They run in
Jinja's immutable sandbox, with a time limit, an output size limit and a size check before every
operation that could allocate past it (template_limits); a template that fails falls back to
ChatML with a warning instead of breaking the chat. One that runs past a limit is refused for
good: it is checked once at load, and each chat turn cannot make it allocate or loop either.
"""

from __future__ import annotations

import datetime
import sys
import time
from dataclasses import dataclass, replace
from typing import Any

from jinja2 import TemplateError
from jinja2.exceptions import SecurityError

from deskllm.engine import template_limits
from deskllm.engine.domain import ChatMessage
from deskllm.engine.template_limits import BoundedSandbox, TemplateLimitError
from deskllm.engine.tool_prompt import message_dict, tools_in_text

MAX_OUTPUT_CHARS = 4_000_000
MAX_RENDER_S = 2.0

CHATML = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)


SAMPLE_CONVERSATION = (
    ChatMessage("system", "You are a helpful assistant."),
    ChatMessage("user", "Hello!"),
    ChatMessage("assistant", "Hi. How can I help?"),
    ChatMessage("user", "What is 2 + 2?"),
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


def _strftime_now(format: str) -> str:  # noqa: A002 (the name templates call it with)
    """Today's date as the template wants it: Hugging Face's helper, which gpt-oss and
    Llama 3.x templates call for the date they put in the system message."""
    return datetime.datetime.now().strftime(format)


class ChatTemplate:
    """A compiled chat template with a ChatML fallback."""

    def __init__(self, source: str | None, bos_token: str = "", eos_token: str = "") -> None:
        self.env = BoundedSandbox(
            MAX_OUTPUT_CHARS, trim_blocks=True, lstrip_blocks=True, autoescape=False
        )
        self.env.globals["raise_exception"] = _raise_exception
        self.env.globals["strftime_now"] = _strftime_now
        self.bos_token = bos_token
        self.eos_token = eos_token
        self.warning: str | None = None
        self.template = None
        self._knows_tools: bool | None = None  # found out on the first request with tools
        self.fallback = self.env.from_string(CHATML)
        if not source:
            self.warning = "the model has no chat template; using ChatML"
            return
        try:
            self.template = self.env.from_string(source)
        except TemplateLimitError as exc:
            self.warning = f"the model's chat template was refused: {exc}; using ChatML"
        except TemplateError as exc:
            self.warning = f"the model's chat template does not compile ({exc}); using ChatML"
        else:
            self._validate()

    def _validate(self) -> None:
        """Render an ordinary conversation once, so a template that runs past a limit even on
        that is refused at load (and the load says so). Chat turns stay bounded all the same:
        a template may keep its bomb for one particular message."""
        try:
            _render_limited(self.template, self._context(SAMPLE_CONVERSATION))
        except TemplateLimitError as exc:
            self._refuse(f"the model's chat template was refused: {exc}")
        except _Deadline:
            self._refuse(f"the chat template ran longer than {MAX_RENDER_S:.0f} s")
        except Exception:  # noqa: BLE001 - raising on an unexpected conversation is allowed
            pass

    @property
    def source(self) -> str:
        return "model" if self.template is not None else "fallback"

    def _context(
        self,
        messages: list[ChatMessage] | tuple[ChatMessage, ...],
        tools: list[dict] | None = None,
        think: str | None = None,
    ) -> dict[str, Any]:
        context: dict[str, Any] = {
            "messages": [message_dict(m) for m in messages],
            "add_generation_prompt": True,
            "bos_token": self.bos_token,
            "eos_token": self.eos_token,
        }
        if tools:
            context["tools"] = tools
        if think is not None:
            # The names reasoning models' templates read: Qwen3 and others enable_thinking,
            # DeepSeek V3.1 thinking, gpt-oss reasoning_effort.
            context["enable_thinking"] = context["thinking"] = think != "off"
            if think in ("low", "medium", "high"):
                context["reasoning_effort"] = think
        return context

    def knows_tools(self) -> bool:
        """Whether the model's template writes the `tools` it is given into the prompt (a
        sample conversation rendered with one tool and without differs)."""
        if self.template is None:
            return False
        if self._knows_tools is None:
            # (a description: gpt-oss's template writes every tool's)
            probe = [{"type": "function", "function": {
                "name": "probe_tool_x", "description": "A probe.", "parameters": {}}}]  # fmt: skip
            try:
                with_tool = _render_limited(
                    self.template, self._context(SAMPLE_CONVERSATION, probe)
                )
                plain = _render_limited(self.template, self._context(SAMPLE_CONVERSATION))
                self._knows_tools = "probe_tool_x" in with_tool and with_tool != plain
            except Exception:  # noqa: BLE001 - a template that fails on tools does not know them
                self._knows_tools = False
        return self._knows_tools

    def render(
        self,
        messages: list[ChatMessage] | tuple[ChatMessage, ...],
        *,
        continue_reply: bool = False,
        tools: list[dict] | None = None,
        think: str | None = None,
    ) -> RenderedPrompt:
        """The prompt for the next assistant turn. `continue_reply`: the last message is a
        partial assistant reply; the prompt is the turns before it with the generation prompt,
        then its text as the start of the turn (not closed), so the model goes on with it.
        `tools`: OpenAI's tool list, given to a template that knows tools and described in
        the system message otherwise (tool_prompt). `think`: Sampling.think, for the
        template's enable_thinking / reasoning_effort."""
        if continue_reply:
            *head, partial = messages
            rendered = self.render(head, tools=tools, think=think)
            return replace(rendered, text=rendered.text + partial.content)
        uses_tools = bool(tools) or any(m.tool_calls_json or m.role == "tool" for m in messages)
        as_text = tools_in_text(messages, tools) if uses_tools else messages
        if uses_tools and not self.knows_tools():
            messages, tools = as_text, None
        context = self._context(messages, tools, think)
        if self.template is not None:
            try:
                text = _render_limited(self.template, context)
                return RenderedPrompt(text, "model", None)
            except SecurityError as exc:
                raise TemplateRefused(
                    f"the model's chat template tried to escape the sandbox ({exc}); it was not run"
                ) from None
            except TemplateLimitError as exc:
                # Kept for the next turn: the size may come from this conversation's messages.
                warning = f"the model's chat template was refused: {exc}; using ChatML"
            except _Deadline:
                warning = self._refuse(f"the chat template ran longer than {MAX_RENDER_S:.0f} s")
            except Exception as exc:  # a template is untrusted code: any failure means fallback
                warning = f"the chat template failed ({type(exc).__name__}: {exc}); using ChatML"
        else:
            warning = self.warning
        # ChatML knows no tools: they go into the text.
        return RenderedPrompt(_render_limited(self.fallback, self._context(as_text)), "fallback",
                              warning)  # fmt: skip

    def _refuse(self, reason: str) -> str:
        """Stop using a template: it would cost as much again on every turn."""
        self.template = None
        self.warning = f"{reason}; using ChatML"
        return self.warning


def _render_limited(template: Any, context: dict[str, Any]) -> str:
    """Render with a wall-clock limit (a trace hook checks the deadline in template code) and an
    output-size limit, so a looping or exploding template cannot hang or flood the engine."""
    deadline = time.monotonic() + MAX_RENDER_S
    size = 0
    parts = []

    def tracer(frame: Any, event: str, arg: Any) -> Any:
        if time.monotonic() > deadline:
            raise _Deadline()
        # The size checks bound their own loops; tracing them line by line would only slow
        # down the walk over a large value until the deadline, not stop anything sooner.
        return None if frame.f_code.co_filename == template_limits.__file__ else tracer

    previous = sys.gettrace()
    sys.settrace(tracer)
    try:
        for chunk in template.generate(**context):
            size += len(chunk)
            if size > MAX_OUTPUT_CHARS:
                raise TemplateLimitError(f"output longer than {MAX_OUTPUT_CHARS} characters")
            parts.append(chunk)
    finally:
        sys.settrace(previous)
    return "".join(parts)
