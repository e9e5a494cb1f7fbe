"""Chat templates from the model file, with the real engine: a hostile template is refused,
a broken or missing one falls back with a warning, and the engine keeps working."""

from __future__ import annotations

import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from engine_helpers import BROKEN_TEMPLATE, collect, with_template

from deskllm.engine.client import EngineClient
from deskllm.engine.domain import ChatMessage, Error, Sampling

SHORT = Sampling(temperature=0.0, max_tokens=8)
ESCAPE = (
    "{% for c in ''.__class__.__mro__[1].__subclasses__() %}"
    "{% if c.__name__ == 'Popen' %}{{ c(['touch', '/tmp/deskllm-pwned']) }}{% endif %}"
    "{% endfor %}{{ messages[0]['content'] }}"
)
BROKEN = BROKEN_TEMPLATE
CHATML_LOOP = (
    "{% for message in messages %}{PREFIX}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}"
    "{% endfor %}{{ '<|im_start|>assistant\\n' }}"
)
# Allocates a gigabyte in one C call on every render: before any message is even read.
LJUST_BOMB = CHATML_LOOP.replace("{PREFIX}", "{{ 'a'.ljust(10**9)[:0] }}")
# The same bomb, set off only by a message that contains an "x".
TRIGGERED_BOMB = CHATML_LOOP.replace(
    "{PREFIX}", "{% if 'x' in message['content'] %}{{ 'a'.ljust(10**9)[:0] }}{% endif %}"
)


@pytest.fixture(scope="module")
def template_models(tmp_path_factory, starter_model) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("templates")
    return {
        "escape": with_template(starter_model, folder / "escape.gguf", ESCAPE),
        "broken": with_template(starter_model, folder / "broken.gguf", BROKEN),
        "ljust": with_template(starter_model, folder / "ljust.gguf", LJUST_BOMB),
        "triggered": with_template(starter_model, folder / "triggered.gguf", TRIGGERED_BOMB),
    }


def test_a_template_that_escapes_the_sandbox_is_refused(load_params, template_models):
    marker = Path("/tmp/deskllm-pwned")
    marker.unlink(missing_ok=True)
    with EngineClient() as client:
        client.load(load_params(model_path=str(template_models["escape"])))
        got = collect(client.chat(uuid.uuid4().hex, [ChatMessage("user", "Hi")], SHORT))
        assert isinstance(got.final, Error), got.final
        assert got.final.kind == "template"
        assert "sandbox" in got.final.reason
        assert not marker.exists()
        # The engine is still alive and answers a status request.
        status = client.status()
        assert status is not None and status.loaded


def test_a_broken_template_falls_back_with_a_warning(load_params, template_models):
    with EngineClient() as client:
        loaded = client.load(load_params(model_path=str(template_models["broken"])))
        assert loaded.chat_template_source == "fallback"
        assert loaded.warnings and "template" in loaded.warnings[0]
        done = collect(client.chat(uuid.uuid4().hex, [ChatMessage("user", "Hi")], SHORT)).done
        assert done.text and done.metrics.generated_tokens > 0


def test_a_template_that_would_allocate_a_gigabyte_loads_with_the_fallback(
    load_params, template_models
):
    with EngineClient() as client:
        loaded = client.load(load_params(model_path=str(template_models["ljust"])))
        assert loaded.chat_template_source == "fallback"
        assert len(loaded.warnings) == 1
        assert "refused" in loaded.warnings[0] and "str.ljust" in loaded.warnings[0]
        for _turn in range(2):  # refused once: no turn runs it again
            done = collect(client.chat(uuid.uuid4().hex, [ChatMessage("user", "Hi")], SHORT)).done
            assert done.text and done.metrics.generated_tokens > 0
            assert done.warnings == loaded.warnings
        assert client.status().rss_bytes < loaded.rss_bytes + (256 << 20)


def test_a_bomb_set_off_by_one_message_falls_back_for_that_turn_only(
    load_params, template_models
):
    with EngineClient() as client:
        loaded = client.load(load_params(model_path=str(template_models["triggered"])))
        assert (loaded.chat_template_source, loaded.warnings) == ("model", ())
        chat = uuid.uuid4().hex
        bombed = collect(client.chat(chat, [ChatMessage("user", "Say xylophone")], SHORT)).done
        assert bombed.text and bombed.metrics.generated_tokens > 0
        assert any("str.ljust" in w for w in bombed.warnings), bombed.warnings
        plain = collect(client.chat(uuid.uuid4().hex, [ChatMessage("user", "Hi")], SHORT)).done
        assert plain.text and plain.warnings == ()
        assert client.status().rss_bytes < loaded.rss_bytes + (256 << 20)


def test_cli_chat_says_when_the_template_was_not_used(tmp_path, session_home, template_models):
    from server_helpers import serve_env

    result = subprocess.run(
        [sys.executable, "-m", "deskllm", "chat", "--model", str(template_models["broken"]),
         "--prompt", "Hi", "--max-tokens", "4", "--ctx", "1024"],
        env=serve_env(tmp_path, session_home), capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert "[note: the model's chat template does not compile" in result.stderr
    assert "replies may be worse" in result.stderr  # without --metrics too
