"""What deskllm creates in the per-user folder is private on POSIX: folders 0700, files 0600,
whatever the umask; what the user made is left as it is."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from deskllm import paths
from deskllm.downloads.lock import FileLock
from deskllm.downloads.partfile import Sidecar
from deskllm.store import open_database

pytestmark = pytest.mark.skipif(os.name == "nt", reason="POSIX modes; AppData is per-user")


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.fixture(autouse=True)
def usual_umask():
    """The common desktop umask: without our care, folders 0755 and files 0644."""
    old = os.umask(0o022)
    yield
    os.umask(old)


@pytest.fixture
def new_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    home = tmp_path / "not-yet" / "deskllm"
    monkeypatch.setenv("DESKLLM_HOME", str(home))
    return home


def test_the_data_folder_and_every_subfolder_are_created_private(new_home: Path):
    assert paths.home() == new_home and mode(new_home) == 0o700
    made = [paths.models_dir(), paths.kv_cache_dir(), paths.probe_cache_dir(), paths.logs_dir()]
    assert [mode(p) for p in made] == [0o700] * 4
    assert all(p.parent == new_home for p in made)
    # Parents are not ours (~/.local/share): the usual mode.
    assert mode(new_home.parent) == 0o755


def test_a_folder_the_user_made_is_left_as_it_is(new_home: Path):
    new_home.mkdir(parents=True, mode=0o755)
    (new_home / "models").mkdir(mode=0o750)
    os.chmod(new_home / "models", 0o750)
    assert paths.home() == new_home and paths.models_dir() == new_home / "models"
    assert mode(new_home) == 0o755 and mode(new_home / "models") == 0o750
    assert mode(paths.kv_cache_dir()) == 0o700  # the one we create is private


def test_the_database_and_its_wal_and_shm_files_are_private(new_home: Path):
    db = open_database()  # in the per-user folder, created now
    db["notes"].insert({"text": "a conversation nobody else should read"})
    files = [paths.database_path(), *(paths.database_path().with_name(
        paths.database_path().name + suffix) for suffix in ("-wal", "-shm"))]  # fmt: skip
    assert all(f.exists() for f in files), files
    assert [mode(f) for f in files] == [0o600] * 3
    db.close()


def test_a_database_file_the_user_made_keeps_its_mode(tmp_path: Path):
    path = tmp_path / "mine.sqlite3"
    path.touch(mode=0o644)
    open_database(path).close()
    assert mode(path) == 0o644


def test_download_sidecars_and_lock_files_are_private(tmp_path: Path):
    side = tmp_path / "model.gguf.part.json"
    Sidecar(url="u", size=3, sha256="ab", bytes_done=2).save(side)
    assert mode(side) == 0o600
    # A temporary file left by a crash with a wide mode is tightened when it is written again.
    side.with_name(side.name + ".tmp").write_text("{}")
    os.chmod(side.with_name(side.name + ".tmp"), 0o666)
    Sidecar(url="u", size=3, sha256="ab", bytes_done=3).save(side)
    assert mode(side) == 0o600 and Sidecar.load(side).bytes_done == 3
    lock = tmp_path / "model.gguf.lock"
    with FileLock(lock, "model.gguf"):
        assert mode(lock) == 0o600


def test_the_helpers_for_other_files(tmp_path: Path):
    text = tmp_path / "settings.json"
    paths.write_private_text(text, '{"n_ctx": 4096}')
    assert mode(text) == 0o600 and text.read_text() == '{"n_ctx": 4096}'
    with paths.open_private(tmp_path / "state.bin", "wb") as f:
        f.write(b"\0\1")
    assert mode(tmp_path / "state.bin") == 0o600
    empty = paths.ensure_private_file(tmp_path / "new.sqlite3")
    assert mode(empty) == 0o600 and empty.stat().st_size == 0
    os.chmod(empty, 0o640)
    paths.ensure_private_file(empty)  # exists: left alone
    assert mode(empty) == 0o640
    with pytest.raises(ValueError):
        paths.open_private(tmp_path / "x", "a")
