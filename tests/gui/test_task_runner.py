"""TaskRunner: a result that arrives after its widget was closed and deleted is dropped
quietly, never an error from the worker thread."""

from __future__ import annotations

import logging
import threading

from deskllm.gui.qt import QWidget
from deskllm.gui.tasks import TaskRunner


def test_a_result_after_the_runner_was_deleted_is_dropped(qtbot, caplog):
    caplog.set_level(logging.DEBUG)
    owner = QWidget()
    runner = TaskRunner("closing", owner)
    release, done = threading.Event(), threading.Event()
    delivered: list[int] = []
    future = runner.run(lambda: release.wait(10) and 42, lambda f: delivered.append(f.result()))
    future.add_done_callback(lambda _f: done.set())
    deleted: list[bool] = []
    runner.destroyed.connect(lambda: deleted.append(True))
    owner.deleteLater()
    qtbot.waitUntil(lambda: bool(deleted))
    release.set()
    assert done.wait(10) and future.result() == 42
    assert delivered == []
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR], caplog.text
    assert "a result arrived after the runner was deleted" in caplog.text
