"""Remote engines in the window, against real servers: a second `deskllm serve` (its /metrics
counts every request it gets) and llama-cpp-python's own server, which one test kills. The
window runs on the real engine with the starter model (conftest.make_window)."""

from __future__ import annotations

import logging
import re
from pathlib import Path

import httpx2
import keyring
import keyring.core
import pytest
from gui_helpers import REPLY_TIMEOUT_MS, send_and_wait, set_sampling, type_and_send
from remote_helpers import llama_cpp_server
from server_helpers import API_KEY, running_server

from deskllm.backends.names import AUTO
from deskllm.engine.domain import Done
from deskllm.gui.qt import QMenu, QMessageBox, Qt
from deskllm.remote.calibration import CALIBRATION_PROMPTS
from deskllm.remote.endpoint import Endpoint
from deskllm.remote.keys import KeyStore
from deskllm.store.remote_endpoints import EndpointRegistry

DESK_MODEL = "smollm2-135m-instruct-q4_1"  # what deskllm serve calls the starter model
LCS_KEY = "sk-lcs-gui-41d7e0"
ALIAS = "smol"
SHORT = {"temperature": 0, "max_tokens": 12}
LONG_PART = "the river runs on past the mill and the bridge. "


@pytest.fixture(scope="module")
def desk(tmp_path_factory, session_home: Path, extra_bufts: bool):
    home = tmp_path_factory.mktemp("desk-serve-home")
    with running_server(home, session_home, "--api-key", API_KEY) as server:
        yield server


@pytest.fixture(autouse=True)
def key_file(monkeypatch: pytest.MonkeyPatch, tmp_path: Path):
    """No keyring daemon here: keyring's fail backend is named, as users name one, so keys go
    to the private file in the test's home."""
    monkeypatch.setenv("PYTHON_KEYRING_BACKEND", "keyring.backends.fail.Keyring")
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg-data"))
    keyring.core.init_backend()
    yield
    monkeypatch.delenv("PYTHON_KEYRING_BACKEND")
    keyring.core.init_backend()


def served_requests(server) -> int:
    """Requests the remote answered on its API routes (not /metrics or /health)."""
    text = httpx2.get(server.url + "/metrics", headers={"Authorization": f"Bearer {API_KEY}"},
                      timeout=10).text  # fmt: skip
    return sum(int(n) for path, n in re.findall(
        r'deskllm_requests_total\{path="([^"]+)",status="\d+"\} (\d+)', text)
        if path.startswith("/v1"))  # fmt: skip


def register(win, name: str, url: str, key: str, allow_routing: bool = False) -> None:
    EndpointRegistry(win.store.db).add(Endpoint(name, url, "deskllm", allow_routing))
    KeyStore().set(name, key)


def refreshed(qtbot, win) -> None:
    """The catalog asked every endpoint (in the background) and has their answers."""
    catalog = win.chat.remote
    with qtbot.waitSignal(catalog.changed, timeout=REPLY_TIMEOUT_MS):
        catalog.refresh()
    qtbot.waitUntil(lambda: all(e.name in catalog.probes for e in catalog.endpoints()),
                    timeout=REPLY_TIMEOUT_MS)  # fmt: skip


def menu_action(win, text: str):
    return next(a for menu in win.menuBar().findChildren(QMenu) for a in menu.actions()
                if a.text() == text)  # fmt: skip


def choose(win, data: str) -> None:
    """Pick the model menu's entry for `data` (NAME/MODEL or "auto") as the user does."""
    button = win.chat.model_button
    button.menu().aboutToShow.emit()
    action = next(a for a in button.remote_actions() if a.data() == data)
    action.trigger()


def test_add_test_price_and_remove_an_endpoint_in_the_page(
    window, qtbot, desk, monkeypatch, deskllm_home, caplog
):
    caplog.set_level(logging.DEBUG)  # every log line, the HTTP client's too
    menu_action(window, "Remote &engines…").trigger()
    page = window.chat.remote_dialog
    page.preset_box.setCurrentIndex(page.preset_box.findData("deskllm"))
    assert page.url_edit.text() == "http://127.0.0.1:8383/v1"  # the preset fills the URL
    assert not page.routing_check.isChecked()  # routing is opt-in
    assert "leave this computer" in page.routing_note.text()
    page.name_edit.setText("desk")
    page.url_edit.setText(desk.v1)

    page.key_edit.setText("wrong-key")
    page.test_button.click()
    qtbot.waitUntil(page.test_button.isEnabled, timeout=REPLY_TIMEOUT_MS)
    assert page.status.text() == "Failed: endpoint desk refused the API key (401)"

    page.key_edit.setText(API_KEY)
    page.test_button.click()
    qtbot.waitUntil(page.test_button.isEnabled, timeout=REPLY_TIMEOUT_MS)
    # A deskllm server lists its model, then `auto` (its router).
    assert page.status.text() == f"Connected: it serves {DESK_MODEL}, auto."
    assert EndpointRegistry(window.store.db).find("desk") is None  # tested, not yet added

    catalog = window.chat.remote
    page.add_button.click()
    qtbot.waitUntil(lambda: "desk" in catalog.probes, timeout=REPLY_TIMEOUT_MS)
    assert page.key_edit.text() == "" and page.key_edit.placeholderText() == "key stored"
    assert "key stored in the private file" in page.status.text()
    assert KeyStore().get("desk") == API_KEY
    row = page.row_of("desk")
    assert page.table.item(row, 2).text() == "healthy"
    assert page.table.item(row, 3).text() == f"{DESK_MODEL}, auto"
    assert page.table.item(row, 4).checkState() == Qt.CheckState.Unchecked
    for db_file in deskllm_home.glob("deskllm.sqlite3*"):  # the database and its WAL
        assert API_KEY.encode() not in db_file.read_bytes()

    # The model menu lists it, without Auto: no endpoint allows routing.
    choose(window, f"desk/{DESK_MODEL}")
    assert [a.data() for a in window.chat.model_button.remote_actions()] == [
        f"desk/{DESK_MODEL}", "desk/auto"]  # fmt: skip

    page.table.selectRow(row)
    page.price_model.setCurrentText(DESK_MODEL)
    page.price_input.setValue(0.5)
    page.price_output.setValue(1.5)
    page.price_button.click()
    price = EndpointRegistry(window.store.db).get("desk").prices[DESK_MODEL]
    assert (price.input_per_mtok, price.output_per_mtok) == (0.5, 1.5)
    assert "0.5 in / 1.5 out" in page.table.item(row, 5).text()

    monkeypatch.setattr(QMessageBox, "question", lambda *a, **k: QMessageBox.StandardButton.No)
    page.remove_button.click()
    assert EndpointRegistry(window.store.db).find("desk") is not None  # asked, and kept
    monkeypatch.setattr(QMessageBox, "question", lambda *a, **k: QMessageBox.StandardButton.Yes)
    page.remove_button.click()
    assert EndpointRegistry(window.store.db).find("desk") is None
    qtbot.waitUntil(lambda: KeyStore().get("desk") is None, timeout=REPLY_TIMEOUT_MS)
    assert page.table.rowCount() == 0
    assert API_KEY not in caplog.text and "wrong-key" not in caplog.text
    assert f"{desk.v1}/models" in caplog.text  # the HTTP client's requests were logged


def test_a_chat_on_a_remote_model_streams_is_stored_and_marked(window, qtbot, desk):
    register(window, "desk", desk.v1, API_KEY)
    refreshed(qtbot, window)
    spec = f"desk/{DESK_MODEL}"
    choose(window, spec)
    chat = window.chat
    cid = chat.conversation_id
    assert window.store.get(cid).model == spec
    assert spec in chat.model_button.toolTip() and chat.details.full_text() == spec
    set_sampling(window, **SHORT)
    deltas: list[str] = []
    window.bridge.delta.connect(lambda _cid, text: deltas.append(text))
    before = served_requests(desk)

    final = send_and_wait(qtbot, window, "Say hello in one short sentence.")
    assert isinstance(final, Done), final
    assert len(deltas) > 1  # streamed, not handed over at the end
    assert served_requests(desk) == before + 1
    reply = window.store.messages(cid)[-1]
    assert reply.status == "complete" and reply.content == "".join(deltas)
    assert reply.model == spec and reply.metrics["engine"] == "desk"
    assert reply.metrics["generated_tokens"] > 0
    assert chat.widgets[-1].note.text() == f"Sent to remote endpoint desk ({spec})."
    assert "tok/s" in chat.widgets[-1].figures.text()
    assert "– tok/s" not in window.readouts.text()  # the stream's figures reached the readouts

    # Stopped mid-reply: what came is kept, marked interrupted.
    # ignore_eos: the reply runs until stopped whatever the model would say (a greedy reply
    # can end early, and differently after the server's cache saw other requests).
    set_sampling(window, temperature=0, max_tokens=400, ignore_eos=True)
    deltas.clear()
    with qtbot.waitSignal(window.bridge.finished, timeout=REPLY_TIMEOUT_MS):
        chat.input.setPlainText("Count from one to one hundred in words.")
        chat.send()
        qtbot.waitUntil(lambda: len(deltas) > 12, timeout=REPLY_TIMEOUT_MS)
        chat.stop_button.click()
    stopped = window.store.messages(cid)[-1]
    assert stopped.status == "interrupted" and stopped.content
    assert stopped.metrics["finish_reason"] == "cancelled"
    assert not chat.widgets[-1].continue_button.isVisible()  # a remote reply cannot go on
    assert chat.widgets[-1].regenerate_button.isVisible()

    # No local model needed: with it unloaded, the remote chat goes on.
    with qtbot.waitSignal(window.bridge.unloaded, timeout=REPLY_TIMEOUT_MS):
        window.bridge.unload()
    assert not chat.model_ready and chat.send_button.isEnabled()
    set_sampling(window, **SHORT)
    final = send_and_wait(qtbot, window, "Thanks.")
    assert isinstance(final, Done), final
    assert window.store.messages(cid)[-1].metrics["engine"] == "desk"


def test_a_killed_remote_shows_a_banner_and_the_chat_continues_locally(
    window, qtbot, tmp_path, starter_model, extra_bufts
):
    chat, banner = window.chat, window.chat.remote_banner
    deltas: list[str] = []
    window.bridge.delta.connect(lambda _cid, text: deltas.append(text))
    with llama_cpp_server(starter_model, ALIAS, LCS_KEY, tmp_path, extra_bufts) as server:
        register(window, "lcs", server.v1, LCS_KEY)
        refreshed(qtbot, window)
        choose(window, f"lcs/{ALIAS}")
        set_sampling(window, temperature=0, max_tokens=400)
        with qtbot.waitSignal(window.bridge.finished, timeout=REPLY_TIMEOUT_MS):
            type_and_send(qtbot, window, "Count from one to one hundred in words.")
            qtbot.waitUntil(lambda: len(deltas) > 5, timeout=REPLY_TIMEOUT_MS)
            server.process.kill()  # mid-reply
            server.process.wait()

    # The text so far is kept and marked; the banner names the endpoint and what happened.
    cut = window.store.messages(chat.conversation_id)[-1]
    assert cut.status == "interrupted" and cut.content and cut.metrics["error_kind"] == "dropped"
    assert banner.isVisible()
    assert banner.label.text().startswith("Remote engine lcs could not answer: endpoint lcs "
                                          "dropped the connection mid-reply")  # fmt: skip
    assert not chat.widgets[-1].continue_button.isVisible()  # not on the remote model
    set_sampling(window, temperature=0, max_tokens=16)
    with qtbot.waitSignal(window.bridge.finished, timeout=REPLY_TIMEOUT_MS) as blocker:
        banner.continue_button.click()  # the local model goes on with the cut-off reply
    assert isinstance(blocker.args[1].final, Done), blocker.args[1].final
    assert not banner.isVisible()
    assert Path(window.store.get(chat.conversation_id).model).resolve() == \
        starter_model.resolve()  # fmt: skip
    grown = window.store.messages(chat.conversation_id)[-1]
    assert grown.id == cut.id and grown.status == "complete"
    assert grown.content.startswith(cut.content) and len(grown.content) > len(cut.content)

    # Back on the remote, which is gone now: the banner again, and the turn answered locally.
    choose(window, f"lcs/{ALIAS}")
    set_sampling(window, **SHORT)
    send_and_wait(qtbot, window, "Hello there.")
    assert banner.isVisible()
    assert banner.label.text().startswith("Remote engine lcs could not answer: endpoint lcs is "
                                          f"unreachable at {server.v1}")  # fmt: skip
    failed = window.store.messages(chat.conversation_id)[-1]
    assert failed.status == "error" and "endpoint lcs is unreachable" in failed.metrics["error"]
    with qtbot.waitSignal(window.bridge.finished, timeout=REPLY_TIMEOUT_MS) as blocker:
        banner.continue_button.click()
    assert isinstance(blocker.args[1].final, Done)
    reply = window.store.messages(chat.conversation_id)[-1]
    assert reply.status == "complete" and reply.content and reply.metrics["engine"] == "local"
    assert [m.role for m in window.store.messages(chat.conversation_id)] == [
        "user", "assistant", "user", "assistant"]  # fmt: skip


def test_auto_asks_the_remote_only_when_routing_is_allowed(make_window, qtbot, desk):
    window = make_window(n_ctx=256)  # small: the chat outgrows it (what would escalate)
    register(window, "desk", desk.v1, API_KEY, allow_routing=True)
    refreshed(qtbot, window)
    spec = f"desk/{DESK_MODEL}"
    choose(window, AUTO)
    chat = window.chat
    cid = chat.conversation_id
    assert window.store.get(cid).model == AUTO
    set_sampling(window, **SHORT)

    before = served_requests(desk)
    send_and_wait(qtbot, window, "What is 2 + 2?")
    first = window.store.messages(cid)[-1]
    assert first.metrics["engine"] == "local" and first.metrics["route_reason"] == "local"
    assert served_requests(desk) == before  # it fitted and was not asked: local only
    ask = chat.widgets[-1].ask_button
    assert ask.isVisible() and ask.text() == f"Ask {spec}"

    with qtbot.waitSignal(window.bridge.finished, timeout=REPLY_TIMEOUT_MS):
        ask.click()
    asked = window.store.messages(cid)[-1]
    assert asked.metrics["engine"] == "desk" and asked.metrics["route_reason"] == "asked"
    assert asked.model == spec and asked.status == "complete"
    assert [m.role for m in window.store.messages(cid)] == ["user", "assistant"]  # replaced
    assert chat.widgets[-1].note.text() == (f"Sent to remote endpoint desk ({spec}): you asked "
                                            "for it.")  # fmt: skip
    assert served_requests(desk) == before + 1

    # A conversation that outgrows the local context goes remote, and says why.
    for i in range(2):
        final = send_and_wait(qtbot, window, f"Part {i}: {LONG_PART * 12}")
        assert isinstance(final, Done), final
    outgrown = window.store.messages(cid)[-1]
    assert outgrown.metrics["engine"] == "desk" and outgrown.metrics["route_reason"] == "context"
    assert chat.widgets[-1].note.text() == (f"Sent to remote endpoint desk ({spec}): the "
                                            "conversation did not fit the local model's "
                                            "context.")  # fmt: skip

    # Routing switched off in the page: Auto keeps everything on this computer.
    chat.open_remote_engines()
    page = chat.remote_dialog
    page.table.item(page.row_of("desk"), 4).setCheckState(Qt.CheckState.Unchecked)
    assert not EndpointRegistry(window.store.db).get("desk").allow_routing
    assert not chat.widgets[-1].ask_button.isVisible()
    chat.model_button.menu().aboutToShow.emit()
    assert AUTO not in [a.data() for a in chat.model_button.remote_actions()]
    page.reject()

    # Even a conversation too long for the local context stays here (old turns left out).
    before = served_requests(desk)
    for i in range(2, 4):
        final = send_and_wait(qtbot, window, f"Part {i}: {LONG_PART * 12}")
        assert isinstance(final, Done), final
        private = window.store.messages(cid)[-1]
        assert private.metrics["engine"] == "local"
        assert private.metrics["route_reason"] == "private"
    assert private.metrics["dropped_messages"] > 0
    assert served_requests(desk) == before  # no request reached the remote


def test_auto_sends_the_least_sure_replies_remote_at_the_calibrated_share(
    make_window, qtbot, tmp_path, starter_model, extra_bufts
):
    """While the window's API server runs: Auto's local replies are the same engine's (its
    slots give them token log-probabilities), the remote is llama-cpp-python's server."""
    window = make_window(router_escalate="0.5")
    engine = window.bridge.engine
    serve_with_two_slots(qtbot, window)
    loads = engine.loads
    with llama_cpp_server(starter_model, ALIAS, LCS_KEY, tmp_path, extra_bufts) as lcs:
        register(window, "lcs", lcs.v1, LCS_KEY, allow_routing=True)
        refreshed(qtbot, window)
        calibrated_routing(window, qtbot, f"lcs/{ALIAS}")
    assert window.bridge.server is not None and engine.loads == loads  # served throughout


def serve_with_two_slots(qtbot, window) -> None:
    window.open_server_panel()
    window.server_panel.slots.setValue(2)
    with qtbot.waitSignal(window.bridge.serving, timeout=REPLY_TIMEOUT_MS) as started:
        window.server_panel.start_button.click()
    assert started.args[0] is not None, window.server_panel.status.text()


def calibrated_routing(window, qtbot, spec: str) -> None:
    chat, endpoint = window.chat, spec.split("/")[0]
    greedy = {"temperature": 0, "max_tokens": 24}  # more than the 16 tokens it measures
    notices: list[str] = []
    window.bridge.notice.connect(lambda _cid, text: notices.append(text))

    def ask_in_a_new_chat(prompt: str, timeout_ms: int = REPLY_TIMEOUT_MS):
        window.new_conversation()
        choose(window, AUTO)
        set_sampling(window, **greedy)
        with qtbot.waitSignal(window.bridge.finished, timeout=timeout_ms) as blocker:
            type_and_send(qtbot, window, prompt)
        final = blocker.args[1].final
        assert isinstance(final, Done), final
        return window.store.messages(chat.conversation_id)[-1]

    # 24 short local replies first: minutes on a loaded 2-core machine.
    first = ask_in_a_new_chat(CALIBRATION_PROMPTS[0], timeout_ms=10 * REPLY_TIMEOUT_MS)
    assert len(notices) == 1 and "24 fixed prompts" in notices[0]  # measured before it
    (calibration,) = window.bridge.calibrations.values()
    scores = calibration.scores
    assert len(scores) == len(CALIBRATION_PROMPTS) and None not in scores
    assert sum(s < calibration.threshold for s in scores) == len(scores) // 2
    # The reply's own score is the one measured on the same prompt (same model, sampling).
    assert first.metrics["route_score"] == pytest.approx(scores[0], abs=1e-3)
    escalated = first.metrics["route_reason"] == "uncertain"
    assert escalated == (scores[0] < calibration.threshold)

    # The least sure prompt goes remote, the surest stays here; no second measurement.
    ranked = sorted(range(len(scores)), key=lambda i: scores[i])
    unsure = ask_in_a_new_chat(CALIBRATION_PROMPTS[ranked[0]])
    assert unsure.metrics["route_reason"] == "uncertain" and unsure.metrics["engine"] == endpoint
    assert unsure.model == spec and unsure.status == "complete"
    assert chat.widgets[-1].note.text() == (f"Sent to remote endpoint {endpoint} ({spec}): the "
                                            "local model was unsure.")  # fmt: skip
    sure = ask_in_a_new_chat(CALIBRATION_PROMPTS[ranked[-1]])
    assert sure.metrics["route_reason"] == "local" and sure.metrics["engine"] == "local"
    assert len(notices) == 1 and len(window.bridge.calibrations) == 1


def test_a_chat_on_a_remote_model_uses_tools_with_consent(window, qtbot, desk):
    """deskllm serve as the remote engine (it calls tools natively: `tools`, `tool_choice`,
    streamed `tool_calls`); mcp-server-time from PyPI as the tool."""
    from mcp_helpers import TIME

    register(window, "desk", desk.v1, API_KEY)
    refreshed(qtbot, window)
    spec = f"desk/{DESK_MODEL}"
    choose(window, spec)
    cid = window.chat.conversation_id
    window.bridge.mcp_config.put(TIME)
    window.chat.tools_button.choose(["time"], "required")
    set_sampling(window, temperature=0, max_tokens=60)
    with qtbot.waitSignal(window.bridge.consent_needed, timeout=REPLY_TIMEOUT_MS) as asked:
        type_and_send(qtbot, window, "What time is it in Tokyo?")
    assert asked.args[1].name == "get_current_time"
    with qtbot.waitSignal(window.bridge.finished, timeout=REPLY_TIMEOUT_MS):
        window.chat.pending_cards()[0].allow_once.click()
    messages = window.store.messages(cid)
    assert [m.role for m in messages][:3] == ["user", "assistant", "tool"]
    calling, result = messages[1], messages[2]
    assert calling.tool_calls[0]["name"] == "get_current_time"
    assert calling.metrics["engine"] == "desk" and "<tool_call>" not in calling.content
    assert result.metrics["decision"] == "once" and result.metrics["is_error"] is False
    assert "datetime" in result.content  # the real server's answer
    assert messages[-1].role == "assistant" and messages[-1].metrics["engine"] == "desk"
