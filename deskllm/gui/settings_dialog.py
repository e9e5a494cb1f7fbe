"""The Settings dialog, built from the settings' own declarations (deskllm.settings.specs):
engine settings apply when the model is next loaded, appearance and input at once. Values are
checked with Settings.validate(); the problems are shown and nothing is saved until they are
fixed.

Signals:
    saved(Settings): valid settings were written with settings.save().
"""

from __future__ import annotations

import dataclasses
from typing import Any

from deskllm import paths
from deskllm import settings as settings_mod
from deskllm.gui.qt import (
    QCheckBox,
    QComboBox,
    QDialog,
    QDialogButtonBox,
    QDoubleSpinBox,
    QFileDialog,
    QFormLayout,
    QGroupBox,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QPushButton,
    QSpinBox,
    QVBoxLayout,
    QWidget,
    Signal,
)
from deskllm.settings import Settings, SettingSpec

GROUP_TITLES = {
    "next_load": "Engine — applies when the model is next loaded",
    "now": "Models, appearance and input — apply at once",
}
SPIN_LIMIT = 1 << 30


class _FolderField(QWidget):
    """A folder path (or, `model_file`, a .gguf file's) with a Choose… button."""

    def __init__(self, value: str, placeholder: str, title: str,
                 model_file: bool = False) -> None:  # fmt: skip
        super().__init__()
        self.title = title
        self.model_file = model_file
        self.edit = QLineEdit(value)
        self.edit.setPlaceholderText(placeholder)
        browse = QPushButton("Choose…")
        browse.clicked.connect(self._choose)
        row = QHBoxLayout(self)
        row.setContentsMargins(0, 0, 0, 0)
        row.addWidget(self.edit, 1)
        row.addWidget(browse)

    def _choose(self) -> None:
        start = self.edit.text() or self.edit.placeholderText()
        if self.model_file:
            chosen = QFileDialog.getOpenFileName(self, self.title, start, "GGUF models (*.gguf)")[0]
        else:
            chosen = QFileDialog.getExistingDirectory(self, self.title, start)
        if chosen:
            self.edit.setText(chosen)

    def text(self) -> str:
        return self.edit.text().strip()

    def setText(self, text: str) -> None:  # noqa: N802 (Qt style, like QLineEdit)
        self.edit.setText(text)


def _widget(spec: SettingSpec, value: Any) -> QWidget:
    if spec.kind == "folder":
        return _FolderField(value, str(paths.models_dir()), spec.label)
    if spec.kind == "model_file":
        return _FolderField(value, "none", spec.label, model_file=True)
    if spec.choices:
        box = QComboBox()
        for choice, label in spec.choices.items():
            box.addItem(label, choice)
        box.setCurrentIndex(max(0, box.findData(value)))
        return box
    if isinstance(value, bool):
        check = QCheckBox(spec.label)
        check.setChecked(value)
        return check
    if isinstance(value, float):  # a price: a decimal field, checked by validate() too
        decimal = QDoubleSpinBox()
        decimal.setDecimals(4)
        decimal.setRange(0.0, float(SPIN_LIMIT))
        decimal.setValue(value)
        decimal.setSuffix(spec.suffix)
        if spec.special is not None:
            decimal.setSpecialValueText(spec.special[1])
        return decimal
    box = QSpinBox()
    # Wide ranges on purpose: Settings.validate() explains a value out of range in words.
    low = min(spec.minimum, 1) if spec.minimum is not None else 0
    box.setRange(low, spec.maximum or SPIN_LIMIT)
    box.setValue(value)
    box.setSuffix(spec.suffix)
    if spec.special is not None:
        box.setSpecialValueText(spec.special[1])
    if spec.maximum and spec.maximum > 100_000:
        box.setSingleStep(1024)
    return box


def _value(widget: QWidget) -> Any:
    if isinstance(widget, _FolderField):
        return widget.text()
    if isinstance(widget, QComboBox):
        return widget.currentData()
    if isinstance(widget, QCheckBox):
        return widget.isChecked()
    return widget.value()


class SettingsDialog(QDialog):
    """Attributes:
    widgets: the editor of each setting, by field name (QComboBox, QCheckBox, QSpinBox or
        a folder field)."""

    saved = Signal(object)

    def __init__(self, current: Settings, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setWindowTitle("Settings")
        self.current = current
        self.widgets: dict[str, QWidget] = {}
        groups = {key: QGroupBox(title) for key, title in GROUP_TITLES.items()}
        forms = {key: QFormLayout(box) for key, box in groups.items()}
        for name, spec in settings_mod.specs().items():
            widget = _widget(spec, getattr(current, name))
            self.widgets[name] = widget
            label = "" if isinstance(widget, QCheckBox) else spec.label
            forms[spec.applies].addRow(label, widget)
            if spec.help:
                widget.setToolTip(spec.help)
        for spec in settings_mod.specs().values():
            if spec.enabled_when is not None:
                other = self.widgets[spec.enabled_when[0]]
                if isinstance(other, QComboBox):
                    other.currentIndexChanged.connect(self._update_enabled)
        self.problems = QLabel()
        self.problems.setWordWrap(True)
        font = self.problems.font()
        font.setWeight(font.Weight.Bold)
        self.problems.setFont(font)
        self.problems.hide()
        self.buttons = QDialogButtonBox(
            QDialogButtonBox.StandardButton.Save | QDialogButtonBox.StandardButton.Cancel
        )
        self.buttons.accepted.connect(self.save)
        self.buttons.rejected.connect(self.reject)
        layout = QVBoxLayout(self)
        for box in groups.values():
            layout.addWidget(box)
        layout.addWidget(self.problems)
        layout.addWidget(self.buttons)
        self._update_enabled()

    def _update_enabled(self) -> None:
        for name, spec in settings_mod.specs().items():
            if spec.enabled_when is not None:
                other, wanted = spec.enabled_when
                self.widgets[name].setEnabled(_value(self.widgets[other]) == wanted)

    def set_value(self, name: str, value: Any) -> None:
        """Put `value` in the editor of setting `name` (as a user would)."""
        widget = self.widgets[name]
        if isinstance(widget, _FolderField):
            widget.setText(value)
        elif isinstance(widget, QComboBox):
            widget.setCurrentIndex(widget.findData(value))
        elif isinstance(widget, QCheckBox):
            widget.setChecked(value)
        else:
            widget.setValue(value)

    def edited(self) -> Settings:
        """The settings as edited (not yet checked or saved)."""
        values = {name: _value(widget) for name, widget in self.widgets.items()}
        return dataclasses.replace(self.current, **values)

    def save(self) -> None:
        """Check, then save and close; with problems, list them and stay open."""
        edited = self.edited()
        problems = edited.validate()
        if problems:
            text = "\n".join(f"• {p[0].upper()}{p[1:]}." for p in problems)
            self.problems.setText(f"Please fix before saving:\n{text}")
            self.problems.show()
            return
        try:
            settings_mod.save(edited)
        except OSError as exc:
            self.problems.setText(f"The settings could not be saved: {exc}")
            self.problems.show()
            return
        self.current = edited
        self.saved.emit(edited)
        self.accept()
