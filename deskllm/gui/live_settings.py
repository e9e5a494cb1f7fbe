"""LiveSettings: the app's current settings and one signal when they change, so each panel
subscribes to what it shows instead of being told by the main window or reading the file.

Signals:
    changed(Settings, dict): the new settings and {field name: "now" | "next_load"} for each
        field that changed.
"""

from __future__ import annotations

from deskllm.gui.qt import QObject, Signal
from deskllm.settings import Settings, changed_fields


class LiveSettings(QObject):
    changed = Signal(object, object)

    def __init__(self, settings: Settings, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.value = settings

    def replace(self, new: Settings) -> None:
        changes = changed_fields(self.value, new)
        self.value = new
        if changes:
            self.changed.emit(new, changes)
