"""Syntax highlighting of a code block with Pygments (its lexers and styles), drawn by Qt's
QSyntaxHighlighter.

Qt highlights one line at a time; Pygments needs the whole text (a docstring or a comment
spans lines). So the block is lexed whole when it changes, the formats kept per line, and
each line's highlightBlock only applies its own. Blocks are small and a streaming one is
re-lexed at the chat's repaint rate, so lexing everything again is cheaper than tracking
lexer state across lines."""

from __future__ import annotations

from pygments.lexers import get_lexer_by_name
from pygments.styles import get_style_by_name
from pygments.token import _TokenType
from pygments.util import ClassNotFound

from deskllm.gui.qt import QColor, QFont, QSyntaxHighlighter, QTextCharFormat, QTextDocument

LIGHT_STYLE, DARK_STYLE = "default", "monokai"


class CodeHighlighter(QSyntaxHighlighter):
    """Highlights `document` as `language` (a fence's tag: "python", "js", …; unknown or
    empty: plain text). `dark`: a style that reads on a dark background."""

    def __init__(self, document: QTextDocument, dark: bool) -> None:
        super().__init__(document)
        self._style = get_style_by_name(DARK_STYLE if dark else LIGHT_STYLE)
        self._formats: dict[_TokenType, QTextCharFormat | None] = {}
        self._lexer = None
        self.language = ""
        self._lines: list[list[tuple[int, int, QTextCharFormat]]] = []

    def set_language(self, language: str) -> None:
        if language == self.language:
            return
        self.language = language
        try:
            # stripnl/ensurenl off: the token offsets are the text's own.
            self._lexer = get_lexer_by_name(language, stripnl=False, ensurenl=False)
        except (ClassNotFound, ValueError):
            self._lexer = None

    def set_text(self, text: str) -> None:
        """Lex `text` (what the document is about to show) into each line's formats."""
        lines: list[list[tuple[int, int, QTextCharFormat]]] = [[]]
        if self._lexer is not None:
            column = 0
            for token, value in self._lexer.get_tokens(text):
                fmt = self._format(token)
                for i, part in enumerate(value.split("\n")):
                    if i:
                        lines.append([])
                        column = 0
                    if part and fmt is not None:
                        lines[-1].append((column, len(part), fmt))
                    column += len(part)
        self._lines = lines

    def highlightBlock(self, text: str) -> None:  # noqa: N802 (Qt name)
        n = self.currentBlock().blockNumber()
        if n < len(self._lines):
            for start, length, fmt in self._lines[n]:
                self.setFormat(start, length, fmt)

    def _format(self, token: _TokenType) -> QTextCharFormat | None:
        if token not in self._formats:
            style = self._style.style_for_token(token)
            fmt = QTextCharFormat()
            if style["color"]:
                fmt.setForeground(QColor(f"#{style['color']}"))
            if style["bold"]:
                fmt.setFontWeight(QFont.Weight.Bold)
            if style["italic"]:
                fmt.setFontItalic(True)
            self._formats[token] = fmt if (style["color"] or style["bold"]
                                           or style["italic"]) else None  # fmt: skip
        return self._formats[token]
