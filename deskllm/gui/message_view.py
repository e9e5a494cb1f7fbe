"""MessageWidget: one message of the chat, rendered on its own so a streaming reply re-renders
only itself. Prose is Qt's own Markdown (a ProseView); fenced code gets a CodeBlockView. A
message is untrusted text: it loads no resource it names, and a link opens only after the user
saw all of it and agreed.

Signals:
    edit_requested(Message): the user wants to edit and resend this (user) message.
    continue_requested(): continue this interrupted reply.
    regenerate_requested(): regenerate this reply.
    ask_requested(str): write this reply anew on that remote model (NAME/MODEL).
    tool_answered(str, str): a tool call's id and the user's decision (once/always/deny).
"""

from __future__ import annotations

import math
from collections.abc import Callable

from deskllm.engine.domain import PromptProgress
from deskllm.gui.chat_render import (
    ROLE_TITLES,
    Block,
    dropped_note,
    metrics_details,
    metrics_line,
    route_note,
    split_blocks,
    status_note,
    tools_note,
)
from deskllm.gui.code_block import CodeBlockView
from deskllm.gui.qt import (
    QApplication,
    QColor,
    QDesktopServices,
    QFont,
    QFrame,
    QHBoxLayout,
    QLabel,
    QMessageBox,
    QObject,
    QPalette,
    QProgressBar,
    QSizePolicy,
    Qt,
    QTextBrowser,
    QTextCharFormat,
    QTextCursor,
    QTextDocument,
    QTextFormat,
    QToolButton,
    QUrl,
    QVBoxLayout,
    QWidget,
    Signal,
)
from deskllm.gui.sources_view import SourcesView
from deskllm.gui.thinking_view import ThinkingView
from deskllm.gui.tool_calls_view import ToolCallsView, ToolResultView
from deskllm.store.conversations import Message

LinkOpener = Callable[[QUrl], bool]  # QDesktopServices.openUrl, or a test's recorder
WEB_SCHEMES = ("http", "https")
# GitHub's Markdown without raw HTML: a reply's `<img src=...>` or `<link href=...>` would name
# resources to load, and `<b>` in prose about HTML is meant to be read, not rendered.
_MARKDOWN = QTextDocument.MarkdownFeature.MarkdownDialectGitHub | (
    QTextDocument.MarkdownFeature.MarkdownNoHTML
)


class MessageDocument(QTextDocument):
    """The text of a message, which is untrusted: it never loads what it names. A remote
    image would tell a server the reply was read; a file or UNC path would read local files
    (or hand Windows credentials to a server). Inline data: images carry their own bytes."""

    def loadResource(self, kind: int, url: QUrl):  # noqa: N802 (Qt name)
        if url.scheme().lower() == "data":
            return super().loadResource(kind, url)
        return None


def message_document(markdown: str, font: QFont, parent: QObject | None = None) -> QTextDocument:
    """`markdown` parsed into a MessageDocument whose images, other than data: ones, are
    replaced by a text note before anything lays it out: Qt's image handler reads a file by
    its name itself when the document gives it nothing."""
    document = MessageDocument(parent)
    document.setDefaultFont(font)
    document.setDocumentMargin(2)
    document.setMarkdown(markdown, _MARKDOWN)
    images = []
    block = document.begin()
    while block.isValid():
        it = block.begin()
        while not it.atEnd():
            fragment = it.fragment()
            fmt = fragment.charFormat()
            if fmt.isImageFormat() and QUrl(fmt.toImageFormat().name()).scheme() != "data":
                images.append((fragment.position(), fragment.length(), fmt.toImageFormat()))
            it += 1
        block = block.next()
    for position, length, image in reversed(images):
        cursor = QTextCursor(document)
        cursor.setPosition(position)
        cursor.setPosition(position + length, QTextCursor.MoveMode.KeepAnchor)
        alt = image.property(QTextFormat.Property.ImageAltText) or "image"
        cursor.insertText(f"[{alt}: not loaded, {image.name()}]", QTextCharFormat())
    return document


def link_text(url: QUrl) -> str:
    """The whole address as it will be sent (percent-encoded, the host in ASCII), so that
    look-alike letters and hidden parts show."""
    return bytes(url.toEncoded()).decode("ascii", "replace")


def open_link(url: QUrl, parent: QWidget, opener: LinkOpener) -> bool:
    """Open a link from a message only if it is a web address and the user agrees after
    seeing all of it; anything else (file:, javascript:, a relative path) is refused."""
    shown = link_text(url)
    if url.scheme().lower() not in WEB_SCHEMES or not url.host():
        box = QMessageBox(
            QMessageBox.Icon.Warning,
            "Link not opened",
            "Only web links (http and https) open from a message. This one was not opened.",
            QMessageBox.StandardButton.Close,
            parent,
        )
        box.setInformativeText(shown)
        box.exec()
        return False
    box = QMessageBox(
        QMessageBox.Icon.Question,
        "Open link?",
        "Open this link from the conversation in your web browser?",
        QMessageBox.StandardButton.NoButton,
        parent,
    )
    box.setInformativeText(
        f"{shown}\n\nSite: {url.host(QUrl.ComponentFormattingOption.FullyEncoded)}"
    )
    box.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
    accept = box.addButton("Open in browser", QMessageBox.ButtonRole.AcceptRole)
    box.setDefaultButton(box.addButton(QMessageBox.StandardButton.Cancel))
    box.exec()
    return box.clickedButton() is accept and bool(opener(url))


# Text accepted drafts wrote: a translucent green that reads on light and dark themes.
DRAFTED_COLOUR = QColor(60, 170, 90, 90)


def drafted_spans(message: Message) -> list[tuple[int, int]]:
    """The spans of `message.content` accepted drafts wrote (the stored spans count from
    where this run of the reply began: a continued reply's text before it is skipped)."""
    metrics = message.metrics
    spans, of = metrics.get("drafted_spans") or [], metrics.get("drafted_of") or 0
    offset = len(message.content) - of
    if not spans or offset < 0:
        return []
    return [(offset + start, offset + end) for start, end in spans if offset + end <= len(
        message.content)]


class ProseView(QTextBrowser):
    """A run of Markdown prose, selectable. Its height follows its text, so the chat's own
    scroll area does the scrolling. Links are not followed here: `anchorClicked` goes to the
    message, which asks first.

    Signals:
        anchorClicked(QUrl): the user clicked (or pressed Enter on) a link.
    """

    kind = "prose"

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.block: Block | None = None
        self.setOpenLinks(False)
        self.setOpenExternalLinks(False)
        self.setFrameShape(QFrame.Shape.NoFrame)
        self.setVerticalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.viewport().setAutoFillBackground(False)  # the message's own background shows
        # Ignored width: a long word or URL wraps at the view's edge instead of widening it.
        self.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Fixed)
        self.setDocument(message_document("", self.font(), self))

    def set_block(self, block: Block) -> None:
        if block != self.block:
            self.block = block
            self._show(message_document(block.text, self.font(), self))

    def show_drafted(self, text: str, spans: list[tuple[int, int]]) -> None:
        """`text` as written (no Markdown), the `spans` accepted drafts wrote highlighted."""
        self.block = Block("prose", text)
        document = message_document("", self.font(), self)
        cursor, plain, drafted = QTextCursor(document), QTextCharFormat(), QTextCharFormat()
        drafted.setBackground(DRAFTED_COLOUR)
        last = 0
        for start, end in spans:
            cursor.insertText(text[last:start], plain)
            cursor.insertText(text[start:end], drafted)
            last = end
        cursor.insertText(text[last:], plain)
        share = sum(end - start for start, end in spans) / max(len(text), 1)
        self.setToolTip(f"Highlighted: {share:.0%} of this reply was drafted (speculative "
                        "decoding) and accepted by the model")  # fmt: skip
        self._show(document)

    def _show(self, document: QTextDocument) -> None:
        old = self.document()
        self.setDocument(document)
        old.deleteLater()
        self.fit_height()

    def wheelEvent(self, event) -> None:  # noqa: N802 (Qt name)
        event.ignore()  # the chat scrolls, not this view

    def resizeEvent(self, event) -> None:  # noqa: N802 (Qt name)
        super().resizeEvent(event)
        self.fit_height()

    def fit_height(self) -> None:
        document = self.document()
        document.setTextWidth(self.viewport().width())
        height = math.ceil(document.size().height()) + 2 * self.frameWidth()
        if height != self.height():
            self.setFixedHeight(height)


def _tool_button(text: str, tip: str, parent: QWidget) -> QToolButton:
    # Parented at once: showing a parentless widget, even briefly, makes it a window.
    button = QToolButton(parent, text=text)
    button.setToolTip(tip)
    button.setAutoRaise(True)
    return button


class MessageWidget(QFrame):
    """Attributes:
    message: the stored message shown (a provisional one with id -1 until the store has it).
    revision: how many times the content was rendered; tests use it to check that streaming
        touches only the message being written.
    open_url: opens a web link once the user agreed (QDesktopServices.openUrl).
    """

    edit_requested = Signal(object)
    delete_requested = Signal(object)
    # The message and a step: -1 the version before it, +1 the one after.
    version_requested = Signal(object, int)
    continue_requested = Signal()
    regenerate_requested = Signal()
    ask_requested = Signal(str)
    tool_answered = Signal(str, str)

    def __init__(
        self,
        message: Message,
        parent: QWidget | None = None,
        open_url: LinkOpener = QDesktopServices.openUrl,
    ) -> None:
        super().__init__(parent)
        self.message = message
        self.open_url = open_url
        self.revision = 0
        self._busy = False
        self._version = (1, 1)
        self.ask_target: str | None = None  # NAME/MODEL the Ask button sends to
        self.can_continue = True  # False in a chat on a remote model: it cannot go on in place
        self._text: str | None = None
        self._views: list[ProseView | CodeBlockView] = []
        self.colour_drafted = False  # View → Colour drafted text
        self._drafted_shown = False
        # Palette roles (not colours) so light and dark themes both work.
        self.setAutoFillBackground(True)
        user = message.role == "user"
        self.setBackgroundRole(QPalette.ColorRole.Window if user else QPalette.ColorRole.Base)
        self._build()
        self.set_message(message)

    def _build(self) -> None:
        self.title = QLabel(ROLE_TITLES.get(self.message.role, self.message.role))
        font = self.title.font()
        font.setWeight(QFont.Weight.Bold)
        self.title.setFont(font)
        self.edit_button = _tool_button("Edit", "Edit this message and send it again", self)
        self.edit_button.setVisible(self.message.role == "user")
        self.edit_button.clicked.connect(lambda: self.edit_requested.emit(self.message))
        self.copy_button = _tool_button("Copy", "Copy the whole message", self)
        self.copy_button.clicked.connect(self.copy)
        self.delete_button = _tool_button("Delete", "Delete this message and what follows it",
                                          self)  # fmt: skip
        self.delete_button.clicked.connect(lambda: self.delete_requested.emit(self.message))
        # ‹ 2/3 ›: a regenerated reply's or an edited message's versions.
        self.previous_version = _tool_button("‹", "The previous version", self)
        self.previous_version.clicked.connect(lambda: self.version_requested.emit(self.message, -1))
        self.version_label = QLabel(self)
        self.next_version = _tool_button("›", "The next version", self)
        self.next_version.clicked.connect(lambda: self.version_requested.emit(self.message, 1))
        header = QHBoxLayout()
        header.addWidget(self.title)
        header.addStretch(1)
        for widget in (self.previous_version, self.version_label, self.next_version):
            header.addWidget(widget)
        header.addWidget(self.edit_button)
        header.addWidget(self.copy_button)
        header.addWidget(self.delete_button)
        self.set_versions(1, 1)

        self.thinking = ThinkingView(self)  # a reasoning model's, folded
        self.body = QVBoxLayout()
        self.body.setSpacing(6)
        self.note = QLabel(wordWrap=True)
        self.note.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.continue_button = _tool_button("Continue", "Ask the model to go on from here", self)
        self.continue_button.clicked.connect(self.continue_requested)
        self.regenerate_button = _tool_button("Regenerate", "Write this reply anew", self)
        self.regenerate_button.clicked.connect(self.regenerate_requested)
        self.ask_button = _tool_button("Ask", "", self)
        self.ask_button.clicked.connect(lambda: self.ask_requested.emit(self.ask_target))
        self.ask_button.hide()
        notes = QHBoxLayout()
        notes.addWidget(self.note, 1)
        notes.addWidget(self.continue_button)
        notes.addWidget(self.regenerate_button)
        # Right-aligned: it may be the only thing in the row (a complete reply has no note).
        notes.addWidget(self.ask_button, 0, Qt.AlignmentFlag.AlignRight)
        self.figures = QLabel(wordWrap=True)
        self.figures.setForegroundRole(QPalette.ColorRole.PlaceholderText)
        self.sources = SourcesView(self, self.open_url)  # the passages a reply was given
        # A long prompt being read: tokens read of all, and the time left, until the text.
        self.progress = QProgressBar(self, maximum=1000, textVisible=True)
        self.progress.hide()
        # A reply's tool calls (cards asking consent while they wait), a tool's result.
        self.tool_calls = ToolCallsView(self)
        self.tool_calls.answered.connect(self.tool_answered)
        self.tool_result = ToolResultView(self)

        layout = QVBoxLayout(self)
        layout.addLayout(header)
        layout.addWidget(self.thinking)
        layout.addLayout(self.body)
        layout.addWidget(self.tool_result)
        layout.addWidget(self.tool_calls)
        layout.addWidget(self.progress)
        layout.addWidget(self.sources)
        layout.addLayout(notes)
        layout.addWidget(self.figures)

    # Content ---------------------------------------------------------------------------------
    def set_message(self, message: Message) -> None:
        """Show a stored message (its final text, notes and figures)."""
        self.message = message
        streaming = message.status == "streaming"
        if not streaming:
            self.progress.hide()
        if message.role == "tool":
            self.tool_result.set_result(message.content, message.metrics)
        elif message.tool_calls and not message.content:
            self.set_text("")  # a reply that only calls tools: its cards say it
            self._drop_views(0)
        elif self.colour_drafted and not streaming and (spans := drafted_spans(message)):
            self._show_drafted(message.content, spans)
        else:
            if self._drafted_shown:
                self._drafted_shown, self._text = False, None
                self._drop_views(0)
            self.set_text(message.content if message.content or not streaming else "")
        self.tool_calls.set_calls(message.tool_calls)
        self.set_thinking(message.reasoning, message.metrics.get("reasoning_tokens"),
                          message.metrics.get("reasoning_s"), live=streaming)
        notes = [route_note(message.metrics, message.model), status_note(message),
                 dropped_note(message.metrics), tools_note(message.metrics)]  # fmt: skip
        self.note.setText("\n".join(n for n in notes if n))
        self.note.setVisible(bool(self.note.text()))
        line = "" if streaming else metrics_line(message.metrics)
        self.figures.setText(line)
        self.figures.setToolTip(metrics_details(message.metrics) if line else "")
        self.figures.setVisible(bool(line))
        self.sources.set_sources(message.metrics.get("sources", []))
        self.set_actions(False)
        self._enable_branch_actions()

    def set_thinking(self, text: str, tokens: int | None = None, seconds: float | None = None,
                     live: bool = False) -> None:  # fmt: skip
        """A reasoning model's thinking, folded above the answer (hidden without any)."""
        if text:
            self.progress.hide()
        self.thinking.set_thinking(text, tokens, seconds, live)

    def show_prompt_progress(self, progress: PromptProgress) -> None:
        """How far the prompt is read, in place of the reply until its first text."""
        if self._text or self.thinking.isVisible():
            return  # the reply is being written: the prompt was read
        text = progress.describe()
        self.progress.setValue(round(progress.fraction * 1000))
        self.progress.setFormat(text)
        self.progress.setToolTip(text)
        self.progress.show()

    def set_text(self, text: str) -> None:
        """Render `text`; only the blocks that changed are touched (while streaming, the last)."""
        if text:
            self.progress.hide()
        if text == self._text:
            return
        self._text = text
        self.revision += 1
        blocks = split_blocks(text) or [Block("prose", "…")]
        for i, block in enumerate(blocks):
            if i < len(self._views) and self._views[i].kind == block.kind:
                self._views[i].set_block(block)
                continue
            self._drop_views(i)
            if block.kind == "code":
                view = CodeBlockView(self)
            else:
                view = ProseView(self)
                view.anchorClicked.connect(self._on_link)
            view.set_block(block)
            self._views.append(view)
            self.body.addWidget(view)
        self._drop_views(len(blocks))

    def set_colour_drafted(self, on: bool) -> None:
        """Show (or not) the text accepted drafts wrote highlighted, the reply as plain text."""
        if on != self.colour_drafted:
            self.colour_drafted = on
            if self.message.status != "streaming":
                self.set_message(self.message)

    def _show_drafted(self, text: str, spans: list[tuple[int, int]]) -> None:
        self.progress.hide()
        self._drop_views(0)
        self._text, self._drafted_shown = None, True
        view = ProseView(self)
        view.anchorClicked.connect(self._on_link)
        view.show_drafted(text, spans)
        self._views.append(view)
        self.body.addWidget(view)

    def _drop_views(self, start: int) -> None:
        for view in self._views[start:]:
            view.hide()  # out of the layout at once; deleted when control returns
            view.deleteLater()
        del self._views[start:]

    def _on_link(self, url: QUrl) -> None:
        open_link(url, self, self.open_url)

    def set_actions(self, enabled: bool) -> None:
        """Continue / Regenerate next to an interrupted reply: only on the last message, and
        only while nothing is being generated."""
        interrupted = self.message.status == "interrupted" and self.message.role == "assistant"
        # A reply stopped before its first text has nothing to go on from: Regenerate only.
        self.continue_button.setVisible(enabled and interrupted and self.can_continue
                                        and bool(self.message.content))  # fmt: skip
        self.regenerate_button.setVisible(enabled and interrupted)
        self.ask_button.setVisible(enabled and self.ask_target is not None)

    def set_ask_target(self, target: str | None) -> None:
        """Offer "Ask <target>" on this reply (None: no remote model may be asked)."""
        self.ask_target = target if self.message.role == "assistant" else None
        if self.ask_target:
            self.ask_button.setText(f"Ask {self.ask_target}")
            self.ask_button.setToolTip(f"Write this reply anew on {self.ask_target}: the "
                                       "conversation is sent to that endpoint")  # fmt: skip

    def set_versions(self, number: int, count: int) -> None:
        """Show ‹ number/count › where the message has other versions."""
        self._version = (number, count)
        for widget in (self.previous_version, self.version_label, self.next_version):
            widget.setVisible(count > 1)
        self.version_label.setText(f"{number}/{count}")
        self._enable_branch_actions()

    def set_busy(self, busy: bool) -> None:
        self._busy = busy
        self.edit_button.setEnabled(not busy)
        self._enable_branch_actions()

    def _enable_branch_actions(self) -> None:
        # The branch shown never changes under a reply being written; a message not stored
        # yet (id -1) has nothing to delete.
        number, count = self._version
        self.previous_version.setEnabled(not self._busy and number > 1)
        self.next_version.setEnabled(not self._busy and number < count)
        self.delete_button.setEnabled(not self._busy)
        self.delete_button.setVisible(self.message.id >= 0)

    def plain_text(self) -> str:
        """What the widget shows, as text (titles, body, notes)."""
        parts = [self.title.text()] + [v.block.text for v in self._views if v.block]
        if self.message.role == "tool":
            parts.append(self.tool_result.toggle.text())
        parts += [f"Tool call: {c.call['name']}" for c in self.tool_calls.cards]
        return "\n".join(parts + [self.note.text(), self.figures.text()]).strip()

    def code_blocks(self) -> list[CodeBlockView]:
        return [v for v in self._views if isinstance(v, CodeBlockView)]

    def copy(self) -> None:
        QApplication.clipboard().setText(self._text or self.message.content or "")
