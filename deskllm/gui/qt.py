"""All Qt imports go through here, so the rest of gui/ names one module and a Qt binding
change touches one file."""

from PySide6.QtCore import QObject, QSettings, Qt, QThread, QTimer, Signal, Slot
from PySide6.QtGui import QAction, QFont, QFontDatabase, QIcon, QKeySequence, QTextCursor
from PySide6.QtWidgets import (
    QApplication,
    QHBoxLayout,
    QLabel,
    QListWidget,
    QListWidgetItem,
    QMainWindow,
    QMessageBox,
    QPlainTextEdit,
    QProgressBar,
    QPushButton,
    QSplitter,
    QTextBrowser,
    QVBoxLayout,
    QWidget,
)

__all__ = [
    "QAction",
    "QApplication",
    "QFont",
    "QFontDatabase",
    "QHBoxLayout",
    "QIcon",
    "QKeySequence",
    "QLabel",
    "QListWidget",
    "QListWidgetItem",
    "QMainWindow",
    "QMessageBox",
    "QObject",
    "QPlainTextEdit",
    "QProgressBar",
    "QPushButton",
    "QSettings",
    "QSplitter",
    "QTextBrowser",
    "QTextCursor",
    "QThread",
    "QTimer",
    "QVBoxLayout",
    "QWidget",
    "Qt",
    "Signal",
    "Slot",
]
