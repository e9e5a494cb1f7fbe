"""Importing models the user already has, with real GGUF files and the real CLI."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from deskllm.store import ModelLibrary, open_database
from deskllm.store.library_import import gguf_files, import_known_folders, import_path


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


def test_cli_import_list_and_remove_with_confirmation(tmp_path, starter_model, deskllm_home):
    copy = tmp_path / "copy.gguf"
    shutil.copy(starter_model, copy)
    env = os.environ | {"DESKLLM_HOME": str(deskllm_home)}

    def cli(*args: str, stdin: str = "") -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "deskllm", "models", *args], env=env,
                              input=stdin, capture_output=True, text=True, timeout=120)

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
