"""The Server panel: the window serves its loaded model through the local API, the window's
chat and the API's streams share one engine (one copy of the model, one scheduler), and
neither starting (with slots enough) nor stopping the server reloads the model. Real engine,
real server, the official openai SDK as the client."""

from __future__ import annotations

import socket
import threading

import openai
import pytest
from gui_helpers import REPLY_TIMEOUT_MS, send_and_wait, set_sampling

from deskllm.engine.domain import Done
from deskllm.engine.slot_client import SlotClient


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start(qtbot, win, port: int, slots: int, require_key: bool = False):
    win.open_server_panel()
    panel = win.server_panel
    panel.port.setValue(port)
    panel.slots.setValue(slots)
    panel.require_key.setChecked(require_key)
    with qtbot.waitSignal(win.bridge.serving, timeout=REPLY_TIMEOUT_MS) as blocker:
        panel.start_button.click()
    assert blocker.args[0] is not None, panel.status.text()
    return panel, blocker.args[0]


def stream_reply(client: openai.OpenAI, model: str, prompt: str, out: dict) -> None:
    try:
        stream = client.chat.completions.create(
            model=model, messages=[{"role": "user", "content": prompt}], stream=True,
            max_tokens=160, temperature=0, extra_body={"ignore_eos": True},
        )  # fmt: skip
        out["text"] = "".join(c.choices[0].delta.content or "" for c in stream if c.choices)
    except Exception as exc:  # the assertion below says what happened
        out["error"] = exc


def test_the_window_serves_its_model_and_its_chat_shares_the_slots(qtbot, window):
    win = window
    engine = win.bridge.engine
    assert engine.n_slots == 1 and engine.loads == 1
    panel, server = start(qtbot, win, free_port(), slots=2, require_key=True)
    key = server.config.api_key
    assert key and panel.key.text() == key
    assert panel.address.text() == server.url
    assert panel.copy_address.isEnabled() and panel.copy_key.isEnabled()
    # One engine: it was loaded again once, with the slots the server asked for, and the
    # window's chat and the server are both its clients.
    assert engine.n_slots == 2 and engine.loads == 2
    assert isinstance(win.bridge.client, SlotClient)
    assert win.bridge.client.engine is engine is server.host.client
    pid = engine.pid
    assert "slots 0/2" in win.server_status.text()

    with pytest.raises(openai.AuthenticationError):
        openai.OpenAI(base_url=server.url, api_key="wrong", max_retries=0).models.list()
    api = openai.OpenAI(base_url=server.url, api_key=key, max_retries=0, timeout=120)
    outs = [{}, {}]
    threads = [threading.Thread(target=stream_reply, args=(api, server.host.model_id, p, o))
               for p, o in zip(("Tell me about ships.", "Tell me about trees."), outs,
                               strict=True)]  # fmt: skip
    for t in threads:
        t.start()
    qtbot.waitUntil(lambda: server.snapshot().running >= 1 or bool(outs[0] or outs[1]),
                    timeout=REPLY_TIMEOUT_MS)  # fmt: skip
    assert not any("error" in out for out in outs), outs
    # The window's chat while API streams run: it waits for a slot or shares the batch.
    set_sampling(win, max_tokens=24, temperature=0.0)
    final = send_and_wait(qtbot, win, "Say hello.")
    for t in threads:
        t.join(REPLY_TIMEOUT_MS / 1000)
    assert isinstance(final, Done), final
    assert final.metrics.n_ctx == 2 * 2048  # the longest conversation: the slots' pool
    for out in outs:
        assert "error" not in out, out["error"]
        assert len(out["text"]) > 20

    panel.refresh()
    assert panel.table.rowCount() >= 2
    assert "/v1/chat/completions 200" in panel.log.toPlainText()
    assert "401" in panel.log.toPlainText()

    with qtbot.waitSignal(win.bridge.serving, timeout=REPLY_TIMEOUT_MS):
        panel.start_button.click()  # Stop: the engine keeps its model and its slots
    assert win.bridge.server is None and win.bridge.client.engine is engine
    assert panel.start_button.text() == "&Start server"
    assert not win.server_status.isVisible()
    # Nothing to copy once stopped; the panel closes with its own button.
    assert not panel.copy_address.isEnabled() and not panel.copy_key.isEnabled()
    panel.buttons.button(panel.buttons.StandardButton.Close).click()
    assert not panel.isVisible()
    with pytest.raises(openai.APIConnectionError):
        api.models.list()
    assert isinstance(send_and_wait(qtbot, win, "Say hello again."), Done)
    # Serving again with the slots the engine has: no reload, the same process.
    start(qtbot, win, free_port(), slots=2)
    assert engine.loads == 2 and engine.pid == pid
    with qtbot.waitSignal(win.bridge.serving, timeout=REPLY_TIMEOUT_MS):
        win.bridge.stop_serving()
    assert engine.loads == 2 and engine.pid == pid


def test_a_taken_port_is_said_and_the_window_keeps_its_model(qtbot, window):
    win = window
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        win.open_server_panel()
        panel = win.server_panel
        panel.port.setValue(port)
        with qtbot.waitSignal(win.bridge.serve_failed, timeout=REPLY_TIMEOUT_MS) as failed:
            panel.start_button.click()
    assert f"could not listen on 127.0.0.1:{port}" in failed.args[0]
    assert failed.args[0] in panel.status.text()
    assert win.bridge.server is None
    qtbot.waitUntil(lambda: win.bridge.client.loaded is not None, timeout=REPLY_TIMEOUT_MS)
    set_sampling(win, max_tokens=8)
    assert isinstance(send_and_wait(qtbot, win, "Hello?"), Done)


def test_a_wider_address_always_requires_the_key(qtbot, window):
    window.open_server_panel()
    panel = window.server_panel
    panel.require_key.setChecked(False)
    panel.host.setCurrentIndex(panel.host.findData("0.0.0.0"))
    assert panel.require_key.isChecked() and not panel.require_key.isEnabled()
    assert panel.config().api_key  # the stored key
    panel.host.setCurrentIndex(panel.host.findData("127.0.0.1"))
    assert panel.require_key.isEnabled()


def test_a_chat_from_before_the_server_is_restored_on_its_slot_not_read_again(qtbot, window):
    """Starting the server with more slots than the engine has loads the model again; the
    conversation's KV state goes with it through the state cache, so its next turn reads only
    the new message."""
    win = window
    set_sampling(win, max_tokens=16, temperature=0.0)
    first = send_and_wait(qtbot, win, "Tell me about the sea.")
    assert isinstance(first, Done)
    start(qtbot, win, free_port(), slots=2)
    second = send_and_wait(qtbot, win, "And rivers?")
    assert isinstance(second, Done), second
    assert second.metrics.restored_from in ("ram", "disk")
    assert second.metrics.cached_tokens >= first.metrics.prompt_tokens
    with qtbot.waitSignal(win.bridge.serving, timeout=REPLY_TIMEOUT_MS):
        win.bridge.stop_serving()


def test_a_request_for_another_installed_model_loads_it_beside_and_the_views_show_it(
    qtbot, window, quant_ladder
):
    """The window's API server loads an installed model a request names beside the window's
    own (an engine of its own); the Server panel and Engine → Loaded models list both, with
    their memory; Pin keeps it, Unload frees it, and the window's model stays."""
    from deskllm.gui.loaded_models import LoadedModelsDialog

    win = window
    other = win.library.add(quant_ladder["Q8_0"], name="Second model (Q8_0)")
    panel, server = start(qtbot, win, free_port(), slots=1)
    api = openai.OpenAI(base_url=server.url, api_key="none", max_retries=0, timeout=300)
    reply = api.chat.completions.create(model="second-model-q8_0", max_tokens=4, temperature=0,
                                        messages=[{"role": "user", "content": "Hi"}])  # fmt: skip
    assert reply.choices[0].message.content is not None
    assert reply.model == "second-model-q8_0"
    panel.refresh()
    rows = panel.loaded.rows
    assert [r.role for r in rows] == ["Chat and API server", "API server (loaded for a request)"]
    extra = rows[1]
    assert extra.model_id == "second-model-q8_0" and extra.can_unload and not extra.pinned
    assert extra.memory_bytes >= other.size_bytes and extra.expires_in_s > 0
    dialog = LoadedModelsDialog(win)
    qtbot.addWidget(dialog)
    dialog.refresh()
    same = [(r.model_id, r.role, r.memory_bytes, r.slots) for r in dialog.table.rows]
    assert same == [(r.model_id, r.role, r.memory_bytes, r.slots) for r in rows]  # Engine menu

    dialog.table.pin_requested.emit("second-model-q8_0", True)
    assert dialog.table.rows[1].pinned and dialog.table.item(1, 4).text() == "pinned"
    cards = {m.id: m for m in api.models.list().data}
    assert cards["second-model-q8_0"].model_extra["pinned"] is True
    dialog.table.unload_requested.emit("second-model-q8_0")
    assert [r.model_id for r in dialog.table.rows] == [rows[0].model_id]
    cards = {m.id: m for m in api.models.list().data}
    assert cards["second-model-q8_0"].model_extra["loaded"] is False
    assert win.chat.model_ready and win.bridge.engine.loaded is not None
    with qtbot.waitSignal(win.bridge.serving, timeout=REPLY_TIMEOUT_MS):
        panel.start_button.click()  # stop


def test_while_serving_a_chat_on_another_model_is_answered_beside_without_a_reload(
    qtbot, window, quant_ladder
):
    win = window
    other = win.library.add(quant_ladder["Q8_0"], name="Beside (Q8_0)")
    panel, server = start(qtbot, win, free_port(), slots=1)
    engine = win.bridge.engine
    loads, served = engine.loads, server.host.model_id
    cid = win.chat.conversation_id
    win.store.update(cid, model=other.path)
    win.chat.show_conversation(cid)
    set_sampling(win, max_tokens=6, temperature=0.0)
    final = send_and_wait(qtbot, win, "Hello")
    assert isinstance(final, Done), final
    reply = win.store.messages(cid)[-1]
    assert reply.status == "complete" and reply.content
    assert reply.model == other.path  # written by the other model
    assert engine.loads == loads and server.host.model_id == served  # the window's stays
    extra = server.host.loaded_extras()
    assert [e.model_id for e in extra] == ["beside-q8_0"] and extra[0].held == 0
    panel.refresh()
    assert [r.model_id for r in panel.loaded.rows][1:] == ["beside-q8_0"]
    with qtbot.waitSignal(win.bridge.serving, timeout=REPLY_TIMEOUT_MS):
        panel.start_button.click()  # stop
