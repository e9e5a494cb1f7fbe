"""ChatPanel: the open conversation, one MessageWidget per message in a scroll area, the
message box and the chat's buttons. Replies start through the EngineBridge; their tokens are
gathered as they come and only the reply's own widget re-renders, at most every
REPAINT_INTERVAL_MS, so a long reply costs the same per token as a short one.

A chat's model may be remote (NAME/MODEL, or "auto": the router): the panel keeps the
RemoteCatalog the model menu lists them from, offers "Ask <remote model>" on the last reply
while an endpoint allows routing, and shows a banner when the endpoint cannot answer.

Signals:
    stream_started(str): a reply was requested for this conversation id.
    turn_finished(str, Reply): the reply ended (finished, stopped or failed) and is stored.
    conversation_changed(str): title, model, settings or the branch shown of this conversation
        changed.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

from deskllm.backends.names import AUTO, AUTO_TITLE, endpoint_of, is_remote
from deskllm.backends.routing import ENDPOINT_DOWN
from deskllm.gui.attachments_bar import AttachmentsBar
from deskllm.gui.chat_input import ChatInput, local_files
from deskllm.gui.conversation_settings import ConversationSettingsDialog
from deskllm.gui.docs_button import DocumentsButton
from deskllm.gui.elided_label import ElidedLabel
from deskllm.gui.engine_bridge import EngineBridge
from deskllm.gui.message_view import MessageWidget
from deskllm.gui.model_menu import ModelMenuButton, PlanSettings, same_file
from deskllm.gui.qt import (
    QDesktopServices,
    QFont,
    QFrame,
    QHBoxLayout,
    QKeySequence,
    QLabel,
    QMessageBox,
    QPalette,
    QPushButton,
    QScrollArea,
    Qt,
    QVBoxLayout,
    QWidget,
    Signal,
)
from deskllm.gui.remote_banner import RemoteBanner
from deskllm.gui.remote_catalog import RemoteCatalog
from deskllm.gui.throttle import Throttle
from deskllm.gui.tools_button import ToolsButton
from deskllm.store import Conversation, ConversationStore, Message, ModelLibrary

REPAINT_INTERVAL_MS = 33  # ~30 repaints a second at most, whatever the token rate
NEW_TITLE = "New chat"
ROLE_WORDS = {"user": "message", "assistant": "reply"}


@dataclass
class _Stream:
    conversation_id: str
    parts: list[str] = field(default_factory=list)
    thinking: list[str] = field(default_factory=list)  # a reasoning model's, as it streams
    prefix: str = ""  # the text a continued reply already had
    message_id: int | None = None  # the stored reply being continued (None: a new reply)


def _provisional(conversation_id: str, role: str, text: str = "") -> Message:
    """A message shown before the store has it (id -1); replaced by the stored one."""
    status = "streaming" if role == "assistant" else "complete"
    return Message(-1, conversation_id, role, text, status)


class ChatPanel(QWidget):
    stream_started = Signal(str)
    turn_finished = Signal(str, object)
    conversation_changed = Signal(str)

    def __init__(
        self,
        store: ConversationStore,
        bridge: EngineBridge,
        library: ModelLibrary,
        ensure_model: Callable[[Conversation], None],
        parent: QWidget | None = None,
        plan_settings: PlanSettings = lambda: (0, "f16"),
    ) -> None:
        """`plan_settings`: the (n_ctx, kv_type) a load would use, for the model menu's fit
        badges."""
        super().__init__(parent)
        self.store = store
        self.bridge = bridge
        self.library = library
        self.plan_settings = plan_settings
        self.ensure_model = ensure_model  # queues a model load before a reply that needs it
        self.open_url = QDesktopServices.openUrl  # a link from a message, once the user agreed
        self.conversation_id: str | None = None
        self.model_ready = False
        self.widgets: list[MessageWidget] = []
        self.colour_drafted = False  # View → Colour drafted text
        self.settings_dialog: ConversationSettingsDialog | None = None
        self._stream: _Stream | None = None
        self._editing: Message | None = None
        self._follow = True  # keep the newest text in view until the user scrolls up
        self._throttle = Throttle(self._render_stream, REPAINT_INTERVAL_MS, self)
        self._consents: dict[str, str] = {}  # tool calls waiting for the user: id → chat id
        self.remote = RemoteCatalog(store.db, self)
        bridge.routing_target = self.remote.routing_target
        self._build()
        self.remote.changed.connect(self._update_buttons)
        self.remote.refresh()  # the endpoints' model lists, in the background
        bridge.delta.connect(self._on_delta)
        bridge.thinking.connect(self._on_thinking)
        bridge.notice.connect(self._on_notice)
        bridge.prompt_progress.connect(self._on_prompt_progress)
        bridge.finished.connect(self._on_finished)
        bridge.consent_needed.connect(self._on_consent_needed)
        bridge.tool_stored.connect(self._on_tool_stored)

    # Layout ----------------------------------------------------------------------------------
    def _build(self) -> None:
        self.title = ElidedLabel()
        font = self.title.font()
        font.setWeight(QFont.Weight.Bold)
        self.title.setFont(font)
        self.details = ElidedLabel()
        self.details.setForegroundRole(QPalette.ColorRole.PlaceholderText)
        self.settings_button = QPushButton("Chat settings…")
        self.settings_button.setToolTip("Model, system prompt and sampling for this chat")
        self.settings_button.clicked.connect(self.open_settings)
        # The model switcher: what chats are answered with, on this machine's fit.
        self.model_button = ModelMenuButton(self.library, self.plan_settings, self, self.remote)
        self.model_button.chat_model_chosen.connect(self.use_chat_model)
        self.docs_button = DocumentsButton(self)  # which collections this chat searches
        self.tools_button = ToolsButton(self.store, self)  # which MCP servers it may use
        header = QHBoxLayout()
        header.addWidget(self.title, 2)
        header.addWidget(self.details, 1)
        header.addWidget(self.model_button)
        header.addWidget(self.docs_button)
        header.addWidget(self.tools_button)
        header.addWidget(self.settings_button)

        self.empty_label = QLabel(
            "No messages yet. Type below to start: replies are written on this computer."
        )
        self.empty_label.setAlignment(Qt.AlignmentFlag.AlignCenter)
        self.empty_label.setWordWrap(True)
        self.empty_label.setForegroundRole(QPalette.ColorRole.PlaceholderText)
        container = QWidget()
        container.setBackgroundRole(QPalette.ColorRole.Base)
        self.messages_layout = QVBoxLayout(container)
        self.messages_layout.addWidget(self.empty_label)
        self.messages_layout.addStretch(1)
        self.scroll = QScrollArea()
        self.scroll.setWidgetResizable(True)
        self.scroll.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.scroll.setBackgroundRole(QPalette.ColorRole.Base)
        self.scroll.setWidget(container)
        bar = self.scroll.verticalScrollBar()
        bar.rangeChanged.connect(self._on_range_changed)
        bar.valueChanged.connect(self._on_scrolled)

        self.edit_banner = QFrame()
        self.edit_banner.setFrameShape(QFrame.Shape.StyledPanel)
        self.edit_note = QLabel(
            "Editing a message: sending replaces it and every message after it."
        )
        self.edit_note.setWordWrap(True)
        self.cancel_edit_button = QPushButton("Cancel edit")
        self.cancel_edit_button.clicked.connect(self.cancel_edit)
        banner = QHBoxLayout(self.edit_banner)
        banner.addWidget(self.edit_note, 1)
        banner.addWidget(self.cancel_edit_button)
        self.edit_banner.hide()

        self.input = ChatInput()
        self.input.submitted.connect(self.send)
        self.attachments = AttachmentsBar(self)  # files attached to this chat
        self.input.files_dropped.connect(self.attachments.attach_paths)
        self.setAcceptDrops(True)  # files dropped on the messages are attached too
        self.send_button = QPushButton("Send")
        self.send_button.setDefault(True)
        self.stop_button = QPushButton("Stop")
        self.stop_button.setShortcut(QKeySequence(Qt.Key.Key_Escape))
        self.stop_button.setToolTip("Stop the reply (Esc); what was written is kept")
        self.regenerate_button = QPushButton("Regenerate")
        self.regenerate_button.setToolTip("Write the last reply again")
        self.send_button.clicked.connect(self.send)
        self.stop_button.clicked.connect(self.bridge.stop)
        self.regenerate_button.clicked.connect(self.regenerate)
        row = QHBoxLayout()
        row.addStretch(1)
        for button in (self.regenerate_button, self.stop_button, self.send_button):
            row.addWidget(button)

        self.remote_banner = RemoteBanner(self)
        self.remote_banner.continue_locally.connect(self.continue_locally)

        layout = QVBoxLayout(self)
        layout.addLayout(header)
        layout.addWidget(self.remote_banner)
        layout.addWidget(self.scroll, 1)
        layout.addWidget(self.edit_banner)
        layout.addWidget(self.attachments)
        layout.addWidget(self.input)
        layout.addLayout(row)
        self._update_buttons()

    def dragEnterEvent(self, event) -> None:  # noqa: N802 (Qt name)
        if local_files(event.mimeData()):
            event.acceptProposedAction()

    def dropEvent(self, event) -> None:  # noqa: N802 (Qt name)
        files = local_files(event.mimeData())
        if files:
            event.acceptProposedAction()
            self.attachments.attach_paths(files)

    def add_notice(self, widget: QWidget) -> None:
        """A card above the messages (the first-run card): it shows and hides itself."""
        self.layout().insertWidget(1, widget)

    # Conversation ----------------------------------------------------------------------------
    def show_conversation(self, conversation_id: str | None) -> None:
        self.cancel_edit()
        if conversation_id != self.conversation_id:
            self.remote_banner.hide()
        self.conversation_id = conversation_id
        self._drop_widgets(0)
        self._follow = True
        if conversation_id:
            self._sync()
        self.update_header()
        self._update_buttons()

    def update_header(self) -> None:
        if self.docs_button.conversation_id != self.conversation_id:
            self.docs_button.set_conversation(self.conversation_id)
            self.attachments.set_conversation(self.conversation_id)
        if self.tools_button.conversation_id != self.conversation_id:
            self.tools_button.set_conversation(self.conversation_id)
        if not self.conversation_id:
            self.title.setText("")
            self.details.setText("")
            self.model_button.set_chat_model(None)
            return
        conversation = self.store.get(self.conversation_id)
        self.title.setText(conversation.title)
        self.model_button.set_chat_model(conversation.model)
        model = Path(conversation.model).name if conversation.model else "no model chosen"
        if is_remote(conversation.model):
            model = AUTO_TITLE if conversation.model == AUTO else conversation.model
        # The model button names the loaded model already: the header names the chat's own
        # only where it is another one (it was named twice).
        parts = []
        if is_remote(conversation.model) or not same_file(conversation.model,
                                                          self.model_button.current):
            parts.append(model)
        if conversation.system_prompt:
            parts.append("system prompt set")
        self.details.setText(" · ".join(parts))

    def set_model_ready(self, ready: bool) -> None:
        self.model_ready = ready
        self._update_buttons()

    def open_settings(self) -> None:
        if not self.conversation_id:
            return
        conversation = self.store.get(self.conversation_id)
        self.settings_dialog = ConversationSettingsDialog(conversation, self.library.list(), self)
        self.settings_dialog.accepted.connect(self._settings_accepted)
        self.settings_dialog.open()

    def use_chat_model(self, model: str) -> None:
        """This chat is answered by `model` from now on: a remote NAME/MODEL, "auto", or the
        loaded local model (nothing to load for any of them)."""
        if not self.conversation_id:
            return
        self.store.update(self.conversation_id, model=model)
        self.remote_banner.hide()
        self.update_header()
        self._update_buttons()
        self.conversation_changed.emit(self.conversation_id)

    def continue_locally(self) -> None:
        """After a remote failure: switch this chat to the loaded local model and answer the
        failed turn there (a failed reply anew, a cut-off one continued)."""
        local = self.model_button.current
        if local is None or not self.conversation_id:
            return
        self.use_chat_model(local)
        last = self.widgets[-1].message if self.widgets else None
        if last is not None and last.role == "assistant" and last.status == "error":
            self.regenerate()
        elif last is not None and last.role == "assistant" and last.status == "interrupted":
            self.continue_reply()

    def open_remote_engines(self) -> None:
        """The Remote engines dialog: endpoints, their keys, routing and prices."""
        from deskllm.gui.remote_engines import RemoteEnginesDialog

        self.remote_dialog = RemoteEnginesDialog(self.remote, self)
        self.remote_dialog.open()

    def _settings_accepted(self) -> None:
        dialog = self.settings_dialog
        self.store.update(dialog.conversation.id, **dialog.values())
        self.update_header()
        self.conversation_changed.emit(dialog.conversation.id)

    # Sending ---------------------------------------------------------------------------------
    @property
    def busy(self) -> bool:
        return self._stream is not None

    def can_send(self) -> bool:
        """A chat on a remote model needs no local model loaded."""
        if not self.conversation_id or self.busy:
            return False
        return self.model_ready or self._remote_endpoint() is not None

    def _remote_endpoint(self) -> str | None:
        """The endpoint of the open chat's NAME/MODEL (None: local or Auto)."""
        cid = self.conversation_id
        if not cid or not self.store.exists(cid):  # (deleted, and not yet replaced)
            return None
        return endpoint_of(self.store.get(cid).model)

    def send(self) -> None:
        text = self.input.toPlainText().strip()
        if not text or not self.can_send():
            return
        self.input.clear()
        if self._editing is not None:
            # The edited message is a new version beside the old one: a branch.
            self.store.branch_before(self._editing.id)
            self.cancel_edit()
            self._sync()
        self._send_text(text)

    def _send_text(self, text: str) -> None:
        cid = self.conversation_id
        if self.store.get(cid).title == NEW_TITLE:
            self.store.update(cid, title=text.splitlines()[0][:60])
            self.update_header()
        self._add_widget(_provisional(cid, "user", text))
        self._start(lambda: self.bridge.send(cid, text))

    def regenerate(self) -> None:
        if not self.can_send():
            return
        messages = self.store.messages(self.conversation_id)
        if not messages:
            return
        if messages[-1].role == "assistant":
            self.store.branch_before(messages[-1].id)  # the old reply stays, a version away
            self._sync()
        cid = self.conversation_id
        self._start(lambda: self.bridge.regenerate(cid))

    def ask_remote(self, target: str) -> None:
        """Write the last reply anew on the remote model `target` (route reason "asked")."""
        if not self.can_send() or not target:
            return
        messages = self.store.messages(self.conversation_id)
        if not messages or messages[-1].role != "assistant":
            return
        self.store.branch_before(messages[-1].id)
        self._sync()
        cid = self.conversation_id
        self._start(lambda: self.bridge.regenerate(cid, ask=target))

    def continue_reply(self) -> None:
        """Go on with the interrupted last reply in place: the model takes its text as the
        start of its turn, and the same message (and bubble) grows."""
        if not self.can_send() or not self.widgets:
            return
        message = self.widgets[-1].message
        if message.role != "assistant" or message.status != "interrupted" or message.id < 0:
            return
        cid = self.conversation_id
        self._start(lambda: self.bridge.continue_reply(cid), continued=message)

    def show_version(self, message: Message, step: int) -> None:
        """The version before (-1) or after (+1) `message`, and the branch that follows it."""
        if self.busy or message.id < 0:
            return
        ids = self.store.versions(self.conversation_id).get(message.id, [message.id])
        i = ids.index(message.id) + step
        if 0 <= i < len(ids):
            self.store.show_version(ids[i])
            self._sync()
            self.conversation_changed.emit(self.conversation_id)

    def delete_message(self, message: Message) -> None:
        """Delete a message and what follows it, once the user agrees."""
        if self.busy or message.id < 0:
            return
        follows = " and everything after it" if message.id != self.widgets[-1].message.id else ""
        answer = QMessageBox.question(
            self, "Delete message",
            f"Delete this {ROLE_WORDS.get(message.role, 'message')}{follows}? Other versions "
            "stay.",
        )  # fmt: skip
        if answer != QMessageBox.StandardButton.Yes:
            return
        self.store.delete_message(message.id)
        self._sync()
        self.conversation_changed.emit(self.conversation_id)

    def edit_message(self, message: Message) -> None:
        if self.busy:
            return
        self._editing = message
        self.input.setPlainText(message.content)
        self.input.moveCursor(self.input.textCursor().MoveOperation.End)
        self.input.setFocus()
        self.edit_banner.show()

    def cancel_edit(self) -> None:
        if self._editing is not None:
            self.input.clear()
        self._editing = None
        self.edit_banner.hide()

    def _start(self, request: Callable[[], None], continued: Message | None = None) -> None:
        cid = self.conversation_id
        conversation = self.store.get(cid)
        if not is_remote(conversation.model):  # the router uses whatever model is loaded
            self.ensure_model(conversation)
        self.remote_banner.hide()
        self._follow = True
        if continued is None:
            self._stream = _Stream(cid)
            self._add_widget(_provisional(cid, "assistant"))
        else:
            self._stream = _Stream(cid, prefix=continued.content, message_id=continued.id)
            self.widgets[-1].set_message(replace(continued, status="streaming"))
        self._update_buttons()
        self.stream_started.emit(cid)
        request()

    # Streaming -------------------------------------------------------------------------------
    def _on_delta(self, conversation_id: str, text: str) -> None:
        stream = self._stream
        if stream is None or stream.conversation_id != conversation_id:
            return
        stream.parts.append(text)
        if conversation_id == self.conversation_id:
            self._throttle.request()

    def _on_thinking(self, conversation_id: str, text: str) -> None:
        stream = self._stream
        if stream is None or stream.conversation_id != conversation_id:
            return
        stream.thinking.append(text)
        if conversation_id == self.conversation_id:
            self._throttle.request()

    def _waiting_reply(self, conversation_id: str) -> MessageWidget | None:
        """The reply of `conversation_id` being written, while it is shown and has no text
        yet (None otherwise)."""
        stream = self._stream
        if (stream is None or stream.conversation_id != conversation_id or stream.parts
                or stream.thinking):  # fmt: skip
            return None
        if conversation_id != self.conversation_id or not self.widgets:
            return None
        return self.widgets[-1]

    def _on_notice(self, conversation_id: str, text: str) -> None:
        """What the reply waits for, in its place until its first text."""
        if (reply := self._waiting_reply(conversation_id)) is not None:
            reply.set_text(f"*{text}*")

    def _on_prompt_progress(self, conversation_id: str, progress: object) -> None:
        """A long prompt being read: the bar in the reply's place until its first text."""
        if (reply := self._waiting_reply(conversation_id)) is not None:
            reply.show_prompt_progress(progress)

    def _render_stream(self) -> None:
        stream = self._stream
        if stream is None or stream.conversation_id != self.conversation_id or not self.widgets:
            return
        last = self.widgets[-1].message
        if last.status != "streaming" and last.id != stream.message_id:
            return  # a stored step of a turn with tools (its cards): not the reply written
        if stream.thinking:
            self.widgets[-1].set_thinking("".join(stream.thinking).strip(),
                                          live=not stream.parts)  # fmt: skip
        if stream.parts or not stream.thinking:
            self.widgets[-1].set_text(stream.prefix + "".join(stream.parts))

    def _on_tool_stored(self, conversation_id: str, _message: object) -> None:
        """A step of a turn with tools was stored: the reply so far is now a stored message
        (its calls' cards), or a call's result; the next reply starts afresh below them."""
        stream = self._stream
        if stream is not None and stream.conversation_id == conversation_id:
            stream.parts, stream.thinking = [], []
            self._throttle.cancel()
        if conversation_id == self.conversation_id:
            self._sync()

    def _on_consent_needed(self, conversation_id: str, call: object) -> None:
        """A tool call waits for the user: its card asks (now, or when its chat is shown)."""
        self._consents[call.id] = conversation_id
        if conversation_id == self.conversation_id:
            self._sync()
            self._follow = True
            self._on_range_changed(0, self.scroll.verticalScrollBar().maximum())

    def answer_tool_call(self, call_id: str, decision: str) -> None:
        """The user's answer on a call's card: "once", "always" or "deny"."""
        if self._consents.pop(call_id, None) is not None:
            self.bridge.answer_consent(call_id, decision)

    def pending_cards(self) -> list:
        """The cards of calls waiting for the user in the chat shown."""
        cards = [w.tool_calls.card(call_id) for call_id in self._consents for w in self.widgets]
        return [c for c in cards if c is not None and c.pending]

    def _on_finished(self, conversation_id: str, event: object) -> None:
        for call_id in [i for i, cid in self._consents.items() if cid == conversation_id]:
            del self._consents[call_id]  # (a Stop while a call waited: the turn is over)
        if self._stream is not None and self._stream.conversation_id == conversation_id:
            self._stream = None
            self._throttle.cancel()
        if conversation_id == self.conversation_id:
            self._sync()  # the stored reply: final text, status, figures
            self.update_header()
            self._remote_failed(event)
        self._update_buttons()
        self.turn_finished.emit(conversation_id, event)

    def _remote_failed(self, reply) -> None:
        """A chat on a remote model whose endpoint could not answer: the banner."""
        error = getattr(reply, "error", None)
        endpoint = self._remote_endpoint()
        if endpoint is None or error is None or error.kind not in ENDPOINT_DOWN:
            return
        local = self.model_button.current
        self.remote_banner.show_failure(endpoint, error.reason,
                                        Path(local).name if local else None)  # fmt: skip

    def _on_range_changed(self, _minimum: int, maximum: int) -> None:
        if self._follow:
            self.scroll.verticalScrollBar().setValue(maximum)

    def _on_scrolled(self, value: int) -> None:
        bar = self.scroll.verticalScrollBar()
        self._follow = value >= bar.maximum() - bar.singleStep()

    # Widgets ---------------------------------------------------------------------------------
    def _sync(self) -> None:
        """Bring the widgets in line with the store; only changed messages re-render."""
        messages = [m for m in self.store.messages(self.conversation_id) if m.role != "system"]
        keep = 0
        for widget, message in zip(self.widgets, messages, strict=False):
            shown = widget.message
            if shown.id != message.id and not (shown.id < 0 and shown.role == message.role):
                break
            keep += 1
        self._drop_widgets(keep)
        for widget, message in zip(self.widgets, messages, strict=False):
            if widget.message != message and not self._is_streaming(message):
                widget.set_message(message)
        for message in messages[keep:]:
            self._add_widget(message)
        versions = self.store.versions(self.conversation_id)
        for widget in self.widgets:
            ids = versions.get(widget.message.id, [widget.message.id])
            widget.set_versions(ids.index(widget.message.id) + 1, len(ids))
        stream = self._stream
        waiting = [i for i, cid in self._consents.items() if cid == self.conversation_id]
        results = {m.tool_call_id: m.metrics for m in messages if m.role == "tool"}
        running = stream is not None and stream.conversation_id == self.conversation_id
        for widget in self.widgets:
            for card in widget.tool_calls.cards:
                if (card.call["id"] in waiting) != card.pending:  # asked, or no longer
                    card.set_pending(not card.pending)
                card.set_result(results.get(card.call["id"]), running)
        if stream is not None and stream.conversation_id == self.conversation_id:
            last = self.widgets[-1].message if self.widgets else None
            fresh = last is None or (last.status != "streaming" and last.id != stream.message_id)
            if fresh and not waiting:  # (a call waiting for the user: no reply is written)
                self._add_widget(_provisional(self.conversation_id, "assistant"))
            self._render_stream()
        self._update_buttons()

    def _is_streaming(self, message: Message) -> bool:
        # The store lags the tokens by up to half a second: the stream's text wins (for a
        # continued reply, also before the store marked it streaming again).
        stream = self._stream
        if stream is None:
            return False
        return message.status == "streaming" or message.id == stream.message_id

    def _add_widget(self, message: Message) -> None:
        # Created inside the chat: a parentless widget, even never shown, costs the window
        # its activation when it is reparented (offscreen; shortcuts then stop working).
        widget = MessageWidget(
            message, self.messages_layout.parentWidget(), lambda url: self.open_url(url)
        )
        widget.edit_requested.connect(self.edit_message)
        widget.delete_requested.connect(self.delete_message)
        widget.version_requested.connect(self.show_version)
        widget.continue_requested.connect(self.continue_reply)
        widget.regenerate_requested.connect(self.regenerate)
        widget.ask_requested.connect(self.ask_remote)
        widget.tool_answered.connect(self.answer_tool_call)
        widget.set_colour_drafted(self.colour_drafted)
        self.messages_layout.insertWidget(self.messages_layout.count() - 1, widget)
        self.widgets.append(widget)
        self.empty_label.hide()

    def set_colour_drafted(self, on: bool) -> None:
        """View → Colour drafted text: replies show the text accepted drafts wrote."""
        self.colour_drafted = on
        for widget in self.widgets:
            widget.set_colour_drafted(on)

    def _drop_widgets(self, start: int) -> None:
        for widget in self.widgets[start:]:
            widget.hide()
            widget.deleteLater()
        del self.widgets[start:]
        self.empty_label.setVisible(not self.widgets)

    def _update_buttons(self) -> None:
        can = self.can_send()
        self.send_button.setEnabled(can)
        self.regenerate_button.setEnabled(can and bool(self.widgets))
        self.stop_button.setEnabled(self.busy)
        self.settings_button.setEnabled(bool(self.conversation_id))
        for widget in self.widgets:
            widget.set_busy(self.busy)
            widget.set_actions(False)
        if self.widgets and can:
            last = self.widgets[-1]
            last.set_ask_target(self._ask_target(last.message))
            last.can_continue = self._remote_endpoint() is None
            last.set_actions(True)

    def _ask_target(self, message: Message) -> str | None:
        """The remote model "Ask" offers on this reply: the routing target, in a chat on a
        local model or Auto, unless the reply came from it already."""
        target = self.remote.routing_target()
        if target is None or message.role != "assistant" or message.id < 0:
            return None
        if message.metrics.get("model") == target or self._remote_endpoint() is not None:
            return None  # answered by it already, or a chat on a remote model (no router)
        return target
