"""What the chat says about where a reply was written, which models count as remote, and
what a model name means (the one resolver every face uses)."""

from __future__ import annotations

from pathlib import Path

from deskllm.backends.names import AUTO, ModelName, NameKind, endpoint_of, is_remote, parse_name
from deskllm.gui.chat_render import route_note
from deskllm.server.installed import InstalledModels
from deskllm.store.library import InstalledModel


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


def test_names_parse_into_what_answers_them(tmp_path: Path):
    assert parse_name("auto") == ModelName(NameKind.AUTO, "auto")
    assert parse_name("lab/qwen") == ModelName(NameKind.ENDPOINT, "lab/qwen", "lab", "qwen")
    pool = parse_name("*/qwen")
    assert pool == ModelName(NameKind.POOL, "*/qwen", model="qwen")
    assert is_remote("*/qwen") and endpoint_of("*/qwen") is None
    assert parse_name("qwen").kind == NameKind.LOCAL
    assert parse_name(str(tmp_path / "org" / "m.gguf")).kind == NameKind.LOCAL  # absolute


def _installed(tmp_path: Path, *names: str) -> InstalledModels:
    models = []
    for i, name in enumerate(names):
        path = tmp_path / f"{name.replace(' ', '-')}.Q4_K_M.gguf"
        path.write_bytes(b"GGUF")
        models.append(InstalledModel(i, str(path), name, "llama", 0, "Q4_K_M", 4, 2048, True,
                                     "", "download", 0.0))  # fmt: skip
    return InstalledModels(lambda: models, lambda path: None)  # type: ignore[arg-type]


def test_a_short_name_finds_the_one_model_it_is_part_of(tmp_path: Path):
    installed = _installed(tmp_path, "Qwen2.5 0.5B Instruct", "Gemma 3 270M", "Gemma 3 1B")
    # Found under its id: the library name as a client can type it.
    assert installed.find("qwen")[0] == "qwen2.5-0.5b-instruct"  # any case
    assert installed.find("270m")[0] == "gemma-3-270m"
    assert installed.find("gemma") is None  # two models: ambiguous, never a guess
    assert installed.find("Gemma-3-1B.Q4_K_M")[0] == "gemma-3-1b"  # the file stem
    assert installed.find("Gemma 3 270M")[0] == "gemma-3-270m"  # the library name itself
    assert installed.find("gemma 3 270")[0] == "gemma-3-270m"  # a part of it, as typed
    assert installed.find("llama") is None and installed.find("") is None
