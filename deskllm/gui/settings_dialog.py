"""The Settings dialog: engine settings (apply when the model is next loaded) and appearance
and input (apply at once). Values are checked with Settings.validate(); the problems are shown
and nothing is saved until they are fixed.

Signals:
    saved(Settings): valid settings were written with settings.save().
"""

from __future__ import annotations

import dataclasses

from deskllm import paths
from deskllm import settings as settings_mod
from deskllm.gui.chat_input import SEND_KEYS
from deskllm.gui.qt import (
    QCheckBox,
    QComboBox,
    QDialog,
    QDialogButtonBox,
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
from deskllm.settings import GPU_OFFLOAD_MODES, KV_TYPES, Settings

GPU_MODE_LABELS = {"auto": "Automatic", "manual": "Manual: a number of layers", "off": "Off"}
THEME_LABELS = {"system": "Follow the system", "light": "Light", "dark": "Dark"}
SEND_KEY_LABELS = {"enter": "Enter sends, Shift+Enter new line",
                   "ctrl+enter": "Ctrl+Enter sends, Enter new line"}  # fmt: skip


def _combo(labels: dict[str, str], current: str) -> QComboBox:
    box = QComboBox()
    for value, label in labels.items():
        box.addItem(label, value)
    box.setCurrentIndex(max(0, box.findData(current)))
    return box


def _spin(low: int, high: int, value: int, suffix: str = "") -> QSpinBox:
    box = QSpinBox()
    box.setRange(low, high)
    box.setValue(value)
    box.setSuffix(suffix)
    return box


class SettingsDialog(QDialog):
    saved = Signal(object)

    def __init__(self, current: Settings, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setWindowTitle("Settings")
        self.current = current
        engine = QGroupBox("Engine — applies when the model is next loaded")
        form = QFormLayout(engine)
        self.models_dir = QLineEdit(current.models_dir)
        self.models_dir.setPlaceholderText(str(paths.models_dir()))
        browse = QPushButton("Choose…")
        browse.clicked.connect(self._choose_models_dir)
        row = QHBoxLayout()
        row.addWidget(self.models_dir, 1)
        row.addWidget(browse)
        form.addRow("Models folder", row)
        self.threads = _spin(0, 1024, current.n_threads)
        self.threads.setSpecialValueText("Automatic (one per physical core)")
        form.addRow("CPU threads", self.threads)
        # Wide ranges on purpose: Settings.validate() explains a bad value in words.
        self.n_ctx = _spin(1, 1 << 20, current.n_ctx, " tokens")
        self.n_ctx.setSingleStep(1024)
        form.addRow("Default context length", self.n_ctx)
        self.kv_type = QComboBox()
        self.kv_type.addItems(list(KV_TYPES))
        self.kv_type.setCurrentText(current.kv_type)
        form.addRow("KV cache type", self.kv_type)
        self.flash_attn = QCheckBox("Flash attention")
        self.flash_attn.setChecked(current.flash_attn)
        form.addRow("", self.flash_attn)
        self.gpu_mode = _combo({m: GPU_MODE_LABELS[m] for m in GPU_OFFLOAD_MODES},
                               current.gpu_offload)  # fmt: skip
        self.gpu_layers = _spin(-1, 999, current.n_gpu_layers, " layers")
        self.gpu_layers.setSpecialValueText("all layers")
        self.gpu_mode.currentIndexChanged.connect(self._gpu_mode_changed)
        form.addRow("GPU offload", self.gpu_mode)
        form.addRow("GPU layers", self.gpu_layers)
        self.kv_ram = _spin(0, 1 << 20, current.kv_ram_budget_mb, " MiB")
        form.addRow("Prompt cache in RAM", self.kv_ram)
        self.kv_disk = _spin(0, 1 << 24, current.kv_disk_budget_mb, " MiB")
        form.addRow("Prompt cache on disk", self.kv_disk)

        now = QGroupBox("Appearance and input — apply at once")
        form_now = QFormLayout(now)
        self.send_key = _combo({k: SEND_KEY_LABELS[k] for k in SEND_KEYS}, current.send_key)
        form_now.addRow("Send key", self.send_key)
        self.theme = _combo(THEME_LABELS, current.theme)
        form_now.addRow("Theme", self.theme)

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
        layout.addWidget(engine)
        layout.addWidget(now)
        layout.addWidget(self.problems)
        layout.addWidget(self.buttons)
        self._gpu_mode_changed()

    def _gpu_mode_changed(self) -> None:
        self.gpu_layers.setEnabled(self.gpu_mode.currentData() == "manual")

    def _choose_models_dir(self) -> None:
        chosen = QFileDialog.getExistingDirectory(
            self, "Models folder", self.models_dir.text() or self.models_dir.placeholderText()
        )
        if chosen:
            self.models_dir.setText(chosen)

    def edited(self) -> Settings:
        """The settings as edited (not yet checked or saved)."""
        return dataclasses.replace(
            self.current,
            models_dir=self.models_dir.text().strip(),
            n_threads=self.threads.value(),
            n_ctx=self.n_ctx.value(),
            kv_type=self.kv_type.currentText(),
            flash_attn=self.flash_attn.isChecked(),
            gpu_offload=self.gpu_mode.currentData(),
            n_gpu_layers=self.gpu_layers.value(),
            kv_ram_budget_mb=self.kv_ram.value(),
            kv_disk_budget_mb=self.kv_disk.value(),
            send_key=self.send_key.currentData(),
            theme=self.theme.currentData(),
        )

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
