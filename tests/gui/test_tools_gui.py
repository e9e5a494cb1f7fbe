"""Tools in the window, with real parts: the real engine and starter model (held to a call by
a grammar: "Make the first reply a tool call"), `mcp-server-time` from PyPI, and the
SDK-written test server over Streamable HTTP whose `count` tool counts its calls in a file
(so a denied call can be seen never to have run). Nothing runs before the user answers the
call's card; the calls, results and decisions are stored, shown again and exported."""

from __future__ import annotations

import json

import pytest
from gui_helpers import REPLY_TIMEOUT_MS, set_sampling, type_and_send
from mcp_helpers import TIME, start_test_server

from deskllm.gui.qt import QApplication
from deskllm.gui.tools_dialog import ToolServersDialog
from deskllm.store.export import conversation_dict, conversation_markdown, import_json
from deskllm.tools.mcp_config import McpConfig, McpServer


@pytest.fixture
def counter_server(tmp_path):
    counter = tmp_path / "count"
    process, url = start_test_server(counter, only="count")
    try:
        yield McpServer("counter", url=url), counter
    finally:
        process.kill()
        process.wait()


def calls_made(counter) -> int:
    return int(counter.read_text()) if counter.exists() else 0


def use_tools(win, server: McpServer) -> str:
    win.bridge.mcp_config.put(server)
    win.chat.tools_button.choose([server.name], "required")
    set_sampling(win, temperature=0, max_tokens=60)
    return win.chat.conversation_id


def ask_and_wait_for_card(qtbot, win, text: str):
    with qtbot.waitSignal(win.bridge.consent_needed, timeout=REPLY_TIMEOUT_MS) as asked:
        type_and_send(qtbot, win, text)
    QApplication.processEvents()
    call = asked.args[1]
    cards = win.chat.pending_cards()
    assert [c.call["id"] for c in cards] == [call.id]
    return call, cards[0]


def roles(win, cid) -> list[str]:
    return [m.role for m in win.store.messages(cid)]


def test_a_call_waits_for_consent_then_runs_and_the_answer_follows(qtbot, window):
    cid = use_tools(window, TIME)
    call, card = ask_and_wait_for_card(qtbot, window, "What time is it in Tokyo?")
    assert call.name == "get_current_time" and call.tool.server == "time"
    assert card.isVisible() and card.allow_once.isVisible() and card.deny.isVisible()
    assert "get_current_time" in card.title.text() and "time" in card.title.text()
    assert "tool" not in roles(window, cid)  # nothing ran before the answer
    with qtbot.waitSignal(window.bridge.finished, timeout=REPLY_TIMEOUT_MS):
        card.allow_once.click()
    QApplication.processEvents()
    messages = window.store.messages(cid)
    calling = next(m for m in messages if m.tool_calls)
    assert calling.tool_calls[0]["name"] == "get_current_time"
    result = next(m for m in messages if m.role == "tool")
    assert result.tool_call_id == calling.tool_calls[0]["id"]
    assert result.metrics["decision"] == "once" and result.metrics["server"] == "time"
    assert messages[-1].role == "assistant" and messages[-1].status == "complete"
    # The window shows the card (answered) and the result folded under it.
    widgets = window.chat.widgets
    shown = next(w for w in widgets if w.message.role == "tool")
    assert shown.tool_result.isVisible() and not shown.tool_result.unfolded
    assert "get_current_time (time)" in shown.tool_result.toggle.text()
    assert "allowed once" in shown.tool_result.toggle.text()
    shown.tool_result.toggle.click()
    assert shown.tool_result.text.text() == result.content
    answered = next(w for w in widgets if w.tool_calls.cards).tool_calls.cards[0]
    assert not answered.pending and not answered.allow_once.isVisible()
    assert answered.state.text() == "Allowed once; its result is below."
    # Shown again from the store (another chat, then back): the same cards and result.
    window.chat.show_conversation(None)
    window.chat.show_conversation(cid)
    assert [w.message.role for w in window.chat.widgets] == roles(window, cid)
    assert any(w.tool_calls.cards for w in window.chat.widgets)
    # The next turn's history gives the model the call and its result (a template that
    # did not take them would fail the turn).
    exported = conversation_dict(window.store, cid)
    assert any(m.get("tool_calls") for m in exported["messages"])
    assert "Tool call: `get_current_time` on time" in conversation_markdown(window.store, cid)


def test_deny_never_runs_the_tool_and_always_allow_is_kept(qtbot, window, counter_server,
                                                           tmp_path):  # fmt: skip
    server, counter = counter_server
    cid = use_tools(window, server)
    _call, card = ask_and_wait_for_card(qtbot, window, "Count this call, please.")
    with qtbot.waitSignal(window.bridge.finished, timeout=REPLY_TIMEOUT_MS):
        card.deny.click()
    denied = next(m for m in window.store.messages(cid) if m.role == "tool")
    assert denied.metrics["decision"] == "deny" and "denied" in denied.content
    assert calls_made(counter) == 0  # the server never saw the call

    _call, card = ask_and_wait_for_card(qtbot, window, "Count again.")
    with qtbot.waitSignal(window.bridge.finished, timeout=REPLY_TIMEOUT_MS):
        card.allow_always.click()
    assert calls_made(counter) == 1
    kept = McpConfig(window.bridge.mcp_config.path).get("counter")
    assert kept.always_allow == ("count",)  # in mcp.json: it outlives the app

    asked = []
    window.bridge.consent_needed.connect(lambda *a: asked.append(a))
    with qtbot.waitSignal(window.bridge.finished, timeout=REPLY_TIMEOUT_MS):
        type_and_send(qtbot, window, "And once more.")
    assert asked == [] and calls_made(counter) == 2
    last_result = [m for m in window.store.messages(cid) if m.role == "tool"][-1]
    assert last_result.metrics["decision"] == "allowed"

    # The export holds the calls and results, and reads back the same.
    path = tmp_path / "chat.json"
    path.write_text(json.dumps(conversation_dict(window.store, cid)))
    copy = import_json(window.store, path)
    again = window.store.messages(copy.id)
    assert [(m.role, m.tool_calls, m.tool_call_id) for m in again] == [
        (m.role, m.tool_calls, m.tool_call_id) for m in window.store.messages(cid)]


def test_stop_while_a_call_waits_ends_the_turn_and_runs_nothing(qtbot, window, counter_server):
    server, counter = counter_server
    cid = use_tools(window, server)
    ask_and_wait_for_card(qtbot, window, "Count this.")
    with qtbot.waitSignal(window.bridge.finished, timeout=REPLY_TIMEOUT_MS):
        window.chat.stop_button.click()
    QApplication.processEvents()
    assert calls_made(counter) == 0
    assert "tool" not in roles(window, cid)
    assert window.chat.pending_cards() == [] and window.bridge.pending_consents() == []
    assert window.chat.send_button.isEnabled()
    card = next(w for w in window.chat.widgets if w.tool_calls.cards).tool_calls.cards[0]
    assert card.state.text() == "Not run: the turn was stopped before it."
    assert not card.allow_once.isVisible()


def test_a_server_that_cannot_start_is_said_and_the_chat_goes_on(qtbot, window):
    missing = McpServer("missing", "/nonexistent/mcp-server")
    window.bridge.mcp_config.put(missing)
    window.chat.tools_button.choose(["missing"])
    set_sampling(window, temperature=0, max_tokens=8)
    with qtbot.waitSignal(window.bridge.finished, timeout=REPLY_TIMEOUT_MS):
        type_and_send(qtbot, window, "Hi")
    QApplication.processEvents()
    reply = window.chat.widgets[-1]
    assert "missing" in reply.message.metrics["tool_failures"]
    assert "The tool server missing could not start" in reply.note.text()
    assert reply.message.status == "complete" and reply.message.content


def test_tool_servers_dialog_adds_turns_off_imports_and_removes(qtbot, tmp_path):
    config = McpConfig(tmp_path / "mcp.json")
    dialog = ToolServersDialog(config)
    qtbot.addWidget(dialog)
    dialog.add_server(TIME)
    assert dialog.table.rowCount() == 1 and dialog.table.item(0, 1).text() == "time"
    dialog.table.item(0, 0).setCheckState(dialog.table.item(0, 0).checkState().Unchecked)
    assert config.get("time").enabled is False
    other = tmp_path / "claude.json"
    other.write_text(json.dumps({"mcpServers": {"git": {"command": "mcp-server-git"}}}))
    assert dialog.import_file(other) == ["git"]
    assert [s.name for s in config.servers()] == ["time", "git"]
    dialog.table.selectRow(1)
    dialog.confirm = lambda _text: False  # the user says no: nothing is removed
    dialog.remove_selected()
    assert len(config.servers()) == 2
    dialog.confirm = lambda _text: True
    dialog.remove_selected()
    assert [s.name for s in config.servers()] == ["time"]
    dialog.import_file(tmp_path / "absent.json")
    assert "absent.json" in dialog.problem.text()


def test_the_dialog_lists_a_servers_tools_with_their_descriptions(qtbot, tmp_path):
    from deskllm.tools.tool_host import ToolHost

    config = McpConfig(tmp_path / "mcp.json")
    config.put(TIME)
    config.put(McpServer("missing", "/nonexistent/mcp-server"))
    host = ToolHost()
    dialog = ToolServersDialog(config, host)
    qtbot.addWidget(dialog)
    try:
        dialog.table.selectRow(0)
        assert "not started yet" in dialog.tools.text()
        dialog.list_tools()
        qtbot.waitUntil(lambda: dialog.list_button.isEnabled(), timeout=60_000)
        text = dialog.tools.text()
        assert text.startswith("time offers 2 tools:") and "• get_current_time — " in text
        assert dialog.table.item(0, 4).text() == "running"
        dialog.table.selectRow(1)
        dialog.list_tools()
        qtbot.waitUntil(lambda: dialog.list_button.isEnabled(), timeout=60_000)
        assert "missing could not start: the program was not found" in dialog.tools.text()
        assert dialog.table.item(1, 4).text() == "failed"
    finally:
        dialog.tasks.shutdown()
        host.close()
