"""ModelMenuButton: the chat header's model switcher. Its menu lists the installed models, each
with a fit badge (full GPU, partial GPU, CPU, too large) planned for this machine, the loaded
one checked; choosing one asks for the same load as the Models panel's Load button.

Badges read each file's header and the hardware report, so they are planned off the GUI thread
(TaskRunner) and filled in when they arrive; until then a model shows "…".

Signals:
    model_chosen(str): the user chose this model file (path) to chat with.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import Future
from pathlib import Path

from deskllm.gui.qt import QAction, QActionGroup, QMenu, QPoint, Qt, QToolButton, QWidget, Signal
from deskllm.gui.tasks import TaskRunner
from deskllm.store import InstalledModel, ModelLibrary

FIT_BADGES = {"gpu": "full GPU", "partial": "partial GPU", "cpu": "CPU", "too_big": "too large"}
UNKNOWN_BADGE = "fit unknown"  # no hardware report, or a header that cannot be read
PENDING_BADGE = "…"

PlanSettings = Callable[[], tuple[int, str]]  # (n_ctx, kv_type) the next load would use


def _resolved(path: str | None) -> str | None:
    return str(Path(path).resolve()) if path else None


def plan_badges(paths: list[str], n_ctx: int, kv_type: str) -> dict[str, tuple[str, str]]:
    """(badge, reason) per path, for this machine; runs on a task thread (probes once)."""
    from deskllm.planner.installed_fit import plan_installed
    from deskllm.planner.machine import current_hardware

    hardware = current_hardware()
    if hardware is None:
        return {p: (UNKNOWN_BADGE, "the hardware probe failed") for p in paths}
    plans = plan_installed(paths, hardware, n_ctx, kv_type)
    return {
        p: (FIT_BADGES[plan.fit], plan.reason) if plan else (UNKNOWN_BADGE, "unreadable header")
        for p, plan in plans.items()
    }


MAX_TEXT_PX = 200


class ModelMenuButton(QToolButton):
    """Attributes:
    badges: path → (badge, reason) of every model planned so far, for the settings planned at.
    current: the loaded model's path (resolved), checked in the menu; None when none is.
    """

    model_chosen = Signal(str)

    def __init__(
        self, library: ModelLibrary, plan_settings: PlanSettings, parent: QWidget | None = None
    ) -> None:
        super().__init__(parent)
        self.library = library
        self.plan_settings = plan_settings
        self.current: str | None = None
        self.badges: dict[str, tuple[str, str]] = {}
        self._planned_for: tuple[int, str] | None = None
        self._planning: set[str] = set()
        self._tasks = TaskRunner("model-menu", self)
        self.setPopupMode(QToolButton.ToolButtonPopupMode.InstantPopup)
        self.setAutoRaise(True)
        self.setMenu(QMenu(self))
        self.group = QActionGroup(self)
        self.group.setExclusive(True)
        # The library changes behind the menu's back (imports, downloads): read it each time.
        self.menu().aboutToShow.connect(self.refresh)
        self.refresh()

    # Menu ------------------------------------------------------------------------------------
    def model_actions(self) -> list[QAction]:
        return [a for a in self.menu().actions() if a.data()]

    def refresh(self) -> None:
        """Rebuild the menu from the library; plan the badges still missing."""
        menu = self.menu()
        for action in menu.actions():
            self.group.removeAction(action)
        menu.clear()
        models = self.library.list()
        if not models:
            menu.addAction("No models installed: see the Models panel").setEnabled(False)
        for model in models:
            action = QAction(self._text(model), menu)
            action.setData(model.path)
            action.setCheckable(True)
            action.setChecked(model.path == self.current)
            action.setEnabled(model.exists)
            action.setToolTip(self._tip(model))
            action.triggered.connect(lambda _checked=False, p=model.path: self._chosen(p))
            self.group.addAction(action)
            menu.addAction(action)
        menu.setToolTipsVisible(True)
        self._update_text()
        self._plan([m.path for m in models if m.exists])

    def _text(self, model: InstalledModel) -> str:
        if not model.exists:
            return f"{model.name} · {model.quant}  — file missing"
        badge = self.badges.get(model.path, (PENDING_BADGE, ""))[0]
        return f"{model.name} · {model.quant}  [{badge}]"

    def _tip(self, model: InstalledModel) -> str:
        reason = self.badges.get(model.path, ("", ""))[1]
        return f"{model.path}\n{reason}" if reason else model.path

    def _update_text(self) -> None:
        name = next((m.name for m in self.library.list() if m.path == self.current), None)
        text = f"Model: {name}" if name else "Choose a model"
        # Elided, so a long model name never sets the window's minimum width.
        self.setText(self.fontMetrics().elidedText(text, Qt.TextElideMode.ElideMiddle,
                                                   MAX_TEXT_PX))  # fmt: skip
        self.setToolTip(f"{text}\nSwitch the model for this chat (Ctrl+M)")

    def set_current(self, path: str | None) -> None:
        """The model now loaded (None: none is)."""
        self.current = _resolved(path)
        for action in self.model_actions():
            action.setChecked(action.data() == self.current)
        self._update_text()

    def open_menu(self) -> None:
        """Show the menu under the button without blocking (keyboard: Ctrl+M), the loaded
        model highlighted so arrows and Enter pick another."""
        menu = self.menu()
        menu.popup(self.mapToGlobal(QPoint(0, self.height())))
        checked = next((a for a in self.model_actions() if a.isChecked()), None)
        if checked is not None:
            menu.setActiveAction(checked)

    def _chosen(self, path: str) -> None:
        if _resolved(path) != self.current:
            self.model_chosen.emit(path)

    # Badges ----------------------------------------------------------------------------------
    def _plan(self, paths: list[str]) -> None:
        settings = self.plan_settings()
        if settings != self._planned_for:  # other context or KV type: every badge changes
            self.badges.clear()
            self._planning.clear()
            self._planned_for = settings
        todo = [p for p in paths if p not in self.badges and p not in self._planning]
        if not todo:
            return
        self._planning.update(todo)
        n_ctx, kv_type = settings
        self._tasks.run(
            lambda: plan_badges(todo, n_ctx, kv_type),
            lambda future: self._planned(future, settings, todo),
        )

    def _planned(self, future: Future, settings: tuple[int, str], paths: list[str]) -> None:
        self._planning.difference_update(paths)
        if settings != self._planned_for:
            return  # planned for settings changed since; a newer plan is on its way
        try:
            self.badges.update(future.result())
        except Exception as exc:  # a plan must never break the menu: say it could not
            self.badges.update({p: (UNKNOWN_BADGE, str(exc)) for p in paths})
        by_path = {m.path: m for m in self.library.list()}
        for action in self.model_actions():
            model = by_path.get(action.data())
            if model is not None:
                action.setText(self._text(model))
                action.setToolTip(self._tip(model))

    def shutdown(self) -> None:
        self._tasks.shutdown(wait=False)
