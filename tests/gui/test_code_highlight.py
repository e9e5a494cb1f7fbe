"""Code blocks are highlighted by their fence's language with Pygments, whole-block lexed (a
docstring spans lines), in a style that reads on the theme's background."""

from __future__ import annotations

from deskllm.gui.chat_render import Block
from deskllm.gui.code_block import CodeBlockView

CODE = 'def add(a, b):\n    """Add\n    two numbers."""\n    return a + b'


def line_formats(view: CodeBlockView, line: int) -> dict[str, str]:
    """The text of each highlighted range of `line`, with its colour."""
    block = view.text.document().findBlockByNumber(line)
    text = block.text()
    return {text[r.start : r.start + r.length]: r.format.foreground().color().name()
            for r in block.layout().formats()}  # fmt: skip


def test_python_is_highlighted_across_lines(qtbot):
    view = CodeBlockView()
    qtbot.addWidget(view)
    view.set_block(Block("code", CODE, "python"))
    first = line_formats(view, 0)
    assert "def" in first and "add" in first and first["def"] != first["add"]
    # The docstring's second line is inside a string opened on the line before.
    assert line_formats(view, 2) == {'    two numbers."""': line_formats(view, 1)['"""Add']}
    assert view.text.toPlainText() == CODE  # highlighting never changes the text


def test_streaming_keeps_highlighting_and_unknown_languages_stay_plain(qtbot):
    view = CodeBlockView()
    qtbot.addWidget(view)
    view.set_block(Block("code", "x = 1", "python"))
    view.set_block(Block("code", "x = 1\nif x:\n    pass", "python"))
    assert "if" in line_formats(view, 1) and "pass" in line_formats(view, 2)
    plain = CodeBlockView()
    qtbot.addWidget(plain)
    plain.set_block(Block("code", CODE, "no-such-language"))
    assert all(not line_formats(plain, i) for i in range(4))
