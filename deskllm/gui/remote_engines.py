"""RemoteEnginesDialog: the remote OpenAI-compatible endpoints (Engine → Remote engines…).
Add one (name, base URL, API key; a preset fills the URL), test the connection before adding
it, see each endpoint's health and models, allow the router to use it, set a model's price
per million tokens, remove one (asked first).

Keys go to the KeyStore (the OS keyring, or the private file) on a task thread and are then
cleared from the form: the dialog never shows a stored key, and the database never holds one.
Every network call runs in the background (TaskRunner); the list shows the RemoteCatalog's
answers.
"""

from __future__ import annotations

from concurrent.futures import Future

from deskllm.backends.routing import Probe, probe
from deskllm.gui.qt import (
    QAbstractItemView,
    QCheckBox,
    QComboBox,
    QDialog,
    QDialogButtonBox,
    QDoubleSpinBox,
    QFormLayout,
    QGroupBox,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QLineEdit,
    QMessageBox,
    QPushButton,
    Qt,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
)
from deskllm.gui.remote_catalog import RemoteCatalog
from deskllm.gui.tasks import TaskRunner
from deskllm.remote.endpoint import (
    Endpoint,
    EndpointInvalid,
    ModelPrice,
    check_name,
    resolve_url,
)
from deskllm.remote.presets import DEFAULT_PRESET, PRESETS

COLUMNS = ("Name", "URL", "Health", "Models", "Routing", "Price per M tokens")
ROUTING_COLUMN = COLUMNS.index("Routing")
ROUTING_SENTENCE = (
    "Routing lets Auto (local first) send a chat's messages to that endpoint when the local "
    "model cannot answer: those messages leave this computer. It is off until you allow it."
)
KEY_STORED = "key stored"
PRICE_LIMIT = 1_000_000.0


def _keys():
    from deskllm.remote.keys import KeyStore  # imports keyring: on a task thread only

    return KeyStore()


class RemoteEnginesDialog(QDialog):
    """Attributes:
    last_probe: the form's last test result (None before one).
    status: the line under the form that says what the last action did.
    """

    def __init__(self, catalog: RemoteCatalog, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setWindowTitle("Remote engines")
        self.catalog = catalog
        self.registry = catalog.registry
        self.last_probe: Probe | None = None
        self._tasks = TaskRunner("remote-engines", self)
        self._filling = False
        self._build()
        catalog.changed.connect(self._fill_table)
        self._fill_table()
        self._preset_changed()

    # Layout ----------------------------------------------------------------------------------
    def _build(self) -> None:
        intro = QLabel(
            "Chat with models served elsewhere: llama-server, vLLM, Ollama, LM Studio, another "
            "deskllm or any OpenAI-compatible service. Choose one in the chat's model menu."
        )
        intro.setWordWrap(True)
        self.table = QTableWidget(0, len(COLUMNS))
        self.table.setHorizontalHeaderLabels(COLUMNS)
        self.table.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        self.table.setSelectionMode(QAbstractItemView.SelectionMode.SingleSelection)
        self.table.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.table.verticalHeader().hide()
        header = self.table.horizontalHeader()
        header.setSectionResizeMode(QHeaderView.ResizeMode.Stretch)
        for column in (0, 2, ROUTING_COLUMN):  # short words: as wide as they are
            header.setSectionResizeMode(column, QHeaderView.ResizeMode.ResizeToContents)
        line = self.fontMetrics().height()
        self.table.setMinimumHeight(9 * line)
        self.table.itemChanged.connect(self._item_changed)
        self.table.itemSelectionChanged.connect(self._selection_changed)
        self.routing_note = QLabel(ROUTING_SENTENCE)
        self.routing_note.setWordWrap(True)
        self.check_button = QPushButton("Check again")
        self.check_button.setToolTip("Ask every endpoint for its models now")
        self.check_button.clicked.connect(self.catalog.refresh)
        self.remove_button = QPushButton("Remove…")
        self.remove_button.setToolTip("Forget the selected endpoint and its key")
        self.remove_button.clicked.connect(self.remove_selected)
        row = QHBoxLayout()
        row.addStretch(1)
        row.addWidget(self.check_button)
        row.addWidget(self.remove_button)

        price_box = QGroupBox("Price of a model on the selected endpoint")
        self.price_model = QComboBox()
        self.price_model.setEditable(True)
        self.price_input = _price_box()
        self.price_output = _price_box()
        self.price_button = QPushButton("Set price")
        self.price_button.clicked.connect(self.set_price)
        prices = QHBoxLayout(price_box)
        prices.addWidget(self.price_model, 2)
        prices.addWidget(QLabel("input"))
        prices.addWidget(self.price_input, 1)
        prices.addWidget(QLabel("output"))
        prices.addWidget(self.price_output, 1)
        prices.addWidget(self.price_button)

        add_box = QGroupBox("Add an endpoint")
        self.preset_box = QComboBox()
        for preset in PRESETS.values():
            self.preset_box.addItem(preset.name, preset.name)
        self.preset_box.setCurrentIndex(self.preset_box.findData(DEFAULT_PRESET))
        self.preset_box.currentIndexChanged.connect(self._preset_changed)
        self.preset_note = QLabel(wordWrap=True)
        self.name_edit = QLineEdit()
        self.name_edit.setPlaceholderText("a short name: letters, digits, '.', '_', '-'")
        self.url_edit = QLineEdit()
        self.url_edit.setPlaceholderText("http://host:8080/v1")
        self.key_edit = QLineEdit()
        self.key_edit.setEchoMode(QLineEdit.EchoMode.Password)
        self.key_edit.setPlaceholderText("none")
        self.routing_check = QCheckBox("Allow routing: Auto may send messages here")
        self.routing_check.setToolTip(ROUTING_SENTENCE)
        self.test_button = QPushButton("Test connection")
        self.test_button.clicked.connect(self.test_connection)
        self.add_button = QPushButton("Add")
        self.add_button.clicked.connect(self.add_endpoint)
        self.status = QLabel(wordWrap=True)
        self.status.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        form = QFormLayout(add_box)
        form.addRow("Kind", self.preset_box)
        form.addRow("", self.preset_note)
        form.addRow("Name", self.name_edit)
        form.addRow("Base URL", self.url_edit)
        form.addRow("API key", self.key_edit)
        form.addRow("", self.routing_check)
        buttons = QHBoxLayout()
        buttons.addStretch(1)
        buttons.addWidget(self.test_button)
        buttons.addWidget(self.add_button)
        form.addRow(buttons)
        form.addRow(self.status)

        close = QDialogButtonBox(QDialogButtonBox.StandardButton.Close)
        close.rejected.connect(self.reject)
        layout = QVBoxLayout(self)
        layout.addWidget(intro)
        layout.addWidget(self.table, 1)
        layout.addWidget(self.routing_note)
        layout.addLayout(row)
        layout.addWidget(price_box)
        layout.addWidget(add_box)
        layout.addWidget(close)
        self.resize(62 * line, 46 * line)

    # The list --------------------------------------------------------------------------------
    def _fill_table(self) -> None:
        selected = self.selected_name()
        self._filling = True
        endpoints = self.catalog.endpoints()
        self.table.setRowCount(len(endpoints))
        for row, endpoint in enumerate(endpoints):
            found = self.catalog.probes.get(endpoint.name)
            if found is None:
                health, models = "checking…", ""
            elif found.healthy:
                health, models = "healthy", ", ".join(found.models)
            else:
                health, models = "not answering", found.error or ""
            prices = "; ".join(f"{m}: {p.input_per_mtok:g} in / {p.output_per_mtok:g} out"
                               for m, p in endpoint.prices.items())  # fmt: skip
            texts = (endpoint.name, endpoint.base_url, health, models, "", prices)
            for column, text in enumerate(texts):
                item = QTableWidgetItem(text)
                item.setToolTip(text)
                item.setData(Qt.ItemDataRole.UserRole, endpoint.name)
                if column == ROUTING_COLUMN:
                    item.setFlags(item.flags() | Qt.ItemFlag.ItemIsUserCheckable)
                    item.setCheckState(Qt.CheckState.Checked if endpoint.allow_routing
                                       else Qt.CheckState.Unchecked)  # fmt: skip
                    item.setText("allowed" if endpoint.allow_routing else "off")
                    item.setToolTip(ROUTING_SENTENCE)
                self.table.setItem(row, column, item)
            if endpoint.name == selected:
                self.table.selectRow(row)
        self._filling = False
        self._selection_changed()

    def selected_name(self) -> str | None:
        items = self.table.selectedItems()
        return items[0].data(Qt.ItemDataRole.UserRole) if items else None

    def row_of(self, name: str) -> int:
        for row in range(self.table.rowCount()):
            if self.table.item(row, 0).text() == name:
                return row
        raise KeyError(name)

    def _selection_changed(self) -> None:
        name = self.selected_name()
        self.remove_button.setEnabled(name is not None)
        self.price_button.setEnabled(name is not None)
        current = self.price_model.currentText()
        self.price_model.clear()
        if name is not None:
            self.price_model.addItems(list(self.catalog.models(name)))
            if current:
                self.price_model.setCurrentText(current)

    def _item_changed(self, item: QTableWidgetItem) -> None:
        if self._filling or item.column() != ROUTING_COLUMN:
            return
        name = item.data(Qt.ItemDataRole.UserRole)
        allow = item.checkState() == Qt.CheckState.Checked
        self.set_routing(name, allow)

    def set_routing(self, name: str, allow: bool) -> None:
        self.registry.set_allow_routing(name, allow)
        self.status.setText(f"{name}: routing allowed; Auto may send messages there"
                            if allow else f"{name}: routing off; Auto keeps every message on "
                            "this computer unless another endpoint allows it")  # fmt: skip
        self.catalog.changed.emit()  # no network needed: the lists are cached

    def remove_selected(self) -> None:
        name = self.selected_name()
        if name is None:
            return
        answer = QMessageBox.question(
            self,
            "Remove endpoint?",
            f"Remove the remote endpoint {name} and its stored key? Chats that use its "
            "models will need another model.",
        )
        if answer != QMessageBox.StandardButton.Yes:
            return
        self.registry.remove(name)
        self._tasks.run(lambda: _keys().delete(name), lambda _f: self.catalog.refresh())
        self.status.setText(f"Removed {name} and its key.")
        self.catalog.refresh()

    def set_price(self) -> None:
        name, model = self.selected_name(), self.price_model.currentText().strip()
        if name is None or not model:
            self.status.setText("Choose an endpoint in the list and a model to price.")
            return
        price = ModelPrice(self.price_input.value(), self.price_output.value())
        self.registry.set_price(name, model, price)
        self.status.setText(
            f"{name}/{model}: {price.input_per_mtok:g} per million input tokens, "
            f"{price.output_per_mtok:g} per million output tokens"
        )
        self._fill_table()

    # The form --------------------------------------------------------------------------------
    def _preset_changed(self) -> None:
        preset = PRESETS[self.preset_box.currentData()]
        self.url_edit.setText(preset.default_url)
        self.preset_note.setText(preset.notes)

    def form_endpoint(self) -> Endpoint:
        """The endpoint the form describes; EndpointInvalid says what is wrong."""
        preset = self.preset_box.currentData()
        name = self.name_edit.text().strip()
        if not name:
            raise EndpointInvalid("give the endpoint a name")
        return Endpoint(check_name(name), resolve_url(self.url_edit.text().strip() or None,
                                                      preset), preset,
                        allow_routing=self.routing_check.isChecked())  # fmt: skip

    def test_connection(self) -> None:
        """Ask the endpoint in the form for its models, in the background."""
        try:
            endpoint = self.form_endpoint()
        except EndpointInvalid as exc:
            self.status.setText(str(exc))
            return
        key = self.key_edit.text().strip() or None
        self.test_button.setEnabled(False)
        self.status.setText(f"Connecting to {endpoint.name} at {endpoint.base_url}…")
        self._tasks.run(lambda: probe(endpoint, key), self._tested)

    def _tested(self, future: Future) -> None:
        self.test_button.setEnabled(True)
        try:
            self.last_probe = future.result()
        except Exception as exc:  # said, never a dead dialog
            self.last_probe = Probe(error=f"{type(exc).__name__}: {exc}")
        if self.last_probe.healthy:
            models = ", ".join(self.last_probe.models) or "no models"
            self.status.setText(f"Connected: it serves {models}.")
        else:
            self.status.setText(f"Failed: {self.last_probe.error}")

    def add_endpoint(self) -> None:
        """Register the form's endpoint; its key goes to the KeyStore and leaves the form."""
        try:
            endpoint = self.form_endpoint()
            self.registry.add(endpoint)
        except EndpointInvalid as exc:
            self.status.setText(str(exc))
            return
        key = self.key_edit.text().strip()
        self.key_edit.clear()
        self.key_edit.setPlaceholderText(KEY_STORED if key else "none")
        self.name_edit.clear()
        self.routing_check.setChecked(False)
        self.status.setText(f"Added {endpoint.name}; asking it for its models…")
        self.add_button.setEnabled(False)
        self._tasks.run(lambda: _store_key(endpoint.name, key),
                        lambda f: self._added(f, endpoint.name))  # fmt: skip

    def _added(self, future: Future, name: str) -> None:
        self.add_button.setEnabled(True)
        try:
            where = future.result()
        except Exception as exc:
            self.status.setText(f"Added {name}, but its key could not be stored: {exc}")
        else:
            self.status.setText(f"Added {name}; {KEY_STORED} in {where}." if where
                                else f"Added {name} (no key).")  # fmt: skip
        self.catalog.refresh()


def _price_box() -> QDoubleSpinBox:
    box = QDoubleSpinBox()
    box.setDecimals(4)
    box.setRange(0.0, PRICE_LIMIT)
    return box


def _store_key(name: str, key: str) -> str | None:
    """Keep the key (a task thread: the keyring may take a while); where it went."""
    keys = _keys()
    if key:
        return keys.set(name, key)
    keys.delete(name)  # a name used before does not inherit an old key
    return None
