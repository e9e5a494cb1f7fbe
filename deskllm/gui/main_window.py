"""The main window: conversations on the left; Chat, Models, Hardware and Documents panels on the
right; the model and the live figures in the status bar. It wires the panels to each other and
to the EngineBridge, loads models, and keeps window state in the per-user gui.ini.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from deskllm.backends.routing import escalate_share
from deskllm.documents.embeddings import EMBEDDING_ARCHITECTURES
from deskllm.documents.service import Documents
from deskllm.engine.client import CRASH_LIMIT
from deskllm.engine.domain import Loaded, LoadParams
from deskllm.engine.errors import ErrorKind
from deskllm.engine.load_defaults import DEFAULT_CTX_CAP
from deskllm.engine.reply import Reply
from deskllm.gui.app_model import AppModel
from deskllm.gui.chat_panel import NEW_TITLE, ChatPanel
from deskllm.gui.documents_panel import DocumentsPanel
from deskllm.gui.elided_label import ElidedLabel
from deskllm.gui.engine_bridge import EngineBridge
from deskllm.gui.first_run_card import FirstRunCard
from deskllm.gui.hardware_panel import HardwarePanel
from deskllm.gui.hint_banner import HintBanner
from deskllm.gui.live_settings import LiveSettings
from deskllm.gui.loaded_models import LoadedModelsDialog
from deskllm.gui.model_menu import same_file
from deskllm.gui.models_panel import ModelsPanel
from deskllm.gui.qt import (
    QAction,
    QApplication,
    QFrame,
    QKeySequence,
    QLabel,
    QMainWindow,
    QProgressBar,
    QSettings,
    QSplitter,
    Qt,
    QTabWidget,
    QTimer,
    QVBoxLayout,
    QWidget,
)
from deskllm.gui.readouts import LiveReadouts
from deskllm.gui.settings_dialog import SettingsDialog
from deskllm.gui.shortcuts_dialog import show_shortcuts
from deskllm.gui.sidebar import ConversationSidebar
from deskllm.gui.startup_timing import FirstExpose
from deskllm.gui.theme import apply_theme
from deskllm.gui.tools_dialog import ToolServersDialog
from deskllm.gui.usage_dialog import UsageDialog
from deskllm.loader import params_from_settings
from deskllm.loader.params import cost_rates_from_settings
from deskllm.planner.machine import remember_hardware
from deskllm.remote.keys import LazyKeyStore
from deskllm.settings import Settings
from deskllm.store import Conversation, ConversationStore, ModelLibrary
from deskllm.tools.advice import small_model_note
from deskllm.tools.mcp_config import McpConfig

SETTINGS_NOTE_MS = 5000  # how long "Settings saved." stays in the status bar

MODELS_HINT = (
    "You are chatting with the small starter model, so that deskllm works offline from the "
    "first minute. Larger models answer much better: see the <a href='models'>Models</a> panel."
)


class MainWindow(QMainWindow):
    def __init__(
        self,
        store: ConversationStore,
        bridge: EngineBridge,
        model_path: str,
        gui_state: QSettings,
        settings: Settings | None = None,
        library: ModelLibrary | None = None,
        load_overrides: dict[str, Any] | None = None,
    ) -> None:
        """`settings`: the user's (the app reads the file; default: the defaults).
        `load_overrides`: LoadParams fields the app fixes whatever the settings say."""
        super().__init__()
        self.store = store
        self.bridge = bridge
        self.model_path = model_path  # the model the next load uses
        self.gui_state = gui_state
        self.live_settings = LiveSettings(settings or Settings(), self)
        self.load_overrides = dict(load_overrides or {})
        self.library = library or ModelLibrary(store.db)
        self.loaded_path: str | None = None
        self.settings_dialog: SettingsDialog | None = None
        self.usage_dialog: UsageDialog | None = None
        self.server_panel = None  # gui.server_panel.ServerPanel, made when first opened
        self.setWindowTitle("deskllm")
        self._build()
        self._build_menus()
        self._connect()
        self._restore_state()

    # Layout ----------------------------------------------------------------------------------
    def _build(self) -> None:
        self.sidebar = ConversationSidebar(self.store)
        self.chat = ChatPanel(self.store, self.bridge, self.library, self.ensure_model,
                              plan_settings=self._plan_settings)  # fmt: skip
        self.chat.input.set_send_key(self.settings.send_key)
        self.models = ModelsPanel(self.library, self.live_settings)
        self.hardware = HardwarePanel()
        # Chat with documents: the collections, indexed here, searched by the chat's replies.
        self.documents = Documents(self.bridge.db_path)
        self.bridge.documents = self.documents
        self.documents_panel = DocumentsPanel(self.documents)
        # A benchmark frees the loaded model while it runs and loads it again after it.
        self.hardware.app_model = AppModel(self.bridge, lambda: self.loaded_path, self.load_model)
        # The planner (load checks, Discover's fit badges) reuses the panel's report instead
        # of probing again.
        self.hardware.report_ready.connect(remember_hardware)
        self.tabs = QTabWidget()
        self.tabs.setDocumentMode(True)
        self.tabs.addTab(self.chat, "Chat")
        self.tabs.addTab(self.models, "Models")
        self.tabs.addTab(self.hardware, "Hardware")
        self.tabs.addTab(self.documents_panel, "Documents")
        self.chat.docs_button.attach(self.documents, lambda: self.documents_panel.collections,
                                     lambda: self.tabs.setCurrentWidget(self.documents_panel))
        self.documents_panel.collections_changed.connect(self.chat.docs_button.refresh)
        self.chat.attachments.set_documents(self.documents)
        # MCP tools: the servers of mcp.json (values of env and headers in the keyring), the
        # step limit and call timeout from the settings.
        # The window's API server loads another installed model a request names with the
        # settings the window loads its own with.
        self.bridge.params_for = lambda path: params_from_settings(self.settings, path,
                                                                   **self.load_overrides)
        self.bridge.mcp_config = McpConfig(secrets=LazyKeyStore())
        self.bridge.tool_limits = lambda: (self.settings.tool_steps,
                                           float(self.settings.tool_timeout_s))  # fmt: skip
        self.tool_servers_dialog: ToolServersDialog | None = None
        self.loaded_models_dialog: LoadedModelsDialog | None = None
        tools = self.chat.tools_button
        tools.config = self.bridge.mcp_config
        tools.open_settings = self.open_tool_servers
        tools.model_note = lambda: (small_model_note(self.chat.model_button.current)
                                    if self.chat.model_button.current else None)  # fmt: skip
        tools.set_conversation(self.chat.conversation_id)
        self.documents_panel.embedding_models = lambda: [
            (m.name, Path(m.path)) for m in self.library.list()
            if m.architecture in EMBEDDING_ARCHITECTURES and m.exists
        ]  # fmt: skip
        self.hint = HintBanner(MODELS_HINT, "hints/models_panel_dismissed", self.gui_state)
        self.first_run = FirstRunCard(self.gui_state)
        self.chat.add_notice(self.first_run)
        # A model whose chat template was refused chats in ChatML: said above the chat, not
        # in a tooltip, while that model is loaded.
        self.template_note = self._notice()
        # A failed reply or engine: said above the chat until the engine works again (in the
        # status bar it timed out, or stayed over the next reply's readouts).
        self.engine_banner = self._notice()
        right = QWidget()
        right_layout = QVBoxLayout(right)
        right_layout.setContentsMargins(0, 6, 6, 0)
        right_layout.addWidget(self.hint)
        right_layout.addWidget(self.tabs, 1)

        self.splitter = QSplitter()
        self.splitter.addWidget(self.sidebar)
        self.splitter.addWidget(right)
        self.splitter.setStretchFactor(1, 1)
        self.splitter.setChildrenCollapsible(False)
        self.setCentralWidget(self.splitter)

        self.model_label = ElidedLabel()
        self.load_bar = QProgressBar(maximum=100)
        self.load_bar.setMaximumWidth(12 * self.fontMetrics().height())
        self.load_bar.hide()
        self.readouts = LiveReadouts()
        self.statusBar().addWidget(self.model_label, 1)
        self.statusBar().addWidget(self.load_bar)
        self.statusBar().addPermanentWidget(self.readouts)
        self.server_status = QLabel()  # shown while the local API server runs
        self.server_status.hide()
        self.statusBar().addPermanentWidget(self.server_status)
        self.server_timer = QTimer(self)
        self.server_timer.setInterval(1000)
        self.server_timer.timeout.connect(self._show_server_status)

    def _build_menus(self) -> None:
        """Every action of the window, each with a mnemonic (Alt+letter) and the frequent ones
        with a shortcut; Help → Keyboard shortcuts lists them from these actions. Keys the
        message box edits with (Ctrl+K deletes to the line's end) are left to it."""
        chat, sidebar = self.menuBar().addMenu("&Chat"), self.sidebar
        self._action(chat, "&New chat", self.new_conversation, QKeySequence.StandardKey.New)
        self._action(chat, "Search c&hats", self.focus_search, QKeySequence.StandardKey.Find)
        self._action(chat, "Go to &message box", self.focus_input, QKeySequence("Ctrl+L"))
        chat.addSeparator()
        self._action(chat, "&Rename chat", sidebar.rename_current, QKeySequence("F2"))
        self._action(chat, "Re&generate reply", self.chat.regenerate, QKeySequence("Ctrl+R"))
        self._action(chat, "Chat &settings…", self.chat.open_settings)
        self._action(chat, "&Delete chat…", sidebar.delete_current)
        chat.addSeparator()
        self._action(chat, "Export as Mar&kdown…", lambda: sidebar.export_current("markdown"))
        self._action(chat, "Export as &JSON…", lambda: sidebar.export_current("json"))
        self._action(chat, "&Import conversation…", sidebar.import_file,
                     QKeySequence.StandardKey.Open)  # fmt: skip
        chat.addSeparator()
        self._action(chat, "Se&ttings…", self.open_settings, QKeySequence("Ctrl+,"))
        self._action(chat, "T&ool servers…", self.open_tool_servers)
        chat.addSeparator()
        self._action(chat, "&Quit", self.close, QKeySequence.StandardKey.Quit)
        engine = self.menuBar().addMenu("&Engine")
        self._action(engine, "&Restart engine", self.restart_engine, QKeySequence("Ctrl+Shift+R"))
        self._action(engine, "Switch &model…", self.switch_model, QKeySequence("Ctrl+M"))
        self._action(engine, "Remote &engines…", self.chat.open_remote_engines)
        self._action(engine, "Local API &server…", self.open_server_panel)
        self._action(engine, "&Loaded models…", self.open_loaded_models)
        view = self.menuBar().addMenu("&View")
        for index, name in enumerate(("&Chat", "&Models", "&Hardware", "&Documents")):
            # triggered(bool) passes `checked` first: it must not land in `i`.
            show = lambda _checked=False, i=index: self.tabs.setCurrentIndex(i)  # noqa: E731
            self._action(view, name, show, QKeySequence(f"Ctrl+{index + 1}"))
        view.addSeparator()
        self._action(view, "&Usage…", self.open_usage)
        # Speculative decoding made visible: the text drafts wrote, kept across starts.
        self.colour_drafted = self._action(view, "Colour drafted te&xt", self._colour_drafted)
        self.colour_drafted.setCheckable(True)
        self.colour_drafted.setToolTip("Highlight the text of replies that speculative "
                                       "decoding drafted and the model accepted")  # fmt: skip
        self.colour_drafted.setChecked(self.gui_state.value("chat/colour_drafted", False,
                                                            type=bool))  # fmt: skip
        self.chat.set_colour_drafted(self.colour_drafted.isChecked())
        help_menu = self.menuBar().addMenu("&Help")
        self._action(help_menu, "&Keyboard shortcuts", lambda: show_shortcuts(self),
                     QKeySequence.StandardKey.HelpContents)  # fmt: skip

    def _colour_drafted(self, on: bool) -> None:
        self.gui_state.setValue("chat/colour_drafted", on)
        self.chat.set_colour_drafted(on)

    def focus_search(self) -> None:
        self.sidebar.search.setFocus(Qt.FocusReason.ShortcutFocusReason)
        self.sidebar.search.selectAll()

    def focus_input(self) -> None:
        self.tabs.setCurrentWidget(self.chat)
        self.chat.input.setFocus(Qt.FocusReason.ShortcutFocusReason)

    def _action(self, menu, text: str, slot, shortcut=None) -> QAction:
        action = QAction(text, self)
        if shortcut is not None:
            action.setShortcut(shortcut)
        action.triggered.connect(slot)
        menu.addAction(action)
        return action

    def _connect(self) -> None:
        self.sidebar.selected.connect(self._show_conversation)
        self.sidebar.new_requested.connect(self.new_conversation)
        self.sidebar.deleted.connect(self._conversation_deleted)
        self.sidebar.renamed.connect(lambda _cid: self.chat.update_header())
        self.chat.stream_started.connect(self._stream_started)
        self.chat.turn_finished.connect(self._turn_finished)
        self.chat.conversation_changed.connect(lambda cid: self.sidebar.refresh(select=cid))
        self.models.load_requested.connect(self.use_model)
        self.chat.model_button.model_chosen.connect(self.use_model)
        self.models.unload_requested.connect(self.bridge.unload)
        self.hint.link_activated.connect(lambda _href: self.tabs.setCurrentWidget(self.models))
        self.first_run.discover_requested.connect(self.show_discover)
        self.live_settings.changed.connect(self._settings_changed)
        bridge = self.bridge
        bridge.load_progress.connect(self._load_progress)
        bridge.loaded.connect(self._model_loaded)
        bridge.load_failed.connect(self._model_failed)
        bridge.unloaded.connect(self._model_unloaded)
        bridge.metrics.connect(self.readouts.show_metrics)
        bridge.serving.connect(self._serving_changed)
        bridge.serve_failed.connect(lambda reason: self.statusBar().showMessage(reason, 15000))
        bridge.escalate_share = lambda: escalate_share(self.settings.router_escalate)

    # State -----------------------------------------------------------------------------------
    def _restore_state(self) -> None:
        geometry = self.gui_state.value("window/geometry")
        if geometry is None or not self.restoreGeometry(geometry):
            self._first_size()
        splitter = self.gui_state.value("window/splitter")
        if splitter is not None:
            self.splitter.restoreState(splitter)
        else:
            line = self.fontMetrics().height()
            self.splitter.setSizes([16 * line, 54 * line])
        self.tabs.setCurrentIndex(self.gui_state.value("window/tab", 0, type=int))
        last = self.gui_state.value("chat/last_conversation")
        newest = self.store.list(limit=1)  # one row; the whole list is read in the background
        current = last if last and self.store.exists(last) else next((c.id for c in newest), None)
        if current is None:
            self.new_conversation()
        else:
            self.sidebar.refresh(select=current)
            self._show_conversation(current)

    def _notice(self) -> QLabel:
        """A framed line above the chat, hidden until there is something to say."""
        label = QLabel(wordWrap=True)
        label.setFrameShape(QFrame.Shape.StyledPanel)
        label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        label.hide()
        self.chat.add_notice(label)
        return label

    def _first_size(self) -> None:
        """The first start: most of the screen (3/4 of its width, 4/5 of its height), at least
        70 × 45 text lines where the screen has room, centred; a fixed size was cramped on a
        large screen (title cut) and too large on a small one."""
        screen = self.screen() or QApplication.primaryScreen()
        line = self.fontMetrics().height()  # sized in text lines: right at any scaling
        if screen is None:
            self.resize(70 * line, 45 * line)
            return
        room = screen.availableGeometry()
        width = min(max(room.width() * 3 // 4, 70 * line), room.width())
        height = min(max(room.height() * 4 // 5, 45 * line), room.height())
        self.resize(width, height)
        self.move(room.x() + (room.width() - width) // 2, room.y() + (room.height() - height) // 2)

    def closeEvent(self, event) -> None:  # noqa: N802 (Qt name)
        self.gui_state.setValue("window/geometry", self.saveGeometry())
        self.gui_state.setValue("window/splitter", self.splitter.saveState())
        self.gui_state.setValue("window/tab", self.tabs.currentIndex())
        if self.chat.conversation_id:
            self.gui_state.setValue("chat/last_conversation", self.chat.conversation_id)
        self.gui_state.sync()
        self.chat.model_button.shutdown()
        self.sidebar.shutdown()
        self.first_run.shutdown()
        self.models.shutdown()
        self.documents_panel.shutdown()
        self.chat.attachments.shutdown()
        if self.tool_servers_dialog is not None:
            self.tool_servers_dialog.tasks.shutdown(wait=False)
        self.documents.close()
        super().closeEvent(event)

    # Model -----------------------------------------------------------------------------------
    @property
    def settings(self) -> Settings:
        return self.live_settings.value

    @property
    def load_params(self) -> LoadParams:
        """What the next load asks for: the current model with the settings as they are now
        (the loader resolves automatic GPU offload and the defaults at load time)."""
        return params_from_settings(self.settings, self.model_path, **self.load_overrides)

    def load_model(self, model_path: str | None = None) -> None:
        """Load `model_path` (default: the current one) with the current settings."""
        if model_path is not None:
            self.model_path = model_path
        path = self.model_path
        self.chat.set_model_ready(False)
        self.model_label.setText(f"Loading {Path(path).name}…")
        self.load_bar.setValue(0)
        self.load_bar.show()
        self.models.set_loading(path)
        self._update_model_button()
        self.bridge.load(self.load_params)

    def ensure_model(self, conversation: Conversation) -> None:
        """Before a reply: load the conversation's own model if another one is loaded. The
        load is queued on the bridge's thread ahead of the reply, so the reply waits for it."""
        wanted = conversation.model
        if not wanted or same_file(wanted, self.model_path):
            return
        if self.bridge.server is not None and Path(wanted).is_file():
            return  # the API server runs: the chat's model answers beside the window's
        if not Path(wanted).is_file():
            self.statusBar().showMessage(
                f"{Path(wanted).name} is missing; this chat uses "
                f"{Path(self.model_path).name} instead",
                10000,
            )
            return
        self.load_model(wanted)

    def _plan_settings(self) -> tuple[int, str]:
        return self.settings.n_ctx, self.settings.kv_type

    def switch_model(self) -> None:
        """Open the chat header's model menu (from the keyboard)."""
        self.tabs.setCurrentWidget(self.chat)
        if self.chat.model_button.isEnabled():
            self.chat.model_button.open_menu()

    def _update_model_button(self) -> None:
        # No switching while a model loads or a reply is written: the engine is taken.
        self.chat.model_button.setEnabled(not self.models.busy)

    def use_model(self, path: str) -> None:
        """Load `path` for the open chat (and new chats): the Models panel's Load and the chat
        header's model menu."""
        if self.chat.conversation_id:
            self.store.update(self.chat.conversation_id, model=path)
            self.chat.update_header()
        self.load_model(path)

    def _load_progress(self, fraction: float) -> None:
        self.load_bar.setValue(int(fraction * 100))
        self.models.set_progress(fraction)

    def _model_loaded(self, loaded: Loaded) -> None:
        self.loaded_path = loaded.model_path
        self.load_bar.hide()
        name = Path(loaded.model_path).name
        devices = ", ".join(loaded.devices)
        self.model_label.setText(f"{name} · context {loaded.conversation_ctx} · {devices}")
        self.model_label.setToolTip("\n".join((loaded.model_path, *loaded.warnings)))
        self._show_template_note(loaded)
        self._clear_engine_message()  # a restarted engine: the old failure is resolved
        self.models.set_loaded(loaded.model_path)
        self.chat.model_button.set_current(loaded.model_path)
        self.chat.update_header()
        self._update_model_button()
        self.chat.set_model_ready(True)
        if self._is_starter(loaded.model_path) and not self.store.has_messages():
            # A first run: what this machine can run, at the context the settings give.
            n_ctx = self.settings.n_ctx or DEFAULT_CTX_CAP
            self.first_run.offer(n_ctx, self.settings.usable_tps)

    def _show_template_note(self, loaded: Loaded) -> None:
        fallback = loaded.chat_template_source == "fallback"
        if fallback:
            why = next((w for w in loaded.warnings if "ChatML" in w),
                       "its chat template was not used")  # fmt: skip
            self.template_note.setText(
                f"⚠ {Path(loaded.model_path).name}: {why}. Replies may be worse than the model "
                "can give with its own template.")  # fmt: skip
        self.template_note.setVisible(fallback)

    def _show_engine_message(self, text: str) -> None:
        self.engine_banner.setText(f"⚠ {text}")
        self.engine_banner.show()

    def _clear_engine_message(self) -> None:
        """A failed reply's or engine's banner goes once the engine works again: a model
        loaded, or a reply streaming."""
        self.engine_banner.hide()

    def _is_starter(self, path: str) -> bool:
        return any(m.source == "starter" and same_file(m.path, path) for m in self.library.list())

    def show_discover(self) -> None:
        """The Models panel's Discover tab: the models recommended for this machine."""
        self.tabs.setCurrentWidget(self.models)
        self.models.tabs.setCurrentWidget(self.models.discover)

    def _model_failed(self, message: str) -> None:
        self.loaded_path = None
        self.template_note.hide()
        self.load_bar.hide()
        self.model_label.setText(f"No model loaded: {message}")
        self.model_label.setToolTip(message)
        self.models.set_loaded(None, f"Could not load the model: {message}")
        self.chat.model_button.set_current(None)
        self._update_model_button()
        self.chat.set_model_ready(False)

    def _model_unloaded(self) -> None:
        self.loaded_path = None
        self.template_note.hide()
        self.readouts.clear()  # nothing loaded: no figures of it
        self.model_label.setText("No model loaded; load one in the Models panel")
        self.models.set_loaded(None, "Unloaded; the memory is free again")
        self.chat.model_button.set_current(None)
        self._update_model_button()
        self.chat.set_model_ready(False)

    # Conversations ---------------------------------------------------------------------------
    def new_conversation(self) -> None:
        conversation = self.store.create(NEW_TITLE, model=self.model_path)
        self.sidebar.search.clear()
        self.sidebar.refresh(select=conversation.id)
        self._show_conversation(conversation.id)
        self.tabs.setCurrentWidget(self.chat)
        self.chat.input.setFocus()

    def _show_conversation(self, conversation_id: str) -> None:
        if conversation_id != self.chat.conversation_id:
            self.chat.show_conversation(conversation_id)

    def restart_engine(self) -> None:
        """End the engine process (a stuck one too) and load the model in a fresh one."""
        self.chat.set_model_ready(False)
        self.chat.model_button.setEnabled(False)
        self.model_label.setText(f"Restarting the engine with {Path(self.model_path).name}…")
        self.load_bar.setValue(0)
        self.load_bar.show()
        self.bridge.restart()

    def _conversation_deleted(self, conversation_id: str) -> None:
        self.bridge.forget(conversation_id)
        if conversation_id != self.chat.conversation_id:
            return
        # The next one the list shows (its reload is on its way), else the newest.
        shown = [cid for cid in self.sidebar.ids() if cid != conversation_id]
        remaining = shown or [c.id for c in self.store.list(limit=1)]
        if remaining:
            self.sidebar.refresh(select=remaining[0])
            self.chat.show_conversation(remaining[0])
        else:
            self.chat.show_conversation(None)
            self.new_conversation()

    def _stream_started(self, conversation_id: str) -> None:
        self.sidebar.set_busy(conversation_id)
        if not self.first_run.done():
            self.first_run.finish()  # the user chats: the first-run card has done its job
        self.sidebar.refresh(select=conversation_id)  # a new title, now the most recent
        self.models.set_streaming(True)
        self._update_model_button()
        self.readouts.clear()
        self._clear_engine_message()

    def _turn_finished(self, conversation_id: str, reply: Reply) -> None:
        self.sidebar.set_busy(None)
        self.sidebar.refresh(select=self.chat.conversation_id)
        self.models.set_streaming(False)
        self._update_model_button()
        error = reply.error
        if reply.done is not None:
            self.readouts.show_metrics(reply.done.metrics, final=True)
        elif error is not None and error.kind in (ErrorKind.EXITED, ErrorKind.HUNG):
            crashes = self.bridge.client.crashes
            then = (
                f"the model ended the engine {crashes} times in a row, so the engine is not "
                "started again by itself: Engine → Restart engine tries again."
                if crashes >= CRASH_LIMIT
                else "the next message starts a fresh engine."
            )
            self._show_engine_message(
                f"The engine stopped: {error.reason}. The reply so far is saved; {then}"
            )
        elif error is not None and error.kind == ErrorKind.CRASH_LOOP:
            self._show_engine_message(
                f"{error.reason} The engine is not started again by itself: Engine → Restart "
                "engine (Ctrl+Shift+R) tries again."
            )
        elif error is not None:
            self._show_engine_message(f"The reply failed: {error.reason}")

    # Settings --------------------------------------------------------------------------------
    def open_settings(self) -> None:
        self.settings_dialog = SettingsDialog(self.settings, self)
        self.settings_dialog.saved.connect(self.apply_settings)
        self.settings_dialog.open()

    def open_loaded_models(self) -> None:
        """Engine → Loaded models: what the app holds in memory, with Unload and Pin."""
        if self.loaded_models_dialog is None:
            self.loaded_models_dialog = LoadedModelsDialog(self)
        self.loaded_models_dialog.show()
        self.loaded_models_dialog.raise_()

    def open_tool_servers(self) -> None:
        """Settings → Tools: the MCP servers chats may use."""
        if self.tool_servers_dialog is None:
            self.tool_servers_dialog = ToolServersDialog(self.bridge.mcp_config,
                                                         self.bridge.tool_host, self)  # fmt: skip
        self.tool_servers_dialog.refresh()
        self.tool_servers_dialog.open()

    def open_usage(self) -> None:
        """Tokens and cost per day (a window of its own, refreshed when settings change)."""
        if self.usage_dialog is not None:
            self.usage_dialog.close()
            self.usage_dialog.deleteLater()
        rates = lambda: cost_rates_from_settings(self.settings)  # noqa: E731
        self.usage_dialog = UsageDialog(self.models.db_path, rates, self)
        self.usage_dialog.settings_requested.connect(self.open_settings)
        self.live_settings.changed.connect(self.usage_dialog.refresh)
        self.usage_dialog.show()

    def open_server_panel(self) -> None:
        """The local API server's panel (one per window; it keeps running when closed)."""
        if self.server_panel is None:
            from deskllm.gui.server_panel import ServerPanel

            self.server_panel = ServerPanel(self)
        if self.server_panel.isVisible():
            self.server_panel.raise_()  # brought to the front when already open
        self.server_panel.show()

    def _serving_changed(self, server) -> None:
        """The status bar says while the API serves (beside the chat's own readouts)."""
        if server is None:
            self.server_status.hide()
            self.server_timer.stop()
            return
        self.server_timer.start()
        self._show_server_status()
        self.server_status.show()

    def _show_server_status(self) -> None:
        server = self.bridge.server
        if server is None:
            return
        snap = server.snapshot()
        in_use = snap.slots_in_use(self.bridge.streaming)
        last = snap.replies[-1] if snap.replies else None
        speed = f" · last {last.tg_tps:.0f} tok/s" if last and last.tg_tps else ""
        self.server_status.setText(f"API {snap.url} · {snap.running} running, {snap.waiting} "
                                   f"waiting · slots {in_use}/{snap.slots}{speed}")  # fmt: skip

    def apply_settings(self, new: Settings) -> None:
        """Hand saved settings to every subscriber (LiveSettings.changed)."""
        self.live_settings.replace(new)

    def _settings_changed(self, new: Settings, changes: dict[str, str]) -> None:
        """Theme and send key now; engine settings on the next load (load_params reads the
        settings at each load)."""
        apply_theme(QApplication.instance(), new.theme)
        self.chat.input.set_send_key(new.send_key)
        if "next_load" in changes.values():
            self.statusBar().showMessage(
                "Settings saved. Engine settings apply when the model is next loaded.", 15000
            )
        else:
            self.statusBar().showMessage("Settings saved.", SETTINGS_NOTE_MS)


def run_window(window: MainWindow) -> int:
    window.first_expose = FirstExpose(window)
    window.show()
    window.load_model()
    return QApplication.instance().exec()
