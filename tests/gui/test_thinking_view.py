"""A reasoning model in the window: its thinking streams into a folded "Thinking…" block above
the answer, is stored apart from the answer, and comes back folded with its figures (real
engine: the starter model given a DeepSeek-R1-style template, its thinking closed by a
budget)."""

from __future__ import annotations

import pytest
from engine_helpers import with_template
from gui_helpers import REPLY_TIMEOUT_MS, set_sampling, type_and_send

from deskllm.gui.qt import QApplication
from deskllm.gui.thinking_view import thinking_title

R1 = ("{% for message in messages %}"
      "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}"
      "{% endfor %}"
      "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n<think>\\n' }}{% endif %}")


@pytest.fixture(scope="module")
def r1_model(tmp_path_factory, starter_model):
    return with_template(starter_model, tmp_path_factory.mktemp("r1") / "r1.gguf", R1)


def test_thinking_streams_folded_and_is_stored_apart(qtbot, make_window, r1_model):
    win = make_window(model_path=str(r1_model))
    set_sampling(win, temperature=0, max_tokens=40, reasoning_budget=12)
    seen = []
    win.bridge.thinking.connect(lambda _cid, text: seen.append(text))
    with qtbot.waitSignal(win.bridge.finished, timeout=REPLY_TIMEOUT_MS):
        type_and_send(qtbot, win, "What colour is the sky?")
    QApplication.processEvents()
    assert seen, "no thinking streamed"
    reply = win.chat.widgets[-1]
    stored = win.store.get_message(reply.message.id)
    assert stored.reasoning.startswith("The sky") and stored.content.strip()
    assert "think>" not in stored.content + stored.reasoning
    assert stored.metrics["reasoning_tokens"] == 12
    view = reply.thinking
    assert view.isVisible() and not view.unfolded and not view.text.isVisible()
    assert view.toggle.text().startswith("Thought for") and "12 tokens" in view.toggle.text()
    assert stored.content.strip()[:20] in reply.plain_text()
    assert stored.reasoning[:20] not in reply.plain_text()  # the answer alone in the body
    view.toggle.click()
    assert view.unfolded and view.text.isVisible() and view.text.text() == stored.reasoning


def test_a_reply_without_thinking_has_no_block(qtbot, window):
    set_sampling(window, temperature=0, max_tokens=8)
    with qtbot.waitSignal(window.bridge.finished, timeout=REPLY_TIMEOUT_MS):
        type_and_send(qtbot, window, "Hi")
    QApplication.processEvents()
    assert not window.chat.widgets[-1].thinking.isVisible()


def test_titles():
    assert thinking_title(None, None, live=True) == "Thinking…"
    assert thinking_title(1234, 3.25, live=False) == "Thought for 3.2 s, 1,234 tokens"
    assert thinking_title(None, None, live=False) == "Thought"
