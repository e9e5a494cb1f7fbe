"""ToolsButton: which MCP servers' tools the open chat may use, from its header.

A menu of the servers configured in Settings → Tools, each checkable; what is checked is
stored with the conversation, and its turns then offer those servers' tools to the model
(each call asked first). "Make the first reply a tool call" holds the model to a call (a
grammar) for models that do not call tools on their own. On a small model the menu says that
tools are unlikely to be used well.
"""

from __future__ import annotations

from collections.abc import Callable

from deskllm.gui.qt import QMenu, QToolButton, QWidget
from deskllm.store import ConversationStore
from deskllm.tools.mcp_config import McpConfig, McpConfigError, McpServer


class ToolsButton(QToolButton):
    def __init__(self, store: ConversationStore, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.store = store
        self.config: McpConfig | None = None
        self.open_settings: Callable[[], None] = lambda: None
        self.model_note: Callable[[], str | None] = lambda: None  # a small model's warning
        self.conversation_id: str | None = None
        self.setPopupMode(QToolButton.ToolButtonPopupMode.InstantPopup)
        self.menu_ = QMenu(self)
        self.menu_.aboutToShow.connect(self._fill)
        self.setMenu(self.menu_)
        self.setToolTip("The MCP servers whose tools this chat may use; each call is asked first")
        self._show()

    def set_conversation(self, conversation_id: str | None) -> None:
        self.conversation_id = conversation_id
        self._show()

    def chosen(self) -> list[str]:
        if not self.conversation_id or not self.store.exists(self.conversation_id):
            return []
        return self.store.get(self.conversation_id).tool_servers

    def choose(self, servers: list[str], choice: str | None = None) -> None:
        """Let the chat use `servers`; `choice`: "auto" or "required" (None: unchanged)."""
        if self.conversation_id is None:
            return
        tools = dict(self.store.get(self.conversation_id).tools)
        tools["servers"] = sorted(servers)
        if choice is not None:
            tools["choice"] = choice
        self.store.update(self.conversation_id, tools=tools)
        self._show()

    def servers(self) -> tuple[list[McpServer], str | None]:
        """The configured servers, and why they cannot be read (None: they can)."""
        if self.config is None:
            return [], None
        try:
            return self.config.servers(), None
        except McpConfigError as exc:
            return [], str(exc)

    def _show(self) -> None:
        self.setEnabled(self.conversation_id is not None and self.config is not None)
        chosen = self.chosen()
        if not chosen:
            self.setText("Tools")
        elif len(chosen) == 1:
            self.setText(f"Tools: {chosen[0]}")
        else:
            self.setText(f"Tools: {len(chosen)}")

    def _fill(self) -> None:
        self.menu_.clear()
        servers, problem = self.servers()
        chosen = self.chosen()
        if problem:
            self.menu_.addAction(f"mcp.json cannot be read: {problem}").setEnabled(False)
        elif not servers:
            self.menu_.addAction("No tool servers yet").setEnabled(False)
        for server in servers:
            label = server.name + ("" if server.enabled else " (turned off)")
            action = self.menu_.addAction(label)
            action.setToolTip(server.describe())
            action.setCheckable(True)
            action.setChecked(server.name in chosen)
            action.setEnabled(server.enabled or server.name in chosen)
            action.toggled.connect(lambda on, n=server.name: self._toggle(n, on))
        self.menu_.addSeparator()
        required = self.menu_.addAction("Make the first reply a tool call")
        required.setToolTip("For models that do not call tools on their own: the reply is "
                            "held to a call of one of the chat's tools")  # fmt: skip
        required.setCheckable(True)
        conversation = self.store.get(self.conversation_id) if self.conversation_id else None
        required.setChecked(bool(conversation and conversation.tools.get("choice") == "required"))
        required.setEnabled(bool(chosen))
        required.toggled.connect(
            lambda on: self.choose(self.chosen(), "required" if on else "auto"))
        if chosen and (note := self.model_note()):
            self.menu_.addAction(f"Note: {note}").setEnabled(False)
        self.menu_.addSeparator()
        self.menu_.addAction("Tool servers…", self.open_settings)

    def _toggle(self, name: str, on: bool) -> None:
        names = [n for n in self.chosen() if n != name] + ([name] if on else [])
        self.choose(names)
