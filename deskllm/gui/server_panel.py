"""The Server panel (Engine → Local API server…): starts and stops the OpenAI-compatible API
for the model loaded in the window, and shows its address, its key, the requests in flight,
the slots in use, the models loaded (a request naming another installed model loads it beside
the window's; Unload and Pin here), each finished request's TTFT and tok/s, and a log.

The server runs inside the app on the same engine as the chat (EngineBridge.start_serving):
a chat in the window while API streams run takes one of the slots.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable

from deskllm import settings as settings_mod
from deskllm.gui.loaded_models import LoadedModelsTable, connect_actions, rows_of
from deskllm.gui.qt import (
    QApplication,
    QCheckBox,
    QComboBox,
    QDialog,
    QDialogButtonBox,
    QFormLayout,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QPlainTextEdit,
    QPushButton,
    QSpinBox,
    Qt,
    QTableWidget,
    QTableWidgetItem,
    QTimer,
    QVBoxLayout,
)
from deskllm.server.config import ServerConfig, is_loopback
from deskllm.settings import Settings

POLL_MS = 500
MAX_ROWS = 200
COLUMNS = ("Finished", "Prompt (cached)", "Generated", "TTFT", "tok/s", "Finish")


class ServerPanel(QDialog):
    def __init__(self, window, parent=None) -> None:
        super().__init__(parent or window)
        self.setWindowTitle("Local API server")
        self.window_ = window
        self.bridge = window.bridge
        self._log_seq = 0
        self._last_reply = None
        self._build()
        self.bridge.serving.connect(self._serving_changed)
        self.bridge.serve_failed.connect(self._failed)
        self.timer = QTimer(self)
        self.timer.setInterval(POLL_MS)
        self.timer.timeout.connect(self.refresh)
        self._serving_changed(self.bridge.server)

    # Building ---------------------------------------------------------------------------------
    def _build(self) -> None:
        s: Settings = self.window_.settings
        specs = settings_mod.specs()
        self.host = QComboBox()
        for value, label in specs["server_host"].choices.items():
            self.host.addItem(label, value)
        self.host.setCurrentIndex(max(self.host.findData(s.server_host), 0))
        self.host.currentIndexChanged.connect(self._host_changed)
        self.port = QSpinBox()
        self.port.setRange(1, 65535)
        self.port.setValue(s.server_port)
        self.slots = QSpinBox()
        self.slots.setRange(0, settings_mod.MAX_SERVER_SLOTS)
        self.slots.setSpecialValueText(specs["server_slots"].special[1])
        self.slots.setValue(s.server_slots)
        self.slots.setToolTip(specs["server_slots"].help)
        self.require_key = QCheckBox("Clients must send the API key")
        self.start_button = QPushButton("&Start server")
        self.start_button.clicked.connect(self._start_or_stop)
        self.status = QLabel("Stopped.")
        self.status.setWordWrap(True)

        self.address = QLabel("—")
        self.address.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.copy_address = QPushButton("Copy &address")
        self.copy_address.clicked.connect(lambda: self._copy(self._url()))
        self.key = QLabel("—")
        self.key.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.copy_key = QPushButton("Copy &key")
        self.copy_key.clicked.connect(lambda: self._copy(self._key or ""))
        for button in (self.copy_address, self.copy_key):
            button.setEnabled(False)  # nothing to copy until it serves
        # Closing the panel leaves the server running (the status bar shows it).
        self.buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Close)
        self.buttons.rejected.connect(self.reject)
        self.buttons.button(QDialogButtonBox.StandardButton.Close).setToolTip(
            "Close this panel; a running server keeps serving")
        self.load = QLabel("")
        self.loaded = LoadedModelsTable(self)
        connect_actions(self.loaded, self.window_, self.refresh)
        self.table = QTableWidget(0, len(COLUMNS))
        self.table.setHorizontalHeaderLabels(COLUMNS)
        self.table.horizontalHeader().setSectionResizeMode(QHeaderView.ResizeMode.Stretch)
        self.table.setEditTriggers(QTableWidget.EditTrigger.NoEditTriggers)
        self.table.verticalHeader().hide()
        self.log = QPlainTextEdit()
        self.log.setReadOnly(True)
        self.log.setMaximumBlockCount(1000)

        form = QFormLayout()
        form.addRow("Listen on", self.host)
        form.addRow("Port", self.port)
        form.addRow("Slots", self.slots)
        form.addRow("", self.require_key)
        address_row = QHBoxLayout()
        address_row.addWidget(self.address, 1)
        address_row.addWidget(self.copy_address)
        key_row = QHBoxLayout()
        key_row.addWidget(self.key, 1)
        key_row.addWidget(self.copy_key)
        form.addRow("Address", address_row)
        form.addRow("API key", key_row)
        layout = QVBoxLayout(self)
        layout.addLayout(form)
        layout.addWidget(self.start_button)
        layout.addWidget(self.status)
        layout.addWidget(self.load)
        layout.addWidget(QLabel("Loaded models"))
        layout.addWidget(self.loaded, 1)
        layout.addWidget(QLabel("Finished requests"))
        layout.addWidget(self.table, 2)
        layout.addWidget(QLabel("Log"))
        layout.addWidget(self.log, 1)
        layout.addWidget(self.buttons)
        self._key: str | None = None
        self._host_changed()
        line = self.fontMetrics().height()
        self.resize(48 * line, 40 * line)

    def _host_changed(self) -> None:
        loopback = is_loopback(self.host.currentData())
        # Anyone who can reach a wider address could use the model: never without the key.
        self.require_key.setChecked(not loopback or self.require_key.isChecked())
        self.require_key.setEnabled(loopback)

    # Actions ----------------------------------------------------------------------------------
    def config(self) -> ServerConfig:
        from deskllm.server.api_key import stored_key

        key = stored_key() if self.require_key.isChecked() else None
        return ServerConfig(host=self.host.currentData(), port=self.port.value(), api_key=key)

    def _start_or_stop(self) -> None:
        if self.bridge.server is not None:
            self.status.setText("Stopping…")
            self.start_button.setEnabled(False)
            self.bridge.stop_serving()
            return
        if self.window_.loaded_path is None:
            self._failed("Load a model first: the server serves the model loaded in the window.")
            return
        self._save_settings()
        config = self.config()
        self._key = config.api_key
        self.status.setText("Starting: loading the model with its slots…")
        self.start_button.setEnabled(False)
        self.bridge.start_serving(config, self.slots.value())

    def _save_settings(self) -> None:
        s = self.window_.settings
        new = dataclasses.replace(s, server_host=self.host.currentData(),
                                  server_port=self.port.value(),
                                  server_slots=self.slots.value())  # fmt: skip
        if new != s:
            self.window_.apply_settings(new)
            settings_mod.save(new)

    def _copy(self, text: str) -> None:
        QApplication.clipboard().setText(text)
        self.status.setText("Copied to the clipboard.")

    # State ------------------------------------------------------------------------------------
    def _url(self) -> str:
        server = self.bridge.server
        return server.url if server is not None else ""

    def _serving_changed(self, server) -> None:
        running = server is not None
        self.start_button.setEnabled(True)
        self.start_button.setText("&Stop server" if running else "&Start server")
        for widget in (self.host, self.port, self.slots, self.require_key):
            widget.setEnabled(not running)
        self.copy_address.setEnabled(running)
        self.copy_key.setEnabled(running and server.config.api_key is not None)
        if not running:
            self._host_changed()
            self.timer.stop()
            self.address.setText("—")
            self.key.setText("—")
            self.load.setText("")
            self.status.setText("Stopped.")
            return
        self._key = server.config.api_key
        self.address.setText(server.url)
        self.key.setText(self._key or "none (only this computer can connect)")
        self.status.setText(f"Serving {server.host.model_id} with {server.slots} slots. "
                            "Clients use the address as their OpenAI base URL.")  # fmt: skip
        self.timer.start()
        self.refresh()

    def _failed(self, reason: str) -> None:
        self.start_button.setEnabled(True)
        self.status.setText(reason)

    def refresh(self) -> None:
        server = self.bridge.server
        if server is None:
            return
        snap = server.snapshot()
        in_use = snap.slots_in_use(self.bridge.streaming)
        mine = " (one is this window's chat)" if self.bridge.streaming else ""
        self.load.setText(f"Requests in flight: {snap.running} answering, {snap.waiting} "
                          f"waiting · slots in use: {in_use} of {snap.slots}{mine}")  # fmt: skip
        self.loaded.show_rows(rows_of(self.window_))
        self._add_replies(snap.replies)
        for seq, line in server.metrics.log_since(self._log_seq):
            self._log_seq = seq
            self.log.appendPlainText(line)

    def _add_replies(self, replies) -> None:
        """Rows for the replies after the last one shown (the newest on top)."""
        start = 0
        for i in range(len(replies) - 1, -1, -1):
            if replies[i] is self._last_reply:
                start = i + 1
                break
        for r in replies[start:]:
            self.table.insertRow(0)
            cells = (
                time.strftime("%H:%M:%S", time.localtime(r.at)),
                f"{r.prompt_tokens} ({r.cached_tokens})",
                str(r.generated_tokens),
                _fmt(r.ttft_s, lambda v: f"{v * 1000:.0f} ms"),
                _fmt(r.tg_tps, lambda v: f"{v:.1f}"),
                r.finish_reason,
            )
            for column, text in enumerate(cells):
                self.table.setItem(0, column, QTableWidgetItem(text))
        while self.table.rowCount() > MAX_ROWS:
            self.table.removeRow(self.table.rowCount() - 1)
        if replies:
            self._last_reply = replies[-1]


def _fmt(value, how: Callable[[float], str]) -> str:
    return "—" if value is None else how(value)
