"""ChatTemplate: model chat templates rendered in Jinja's sandbox, with a ChatML fallback."""

import sys
import time
import tracemalloc

import pytest

from deskllm.engine import chat_template
from deskllm.engine.chat_template import CHATML, ChatTemplate, TemplateRefused
from deskllm.engine.domain import ChatMessage

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


@pytest.mark.parametrize("source", [CHATML, LLAMA3_STYLE, None])
def test_a_continued_reply_is_the_open_start_of_the_assistant_turn(source):
    """The turns before the partial reply with the generation prompt, then its text as it is:
    not closed with an end-of-turn, so the model goes on with it."""
    partial = ChatMessage("assistant", "Four, because two ")
    template = ChatTemplate(source, bos_token="<s>")
    out = template.render((*MESSAGES, partial), continue_reply=True)
    assert out.text == template.render(MESSAGES).text + "Four, because two "
    assert out.source == ("model" if source else "fallback")


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


# Templates that allocate gigabytes inside one C call (a method, a filter, a format), where the
# deadline cannot interrupt them. Each is refused before it allocates: (template, named in the
# warning).
BOMBS = [
    ("{{ 'a'.ljust(10**9) }}", "str.ljust"),
    ("{{ 'a'.rjust(10**9) }}", "str.rjust"),
    ("{{ 'a'.center(10**9) }}", "str.center"),
    ("{{ '1'.zfill(10**9) }}", "str.zfill"),
    ("{{ '\\t'.expandtabs(10**9) }}", "str.expandtabs"),
    ("{{ ('a' * 1000000).replace('a', 'b' * 1000) }}", "str.replace"),
    ("{{ ('-' * 40000).join(['x'] * 100000) }}", "str.join"),
    ("{{ 'a'|center(10**9) }}", "'center' filter"),
    ("{{ 'a'|center(1000000000) }}", "'center' filter"),  # folded at compile time before
    ("{{ 'a'|indent(10**9) }}", "'indent' filter"),
    ("{{ ('\\n' * 1000000)|indent(100) }}", "'indent' filter"),
    ("{{ messages|tojson(indent=10**9) }}", "tojson indent"),
    ("{{ range(100000)|join('x' * 4000) }}", "'join' filter"),
    ("{{ ('a' * 1000000)|replace('a', 'b' * 1000) }}", "'replace' filter"),
    ("{{ '%0999999999d'|format(1) }}", "'format' filter"),
    ("{{ [1]|batch(10**9, 'x')|list }}", "'batch' filter"),
    ("{{ '%0999999999d' % 1 }}", "'%' format"),
    ("{{ '%.999999999d' % 1 }}", "'%' format"),
    ("{{ '%*d' % (999999999, 1) }}", "'%' format"),
    ("{{ ('%s' * 1000) % ((('x' * 4000000),) * 1000) }}", "'%' format"),
    ("{{ '{:>999999999}'.format(1) }}", "str.format field"),
    ("{{ '{:{w}}'.format(1, w=999999999) }}", "str.format field"),
    ("{{ '{x:>999999999}'.format_map({'x': 1}) }}", "str.format field"),
    ("{{ ('{0}' * 1000).format('x' * 4000000) }}", "str.format"),
    ("{{ 'abc'.translate({97: 'x' * 4000000}) }}", "str.translate"),
    ("{{ lipsum(10**9) }}", "lipsum"),
    (
        "{% set ns = namespace(v='ab') %}{% for i in range(60) %}"
        "{% set ns.v = ns.v ~ ns.v %}{% endfor %}{{ ns.v|length }}",
        "'~' concatenation",
    ),
    (
        "{% set ns = namespace(v='ab') %}{% for i in range(60) %}"
        "{% set ns.v = ns.v + ns.v %}{% endfor %}{{ ns.v|length }}",
        "'+' concatenation",
    ),
    (
        "{% set ns = namespace(v='ab') %}{% for i in range(60) %}"
        "{% set block %}{{ ns.v }}{{ ns.v }}{% endset %}{% set ns.v = block %}{% endfor %}",
        "set block",
    ),
    (  # tiny in memory, but its text is 2**60 items long
        "{% set ns = namespace(v=[1]) %}{% for i in range(60) %}"
        "{% set ns.v = [ns.v, ns.v] %}{% endfor %}{{ ns.v }}",
        "printed value",
    ),
    (
        "{% set ns = namespace(v=[1]) %}{% for i in range(60) %}"
        "{% set ns.v = [ns.v, ns.v] %}{% endfor %}{{ ns.v|string }}",
        "'string' filter",
    ),
    (
        "{% set ns = namespace(v=[1]) %}{% for i in range(60) %}"
        "{% set ns.v = [ns.v, ns.v] %}{% endfor %}{{ '%s' % (ns.v,) }}",
        "'%' format",
    ),
    (
        "{% set ns = namespace(v=10) %}{% for i in range(40) %}"
        "{% set ns.v = ns.v * ns.v %}{% endfor %}{{ ns.v > 0 }}",
        "product of numbers",
    ),
    ("{{ (10 ** 60) ** 5000 > 0 }}", "a power"),
]

MEMORY_BOUND = 64 << 20  # bytes a refused template may allocate, tokenizer-free


def peak_allocation(run):
    """Run and return (result, the peak bytes Python allocated meanwhile)."""
    tracemalloc.start()
    try:
        result = run()
        return result, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


@pytest.mark.parametrize(("source", "named"), BOMBS)
def test_a_template_that_would_allocate_gigabytes_is_refused_at_load(source, named):
    started = time.monotonic()
    tmpl, peak = peak_allocation(lambda: ChatTemplate(source))
    assert time.monotonic() - started < chat_template.MAX_RENDER_S
    assert peak < MEMORY_BOUND
    assert tmpl.source == "fallback"
    assert "refused" in tmpl.warning and named in tmpl.warning and "ChatML" in tmpl.warning
    out = tmpl.render(MESSAGES)
    assert (out.source, out.text, out.warning) == ("fallback", CHATML_EXPECTED, tmpl.warning)


def test_a_bomb_that_waits_for_one_message_is_bounded_at_chat_time():
    source = (
        "{% for m in messages %}{% if 'x' in m.content %}{{ 'a'.ljust(10**9) }}{% endif %}"
        "[{{ m.content }}]{% endfor %}"
    )
    tmpl = ChatTemplate(source)
    assert (tmpl.source, tmpl.warning) == ("model", None)  # the load-time check sees nothing
    out, peak = peak_allocation(lambda: tmpl.render([ChatMessage("user", "xylophone")]))
    assert peak < MEMORY_BOUND
    assert out.source == "fallback" and "str.ljust" in out.warning
    assert out.text == "<|im_start|>user\nxylophone<|im_end|>\n<|im_start|>assistant\n"
    # Still the model's template for a conversation that does not set it off.
    assert tmpl.render([ChatMessage("user", "hello")]).text == "[hello]"


def test_a_template_that_loops_for_minutes_is_refused_at_load_and_costs_nothing_after(
    monkeypatch,
):
    monkeypatch.setattr(chat_template, "MAX_RENDER_S", 0.3)
    tmpl = ChatTemplate(
        "{% for a in range(100000) %}{% for b in range(100000) %}{% endfor %}{% endfor %}"
    )
    assert tmpl.source == "fallback" and "ran longer than" in tmpl.warning
    started = time.monotonic()
    out = tmpl.render(MESSAGES)
    assert time.monotonic() - started < 0.3
    assert (out.source, out.text) == ("fallback", CHATML_EXPECTED)


def test_widths_counts_and_formats_within_the_limits_still_work():
    source = (
        "{{ 'ab'.center(6, '*') }}|{{ 'a'.ljust(3, '.') }}|{{ '7'.zfill(3) }}|"
        "{{ 'ab'|center(6) }}|{{ 'x\\ny'|indent(2) }}|{{ '%05d' % 42 }}|{{ '%*d' % (4, 7) }}|"
        "{{ '{:>4}'.format('z') }}|{{ '{a}-{b}'.format_map({'a': 1, 'b': 2}) }}|"
        "{{ ', '.join(['p', 'q']) }}|{{ [1, 2]|join('+') }}|{{ 'aa'.replace('a', 'bc') }}|"
        "{{ 'a\\tb'.expandtabs(4) }}|{{ '%s=%d'|format('k', 3) }}|{{ 'o' ~ 1 ~ [2] }}|"
        "{{ [[1], [2]]|sum(start=[]) }}|{{ {'k': [1]}|tojson(indent=1) }}|{{ 2 ** 10 }}|"
        "{% set b %}{{ 'in' }}{{ 'side' }}{% endset %}{{ b }}|{{ [1]|batch(2, 0)|list }}"
    )
    out = render(source)
    assert out.warning is None
    assert out.text == (
        "**ab**|a..|007|  ab  |x\n  y|00042|   7|   z|1-2|p, q|1+2|bcbc|a   b|k=3|o1[2]|"
        '[1, 2]|{\n "k": [\n  1\n ]\n}|1024|inside|[[1, 0]]'
    )
