"""Importing models the user already has, with real GGUF files and the real CLI."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

import pytest

from deskllm.store import ModelLibrary, open_database
from deskllm.store.library_import import (
    gguf_files,
    import_known_folders,
    import_path,
    scan_folder,
)


def test_a_folder_imports_models_once_each_and_says_what_it_skipped(
    tmp_path, starter_model, multipart, mmproj_file
):
    folder = tmp_path / "my models"
    (folder / "nested").mkdir(parents=True)
    shutil.copy(starter_model, folder / "nested" / "smol.gguf")
    for shard in multipart:
        shutil.copy(shard, folder / shard.name)
    shutil.copy(mmproj_file, folder / "mmproj-model-f16.gguf")
    (folder / "broken.gguf").write_bytes(b"GGUF" + b"\0" * 10)
    (folder / "notes.txt").write_text("not a model")
    assert [p.name for p in gguf_files(folder)] == sorted(
        ["broken.gguf", multipart[0].name, "smol.gguf"])  # fmt: skip

    library = ModelLibrary(open_database())
    result = import_path(library, folder)
    assert sorted(Path(m.path).name for m in result.added) == sorted(
        [multipart[0].name, "smol.gguf"])  # fmt: skip
    assert [Path(p).name for p, _ in result.skipped] == ["broken.gguf"]
    assert "too small" in result.skipped[0][1] or "truncated" in result.skipped[0][1]
    again = import_path(library, folder)  # idempotent
    assert len(library.list()) == 2 and len(again.added) == 2
    assert import_path(library, tmp_path / "nowhere").skipped[0][1] == "no such file or folder"


def test_other_tools_folders_are_found_when_present(tmp_path, monkeypatch, starter_model):
    import huggingface_hub.constants as hf

    hf_cache = tmp_path / "hf-cache"
    snapshot = hf_cache / "models--o--m-GGUF" / "snapshots" / "abc"
    blobs = hf_cache / "models--o--m-GGUF" / "blobs"
    snapshot.mkdir(parents=True)
    blobs.mkdir(parents=True)
    shutil.copy(starter_model, blobs / "0123abcd")
    (snapshot / "m-Q4_1.gguf").symlink_to(blobs / "0123abcd")  # as huggingface_hub lays it out
    monkeypatch.setattr(hf, "HF_HUB_CACHE", str(hf_cache))
    home = tmp_path / "home"
    lmstudio = home / ".lmstudio" / "models" / "lmstudio-community" / "x"
    lmstudio.mkdir(parents=True)
    shutil.copy(starter_model, lmstudio / "x-Q4_1.gguf")
    monkeypatch.setenv("HOME", str(home))

    library = ModelLibrary(open_database())
    result = import_known_folders(library)
    sources = sorted(m.source for m in result.added)
    assert sources == ["import:Hugging Face cache", "import:LM Studio"]
    assert not result.skipped


def models_cli(home: Path):
    """`deskllm models ARGS` in `home`, with `stdin` typed in."""
    env = os.environ | {"DESKLLM_HOME": str(home)}

    def cli(*args: str, stdin: str = "") -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "deskllm", "models", *args], env=env,
                              input=stdin, capture_output=True, text=True, timeout=120)

    return cli


def test_cli_import_list_and_remove_with_confirmation(tmp_path, starter_model, deskllm_home):
    copy = tmp_path / "copy.gguf"
    shutil.copy(starter_model, copy)
    cli = models_cli(deskllm_home)
    r = cli("--import", str(copy))
    assert r.returncode == 0 and "added" in r.stderr and str(copy) in r.stderr
    listing = cli().stdout
    assert str(copy) in listing
    refused = cli("--remove", str(copy), "--delete-file", stdin="n\n")
    assert refused.returncode == 1 and copy.exists() and "nothing removed" in refused.stderr
    done = cli("--remove", str(copy), "--delete-file", stdin="y\n")
    assert done.returncode == 0 and not copy.exists()
    assert str(copy) not in cli().stdout
    # Moved outside deskllm: listed as missing, not silently dropped.
    other = tmp_path / "other.gguf"
    shutil.copy(starter_model, other)
    cli("--import", str(other))
    other.unlink()
    assert "file missing" in cli().stdout


def test_cli_subcommands_do_what_the_flags_do(tmp_path, starter_model, deskllm_home):
    copy = tmp_path / "sub.gguf"
    shutil.copy(starter_model, copy)
    cli = models_cli(deskllm_home)
    added = cli("import", str(copy))
    assert added.returncode == 0 and "added" in added.stderr and str(copy) in added.stderr
    listed = json.loads(cli("list", "--json").stdout)
    assert str(copy) in [m["path"] for m in listed]
    assert cli("ls").stdout == cli().stdout
    refused = cli("remove", str(copy), "--delete-file", stdin="n\n")
    assert refused.returncode == 1 and copy.exists()
    done = cli("rm", str(copy), "--delete-file", "--yes")
    assert done.returncode == 0 and not copy.exists() and "removed" in done.stderr
    assert str(copy) not in cli("list").stdout
    assert cli("scan").returncode == 0


# Hostile folders: link loops, FIFOs, devices, unreadable folders, very many files ---------------
def in_thread(fn, timeout: float = 15.0):
    """Run `fn(library)` in a daemon thread (with a library of its own: SQLite connections stay
    in their thread): a walk that hangs fails the test instead of hanging it."""
    box: dict = {}

    def target() -> None:
        try:
            box["result"] = fn(ModelLibrary(open_database()))
        except BaseException as exc:  # handed to the test's thread
            box["error"] = exc

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    thread.join(timeout)
    assert not thread.is_alive(), f"still running after {timeout} s: it hangs"
    if "error" in box:
        raise box["error"]
    return box["result"]


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX links, FIFOs, permissions")
def test_link_loops_end_and_each_folder_is_walked_once(tmp_path, starter_model):
    folder = tmp_path / "models"
    (folder / "sub").mkdir(parents=True)
    shutil.copy(starter_model, folder / "sub" / "smol.gguf")
    # Two loops make os.walk(followlinks=True) explore 2**40 paths before ELOOP stops it.
    (folder / "loop").symlink_to(".")
    (folder / "sub" / "back").symlink_to("..")
    (folder / "sub" / "again").symlink_to(folder)

    result = in_thread(lambda library: import_path(library, folder))
    assert [Path(m.path).name for m in result.added] == ["smol.gguf"]
    loops = sorted(Path(p).name for p, why in result.skipped if "already looked" in why)
    assert loops == ["again", "back", "loop"]


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX links, FIFOs, permissions")
def test_fifos_devices_and_broken_links_are_reported_and_never_opened(tmp_path, starter_model):
    folder = tmp_path / "models"
    folder.mkdir()
    shutil.copy(starter_model, folder / "smol.gguf")
    os.mkfifo(folder / "pipe.gguf")  # opening it for reading blocks until a writer comes
    (folder / "zero.gguf").symlink_to("/dev/zero")
    (folder / "gone.gguf").symlink_to(tmp_path / "nowhere.gguf")

    result = in_thread(lambda library: import_path(library, folder), timeout=10)
    assert [Path(m.path).name for m in result.added] == ["smol.gguf"]
    why = {Path(p).name: reason for p, reason in result.skipped}
    assert set(why) == {"pipe.gguf", "zero.gguf", "gone.gguf"}
    assert "FIFO" in why["pipe.gguf"] and "device" in why["zero.gguf"]
    assert "broken link" in why["gone.gguf"]
    # Named directly, a FIFO is refused the same way.
    direct = in_thread(lambda library: import_path(library, folder / "pipe.gguf"), timeout=10)
    assert not direct.added and "FIFO" in direct.skipped[0][1]


def scan_in_child(folder: Path, as_nobody: bool) -> dict:
    """scan_folder(folder) in a forked child, as the user "nobody" if asked; its result."""
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: never returns into pytest
        code = 1
        try:
            os.close(read_end)
            if as_nobody:
                import pwd

                nobody = pwd.getpwnam("nobody")
                os.setgroups([])
                os.setgid(nobody.pw_gid)
                os.setuid(nobody.pw_uid)
            scan = scan_folder(folder)
            found = {"files": [str(f) for f in scan.files], "skipped": scan.skipped}
            os.write(write_end, json.dumps(found).encode())
            code = 0
        finally:
            os._exit(code)
    os.close(write_end)
    with os.fdopen(read_end, "rb") as fh:
        out = fh.read()
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    return json.loads(out)


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX links, FIFOs, permissions")
def test_an_unreadable_folder_is_reported_and_the_rest_imported():
    # root reads a chmod 000 folder anyway, so as root the walk runs in a child that became
    # "nobody": a really unreadable folder either way. It lives outside pytest's private tmp
    # dir so that "nobody" can reach it.
    base = Path(tempfile.mkdtemp(prefix="deskllm-unreadable-"))
    try:
        base.chmod(0o755)
        (base / "ok").mkdir(mode=0o755)
        (base / "ok" / "model.gguf").write_bytes(b"GGUF")  # the walk only looks at names
        (base / "closed").mkdir()
        (base / "closed" / "hidden.gguf").write_bytes(b"GGUF")
        (base / "closed").chmod(0)
        scan = scan_in_child(base, as_nobody=os.geteuid() == 0)
        assert [Path(f).name for f in scan["files"]] == ["model.gguf"]
        assert scan["skipped"] == [[str(base / "closed"),
                                    "cannot read this folder: Permission denied"]]
    finally:
        (base / "closed").chmod(0o755)
        shutil.rmtree(base)


@pytest.fixture(scope="module")
def huge_folder(tmp_path_factory, starter_model):
    """100,000 empty files in 100 folders, and one model. In memory (tmpfs) where there is
    one: on a loaded ext4 disk, creating them alone takes close to a minute."""
    shm = Path("/dev/shm")
    if shm.is_dir() and os.access(shm, os.W_OK):
        root = Path(tempfile.mkdtemp(prefix="deskllm-huge-", dir=shm))
    else:
        root = tmp_path_factory.mktemp("huge")
    for d in range(100):
        sub = root / f"d{d:03}"
        sub.mkdir()
        for i in range(1000):
            os.close(os.open(sub / f"f{i}.txt", os.O_CREAT | os.O_WRONLY, 0o644))
    (root / "d050" / "smol.gguf").symlink_to(starter_model)
    yield root
    shutil.rmtree(root)


def test_a_folder_of_100000_files_is_walked_with_progress(huge_folder):
    progress: list[int] = []
    result = in_thread(
        lambda library: import_path(library, huge_folder, on_progress=progress.append)
    )
    assert len(result.added) == 1  # the model (a link: the library records its target)
    assert result.seen == 100_000 + 100 + 1 and not result.cancelled
    assert len(progress) >= 100 and progress == sorted(progress) and progress[-1] == result.seen


def test_a_folder_walk_can_be_cancelled(huge_folder):
    stop = threading.Event()

    def on_progress(seen: int) -> None:
        if seen >= 20_000:
            stop.set()  # as the GUI's Cancel button would, from the walk's own progress

    result = in_thread(lambda library: import_path(library, huge_folder, cancel=stop.is_set,
                                                   on_progress=on_progress))
    assert result.cancelled and 20_000 <= result.seen < 100_000
    assert result.added == ()  # nothing is added once the user has cancelled
