"""View → Colour drafted text: with speculative decoding on, a reply's text that accepted
drafts wrote is stored as spans with it and, with the toggle on, shown highlighted (the reply
as written, no Markdown); off again, the reply is Markdown as before. The choice is kept."""

from __future__ import annotations

from gui_helpers import send_and_wait, set_sampling

from deskllm.gui.message_view import DRAFTED_COLOUR, drafted_spans
from deskllm.gui.qt import QApplication

QUOTE = ("Here is a text.\n\nThe lighthouse stood on the rock for two hundred years. Its keeper "
         "climbed the stairs every evening, lit the lamp and wrote in her log. Ships passed in "
         "the night and never knew her name.\n\nQuote the text word for word.")  # fmt: skip


def words(text: str) -> str:
    return "".join(text.split())


def highlighted(widget) -> str:
    """The text of the reply's views that has the drafted background."""
    out = []
    for view in widget._views:
        block = view.document().begin()
        while block.isValid():
            it = block.begin()
            while not it.atEnd():
                fragment = it.fragment()
                if fragment.charFormat().background().color() == DRAFTED_COLOUR:
                    out.append(fragment.text())
                it += 1
            block = block.next()
    return "".join(out)


def test_drafted_text_is_stored_and_coloured_on_request(qtbot, make_window, gui_state):
    window = make_window(speculation="ngram")
    set_sampling(window, temperature=0.0, repeat_penalty=1.0, max_tokens=80)
    send_and_wait(qtbot, window, QUOTE)
    QApplication.processEvents()
    reply = window.chat.widgets[-1]
    message = window.store.messages(window.chat.conversation_id)[-1]
    spans = drafted_spans(message)
    assert message.metrics["draft_n_accepted"] > 0 and spans
    drafted = "".join(message.content[a:b] for a, b in spans)
    assert 0 < len(drafted) <= len(message.content)
    assert highlighted(reply) == ""  # off by default

    window.colour_drafted.trigger()
    assert window.colour_drafted.isChecked()
    assert words(highlighted(reply)) == words(drafted)  # (line breaks are blocks there)
    assert "drafted" in reply._views[0].toolTip()
    assert reply.plain_text().startswith("Assistant")  # the text is still there to copy

    window.colour_drafted.trigger()  # off: Markdown again, nothing highlighted
    assert highlighted(reply) == "" and reply._views
    assert gui_state().value("chat/colour_drafted", type=bool) is False
    window.colour_drafted.trigger()
    assert gui_state().value("chat/colour_drafted", type=bool) is True
