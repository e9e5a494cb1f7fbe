"""A message is untrusted text (a model wrote it): its links open only after the user saw the
whole address and agreed, only web links open at all, and images it names are never loaded.
Real widgets, offscreen; the link opener is injected so no browser starts."""

from __future__ import annotations

import base64
import http.server
import threading

import pytest
from PySide6.QtCore import QBuffer, QByteArray, QIODevice
from PySide6.QtGui import QImage, QTextCursor

from deskllm.gui.message_view import MessageWidget, ProseView
from deskllm.gui.qt import (
    QApplication,
    QMessageBox,
    Qt,
    QTextDocument,
    QTimer,
    QUrl,
    QVBoxLayout,
    QWidget,
)
from deskllm.store.conversations import Message

BIG = 300  # pixels: an image that loaded would make its paragraph at least this tall


def _show(qtbot, text: str, **kwargs) -> MessageWidget:
    host = QWidget()
    qtbot.addWidget(host)
    layout = QVBoxLayout(host)
    widget = MessageWidget(Message(1, "c", "assistant", text, "complete"), host, **kwargs)
    layout.addWidget(widget)
    layout.addStretch(1)
    host.resize(700, 1600)
    host.show()
    qtbot.waitExposed(host)
    qtbot.wait(50)
    widget.host = host  # kept alive as long as the test holds the message
    return widget


def _prose(widget: MessageWidget) -> list[ProseView]:
    return widget.findChildren(ProseView)


def _click_link(qtbot, view: ProseView, href: str) -> None:
    """Click the middle of the link whose target is `href`, as a user would."""
    block = view.document().begin()
    while block.isValid():
        it = block.begin()
        while not it.atEnd():
            fragment = it.fragment()
            if fragment.charFormat().anchorHref() == href:
                cursor = QTextCursor(view.document())
                cursor.setPosition(fragment.position() + fragment.length() // 2)
                point = view.cursorRect(cursor).center()
                qtbot.mouseClick(view.viewport(), Qt.MouseButton.LeftButton, pos=point)
                return
            it += 1
        block = block.next()
    raise AssertionError(f"no link to {href}")


class DialogAnswer:
    """Waits for the next modal message box, notes what it said and what had been opened by
    then, and presses the button named `press`."""

    def __init__(self, press: str, opened: list[QUrl]) -> None:
        self.press, self.opened = press, opened
        self.text = ""
        self.opened_before: int | None = None
        self._tries = 200
        QTimer.singleShot(0, self._act)

    def _act(self) -> None:
        box = QApplication.activeModalWidget()
        if not isinstance(box, QMessageBox):
            self._tries -= 1
            if self._tries:
                QTimer.singleShot(10, self._act)
            return
        self.text = f"{box.windowTitle()}\n{box.text()}\n{box.informativeText()}"
        self.opened_before = len(self.opened)
        (button,) = [b for b in box.buttons() if b.text().replace("&", "") == self.press]
        button.click()


@pytest.fixture
def opened() -> list[QUrl]:
    return []


def _opener(opened: list[QUrl]):
    def open_url(url: QUrl) -> bool:
        opened.append(url)
        return True

    return open_url


def test_a_web_link_opens_only_after_the_user_saw_it_and_agreed(qtbot, opened):
    href = "https://example.com/docs/page?q=%C3%BC&x=1#part"
    widget = _show(qtbot, f"Read [the documentation]({href}) first.", open_url=_opener(opened))
    (view,) = _prose(widget)

    answer = DialogAnswer("Cancel", opened)
    _click_link(qtbot, view, href)
    assert href in answer.text and "Site: example.com" in answer.text
    assert answer.opened_before == 0 and opened == []  # cancelled: nothing opened

    answer = DialogAnswer("Open in browser", opened)
    _click_link(qtbot, view, href)
    assert answer.opened_before == 0  # not before the user agreed
    assert opened == [QUrl(href)]


def test_the_dialog_shows_where_a_link_really_goes(qtbot, opened):
    # The text says one site, the address another; the host is shown in ASCII (punycode).
    href = "https://bank.example@evil.example/login"
    widget = _show(qtbot, f"[https://bank.example]({href})", open_url=_opener(opened))
    answer = DialogAnswer("Cancel", opened)
    _click_link(qtbot, _prose(widget)[0], href)
    assert href in answer.text and "Site: evil.example" in answer.text
    idn = "https://bücher.example/ä"
    widget = _show(qtbot, f"[books]({idn})", open_url=_opener(opened))
    answer = DialogAnswer("Cancel", opened)
    (view,) = _prose(widget)
    _click_link(qtbot, view, _stored_hrefs(view)[0])
    assert "https://xn--bcher-kva.example/%C3%A4" in answer.text
    assert opened == []


@pytest.mark.parametrize(
    "href",
    [
        "file:///etc/passwd",
        "javascript:alert(1)",
        "secrets.txt",
        "smb://server/share",
        "mailto:someone@example.com",
        "http:relative",
    ],  # fmt: skip
)
def test_links_other_than_web_links_are_refused_with_a_message(qtbot, opened, href):
    widget = _show(qtbot, f"Click [here]({href}).", open_url=_opener(opened))
    (view,) = _prose(widget)
    stored = _stored_hrefs(view)  # the href as Qt's Markdown reader stored it
    assert len(stored) == 1
    answer = DialogAnswer("Close", opened)
    _click_link(qtbot, view, stored[0])
    assert answer.text.startswith("Link not opened") and stored[0] in answer.text
    assert opened == []


def _stored_hrefs(view: ProseView) -> list[str]:
    hrefs = []
    block = view.document().begin()
    while block.isValid():
        it = block.begin()
        while not it.atEnd():
            href = it.fragment().charFormat().anchorHref()
            if href and href not in hrefs:
                hrefs.append(href)
            it += 1
        block = block.next()
    return hrefs


class _CountingHandler(http.server.BaseHTTPRequestHandler):
    hits: list[str] = []

    def do_GET(self) -> None:  # noqa: N802 (http.server name)
        self.hits.append(self.path)
        self.send_response(404)
        self.end_headers()

    def log_message(self, *args) -> None:
        pass


@pytest.fixture
def web_server():
    _CountingHandler.hits = []
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _CountingHandler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


def test_images_named_in_a_message_are_never_loaded(qtbot, tmp_path, monkeypatch, web_server):
    image = QImage(BIG, BIG, QImage.Format.Format_RGB32)
    image.fill(Qt.GlobalColor.red)
    png = tmp_path / "big.png"
    assert image.save(str(png))
    monkeypatch.chdir(tmp_path)  # where a relative name would be looked for
    port = web_server.server_address[1]
    tiny = QImage(2, 2, QImage.Format.Format_RGB32)
    tiny.fill(Qt.GlobalColor.blue)
    data_url = "data:image/png;base64," + base64.b64encode(_png_bytes(tiny)).decode()
    text = "\n\n".join(
        [
            f"![a file]({QUrl.fromLocalFile(str(png)).toString()})",
            "![a relative name](big.png)",
            f"![a path]({png})",
            f"![a web image](http://127.0.0.1:{port}/big.png)",
            f'<img src="{png}">',
            f"![inline]({data_url})",
        ]
    )
    widget = _show(qtbot, text)
    views = _prose(widget)
    assert len(views) == 6
    qtbot.wait(200)
    assert [v.height() < BIG / 2 for v in views] == [True] * 6  # no image was laid out
    assert _CountingHandler.hits == []
    assert "a file: not loaded" in views[0].toPlainText()
    assert str(png) in views[0].toPlainText()
    assert views[4].toPlainText().startswith("<img")  # raw HTML is shown as text
    kind = QTextDocument.ResourceType.ImageResource
    for url in (QUrl.fromLocalFile(str(png)), QUrl("big.png"), QUrl(f"http://127.0.0.1:{port}/")):
        assert views[0].document().resource(kind, url) is None
    assert views[5].document().resource(kind, QUrl(data_url)) is not None  # inline: shown


def _png_bytes(image: QImage) -> bytes:
    data = QByteArray()
    buffer = QBuffer(data)
    buffer.open(QIODevice.OpenModeFlag.WriteOnly)
    image.save(buffer, "PNG")
    return bytes(data)
