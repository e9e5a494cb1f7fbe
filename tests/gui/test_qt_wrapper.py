"""deskllm.gui.qt: the one Qt import module, and its workaround for PySide6 6.12.0's emit."""

from __future__ import annotations

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
