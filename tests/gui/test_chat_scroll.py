"""Opening a conversation longer than the view shows its last message, and the scroll area is
as tall as its messages (no empty region to scroll through). Offscreen, and on a real X server
(Xvfb), where the report came from: 40 messages at 1400x880 opened on an empty region."""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from gui_helpers import listed
from PySide6.QtCore import QRect

from deskllm.gui.qt import QApplication

ROOT = Path(__file__).resolve().parents[2]
WINDOW_SIZE = (1400, 880)
PARAGRAPH = (
    "The lighthouse keeper climbed the spiral stairs every evening at dusk, counting the steps "
    "as his father had, and trimmed the wick before the light went on across the bay. "
) * 4
FIGURES = {"generated_tokens": 180, "tg_tps": 96.5, "ttft_s": 0.12, "prompt_tokens": 900,
           "cached_tokens": 700, "evaluated_tokens": 200, "n_ctx": 2048, "n_past": 1100,
           "device": "CPU"}  # fmt: skip


def _long_conversation(store, messages: int = 40) -> str:
    conversation = store.create("A long talk")
    for i in range(messages):
        if i % 2 == 0:
            store.add_message(conversation.id, "user", f"Question {i}: {PARAGRAPH[:300]}")
        else:
            text = f"Answer {i}. {PARAGRAPH[:600]}\n\n{PARAGRAPH[:600]}"
            metrics = FIGURES | ({"dropped_messages": 2} if i == messages - 1 else {})
            store.add_message(conversation.id, "assistant", text, metrics=metrics)
    return conversation.id


def _last_message_in_view(chat) -> bool:
    viewport = chat.scroll.viewport()
    last = chat.widgets[-1]
    top_left = last.mapTo(viewport, last.rect().topLeft())
    return viewport.rect().contains(QRect(top_left, last.size()))


def test_a_long_conversation_opens_at_its_last_message(qtbot, window):
    assert QApplication.platformName() == os.environ["QT_QPA_PLATFORM"]
    cid = _long_conversation(window.store)
    window.resize(*WINDOW_SIZE)
    window.sidebar.refresh()
    listed(qtbot, window)
    window.sidebar.list.setCurrentRow(window.sidebar.ids().index(cid))  # as a click does
    chat = window.chat
    assert chat.conversation_id == cid and len(chat.widgets) == 40
    bar = chat.scroll.verticalScrollBar()
    # Laid out (40 messages cannot fit in one screen) and showing the end; still so later.
    qtbot.waitUntil(lambda: bar.maximum() > 0 and _last_message_in_view(chat), timeout=5000)
    qtbot.wait(300)
    assert _last_message_in_view(chat) and bar.value() == bar.maximum()

    layout = chat.messages_layout
    margins = layout.contentsMargins()
    messages = sum(w.height() for w in chat.widgets)
    # One spacing after each message (the last one's is before the bottom stretch).
    expected = messages + layout.spacing() * len(chat.widgets) + margins.top() + margins.bottom()
    assert chat.scroll.widget().height() <= expected
    assert chat.widgets[-1].note.isVisible() and chat.widgets[-1].figures.isVisible()


@contextlib.contextmanager
def _xvfb():
    """A private X server; yields its DISPLAY."""
    read, write = os.pipe()
    server = subprocess.Popen(
        ["Xvfb", "-displayfd", str(write), "-screen", "0", "1600x1000x24", "-nolisten", "tcp"],
        pass_fds=(write,),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    os.close(write)
    try:
        with os.fdopen(read) as pipe:
            number = pipe.readline().strip()  # written once the server accepts clients
        if not number:
            pytest.skip("Xvfb did not start")
        yield f":{number}"
    finally:
        server.terminate()
        server.wait(timeout=10)


@pytest.mark.driver
def test_a_long_conversation_opens_at_its_last_message_on_xvfb():
    if not shutil.which("Xvfb"):
        pytest.skip("Xvfb is not installed (Debian: xvfb)")
    with _xvfb() as display:
        env = os.environ | {"DISPLAY": display, "QT_QPA_PLATFORM": "xcb"}
        run = subprocess.run(
            [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
             f"{__file__}::test_a_long_conversation_opens_at_its_last_message"],
            cwd=ROOT, env=env, capture_output=True, text=True, timeout=600,
        )  # fmt: skip
    output = run.stdout + run.stderr
    if 'could not load the qt platform plugin "xcb"' in output.lower():
        # Debian: libxcb-cursor0 libxcb-icccm4 libxcb-keysyms1 (and the rest of Qt's xcb deps)
        pytest.skip("Qt's xcb platform plugin cannot load here: X client libraries missing")
    assert run.returncode == 0, output[-4000:]
    assert "1 passed" in output
