"""ModelMenuButton: the chat header's model switcher. Its menu lists the installed models, each
with a fit badge (full GPU, partial GPU, CPU, too large) planned for this machine, the loaded
one checked; choosing one asks for the same load as the Models panel's Load button.

Under a "Remote" heading it lists the models of the registered remote endpoints as
NAME/MODEL, from the RemoteCatalog's cache (opening the menu never waits on the network; a
stale cache is refreshed in the background), and "Auto (local first)" while an endpoint
allows routing.

Badges read each file's header and the hardware report, so they are planned off the GUI thread
(TaskRunner) and filled in when they arrive; until then a model shows "…".

Signals:
    model_chosen(str): the user chose this model file (path) to chat with.
    chat_model_chosen(str): the user chose a model that needs no load for this chat: a remote
        NAME/MODEL, "auto", or the loaded local model for a chat that was remote.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import Future
from pathlib import Path

from deskllm.backends.names import AUTO, AUTO_TITLE, is_remote
from deskllm.documents.embeddings import EMBEDDING_ARCHITECTURES
from deskllm.gui.qt import QAction, QActionGroup, QMenu, QPoint, Qt, QToolButton, QWidget, Signal
from deskllm.gui.remote_catalog import RemoteCatalog
from deskllm.gui.tasks import TaskRunner
from deskllm.store import InstalledModel, ModelLibrary

FIT_BADGES = {"gpu": "full GPU", "partial": "partial GPU", "cpu": "CPU", "too_big": "too large"}
UNKNOWN_BADGE = "fit unknown"  # no hardware report, or a header that cannot be read
PENDING_BADGE = "…"

PlanSettings = Callable[[], tuple[int, str]]  # (n_ctx, kv_type) the next load would use


def _resolved(path: str | None) -> str | None:
    return str(Path(path).resolve()) if path else None


def same_file(a: str | None, b: str | None) -> bool:
    """Whether two model paths name one file (both given)."""
    return bool(a and b) and Path(a).resolve() == Path(b).resolve()


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
    chat_model: the open chat's model when it is remote (NAME/MODEL or "auto"), else None.
    """

    model_chosen = Signal(str)
    chat_model_chosen = Signal(str)

    def __init__(
        self,
        library: ModelLibrary,
        plan_settings: PlanSettings,
        parent: QWidget | None = None,
        catalog: RemoteCatalog | None = None,
    ) -> None:
        super().__init__(parent)
        self.library = library
        self.plan_settings = plan_settings
        self.catalog = catalog
        self.current: str | None = None
        self.chat_model: str | None = None
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
        self.menu().aboutToShow.connect(self._about_to_show)
        if catalog is not None:
            catalog.changed.connect(self.refresh)
        self.refresh()

    def _about_to_show(self) -> None:
        self.refresh()
        if self.catalog is not None and self.catalog.stale():
            self.catalog.refresh()  # in the background; the menu updates when it answers

    # Menu ------------------------------------------------------------------------------------
    def model_actions(self) -> list[QAction]:
        """The local models' actions (their data: the file's path)."""
        return [a for a in self.menu().actions() if a.data() and not is_remote(a.data())]

    def remote_actions(self) -> list[QAction]:
        """Auto and the remote models' actions (their data: "auto" or NAME/MODEL)."""
        return [a for a in self.menu().actions() if a.data() and is_remote(a.data())]

    def refresh(self) -> None:
        """Rebuild the menu from the library; plan the badges still missing."""
        menu = self.menu()
        for action in menu.actions():
            self.group.removeAction(action)
        menu.clear()
        # Embedding models index documents (the Documents tab); they cannot chat.
        models = [m for m in self.library.list() if m.architecture not in EMBEDDING_ARCHITECTURES]
        if not models:
            menu.addAction("No models installed: see the Models panel").setEnabled(False)
        for model in models:
            action = QAction(self._text(model), menu)
            action.setData(model.path)
            action.setCheckable(True)
            action.setChecked(model.path == self.current and self.chat_model is None)
            action.setEnabled(model.exists)
            action.setToolTip(self._tip(model))
            action.triggered.connect(lambda _checked=False, p=model.path: self._chosen(p))
            self.group.addAction(action)
            menu.addAction(action)
        self._add_remote(menu)
        menu.setToolTipsVisible(True)
        self._update_text()
        self._plan([m.path for m in models if m.exists])

    def _add_remote(self, menu: QMenu) -> None:
        endpoints = self.catalog.endpoints() if self.catalog is not None else []
        if not endpoints:
            return
        menu.addSection("Remote")
        choices: list[tuple[str | None, str, str]] = []  # (data, text, tooltip); None: a note
        if self.catalog.any_routing():
            target = self.catalog.routing_target()
            tip = "The local model answers; no remote model listed yet"
            if target:
                tip = (
                    f"The local model answers; a reply goes to {target} only when it must "
                    "(too long for the local context, a local failure, or when you ask)"
                )
            choices.append((AUTO, AUTO_TITLE, tip))
        for endpoint in endpoints:
            probe = self.catalog.probes.get(endpoint.name)
            if probe is None or not probe.models:
                why = "asking for its models…" if probe is None else (probe.error or "no models")
                choices.append((None, f"{endpoint.name}: {why}", endpoint.base_url))
                continue
            for model in probe.models:
                spec = f"{endpoint.name}/{model}"
                choices.append((spec, spec, f"{model} on {endpoint.base_url}: messages in "
                                "this chat are sent there"))  # fmt: skip
        for data, text, tip in choices:
            action = QAction(text, menu)
            action.setToolTip(tip)
            menu.addAction(action)
            if data is None:
                action.setEnabled(False)
                continue
            action.setData(data)
            action.setCheckable(True)
            action.setChecked(data == self.chat_model)
            action.triggered.connect(lambda _checked=False, d=data: self._chat_chosen(d))
            self.group.addAction(action)

    def _chat_chosen(self, model: str) -> None:
        if model != self.chat_model:
            self.chat_model_chosen.emit(model)

    def set_chat_model(self, model: str | None) -> None:
        """The open chat's model: a remote one (NAME/MODEL or "auto") is shown and checked."""
        self.chat_model = model if is_remote(model) else None
        for action in self.menu().actions():
            if action.isCheckable():
                data = action.data()
                action.setChecked(data == self.chat_model if self.chat_model
                                  else data == self.current)  # fmt: skip
        self._update_text()

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
        if self.chat_model is not None:
            name = AUTO_TITLE if self.chat_model == AUTO else self.chat_model
        text = f"Model: {name}" if name else "Choose a model"
        # Elided, so a long model name never sets the window's minimum width.
        self.setText(self.fontMetrics().elidedText(text, Qt.TextElideMode.ElideMiddle,
                                                   MAX_TEXT_PX))  # fmt: skip
        self.setToolTip(f"{text}\nSwitch the model for this chat (Ctrl+M)")

    def set_current(self, path: str | None) -> None:
        """The model now loaded (None: none is)."""
        self.current = _resolved(path)
        self.set_chat_model(self.chat_model)

    def open_menu(self) -> None:
        """Show the menu under the button without blocking (keyboard: Ctrl+M), the loaded
        model highlighted so arrows and Enter pick another."""
        menu = self.menu()
        menu.popup(self.mapToGlobal(QPoint(0, self.height())))
        actions = self.model_actions() + self.remote_actions()
        checked = next((a for a in actions if a.isChecked()), None)
        if checked is not None:
            menu.setActiveAction(checked)

    def _chosen(self, path: str) -> None:
        if _resolved(path) != self.current:
            self.model_chosen.emit(path)
        elif self.chat_model is not None:
            self.chat_model_chosen.emit(path)  # back to the loaded model: no load needed

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
        if self.catalog is not None:
            self.catalog.shutdown()
