"""deskllm.gui.qt: the one Qt import module, and its workaround for PySide6 6.12.0's emit."""

from __future__ import annotations

import os
import subprocess
import sys

from deskllm.gui.qt import QObject, Signal


class _Emitter(QObject):
    changed = Signal(str, object)


def test_emitting_does_not_use_up_references_to_true(qtbot):
    # Unpatched, each emit lowers True's reference count by one and a few hundred emits abort
    # the process (a streamed reply emits once per text chunk).
    emitter = _Emitter()
    got: list[str] = []
    emitter.changed.connect(lambda text, _obj: got.append(text))
    before = sys.getrefcount(True)
    for i in range(5000):
        emitter.changed.emit(str(i), None)
    assert len(got) == 5000
    assert abs(sys.getrefcount(True) - before) < 100


def test_a_long_session_of_void_calls_does_not_use_up_none(tmp_path):
    # PySide6 6.12.0 drops a reference to None on every void call; 20,000 calls (a long
    # session's worth) aborted the process with "none_dealloc" before the workaround.
    script = (
        "import sys\n"
        "from deskllm.gui.qt import QApplication, QLabel\n"
        "app = QApplication([])\n"
        "label = QLabel()\n"
        "for i in range(20000):\n"
        "    label.setText(str(i))\n"
        "    QApplication.processEvents()\n"
        "print('done', flush=True)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=300,
        env={**os.environ, "QT_QPA_PLATFORM": "offscreen"},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    assert "done" in done.stdout
