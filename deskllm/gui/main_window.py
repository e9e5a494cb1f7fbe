"""The main window: conversations on the left, the chat on the right, live figures below.

A first, small window (the full GUI has its own issue): it streams replies, stops them, and
keeps every message in the store.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from deskllm.engine.protocol import Done, Error, Exited, LoadParams, Metrics
from deskllm.gui.chat_render import conversation_markdown, metrics_line
from deskllm.gui.engine_bridge import EngineBridge
from deskllm.gui.qt import (
    QApplication,
    QHBoxLayout,
    QLabel,
    QListWidget,
    QListWidgetItem,
    QMainWindow,
    QMessageBox,
    QObject,
    QPlainTextEdit,
    QProgressBar,
    QPushButton,
    QSettings,
    QSplitter,
    Qt,
    QTextBrowser,
    QTextCursor,
    QTimer,
    QVBoxLayout,
    QWidget,
)
from deskllm.store.conversations import ConversationStore

REPAINT_INTERVAL_MS = 33  # streaming repaints at most ~30 times a second


class _SendKeyFilter(QObject):
    """Enter sends, Shift+Enter starts a new line."""

    def __init__(self, on_send) -> None:
        super().__init__()
        self.on_send = on_send

    def eventFilter(self, obj, event) -> bool:  # noqa: N802 (Qt name)
        from PySide6.QtCore import QEvent

        if (
            event.type() == QEvent.Type.KeyPress
            and event.key() in (Qt.Key.Key_Return, Qt.Key.Key_Enter)
            and not event.modifiers() & Qt.KeyboardModifier.ShiftModifier
        ):
            self.on_send()
            return True
        return False


class MainWindow(QMainWindow):
    def __init__(
        self,
        store: ConversationStore,
        bridge: EngineBridge,
        load_params: LoadParams,
        gui_state: QSettings,
    ) -> None:
        super().__init__()
        self.store = store
        self.bridge = bridge
        self.load_params = load_params
        self.gui_state = gui_state
        self.conversation_id: str | None = None
        self.streaming: dict[int, str] = {}  # message id -> text so far
        self.streaming_conversation: str | None = None
        self.model_ready = False
        self._dirty = False

        self.setWindowTitle("deskllm")
        self._build()
        self._connect()
        self._repaint_timer = QTimer(self, interval=REPAINT_INTERVAL_MS)
        self._repaint_timer.timeout.connect(self._repaint_if_dirty)
        self._repaint_timer.start()
        self._restore_state()

    # Layout ----------------------------------------------------------------------------------
    def _build(self) -> None:
        self.new_button = QPushButton("New chat")
        self.delete_button = QPushButton("Delete")
        self.conversation_list = QListWidget()
        left = QWidget()
        left_layout = QVBoxLayout(left)
        buttons = QHBoxLayout()
        buttons.addWidget(self.new_button)
        buttons.addWidget(self.delete_button)
        left_layout.addLayout(buttons)
        left_layout.addWidget(self.conversation_list)

        self.chat_view = QTextBrowser()
        self.chat_view.setOpenExternalLinks(True)
        self.input = QPlainTextEdit()
        self.input.setPlaceholderText("Message (Enter to send, Shift+Enter for a new line)")
        self.input.setMaximumHeight(120)
        self.send_button = QPushButton("Send")
        self.stop_button = QPushButton("Stop")
        self.stop_button.setShortcut(Qt.Key.Key_Escape)
        self.regenerate_button = QPushButton("Regenerate")
        right = QWidget()
        right_layout = QVBoxLayout(right)
        right_layout.addWidget(self.chat_view, 1)
        right_layout.addWidget(self.input)
        row = QHBoxLayout()
        row.addStretch(1)
        for button in (self.regenerate_button, self.stop_button, self.send_button):
            row.addWidget(button)
        right_layout.addLayout(row)

        self.splitter = QSplitter()
        self.splitter.addWidget(left)
        self.splitter.addWidget(right)
        self.splitter.setStretchFactor(1, 1)
        self.setCentralWidget(self.splitter)

        self.model_label = QLabel()
        self.metrics_label = QLabel()
        self.load_bar = QProgressBar(maximumWidth=160, maximum=100)
        self.statusBar().addWidget(self.model_label)
        self.statusBar().addWidget(self.load_bar)
        self.statusBar().addPermanentWidget(self.metrics_label)
        self._send_filter = _SendKeyFilter(self.send_clicked)
        self.input.installEventFilter(self._send_filter)
        self._update_buttons()

    def _connect(self) -> None:
        self.new_button.clicked.connect(self.new_conversation)
        self.delete_button.clicked.connect(self.delete_conversation)
        self.conversation_list.currentItemChanged.connect(self._conversation_selected)
        self.send_button.clicked.connect(self.send_clicked)
        self.stop_button.clicked.connect(self.bridge.stop)
        self.regenerate_button.clicked.connect(self.regenerate_clicked)
        bridge = self.bridge
        bridge.load_progress.connect(lambda f: self.load_bar.setValue(int(f * 100)))
        bridge.loaded.connect(self._model_loaded)
        bridge.load_failed.connect(self._model_failed)
        bridge.delta.connect(self._on_delta)
        bridge.metrics.connect(self._on_metrics)
        bridge.finished.connect(self._on_finished)

    # State -----------------------------------------------------------------------------------
    def _restore_state(self) -> None:
        geometry = self.gui_state.value("window/geometry")
        if geometry is not None:
            self.restoreGeometry(geometry)
        else:
            self.resize(1000, 700)
        splitter = self.gui_state.value("window/splitter")
        if splitter is not None:
            self.splitter.restoreState(splitter)
        else:
            self.splitter.setSizes([240, 760])
        self.refresh_conversations(select=self.gui_state.value("chat/last_conversation"))
        if self.conversation_list.count() == 0:
            self.new_conversation()

    def closeEvent(self, event) -> None:  # noqa: N802 (Qt name)
        self.gui_state.setValue("window/geometry", self.saveGeometry())
        self.gui_state.setValue("window/splitter", self.splitter.saveState())
        if self.conversation_id:
            self.gui_state.setValue("chat/last_conversation", self.conversation_id)
        self.gui_state.sync()
        super().closeEvent(event)

    # Model -----------------------------------------------------------------------------------
    def load_model(self) -> None:
        self.model_ready = False
        self.model_label.setText(f"Loading {Path(self.load_params.model_path).name}…")
        self.load_bar.setValue(0)
        self.load_bar.show()
        self._update_buttons()
        self.bridge.load(self.load_params)

    def _model_loaded(self, loaded) -> None:
        self.model_ready = True
        self.load_bar.hide()
        devices = ", ".join(loaded.devices)
        name = Path(self.load_params.model_path).name
        self.model_label.setText(f"{name} · context {loaded.n_ctx} · {devices}")
        self._update_buttons()

    def _model_failed(self, message: str) -> None:
        self.load_bar.hide()
        self.model_label.setText("No model loaded")
        QMessageBox.warning(self, "Could not load the model", message)
        self._update_buttons()

    # Conversations ---------------------------------------------------------------------------
    def refresh_conversations(self, select: str | None = None) -> None:
        select = select or self.conversation_id
        self.conversation_list.blockSignals(True)
        self.conversation_list.clear()
        chosen = None
        for conversation in self.store.list():
            item = QListWidgetItem(conversation.title)
            item.setData(Qt.ItemDataRole.UserRole, conversation.id)
            self.conversation_list.addItem(item)
            if conversation.id == select:
                chosen = item
        self.conversation_list.blockSignals(False)
        if chosen is None and self.conversation_list.count():
            chosen = self.conversation_list.item(0)
        if chosen is not None:
            self.conversation_list.setCurrentItem(chosen)
            self._show_conversation(chosen.data(Qt.ItemDataRole.UserRole))

    def new_conversation(self) -> None:
        conversation = self.store.create("New chat", model=self.load_params.model_path)
        self.refresh_conversations(select=conversation.id)
        self.input.setFocus()

    def delete_conversation(self) -> None:
        if not self.conversation_id or self.conversation_id == self.streaming_conversation:
            return
        title = self.store.get(self.conversation_id).title
        answer = QMessageBox.question(
            self, "Delete conversation", f"Delete “{title}” and all its messages?"
        )
        if answer != QMessageBox.StandardButton.Yes:
            return
        self.store.delete(self.conversation_id)
        self.conversation_id = None
        self.refresh_conversations()
        if self.conversation_list.count() == 0:
            self.new_conversation()

    def _conversation_selected(self, current, _previous) -> None:
        if current is not None:
            self._show_conversation(current.data(Qt.ItemDataRole.UserRole))

    def _show_conversation(self, conversation_id: str) -> None:
        self.conversation_id = conversation_id
        self._render()
        self._update_buttons()

    # Chat ------------------------------------------------------------------------------------
    def send_clicked(self) -> None:
        text = self.input.toPlainText().strip()
        if not text or not self._can_send():
            return
        self.input.clear()
        conversation = self.store.get(self.conversation_id)
        if conversation.title == "New chat":
            self.store.update(conversation.id, title=text.splitlines()[0][:60])
        self._start_stream()
        self.bridge.send(self.conversation_id, text)

    def regenerate_clicked(self) -> None:
        if not self._can_send():
            return
        messages = self.store.messages(self.conversation_id)
        if not messages or messages[-1].role != "assistant":
            return
        self.store.delete_messages_from(self.conversation_id, messages[-1].id)
        self._start_stream()
        self.bridge.regenerate(self.conversation_id)

    def _can_send(self) -> bool:
        return bool(self.conversation_id) and self.model_ready and not self.streaming_conversation

    def _start_stream(self) -> None:
        self.streaming_conversation = self.conversation_id
        self.streaming.clear()
        self.metrics_label.setText("reading the prompt…")
        self._update_buttons()

    def _on_delta(self, conversation_id: str, text: str) -> None:
        if conversation_id != self.conversation_id:
            return
        if not self.streaming:
            # The reply row was committed by the session before the first token.
            messages = self.store.messages(conversation_id)
            self.streaming[messages[-1].id] = ""
        message_id = next(iter(self.streaming))
        self.streaming[message_id] += text
        self._dirty = True

    def _on_metrics(self, metrics: Metrics) -> None:
        self.metrics_label.setText(metrics_line(dataclasses.asdict(metrics)))

    def _on_finished(self, conversation_id: str, event) -> None:
        self.streaming_conversation = None
        self.streaming.clear()
        if isinstance(event, Done):
            self.metrics_label.setText(metrics_line(dataclasses.asdict(event.metrics)))
        elif isinstance(event, Error):
            self.metrics_label.setText(f"Error: {event.message}")
        elif isinstance(event, Exited):
            self.metrics_label.setText(
                f"The engine stopped: {event.reason}. The reply so far is saved; "
                "the next message starts a fresh engine."
            )
        self.refresh_conversations(select=self.conversation_id)
        self._update_buttons()

    def _repaint_if_dirty(self) -> None:
        if self._dirty:
            self._dirty = False
            self._render()

    def _render(self) -> None:
        if not self.conversation_id:
            self.chat_view.clear()
            return
        messages = self.store.messages(self.conversation_id)
        bar = self.chat_view.verticalScrollBar()
        at_bottom = bar.value() >= bar.maximum() - 4
        self.chat_view.setMarkdown(conversation_markdown(messages, self.streaming))
        if at_bottom:
            self.chat_view.moveCursor(QTextCursor.MoveOperation.End)
            bar.setValue(bar.maximum())

    def _update_buttons(self) -> None:
        busy = self.streaming_conversation is not None
        self.send_button.setEnabled(self._can_send())
        self.regenerate_button.setEnabled(self._can_send())
        self.stop_button.setEnabled(busy)
        self.delete_button.setEnabled(bool(self.conversation_id) and not busy)


def run_window(window: MainWindow) -> int:
    window.show()
    window.load_model()
    return QApplication.instance().exec()
