"""All Qt imports go through here, so the rest of gui/ names one module and a Qt binding
change touches one file (and a binding bug is worked around in one place)."""

import ctypes
import sys

from PySide6.QtCore import (
    QDate,
    QElapsedTimer,
    QEvent,
    QMimeData,
    QObject,
    QPoint,
    QPointF,
    QSettings,
    QSize,
    Qt,
    QThread,
    QTimer,
    QUrl,
    Signal,
    SignalInstance,
    Slot,
)
from PySide6.QtGui import (
    QAction,
    QActionGroup,
    QColor,
    QDesktopServices,
    QFont,
    QFontDatabase,
    QFontInfo,
    QIcon,
    QKeySequence,
    QPainter,
    QPalette,
    QPen,
    QPolygonF,
    QSyntaxHighlighter,
    QTextCharFormat,
    QTextCursor,
    QTextDocument,
    QTextFormat,
)
from PySide6.QtWidgets import (
    QAbstractItemView,
    QApplication,
    QCheckBox,
    QComboBox,
    QDateEdit,
    QDialog,
    QDialogButtonBox,
    QDoubleSpinBox,
    QFileDialog,
    QFormLayout,
    QFrame,
    QGroupBox,
    QHBoxLayout,
    QHeaderView,
    QInputDialog,
    QLabel,
    QLineEdit,
    QListWidget,
    QListWidgetItem,
    QMainWindow,
    QMenu,
    QMessageBox,
    QPlainTextEdit,
    QProgressBar,
    QPushButton,
    QScrollArea,
    QSizePolicy,
    QSpinBox,
    QSplitter,
    QTableWidget,
    QTableWidgetItem,
    QTabWidget,
    QTextBrowser,
    QToolButton,
    QVBoxLayout,
    QWidget,
)

__all__ = [
    "QAbstractItemView",
    "QAction",
    "QActionGroup",
    "QApplication",
    "QCheckBox",
    "QColor",
    "QComboBox",
    "QDate",
    "QDateEdit",
    "QDesktopServices",
    "QDialog",
    "QDialogButtonBox",
    "QDoubleSpinBox",
    "QElapsedTimer",
    "QEvent",
    "QFileDialog",
    "QFont",
    "QFontDatabase",
    "QFontInfo",
    "QFormLayout",
    "QFrame",
    "QGroupBox",
    "QHBoxLayout",
    "QHeaderView",
    "QIcon",
    "QKeySequence",
    "QInputDialog",
    "QLabel",
    "QLineEdit",
    "QListWidget",
    "QListWidgetItem",
    "QMainWindow",
    "QMenu",
    "QMimeData",
    "QMessageBox",
    "QObject",
    "QPainter",
    "QPalette",
    "QPen",
    "QPlainTextEdit",
    "QPoint",
    "QPointF",
    "QPolygonF",
    "QProgressBar",
    "QPushButton",
    "QScrollArea",
    "QSettings",
    "QSize",
    "QSizePolicy",
    "QSpinBox",
    "QSplitter",
    "QTableWidget",
    "QTableWidgetItem",
    "QTabWidget",
    "QThread",
    "QTimer",
    "QTextBrowser",
    "QSyntaxHighlighter",
    "QTextCharFormat",
    "QTextCursor",
    "QTextDocument",
    "QTextFormat",
    "QToolButton",
    "QUrl",
    "QVBoxLayout",
    "QWidget",
    "Qt",
    "Signal",
    "Slot",
]


def _emit_drops_a_true_reference() -> bool:
    """PySide6 6.12.0's SignalInstance.emit returns True without owning a reference to it, so
    each emit lowers True's reference count by one; on Pythons where True is not immortal
    (before 3.12) the process aborts ("bool_dealloc") after a few hundred emits, i.e. within
    one long streamed reply. Measured rather than assumed, so a fixed binding is left alone."""

    class _Probe(QObject):
        ping = Signal()

    probe, tries = _Probe(), 8
    before = sys.getrefcount(True)
    for _ in range(tries):
        probe.ping.emit()
    dropped = before - sys.getrefcount(True)
    for _ in range(max(0, dropped)):
        _incref(True)  # undo the probe's own damage
    return dropped >= tries


_incref = ctypes.pythonapi.Py_IncRef
_incref.argtypes = [ctypes.py_object]
_incref.restype = None

if _emit_drops_a_true_reference():
    _binding_emit = SignalInstance.emit

    def _emit(self, *args):
        result = _binding_emit(self, *args)
        if result is True:
            _incref(result)  # the reference the binding should have taken
        return result

    SignalInstance.emit = _emit


def _void_call_drops_a_none_reference() -> bool:
    """PySide6 6.12.0 on Python 3.11 also returns None from every void method (setText,
    processEvents, ...) without owning the reference, so a few thousand calls take None's count
    to zero and the process aborts ("none_dealloc"). Measured, as above."""
    probe, tries = QObject(), 64
    before = sys.getrefcount(None)
    for _ in range(tries):
        probe.setObjectName("probe")
    return before - sys.getrefcount(None) >= tries


# Wrapping every void method is not possible from Python, so None gets a cushion of references
# that a lifetime of calls cannot use up. Where None is immortal (3.12+) nothing drops and this
# never runs. The count is the object's first field; the result is checked and undone if not.
_NONE_CUSHION = 1 << 40

if _void_call_drops_a_none_reference():
    _none_refcnt = ctypes.c_ssize_t.from_address(id(None))
    _before = sys.getrefcount(None)
    _none_refcnt.value += _NONE_CUSHION
    if sys.getrefcount(None) - _before != _NONE_CUSHION:
        _none_refcnt.value -= _NONE_CUSHION

