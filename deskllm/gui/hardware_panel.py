"""The Hardware panel: CPU and instruction sets, RAM, each device per API with memory bars,
what the engine build can use, measured memory bandwidth and the plain-words diagnosis.

The probe (child processes, a bandwidth test) runs off the GUI thread on the panel's
TaskRunner, which hands the report back on the GUI thread.

Signals:
    report_ready(HardwareReport): a probe finished and the panel shows its report.
"""

from __future__ import annotations

from concurrent.futures import Future
from datetime import datetime

from deskllm.gui.app_model import AppModel
from deskllm.gui.bench_dialog import BenchSuiteDialog
from deskllm.gui.qt import (
    QFont,
    QFormLayout,
    QGroupBox,
    QHBoxLayout,
    QLabel,
    QPalette,
    QProgressBar,
    QPushButton,
    QScrollArea,
    Qt,
    QVBoxLayout,
    QWidget,
    Signal,
)
from deskllm.gui.tasks import TaskRunner
from deskllm.hardware import HardwareReport, probe_hardware
from deskllm.hardware.report import Device, EngineInfo
from deskllm.hardware.summary import gib
from deskllm.planner.measured_configs import cite_measurements

API_TITLES = {"nvml": "NVIDIA (NVML)", "vulkan": "Vulkan", "opencl": "OpenCL", "metal": "Metal"}


def _label(text: str, *, bold: bool = False, muted: bool = False) -> QLabel:
    label = QLabel(text)
    label.setWordWrap(True)
    label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
    if bold:
        font = label.font()
        font.setWeight(QFont.Weight.Bold)
        label.setFont(font)
    if muted:
        label.setForegroundRole(QPalette.ColorRole.PlaceholderText)
    return label


def memory_bar(used_bytes: int, total_bytes: int) -> QProgressBar:
    """A bar of used / total memory, counted in MiB (a QProgressBar holds an int)."""
    bar = QProgressBar()
    bar.setRange(0, max(1, total_bytes >> 20))
    bar.setValue(max(0, min(used_bytes, total_bytes)) >> 20)
    bar.setFormat(f"{gib(used_bytes)} used of {gib(total_bytes)}")
    return bar


class HardwarePanel(QWidget):
    report_ready = Signal(object)

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.report: HardwareReport | None = None
        self.probing = False
        self._tasks = TaskRunner("hardware", self)
        self.status = QLabel("Not probed yet")
        self.refresh_button = QPushButton("Refresh")
        self.refresh_button.setToolTip("Look at the hardware again (devices, free memory)")
        self.refresh_button.clicked.connect(lambda: self.refresh())
        self.bandwidth_button = QPushButton("Measure bandwidth again")
        self.bandwidth_button.setToolTip("Re-run the memory bandwidth test (a few seconds)")
        self.bandwidth_button.clicked.connect(lambda: self.refresh(refresh_bandwidth=True))
        self.bench_button = QPushButton("Benchmark…")
        self.bench_button.setToolTip(
            "Measure a model in every configuration here; automatic loads then use the fastest"
        )
        self.bench_button.clicked.connect(self.open_benchmark)
        self.bench_dialog: BenchSuiteDialog | None = None
        # The app's loaded model, freed while a benchmark runs (the main window sets it).
        self.app_model: AppModel | None = None
        top = QHBoxLayout()
        top.addWidget(self.status, 1)
        top.addWidget(self.bench_button)
        top.addWidget(self.bandwidth_button)
        top.addWidget(self.refresh_button)
        self.scroll = QScrollArea()
        self.scroll.setWidgetResizable(True)
        self.scroll.setWidget(QWidget())
        layout = QVBoxLayout(self)
        layout.addLayout(top)
        layout.addWidget(self.scroll, 1)

    def showEvent(self, event) -> None:  # noqa: N802 (Qt name)
        super().showEvent(event)
        if self.report is None and not self.probing:
            self.refresh()  # the first look happens when the panel is first opened

    def refresh(self, refresh_bandwidth: bool = False) -> None:
        if self.probing:
            return
        self.probing = True
        self.status.setText(
            "Measuring memory bandwidth…" if refresh_bandwidth else "Looking at the hardware…"
        )
        self.refresh_button.setEnabled(False)
        self.bandwidth_button.setEnabled(False)
        self._tasks.run(
            # the diagnosis cites what `deskllm bench --suite` measured here
            lambda: cite_measurements(probe_hardware(refresh_bandwidth=refresh_bandwidth)),
            self._on_probed,
        )

    def open_benchmark(self) -> BenchSuiteDialog:
        """The Benchmark dialog for the installed models (the starter first); the diagnosis
        is probed again when it closes, to cite a new measurement."""
        from deskllm.store import ModelLibrary, open_database

        db = open_database()
        try:
            library = ModelLibrary(db)
            starter = library.ensure_starter()
            models = [m for m in library.list() if m.exists]
        finally:
            db.close()
        models.sort(key=lambda m: starter is None or m.path != starter.path)
        self.bench_dialog = BenchSuiteDialog([(m.name, m.path) for m in models], parent=self,
                                             app_model=self.app_model)  # fmt: skip
        self.bench_dialog.finished.connect(lambda _code: self.refresh())
        self.bench_dialog.show()
        return self.bench_dialog

    def _on_probed(self, future: Future) -> None:
        self.probing = False
        self.refresh_button.setEnabled(True)
        self.bandwidth_button.setEnabled(True)
        try:
            report = future.result()
        except Exception as exc:  # the probe isolates its parts; this is a bug, say so
            self.status.setText(f"The hardware probe failed: {exc}")
            return
        self.show_report(report)
        self.report_ready.emit(report)

    # Rendering -------------------------------------------------------------------------------
    def show_report(self, report: HardwareReport) -> None:
        self.report = report
        when = _local_time(report.created_at) if report.created_at else "now"
        probe = f" in {report.probe_ms:.0f} ms" if report.probe_ms is not None else ""
        self.status.setText(f"{report.os} · probed {when}{probe}")
        content = QWidget()
        layout = QVBoxLayout(content)
        for section in (self._cpu, self._memory, self._devices, self._engine, self._diagnosis):
            layout.addWidget(section(report))
        layout.addStretch(1)
        self.scroll.setWidget(content)  # the old content is deleted by the scroll area

    def text(self) -> str:
        """Every label's text (tests, copying the report into a bug report)."""
        labels = self.scroll.widget().findChildren(QLabel)
        bars = self.scroll.widget().findChildren(QProgressBar)
        return "\n".join([w.text() for w in labels] + [b.text() for b in bars])

    def _cpu(self, report: HardwareReport) -> QGroupBox:
        cpu, box = report.cpu, QGroupBox("Processor")
        form = QFormLayout(box)
        form.addRow("Name", _label(cpu.name))
        cores = f"{cpu.cores_physical or '?'} cores, {cpu.cores_logical or '?'} threads"
        form.addRow("Cores", _label(f"{cores} ({cpu.arch})" if cpu.arch else cores))
        features = " ".join(cpu.features) or "none detected"
        form.addRow("Instruction sets", _label(features))
        return box

    def _memory(self, report: HardwareReport) -> QGroupBox:
        mem, box = report.memory, QGroupBox("Memory")
        form = QFormLayout(box)
        form.addRow("RAM", memory_bar(mem.total_bytes - mem.available_bytes, mem.total_bytes))
        if mem.swap_total_bytes:
            used = mem.swap_total_bytes - (mem.swap_free_bytes or 0)
            form.addRow("Swap", memory_bar(used, mem.swap_total_bytes))
        form.addRow("Bandwidth", _label(_bandwidth(report)))
        return box

    def _devices(self, report: HardwareReport) -> QGroupBox:
        box = QGroupBox("Graphics and compute devices")
        layout = QVBoxLayout(box)
        for status in report.apis:
            if status.api == "engine":
                continue
            title = API_TITLES.get(status.api, status.api)
            devices = [d for d in report.devices if d.api == status.api]
            if not status.available:
                layout.addWidget(_label(f"{title}: not available — {status.reason}", muted=True))
                continue
            layout.addWidget(_label(title, bold=True))
            version = " ".join((status.version or "").split(",")[0].split())  # PoCL: + options
            found = f"{len(devices)} device(s) via {status.library or '?'} {version}".strip()
            layout.addWidget(_label(found, muted=True))
            for device in devices:
                layout.addLayout(_device_row(device))
            if not devices:
                layout.addWidget(_label("no devices", muted=True))
        return box

    def _engine(self, report: HardwareReport) -> QGroupBox:
        box = QGroupBox("What the engine can use")
        layout = QVBoxLayout(box)
        layout.addWidget(_label(_engine_summary(report.engine)))
        for device in report.engine.devices:
            line = f"{device.name} ({device.backend or '?'}, {device.type}): {device.description}"
            layout.addWidget(_label(line))
        for target in report.offload_targets:
            use = "used automatically" if target.automatic else "only if you choose it"
            engine = f"engine device {target.engine_device}"
            if not target.engine_device:
                engine = "this engine build has no backend for it"
            line = f"Offload target {target.name} [{target.type}]: {use}; {engine}"
            layout.addWidget(_label(line, muted=True))
        return box

    def _diagnosis(self, report: HardwareReport) -> QGroupBox:
        box = QGroupBox("Diagnosis")
        layout = QVBoxLayout(box)
        for text in report.diagnosis or ("Nothing to report.",):
            layout.addWidget(_label(f"• {text}"))
        for error in report.errors:
            layout.addWidget(_label(f"The {error.api} check failed: {error.message}", muted=True))
        return box


def _device_row(device: Device) -> QVBoxLayout:
    row = QVBoxLayout()
    driver = f", driver {device.driver_version}" if device.driver_version else ""
    row.addWidget(_label(f"{device.name} [{device.type}{driver}]"))
    total, free = device.memory_total_bytes, device.memory_free_bytes
    if total and free is not None:
        row.addWidget(memory_bar(total - free, total))
    elif total:
        row.addWidget(_label(f"{gib(total)} memory (free memory not reported)", muted=True))
    return row


def _engine_summary(engine: EngineInfo) -> str:
    if not engine.available:
        return f"The engine is not available: {engine.reason}"
    backends = ", ".join(engine.backends) or "none"
    offload = "can offload to a GPU" if engine.gpu_offload else "runs on the CPU only"
    variant = f"; CPU code for {engine.cpu_variant}" if engine.cpu_variant else ""
    built = " ".join(engine.cpu_build_features)
    features = f"; built for {built}" if built else ""
    return f"llama.cpp backends: {backends}; {offload}{variant}{features}"


def _local_time(iso: str) -> str:
    try:
        return datetime.fromisoformat(iso).astimezone().strftime("%Y-%m-%d %H:%M")
    except ValueError:
        return iso


def _bandwidth(report: HardwareReport) -> str:
    m = report.bandwidth
    if m is None:
        return "not measured"
    how = f"measured {_local_time(m.measured_at)}" if m.cached and m.measured_at else "measured now"
    threads = f", {m.threads} threads" if m.threads else ""
    return f"{m.gbps:.1f} GB/s read ({how}{threads}); decode speed is bounded by it"
