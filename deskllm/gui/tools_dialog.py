"""Settings → Tools: the MCP servers chats may use (mcp.json, as LM Studio and Claude Desktop
keep it). Add a program (stdio) or an address (Streamable HTTP), turn one off, remove one
(asked first), import another app's mcp.json, and take back tools allowed "always". Values of
env and headers go to the keyring (McpConfig). Which servers a chat uses is chosen in its
Tools menu; a turn starts a server the first time it is needed."""

from __future__ import annotations

import shlex
from dataclasses import replace
from pathlib import Path

from deskllm.gui.qt import (
    QComboBox,
    QDialog,
    QDialogButtonBox,
    QFileDialog,
    QFormLayout,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QMessageBox,
    QPlainTextEdit,
    QPushButton,
    Qt,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
)
from deskllm.gui.tasks import TaskRunner
from deskllm.tools.mcp_config import (
    McpConfig,
    McpConfigError,
    McpServer,
    name_value_pairs,
    server_from_json,
)
from deskllm.tools.mcp_hub import McpTool
from deskllm.tools.tool_host import ToolHost

COLUMNS = ("On", "Name", "Runs", "Always allowed", "State")


def _pairs(text: str, what: str) -> dict[str, str]:
    return name_value_pairs((line for line in text.splitlines() if line.strip()),
                            lambda line: f"{what}: write each line as NAME=VALUE "
                                         f"({line.strip()!r})")  # fmt: skip


def tools_text(server: str, tools: list[McpTool]) -> str:
    """A server's tools, one a line, each with the first line of its description."""
    if not tools:
        return f"{server} offers no tools."
    lines = [f"{server} offers {len(tools)} tool{'s' if len(tools) != 1 else ''}:"]
    for tool in tools:
        about = tool.description.strip().splitlines()[0] if tool.description.strip() else ""
        lines.append(f"  • {tool.remote_name}" + (f" — {about}" if about else ""))
    return "\n".join(lines)


class AddServerDialog(QDialog):
    """A new server: its name, and a program with arguments or an address."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setWindowTitle("Add a tool server")
        self.server: McpServer | None = None
        self.name = QLineEdit()
        self.name.setPlaceholderText("time")
        self.kind = QComboBox()
        self.kind.addItem("A program on this computer (stdio)", "stdio")
        self.kind.addItem("An address (Streamable HTTP)", "http")
        self.command = QLineEdit()
        self.command.setPlaceholderText("uvx mcp-server-time --local-timezone Europe/Paris")
        self.pairs = QPlainTextEdit()
        self.pairs.setPlaceholderText("NAME=VALUE, one a line (kept in the keyring)")
        self.pairs.setMaximumHeight(80)
        self.pairs_label = QLabel("Environment")
        self.command_label = QLabel("Command")
        self.kind.currentIndexChanged.connect(self._kind_changed)
        self.problem = QLabel(wordWrap=True)
        self.problem.hide()
        form = QFormLayout()
        form.addRow("Name", self.name)
        form.addRow("Kind", self.kind)
        form.addRow(self.command_label, self.command)
        form.addRow(self.pairs_label, self.pairs)
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Ok
                                   | QDialogButtonBox.StandardButton.Cancel)  # fmt: skip
        buttons.accepted.connect(self.check)
        buttons.rejected.connect(self.reject)
        layout = QVBoxLayout(self)
        layout.addLayout(form)
        layout.addWidget(self.problem)
        layout.addWidget(buttons)
        self._kind_changed()

    def _kind_changed(self) -> None:
        http = self.kind.currentData() == "http"
        self.command_label.setText("Address" if http else "Command")
        self.command.setPlaceholderText("http://127.0.0.1:8000/mcp" if http else
                                        "uvx mcp-server-time")  # fmt: skip
        self.pairs_label.setText("Headers" if http else "Environment")

    def check(self) -> None:
        """Accept if the entry is valid; otherwise say why and stay open."""
        try:
            self.server = self.entry()
        except (McpConfigError, ValueError) as exc:
            self.problem.setText(str(exc))
            self.problem.show()
            return
        self.accept()

    def entry(self) -> McpServer:
        text = self.command.text().strip()
        if self.kind.currentData() == "http":
            entry = {"url": text, "headers": _pairs(self.pairs.toPlainText(), "Headers")}
        else:
            words = shlex.split(text)  # ValueError for an unclosed quote
            if not words:
                raise McpConfigError("give the command that starts the server")
            entry = {"command": words[0], "args": words[1:],
                     "env": _pairs(self.pairs.toPlainText(), "Environment")}  # fmt: skip
        return server_from_json(self.name.text().strip(), entry)


class ToolServersDialog(QDialog):
    def __init__(self, config: McpConfig, host: ToolHost | None = None,
                 parent: QWidget | None = None) -> None:  # fmt: skip
        super().__init__(parent)
        self.setWindowTitle("Tools — MCP servers")
        self.config = config
        self.host = host
        self.confirm = lambda text: QMessageBox.question(
            self, "Remove tool server", text) == QMessageBox.StandardButton.Yes
        self.servers: list[McpServer] = []
        intro = QLabel("Programs and addresses that give chats tools. A chat uses the ones "
                       "checked in its Tools menu, and every call is asked first unless its "
                       f"tool is always allowed. Kept in {config.path}.")  # fmt: skip
        intro.setWordWrap(True)
        self.table = QTableWidget(0, len(COLUMNS))
        self.table.setHorizontalHeaderLabels(COLUMNS)
        self.table.setSelectionBehavior(QTableWidget.SelectionBehavior.SelectRows)
        self.table.setSelectionMode(QTableWidget.SelectionMode.SingleSelection)
        self.table.setEditTriggers(QTableWidget.EditTrigger.NoEditTriggers)
        self.table.horizontalHeader().setStretchLastSection(True)
        self.table.itemChanged.connect(self._item_changed)
        self.table.itemSelectionChanged.connect(self._show_tools)
        self.problem = QLabel(wordWrap=True)
        self.problem.hide()
        # The selected server's tools with their descriptions (once it ran, or on asking).
        self.tools = QLabel(wordWrap=True)
        self.tools.setTextFormat(Qt.TextFormat.PlainText)
        self.tools.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.tasks = TaskRunner("tool-servers", self)
        self.list_button = QPushButton("List tools")
        self.list_button.setToolTip("Start the selected server (if it is not running) and list "
                                    "its tools")  # fmt: skip
        self.list_button.clicked.connect(self.list_tools)
        add, remove = QPushButton("Add…"), QPushButton("Remove…")
        import_button, forget = QPushButton("Import mcp.json…"), QPushButton("Ask again")
        forget.setToolTip("Ask before every call of the selected server's tools again")
        add.clicked.connect(self.add)
        remove.clicked.connect(self.remove_selected)
        import_button.clicked.connect(self.choose_import)
        forget.clicked.connect(self.forget_allowed)
        row = QHBoxLayout()
        for button in (add, remove, import_button, forget, self.list_button):
            row.addWidget(button)
        row.addStretch(1)
        close = QDialogButtonBox(QDialogButtonBox.StandardButton.Close)
        close.rejected.connect(self.reject)
        layout = QVBoxLayout(self)
        layout.addWidget(intro)
        layout.addWidget(self.table, 1)
        layout.addWidget(self.tools)
        layout.addWidget(self.problem)
        layout.addLayout(row)
        layout.addWidget(close)
        self.resize(720, 420)
        self.refresh()

    def refresh(self) -> None:
        try:
            self.servers = self.config.servers()
            self._say("")
        except McpConfigError as exc:
            self.servers = []
            self._say(f"mcp.json cannot be read: {exc}")
        running = self.host.running() if self.host is not None else {}
        self.table.blockSignals(True)
        self.table.setRowCount(len(self.servers))
        for i, server in enumerate(self.servers):
            on = QTableWidgetItem()
            on.setFlags(Qt.ItemFlag.ItemIsUserCheckable | Qt.ItemFlag.ItemIsEnabled
                        | Qt.ItemFlag.ItemIsSelectable)  # fmt: skip
            on.setCheckState(Qt.CheckState.Checked if server.enabled else Qt.CheckState.Unchecked)
            state = {True: "running", False: "failed"}.get(running.get(server.name),
                                                            "not started")  # fmt: skip
            cells = [on, QTableWidgetItem(server.name), QTableWidgetItem(server.describe()),
                     QTableWidgetItem(", ".join(server.always_allow) or "—"),
                     QTableWidgetItem(state)]  # fmt: skip
            for column, item in enumerate(cells):
                self.table.setItem(i, column, item)
        self.table.blockSignals(False)
        self.table.resizeColumnsToContents()

    def _say(self, text: str) -> None:
        self.problem.setText(text)
        self.problem.setVisible(bool(text))

    def list_tools(self) -> None:
        """Start the selected server in the background (the chats' host keeps it running)
        and show its tools, or why it failed."""
        server = self._selected()
        if server is None or self.host is None:
            self._say("Select the server whose tools to list.")
            return
        self.list_button.setEnabled(False)
        self.tools.setText(f"Starting {server.name}…")
        host = self.host
        self.tasks.run(lambda: host.toolbox([server]),
                       lambda future: self._listed(server.name, future))  # fmt: skip

    def _listed(self, name: str, future) -> None:
        self.list_button.setEnabled(True)
        try:
            box, failures = future.result()
        except Exception as exc:  # noqa: BLE001 - said, not raised into Qt
            failures, box = {name: str(exc)}, None
        self.refresh()
        if name in failures:
            self.tools.setText(f"{name} could not start: {failures[name]}")
        elif box is not None:
            self.tools.setText(tools_text(name, box.tools()))

    def _show_tools(self) -> None:
        server = self._selected()
        if server is None or self.host is None:
            self.tools.setText("")
            return
        hub = self.host.hub(server.name)
        if hub is None or hub.failures():
            self.tools.setText(f"{server.name}: not started yet (List tools starts it)."
                               if hub is None else
                               f"{server.name} failed: {hub.failures()[server.name]}")  # fmt: skip
            return
        self.tools.setText(tools_text(server.name, hub.tools()))

    def _selected(self) -> McpServer | None:
        rows = self.table.selectionModel().selectedRows()
        return self.servers[rows[0].row()] if rows else None

    def _item_changed(self, item: QTableWidgetItem) -> None:
        if item.column() != 0:
            return
        name = self.servers[item.row()].name
        on = item.checkState() == Qt.CheckState.Checked
        self._change(name, lambda s: replace(s, enabled=on))

    def _change(self, name: str, change) -> None:
        try:
            self.config.update(name, change)
        except (McpConfigError, OSError) as exc:
            self._say(str(exc))
        self.refresh()

    def add(self) -> None:
        dialog = AddServerDialog(self)
        if dialog.exec() == QDialog.DialogCode.Accepted and dialog.server is not None:
            self.add_server(dialog.server)

    def add_server(self, server: McpServer) -> None:
        if server.name in {s.name for s in self.servers}:
            self._say(f"A server named {server.name!r} exists; remove it first.")
            return
        try:
            self.config.put(server)
        except (McpConfigError, OSError) as exc:
            self._say(str(exc))
            return
        self.refresh()

    def remove_selected(self) -> None:
        server = self._selected()
        if server is None:
            self._say("Select the server to remove.")
            return
        if not self.confirm(f"Remove the tool server {server.name} ({server.describe()})? "
                            "Chats that use it go on without its tools."):  # fmt: skip
            return
        try:
            self.config.remove(server.name)
        except (McpConfigError, OSError) as exc:
            self._say(str(exc))
        self.refresh()

    def forget_allowed(self) -> None:
        server = self._selected()
        if server is not None:
            self._change(server.name, lambda s: replace(s, always_allow=()))

    def choose_import(self) -> None:
        path, _ = QFileDialog.getOpenFileName(self, "Import MCP servers", str(Path.home()),
                                              "mcp.json (*.json);;All files (*)")  # fmt: skip
        if path:
            self.import_file(Path(path))

    def import_file(self, path: Path) -> list[str]:
        try:
            added = self.config.import_file(path)
        except (McpConfigError, OSError) as exc:
            self._say(str(exc))
            return []
        self.refresh()
        self._say(f"Imported {', '.join(added)}." if added else
                  f"Nothing new in {path.name}: its servers are here already.")  # fmt: skip
        return added
