"""What the chat says about where a reply was written, and which models count as remote."""

from __future__ import annotations

from pathlib import Path

from deskllm.gui.chat_render import route_note
from deskllm.gui.remote_targets import AUTO, endpoint_of, is_remote


def test_a_remote_reply_names_its_endpoint_model_and_reason():
    metrics = {"engine": "lab", "model": "lab/qwen", "route_reason": "context"}
    assert route_note(metrics) == ("Sent to remote endpoint lab (lab/qwen): the conversation "
                                   "did not fit the local model's context.")  # fmt: skip
    # A chat on the remote model itself: the message's model names it; no router reason.
    assert route_note({"engine": "lab"}, "lab/qwen") == "Sent to remote endpoint lab (lab/qwen)."


def test_a_local_reply_is_not_marked_unless_it_fell_back():
    assert route_note({"engine": "local", "route_reason": "private"}) == ""
    assert route_note({}) == ""
    notice = "endpoint lab is unreachable; answered by the local model"
    fallback = {"engine": "local", "route_reason": "remote_failed", "route_notice": notice}
    assert route_note(fallback) == ("Answered on this computer: endpoint lab is unreachable; "
                                    "answered by the local model.")  # fmt: skip


def test_remote_choices_are_auto_and_name_slash_model_never_a_file(tmp_path: Path):
    assert is_remote(AUTO) and endpoint_of(AUTO) is None
    assert is_remote("lab/qwen") and endpoint_of("lab/qwen") == "lab"
    assert is_remote("lab/org/model.gguf") and endpoint_of("lab/org/model.gguf") == "lab"
    model = tmp_path / "m.gguf"
    assert not is_remote(str(model)) and not is_remote(None) and not is_remote("")
    model.write_bytes(b"")
    assert not is_remote(str(model))
    assert is_remote("rel/x.gguf")  # a relative name of no existing file: NAME/MODEL
