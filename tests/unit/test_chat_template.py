"""ChatTemplate: model chat templates rendered in Jinja's sandbox, with a ChatML fallback."""

import sys
import time

import pytest

from deskllm.engine import chat_template
from deskllm.engine.chat_template import CHATML, ChatTemplate, TemplateRefused
from deskllm.engine.protocol import ChatMessage

MESSAGES = (
    ChatMessage("system", "You are terse."),
    ChatMessage("user", "Hi!"),
    ChatMessage("assistant", "Hello."),
    ChatMessage("user", "2+2?"),
)

CHATML_EXPECTED = (
    "<|im_start|>system\nYou are terse.<|im_end|>\n"
    "<|im_start|>user\nHi!<|im_end|>\n"
    "<|im_start|>assistant\nHello.<|im_end|>\n"
    "<|im_start|>user\n2+2?<|im_end|>\n"
    "<|im_start|>assistant\n"
)

# The shape of a real Llama-3-style template: bos_token, raise_exception, loop over messages,
# add_generation_prompt, string methods and filters.
LLAMA3_STYLE = (
    "{{ bos_token }}"
    "{% if messages[0]['role'] == 'system' %}"
    "{% set loop_messages = messages[1:] %}{% set system = messages[0]['content'] | trim %}"
    "{% else %}{% set loop_messages = messages %}{% set system = '' %}{% endif %}"
    "{% if system %}"
    "{{ '<|start_header_id|>system<|end_header_id|>\\n\\n' + system + '<|eot_id|>' }}"
    "{% endif %}"
    "{% for message in loop_messages %}"
    "{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}"
    "{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}"
    "{% endif %}"
    "{{ '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n' }}"
    "{{ message['content'].strip() + '<|eot_id|>' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}"
    "{{ '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}"
    "{% endif %}"
)


def render(source, messages=MESSAGES, **kwargs):
    return ChatTemplate(source, **kwargs).render(messages)


def test_chatml_template_from_the_model_renders_exactly():
    out = render(CHATML)
    assert out.source == "model"
    assert out.warning is None
    assert out.text == CHATML_EXPECTED


def test_template_with_bos_token_raise_exception_and_generation_prompt():
    tmpl = ChatTemplate(LLAMA3_STYLE, bos_token="<|begin_of_text|>", eos_token="<|eot_id|>")
    assert tmpl.source == "model"
    assert tmpl.warning is None
    out = tmpl.render(MESSAGES)
    assert out.source == "model"
    assert out.warning is None
    assert out.text == (
        "<|begin_of_text|>"
        "<|start_header_id|>system<|end_header_id|>\n\nYou are terse.<|eot_id|>"
        "<|start_header_id|>user<|end_header_id|>\n\nHi!<|eot_id|>"
        "<|start_header_id|>assistant<|end_header_id|>\n\nHello.<|eot_id|>"
        "<|start_header_id|>user<|end_header_id|>\n\n2+2?<|eot_id|>"
        "<|start_header_id|>assistant<|end_header_id|>\n\n"
    )


def test_raise_exception_in_the_template_falls_back_with_its_message():
    bad_order = (ChatMessage("assistant", "I speak first"), ChatMessage("user", "hm"))
    out = render(LLAMA3_STYLE, bad_order, bos_token="<s>")
    assert out.source == "fallback"
    assert "roles must alternate" in out.warning
    assert "ChatML" in out.warning
    assert out.text == (
        "<|im_start|>assistant\nI speak first<|im_end|>\n"
        "<|im_start|>user\nhm<|im_end|>\n<|im_start|>assistant\n"
    )


def test_eos_token_and_tojson_are_available():
    src = "{{ messages | tojson }}|{{ eos_token }}"
    out = render(src, (ChatMessage("user", 'say "ü"'),), eos_token="</s>")
    assert out.text == '[{"role": "user", "content": "say \\"ü\\""}]|</s>'


def test_trim_blocks_strips_newlines_after_tags():
    out = render("{% for m in messages %}\n[{{ m.role }}]\n{% endfor %}\n")
    assert out.text == "[system]\n[user]\n[assistant]\n[user]\n"


@pytest.mark.parametrize("source", [None, ""])
def test_missing_template_falls_back_to_chatml_with_a_warning(source):
    tmpl = ChatTemplate(source)
    assert tmpl.source == "fallback"
    assert "no chat template" in tmpl.warning
    out = tmpl.render(MESSAGES)
    assert out.source == "fallback"
    assert out.warning == tmpl.warning
    assert out.text == CHATML_EXPECTED


def test_template_that_does_not_compile_falls_back_with_a_warning():
    tmpl = ChatTemplate("{% for m in messages %}{{ m.content }")
    assert tmpl.source == "fallback"
    assert "does not compile" in tmpl.warning
    out = tmpl.render(MESSAGES)
    assert (out.source, out.text) == ("fallback", CHATML_EXPECTED)
    assert "does not compile" in out.warning


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("{{ nothing_here.attr }}", "UndefinedError"),
        ("{{ messages[0]['content'] + 1 }}", "TypeError"),
        ("{{ 1 // 0 }}", "ZeroDivisionError"),
    ],
)
def test_template_that_fails_while_rendering_falls_back(source, expected):
    tmpl = ChatTemplate(source)
    assert tmpl.source == "model"  # it compiled
    out = tmpl.render(MESSAGES)
    assert out.source == "fallback"
    assert expected in out.warning
    assert out.text == CHATML_EXPECTED


ESCAPES = [
    "{{ ''.__class__.__mro__[1].__subclasses__() }}",
    "{{ ().__class__.__base__.__subclasses__() }}",
    "{{ cycler.__init__.__globals__.os }}",
    "{{ joiner.__init__.__globals__.os.system('touch PWNED') }}",
    "{{ self.__init__.__globals__.__builtins__ }}",
    "{{ namespace.__init__.__globals__ }}",
    "{{ raise_exception.__globals__['sys'].modules['os'].system('touch PWNED') }}",
    "{{ messages.append({'role': 'user', 'content': 'injected'}) }}",
    "{% for m in messages %}{{ m.update({'content': 'x'}) }}{% endfor %}",
]


@pytest.mark.parametrize("source", ESCAPES)
def test_sandbox_escapes_are_refused_and_nothing_runs(source, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    tmpl = ChatTemplate(source)
    with pytest.raises(TemplateRefused, match="sandbox"):
        tmpl.render(MESSAGES)
    assert not (tmp_path / "PWNED").exists()


def test_refused_template_does_not_modify_the_callers_messages():
    messages = [ChatMessage("user", "original")]
    with pytest.raises(TemplateRefused):
        ChatTemplate("{{ messages.append(1) }}{{ messages[0].update({'content': 'x'}) }}").render(
            messages
        )
    assert messages == [ChatMessage("user", "original")]


def test_private_attributes_render_as_nothing_rather_than_leaking():
    # Reading an unsafe attribute without using it yields an undefined value, never the object.
    out = render("[{{ ''.__class__ }}][{{ lipsum.__globals__ }}]")
    assert out.text == "[][]"
    assert "class" not in out.text


def test_huge_range_is_blocked_quickly_with_a_clear_warning():
    started = time.monotonic()
    out = render("{% for i in range(10**9) %}x{% endfor %}")
    assert time.monotonic() - started < chat_template.MAX_RENDER_S
    assert out.source == "fallback"
    assert "range" in out.warning.lower()
    assert out.text == CHATML_EXPECTED


def test_endless_loop_is_stopped_at_the_deadline(monkeypatch):
    monkeypatch.setattr(chat_template, "MAX_RENDER_S", 0.5)
    source = "{% for a in range(100000) %}{% for b in range(100000) %}{% endfor %}{% endfor %}"
    started = time.monotonic()
    out = render(source)
    elapsed = time.monotonic() - started
    assert 0.5 <= elapsed < 5
    assert out.source == "fallback"
    assert "ran longer than" in out.warning
    assert out.text == CHATML_EXPECTED


def test_exploding_output_is_cut_at_the_size_limit(monkeypatch):
    monkeypatch.setattr(chat_template, "MAX_OUTPUT_CHARS", 10_000)
    source = "{% for a in range(100000) %}{{ messages[0]['content'] }}{% endfor %}"
    out = render(source)
    assert out.source == "fallback"
    assert "output longer than 10000 characters" in out.warning
    assert out.text == CHATML_EXPECTED


def test_one_huge_string_is_rejected(monkeypatch):
    monkeypatch.setattr(chat_template, "MAX_OUTPUT_CHARS", 10_000)
    out = render("{% for i in range(100000) %}{{ messages[0]['content'] }}{% endfor %}")
    assert out.source == "fallback"
    assert "output longer than" in out.warning


def test_rendering_restores_the_callers_trace_function():
    calls = []

    def tracer(frame, event, arg):
        calls.append(event)
        return None

    previous = sys.gettrace()
    sys.settrace(tracer)
    try:
        render(CHATML)
        assert sys.gettrace() is tracer
    finally:
        sys.settrace(previous)


def test_a_template_is_reusable_after_a_failure():
    tmpl = ChatTemplate(
        "{{ messages[-1]['content'] }}{% if messages|length > 1 %}{{ 1/0 }}{% endif %}"
    )
    assert tmpl.render(MESSAGES).source == "fallback"
    out = tmpl.render((ChatMessage("user", "only one"),))
    assert (out.source, out.text, out.warning) == ("model", "only one", None)


def test_a_template_that_builds_a_huge_string_falls_back_before_allocating_it():
    rendered = ChatTemplate("{{ 'x' * 10**10 }}{{ messages[0]['content'] }}").render(MESSAGES)
    assert rendered.source == "fallback" and "too large" in rendered.warning
    assert ChatTemplate("{{ 'ab' * 3 }}{{ 2 ** 3 }}").render(MESSAGES).text == "ababab8"
