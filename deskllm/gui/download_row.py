"""DownloadRow: one download in the Models panel: name, bar, bytes / speed / ETA, and
Pause / Resume / Cancel (sent to the DownloadBridge)."""

from __future__ import annotations

from deskllm.downloads import DownloadState, Progress
from deskllm.downloads.units import human_bytes, human_seconds
from deskllm.gui.download_bridge import DownloadBridge
from deskllm.gui.qt import QHBoxLayout, QLabel, QProgressBar, QPushButton, QVBoxLayout, QWidget


class DownloadRow(QWidget):
    """One download: name, bar, bytes / speed / ETA, and Pause / Resume / Cancel."""

    def __init__(self, download_id: int, name: str, bridge: DownloadBridge) -> None:
        super().__init__()
        self.download_id = download_id
        self.state: DownloadState | None = None
        self.name = QLabel(name)
        self.bar = QProgressBar()
        self.bar.setRange(0, 1000)
        self.detail = QLabel()
        self.pause_button = QPushButton("Pause")
        self.resume_button = QPushButton("Resume")
        self.cancel_button = QPushButton("Cancel")
        self.pause_button.clicked.connect(lambda: bridge.pause(download_id))
        self.resume_button.clicked.connect(lambda: bridge.resume(download_id))
        self.cancel_button.clicked.connect(lambda: bridge.cancel(download_id))
        top = QHBoxLayout()
        top.addWidget(self.name, 1)
        for button in (self.pause_button, self.resume_button, self.cancel_button):
            top.addWidget(button)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addLayout(top)
        layout.addWidget(self.bar)
        layout.addWidget(self.detail)

    def show_progress(self, event: Progress) -> None:
        self.state = event.state
        self.bar.setValue(int(event.fraction * 1000))
        sizes = f"{human_bytes(event.bytes_done)} of {human_bytes(event.total)}"
        if event.state == DownloadState.DOWNLOADING and event.speed_bps:
            speed = f"{human_bytes(event.speed_bps)}/s, {human_seconds(event.eta_s)} left"
            text = f"{sizes} · {speed}"
        elif event.state == DownloadState.FAILED:
            text = f"Failed: {event.error}" if event.error else "Failed"
        else:
            text = f"{sizes} · {event.state.value}"
        self.detail.setText(text)
        running = event.state in (
            DownloadState.QUEUED, DownloadState.DOWNLOADING, DownloadState.VERIFYING
        )  # fmt: skip
        self.pause_button.setVisible(running)
        self.resume_button.setVisible(event.state in (DownloadState.PAUSED, DownloadState.FAILED))
        self.cancel_button.setEnabled(event.state != DownloadState.VERIFYING)
