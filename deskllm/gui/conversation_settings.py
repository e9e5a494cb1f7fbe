"""Per-conversation settings: the model, the system prompt and the sampling settings.

The dialog only reads and returns values; the chat panel stores them with
ConversationStore.update(system_prompt=..., model=..., sampling=...).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from deskllm.engine.domain import Sampling
from deskllm.gui.qt import (
    QComboBox,
    QDialog,
    QDialogButtonBox,
    QDoubleSpinBox,
    QFormLayout,
    QPlainTextEdit,
    QSpinBox,
    QVBoxLayout,
    QWidget,
)
from deskllm.store import Conversation, InstalledModel

# name: (label, minimum, maximum, step, decimals); decimals 0 is an integer field.
SAMPLING_FIELDS: dict[str, tuple[str, float, float, float, int]] = {
    "temperature": ("Temperature", 0.0, 2.0, 0.05, 2),
    "top_p": ("Top P", 0.0, 1.0, 0.01, 2),
    "top_k": ("Top K (0: off)", 0, 1000, 1, 0),
    "min_p": ("Min P", 0.0, 1.0, 0.01, 2),
    "repeat_penalty": ("Repeat penalty", 0.5, 2.0, 0.01, 2),
    "max_tokens": ("Max tokens", 1, 131072, 64, 0),
    "seed": ("Seed", -1, 2**31 - 1, 1, 0),
    "reasoning_budget": ("Thinking budget (tokens; 0: no limit)", 0, 131072, 256, 0),
}
# Sampling.think: what a reasoning model's template is told (None: its own default).
THINK_CHOICES = (("Model's default", None), ("Off", "off"), ("On", "on"), ("Low effort", "low"),
                 ("Medium effort", "medium"), ("High effort", "high"))  # fmt: skip


class ConversationSettingsDialog(QDialog):
    """Attributes:
    fields: the sampling spin boxes by Sampling field name.
    """

    def __init__(
        self,
        conversation: Conversation,
        models: list[InstalledModel],
        parent: QWidget | None = None,
    ) -> None:
        super().__init__(parent)
        self.setWindowTitle(f"Chat settings — {conversation.title}")
        self.conversation = conversation
        form = QFormLayout()
        self.model = QComboBox()
        for m in models:
            label = m.name if m.quant in m.name else f"{m.name} ({m.quant})"
            self.model.addItem(label, m.path)
        if conversation.model and self.model.findData(conversation.model) < 0:
            self.model.addItem(Path(conversation.model).name, conversation.model)
        self.model.setCurrentIndex(max(0, self.model.findData(conversation.model)))
        form.addRow("Model", self.model)
        self.system_prompt = QPlainTextEdit(conversation.system_prompt)
        self.system_prompt.setPlaceholderText("Optional: how the assistant should behave")
        self.system_prompt.setMaximumHeight(6 * self.fontMetrics().lineSpacing())
        form.addRow("System prompt", self.system_prompt)
        self.fields: dict[str, QSpinBox | QDoubleSpinBox] = {}
        for name, (label, low, high, step, decimals) in SAMPLING_FIELDS.items():
            box = QSpinBox() if decimals == 0 else QDoubleSpinBox(decimals=decimals)
            box.setRange(low, high)
            box.setSingleStep(step)
            self.fields[name] = box
            form.addRow(label, box)
        self.fields["seed"].setSpecialValueText("random")
        self.think = QComboBox()
        self.think.setToolTip("For reasoning models: whether they think before answering, and "
                              "how hard, where their chat template takes it")  # fmt: skip
        for label, value in THINK_CHOICES:
            self.think.addItem(label, value)
        form.addRow("Thinking", self.think)
        self._show_sampling(Sampling.from_dict(conversation.sampling))

        self.buttons = QDialogButtonBox(
            QDialogButtonBox.StandardButton.Ok
            | QDialogButtonBox.StandardButton.Cancel
            | QDialogButtonBox.StandardButton.RestoreDefaults
        )
        self.buttons.accepted.connect(self.accept)
        self.buttons.rejected.connect(self.reject)
        defaults = self.buttons.button(QDialogButtonBox.StandardButton.RestoreDefaults)
        defaults.setToolTip("Sampling settings back to deskllm's defaults")
        defaults.clicked.connect(lambda: self._show_sampling(Sampling()))
        layout = QVBoxLayout(self)
        layout.addLayout(form)
        layout.addWidget(self.buttons)

    def _show_sampling(self, sampling: Sampling) -> None:
        for name, box in self.fields.items():
            box.setValue(getattr(sampling, name))
        self.think.setCurrentIndex(max(0, self.think.findData(sampling.think)))

    def sampling(self) -> dict[str, Any]:
        """The conversation's sampling dict with the edited fields (other keys kept)."""
        return dict(self.conversation.sampling) | {
            name: box.value() for name, box in self.fields.items()
        } | {"think": self.think.currentData()}

    def values(self) -> dict[str, Any]:
        """Keyword arguments for ConversationStore.update."""
        return {
            "system_prompt": self.system_prompt.toPlainText().strip(),
            "model": self.model.currentData() or self.conversation.model,
            "sampling": self.sampling(),
        }
