"""ModelLibrary: installed GGUF models recorded from their own headers."""

import logging
from pathlib import Path

import pytest

from deskllm.catalog.starter import STARTER_NAME
from deskllm.database.connection import open_database, sqlite
from deskllm.gguf.header import GgufError
from deskllm.store.library import ModelLibrary


@pytest.fixture
def db_path(tmp_path) -> Path:
    return tmp_path / "store.sqlite3"


@pytest.fixture
def library(db_path):
    db = open_database(db_path)
    yield ModelLibrary(db)
    db.close()


@pytest.fixture
def starter_copy(copy_model, monkeypatch) -> Path:
    """A copy standing in for the bundled starter model, so that no test can ever delete the real
    one even if the protection regresses."""
    path = copy_model("starter-copy.gguf")
    monkeypatch.setenv("DESKLLM_STARTER_MODEL", str(path))
    return path


def test_add_the_starter_model(library, starter_model, db_path):
    model = library.add(starter_model)
    assert model.path == str(starter_model.resolve())
    assert model.source == "import"
    assert model.architecture == "llama"
    assert model.quant == "Q4_1"
    assert model.parameters > 100_000_000
    assert model.size_bytes == starter_model.stat().st_size
    assert model.context_length > 0
    assert model.has_chat_template
    # The file's name with its quant set apart, as the starter is named (not the header's
    # general.name, a training run's "Smollm2 135M 8k Lc100K Mix1 Ep2").
    assert model.name == "SmolLM2-135M-Instruct (Q4_1)"
    assert model.added_at > 0
    assert model.exists
    assert library.list() == [model]
    assert library.get(model.id) == model
    # committed
    with sqlite.connect(db_path) as conn:
        assert conn.execute("select path from models").fetchall() == [(model.path,)]


def test_add_is_idempotent_per_path(library, starter_model):
    first = library.add(starter_model)
    again = library.add(starter_model)
    assert again.id == first.id
    assert again.added_at == first.added_at
    assert len(library.list()) == 1
    # adding again updates what changed: the name and source given
    renamed = library.add(starter_model, source="download", name="My model")
    assert (renamed.id, renamed.name, renamed.source) == (first.id, "My model", "download")
    assert len(library.list()) == 1


def test_add_through_a_different_spelling_of_the_path_is_the_same_model(
    library, copy_model, tmp_path
):
    path = copy_model("a.gguf")
    first = library.add(path)
    (tmp_path / "sub").mkdir()
    again = library.add(tmp_path / "sub" / ".." / "a.gguf")
    assert again.id == first.id
    assert len(library.list()) == 1


def test_add_with_a_name_and_source(library, copy_model):
    model = library.add(copy_model("x.gguf"), source="download", name="Tiny chat")
    assert (model.name, model.source) == ("Tiny chat", "download")


def test_list_in_order_added(library, copy_model):
    a = library.add(copy_model("a.gguf"))
    b = library.add(copy_model("b.gguf"))
    c = library.add(copy_model("c.gguf"))
    assert [m.id for m in library.list()] == [a.id, b.id, c.id]


def test_adding_a_non_gguf_file_raises_naming_the_file(library, tmp_path):
    bogus = tmp_path / "holiday-photo.gguf"
    bogus.write_bytes(b"\x89PNG\r\n\x1a\n" + b"\0" * 4096)
    with pytest.raises(GgufError, match="holiday-photo.gguf") as info:
        library.add(bogus)
    assert "not a GGUF file" in str(info.value)
    assert library.list() == []


def test_adding_a_tiny_file_raises_naming_the_file(library, tmp_path):
    tiny = tmp_path / "notes.txt"
    tiny.write_text("hello")
    with pytest.raises(GgufError, match="notes.txt"):
        library.add(tiny)
    assert library.list() == []


def test_adding_a_truncated_model_raises(library, copy_model):
    path = copy_model("cut.gguf")
    with path.open("r+b") as fh:
        fh.truncate(path.stat().st_size // 2)
    with pytest.raises(GgufError, match="cut.gguf"):
        library.add(path)
    assert library.list() == []


def test_adding_a_missing_file_raises(library, tmp_path):
    with pytest.raises(GgufError, match="absent.gguf"):
        library.add(tmp_path / "absent.gguf")


def test_find(library, copy_model, tmp_path):
    a = library.add(copy_model("alpha-7B.Q4_K_M.gguf"), name="Alpha Seven")
    b = library.add(copy_model("beta.gguf"), name="Beta Chat")
    assert library.find("Alpha Seven") == a  # exact name
    assert library.find("alpha seven") == a  # case-insensitive
    assert library.find("chat") == b  # substring of the name
    assert library.find("q4_k_m") == a  # substring of the file name
    assert library.find(str(tmp_path / "beta.gguf")) == b  # by path
    assert library.find("nothing like it") is None


def test_find_exact_name_beats_substring(library, copy_model):
    long = library.add(copy_model("1.gguf"), name="Chat large")
    short = library.add(copy_model("2.gguf"), name="Chat")
    assert library.find("chat") == short
    assert library.find("large") == long


def test_find_by_path_of_a_file_not_in_the_library(library, copy_model):
    library.add(copy_model("in.gguf"), name="in")
    outside = copy_model("outside.gguf")
    assert library.find(str(outside)) is None


def test_find_by_relative_path(library, copy_model, tmp_path, monkeypatch):
    model = library.add(copy_model("rel.gguf"))
    monkeypatch.chdir(tmp_path)
    assert library.find("rel.gguf") == model
    assert library.find("./rel.gguf") == model


def test_remove_keeps_the_file_by_default(library, copy_model):
    path = copy_model("keep.gguf")
    model = library.add(path)
    library.remove(model.id)
    assert library.list() == []
    assert path.is_file()


def test_remove_with_delete_file_deletes_a_copy(library, copy_model):
    path = copy_model("deletable.gguf")
    model = library.add(path)
    other = library.add(copy_model("other.gguf"))
    library.remove(model.id, delete_file=True)
    assert not path.exists()
    assert library.list() == [other]
    assert other.exists


def test_remove_with_delete_file_when_the_file_is_already_gone(library, copy_model):
    path = copy_model("gone.gguf")
    model = library.add(path)
    path.unlink()
    library.remove(model.id, delete_file=True)
    assert library.list() == []


def test_remove_never_deletes_the_registered_starter_file(library, starter_copy):
    model = library.ensure_starter()
    assert model.source == "starter"
    library.remove(model.id, delete_file=True)
    assert starter_copy.is_file()
    assert library.list() == []


def test_remove_never_deletes_the_starter_file_even_when_imported(library, starter_copy):
    model = library.add(starter_copy)  # imported by hand, like any other file
    assert model.source == "import"
    library.remove(model.id, delete_file=True)
    assert starter_copy.is_file()
    assert library.list() == []


def test_remove_keeps_the_real_starter_file(library, starter_model):
    size = starter_model.stat().st_size
    model = library.add(starter_model, source="starter")
    library.remove(model.id, delete_file=True)
    assert starter_model.is_file()
    assert starter_model.stat().st_size == size


def test_missing(library, copy_model):
    present = library.add(copy_model("present.gguf"))
    moved_path = copy_model("moved.gguf")
    moved = library.add(moved_path)
    assert library.missing() == []
    moved_path.rename(moved_path.with_name("elsewhere.gguf"))
    assert library.missing() == [moved]
    assert not moved.exists
    assert present.exists


def test_ensure_starter_registers_it_once(library, starter_model):
    model = library.ensure_starter()
    assert model is not None
    assert model.path == str(starter_model.resolve())
    assert (model.source, model.name) == ("starter", STARTER_NAME)
    again = library.ensure_starter()
    assert again.id == model.id
    assert library.list() == [again]


def test_ensure_starter_takes_over_an_imported_copy_of_it(library, starter_model):
    imported = library.add(starter_model)
    model = library.ensure_starter()
    assert model.id == imported.id
    assert (model.source, model.name) == ("starter", STARTER_NAME)
    assert len(library.list()) == 1


def test_ensure_starter_after_the_app_moved(library, copy_model, monkeypatch):
    old = copy_model("old-location.gguf")
    monkeypatch.setenv("DESKLLM_STARTER_MODEL", str(old))
    first = library.ensure_starter()
    user_model = library.add(copy_model("mine.gguf"))

    new = copy_model("new-location.gguf")
    monkeypatch.setenv("DESKLLM_STARTER_MODEL", str(new))
    moved = library.ensure_starter()
    assert moved.path == str(new.resolve())
    assert moved.id != first.id
    assert sorted(m.path for m in library.list()) == sorted([moved.path, user_model.path])
    assert old.is_file()  # the old row goes, no file is touched


def test_ensure_starter_when_it_is_not_installed(library, tmp_path, monkeypatch, caplog):
    monkeypatch.setenv("DESKLLM_STARTER_MODEL", str(tmp_path / "not-here.gguf"))
    with caplog.at_level(logging.WARNING, logger="deskllm.store"):
        assert library.ensure_starter() is None
    assert "starter model is not installed" in caplog.text
    assert library.list() == []
