"""EngineBridge: runs the blocking EngineClient / ChatSession calls on a worker QThread and
turns their events into Qt signals. Stop goes straight to the client (thread-safe)."""

from __future__ import annotations

import logging
from pathlib import Path

from deskllm.engine.client import EngineClient, EngineError
from deskllm.engine.protocol import Done, Error, Exited, LoadParams, Metrics, TextDelta
from deskllm.gui.qt import QObject, QThread, Signal, Slot
from deskllm.session import ChatSession
from deskllm.store import ConversationStore, open_database

log = logging.getLogger("deskllm.gui")


class _Worker(QObject):
    load_progress = Signal(float)
    loaded = Signal(object)  # Loaded
    load_failed = Signal(str)
    unloaded = Signal()
    delta = Signal(str, str)  # conversation id, text
    metrics = Signal(object)  # Metrics
    finished = Signal(str, object)  # conversation id, final event (Done | Error | Exited)

    def __init__(self, client: EngineClient, db_path: Path) -> None:
        super().__init__()
        self.client = client
        self.db_path = db_path
        self._session: ChatSession | None = None

    @property
    def session(self) -> ChatSession:
        # An SQLite connection belongs to the thread that opened it: this thread opens its own
        # (WAL lets it write while the GUI thread reads).
        if self._session is None:
            store = ConversationStore(open_database(self.db_path))
            self._session = ChatSession(self.client, store)
        return self._session

    @Slot(object)
    def load(self, params: LoadParams) -> None:
        try:
            self.loaded.emit(self.client.load(params, self.load_progress.emit))
        except EngineError as exc:
            self.load_failed.emit(str(exc))

    @Slot()
    def unload(self) -> None:
        self.client.unload()
        self.unloaded.emit()

    @Slot(str, str)
    def send(self, conversation_id: str, text: str) -> None:
        self._stream(conversation_id, self.session.send(conversation_id, text))

    @Slot(str)
    def regenerate(self, conversation_id: str) -> None:
        self._stream(conversation_id, self.session.reply(conversation_id))

    def _stream(self, conversation_id: str, events) -> None:
        final: object = Error(None, "the reply ended without a result")
        try:
            for event in events:
                if isinstance(event, TextDelta):
                    self.delta.emit(conversation_id, event.text)
                elif isinstance(event, Metrics):
                    self.metrics.emit(event)
                elif isinstance(event, Done | Error | Exited):
                    final = event
        except Exception as exc:  # keep the GUI alive whatever the core raised
            log.exception("chat failed")
            final = Error(None, str(exc))
        self.finished.emit(conversation_id, final)


class EngineBridge(QObject):
    """Owned by the main window. Call load()/send() from the GUI thread; its signals are
    emitted in the GUI thread (re-emitted from the worker thread's through queued
    connections), so slots and timers on the GUI side never run on the worker thread."""

    load_progress = Signal(float)
    loaded = Signal(object)  # Loaded
    load_failed = Signal(str)
    unloaded = Signal()
    delta = Signal(str, str)  # conversation id, text
    metrics = Signal(object)  # Metrics
    finished = Signal(str, object)  # conversation id, final event (Done | Error | Exited)

    _load = Signal(object)
    _unload = Signal()
    _send = Signal(str, str)
    _regenerate = Signal(str)

    def __init__(self, client: EngineClient, db_path: Path) -> None:
        super().__init__()
        self.client = client
        self.thread = QThread()
        self.thread.setObjectName("deskllm-engine-bridge")
        self.worker = _Worker(client, db_path)
        self.worker.moveToThread(self.thread)
        self._load.connect(self.worker.load)
        self._unload.connect(self.worker.unload)
        self._send.connect(self.worker.send)
        self._regenerate.connect(self.worker.regenerate)
        names = ("load_progress", "loaded", "load_failed", "unloaded", "delta", "metrics",
                 "finished")  # fmt: skip
        for name in names:
            getattr(self.worker, name).connect(getattr(self, name))
        self.thread.finished.connect(self.worker.deleteLater)
        self.thread.start()

    def load(self, params: LoadParams) -> None:
        self._load.emit(params)

    def unload(self) -> None:
        self._unload.emit()

    def send(self, conversation_id: str, text: str) -> None:
        self._send.emit(conversation_id, text)

    def regenerate(self, conversation_id: str) -> None:
        self._regenerate.emit(conversation_id)

    def stop(self) -> None:
        self.client.cancel()

    def shutdown(self) -> None:
        self.client.cancel()
        self.thread.quit()
        self.thread.wait(15000)
        self.client.close()
