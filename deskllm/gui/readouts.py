"""LiveReadouts: the status bar's figures while a reply streams (the engine sends Metrics
every 0.25 s): decode speed with a sparkline, time to first token, prompt speed, prompt tokens
from the cache vs evaluated, context fill, engine RAM, VRAM where used, the device, and the CPU
threads computing (fewer than all, and why, while Automatic finds the machine busy)."""

from __future__ import annotations

import dataclasses

from deskllm.engine.domain import Metrics
from deskllm.engine.speculation import drafts_text
from deskllm.engine.thread_governor import FIXED_THREADS, threads_text
from deskllm.gui.chat_render import energy_per_token, mib
from deskllm.gui.qt import QHBoxLayout, QLabel, QProgressBar, QWidget
from deskllm.gui.sparkline import Sparkline


class LiveReadouts(QWidget):
    """Attributes:
    updates: how many Metrics were shown (tests check the readouts follow the engine).
    """

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.updates = 0
        self.speed = QLabel()
        self.speed.setToolTip("Decode speed: tokens written per second")
        self.sparkline = Sparkline()
        self.sparkline.setToolTip("Decode speed during this reply")
        self.ttft = QLabel()
        self.ttft.setToolTip("Time to first token: how long the prompt took to read")
        self.prompt_speed = QLabel()
        self.prompt_speed.setToolTip("Prompt evaluation speed: prompt tokens read per second")
        self.cache = QLabel()
        self.cache.setToolTip(
            "Prompt tokens: taken from the KV cache (free) vs evaluated now (cost time)"
        )
        self.context = QProgressBar()
        self.context.setToolTip("Context fill: tokens in the context / context length")
        metrics = self.fontMetrics()
        self.context.setMinimumWidth(
            metrics.horizontalAdvance("context 99999/99999") + 2 * metrics.height()
        )
        self.context.setTextVisible(True)
        self.ram = QLabel()
        self.ram.setToolTip("Memory used by the engine process")
        self.vram = QLabel()
        self.vram.setToolTip("GPU memory used by the engine")
        self.device = QLabel()
        self.device.setToolTip("Where the model runs")
        self.threads = QLabel()
        self.drafts = QLabel()
        self.drafts.setToolTip(
            "Speculative decoding (Settings → Speculative decoding): drafted tokens the model "
            "accepted, and tokens written per pass over the weights"
        )
        self.energy = QLabel()
        self.energy.setToolTip(
            "Energy per generated token: measured by the CPU's or GPU's counter, or \"est.\" "
            "from the watts entered in settings"
        )
        layout = QHBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        for widget in (self.speed, self.sparkline, self.ttft, self.prompt_speed, self.cache,
                       self.context, self.ram, self.vram, self.device, self.threads,
                       self.drafts, self.energy):  # fmt: skip
            layout.addWidget(widget)
        self.clear()

    def clear(self) -> None:
        """Before a reply: empty figures and sparkline."""
        self.sparkline.clear()
        self.speed.setText("– tok/s")
        self.ttft.setText("TTFT –")
        self.prompt_speed.setText("prompt –")
        self.cache.setText("cached –")
        self.context.setRange(0, 1)
        self.context.setValue(0)
        self.context.setFormat("context –")
        self.ram.setText("RAM –")
        self.vram.hide()
        self.device.setText("")
        self.threads.setText("")
        self.threads.setToolTip("")
        self.drafts.hide()
        self.energy.hide()

    def show_metrics(self, metrics: Metrics | dict, final: bool = False) -> None:
        """Show one Metrics event (or a stored reply's metrics dict); `final` for the figures of
        the finished reply, which do not add a point to the sparkline."""
        m = dataclasses.asdict(metrics) if isinstance(metrics, Metrics) else metrics
        self.updates += 1
        if m.get("tg_tps"):
            self.speed.setText(f"{m['tg_tps']:.1f} tok/s")
            if not final:
                self.sparkline.add(m["tg_tps"])
        if m.get("ttft_s") is not None:
            self.ttft.setText(f"TTFT {m['ttft_s'] * 1000:.0f} ms")
        if m.get("pp_tps"):
            self.prompt_speed.setText(f"prompt {m['pp_tps']:.0f} tok/s")
        if m.get("prompt_tokens"):
            self.cache.setText(
                f"cached {m.get('cached_tokens', 0)} · evaluated {m.get('evaluated_tokens', 0)}"
            )
        if m.get("n_ctx"):
            self.context.setRange(0, m["n_ctx"])
            self.context.setValue(min(m.get("n_past", 0), m["n_ctx"]))
            self.context.setFormat(f"context {m.get('n_past', 0)}/{m['n_ctx']}")
        if m.get("rss_bytes"):
            self.ram.setText(f"RAM {mib(m['rss_bytes'])}")
        self.vram.setVisible(bool(m.get("vram_bytes")))
        if m.get("vram_bytes"):
            self.vram.setText(f"VRAM {mib(m['vram_bytes'])}")
        if m.get("device"):
            self.device.setText(m["device"])
        if m.get("n_threads"):
            self._show_threads(m["n_threads"], m.get("max_threads") or 0,
                               m.get("threads_reason") or "")  # fmt: skip
        if m.get("draft_n"):
            self.drafts.setText(drafts_text(m["draft_n"], m.get("draft_n_accepted", 0),
                                            m.get("draft_passes") or 0))  # fmt: skip
            self.drafts.show()
        if m.get("joules_per_token") is not None:  # only a finished reply has its energy
            self.energy.setText(energy_per_token(m))
            self.energy.show()

    def _show_threads(self, n: int, top: int, reason: str) -> None:
        self.threads.setText(threads_text(n, top, reason))
        automatic = "Automatic: the engine runs fewer threads while other programs keep cores "
        automatic += "busy, and all of them when the cores are free"
        self.threads.setToolTip(
            f"CPU threads computing: {n}, a fixed count (Settings → CPU threads)"
            if reason == FIXED_THREADS
            else f"CPU threads computing: {n} of {top}. {automatic}. Now: {reason}."
        )

    def text(self) -> str:
        """Every figure as one line (tests, accessibility)."""
        parts = [self.speed.text(), self.ttft.text(), self.prompt_speed.text(),
                 self.cache.text(), self.context.text(), self.ram.text()]  # fmt: skip
        if self.vram.isVisibleTo(self):
            parts.append(self.vram.text())
        parts.append(self.device.text())
        if self.threads.text():
            parts.append(self.threads.text())
        if self.drafts.isVisibleTo(self):
            parts.append(self.drafts.text())
        if self.energy.isVisibleTo(self):
            parts.append(self.energy.text())
        return " · ".join(parts)

