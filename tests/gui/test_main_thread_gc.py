"""deskllm.gui.main_thread_gc: cycles holding Qt objects are collected on the GUI thread, never
on the worker thread that happened to allocate past Python's threshold."""

from __future__ import annotations

import gc
import threading
import weakref

from deskllm.gui.qt import QObject


def _churn_cycles(count: int) -> None:
    """What a busy worker does: allocate many container objects (each a small cycle), which
    with automatic collection on triggers collections on this thread."""
    for _ in range(count):
        cycle: list = []
        cycle.append(cycle)


def test_a_worker_thread_never_collects_a_cycle_holding_a_qt_object(qtbot, main_thread_gc):
    assert not gc.isenabled()
    collected_on: list[str] = []

    def record(phase: str, info: dict) -> None:
        if phase == "stop":
            collected_on.append(threading.current_thread().name)

    gc.callbacks.append(record)
    try:
        owner = QObject()
        owner.me = owner  # a cycle through the wrapper: only the collector can free it
        alive = weakref.ref(owner)
        del owner

        worker = threading.Thread(target=_churn_cycles, args=(200_000,), name="worker")
        worker.start()
        worker.join()
        assert alive() is not None, "the cycle was collected on the worker thread"
        assert "worker" not in collected_on

        qtbot.waitUntil(lambda: alive() is None, timeout=5000)
        assert collected_on and set(collected_on) == {threading.main_thread().name}
    finally:
        gc.callbacks.remove(record)


def test_check_collects_only_when_a_generation_is_past_its_threshold(main_thread_gc):
    gc.collect()
    assert main_thread_gc.check() == 0  # nothing due right after a full collection
    _churn_cycles(gc.get_threshold()[0] + 10)
    assert main_thread_gc.check() > 0  # the cycles just made are found


def test_uninstall_gives_collection_back_to_python(qapp):
    from deskllm.gui.main_thread_gc import MainThreadGc

    gc.enable()  # as before any collector was installed
    collector = MainThreadGc(qapp)
    assert not gc.isenabled()
    collector.uninstall()
    assert gc.isenabled()
    collector.deleteLater()
    gc.disable()  # back to what this test's autouse collector set
