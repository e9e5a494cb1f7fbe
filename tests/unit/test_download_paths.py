"""File names from the Hub become local paths: on every system, and for both path flavours,
an accepted name stays inside the models folder and names the file it says."""

from __future__ import annotations

from pathlib import PurePath, PurePosixPath, PureWindowsPath

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from deskllm.downloads import DownloadError, DownloadItem, RemoteFile

BASES = [PurePosixPath("/home/u/.local/share/deskllm/models"), PureWindowsPath(r"C:\Users\u\m")]


def item(path: str, repo_id: str = "owner/name") -> DownloadItem:
    return DownloadItem(repo_id, (RemoteFile(repo_id, path, 1, None),))


def stays_inside(base: PurePath, dest: PurePath) -> bool:
    return dest.is_relative_to(base) and ".." not in dest.parts and dest != base


@pytest.mark.parametrize(
    "name",
    [
        "C:x.gguf",  # drive-relative on Windows: lands in C:'s current folder
        "C:/x.gguf",
        "c:\\x.gguf",
        "Q4/D:evil.gguf",
        "model.gguf:stream",  # an NTFS alternate data stream
        "NUL",
        "nul.gguf",  # still the NUL device, extension or not
        "CON.tar.gguf",
        "Aux",
        "PRN .gguf",
        "COM1.gguf",
        "lpt9",
        "COM\u00b9.gguf",
        "Q4/LPT3.txt",
        "model.gguf.",  # Windows drops a trailing dot: another name than the one checked
        "model.gguf ",
        "Q4 /a.gguf",
        "../evil.gguf",
        "a/../../b.gguf",
        "./a.gguf",
        "/etc/passwd",
        "a\\..\\b.gguf",
        "\\\\server\\share\\x.gguf",
        "a//b.gguf",
        "",
        "a\x00b.gguf",
        'a"b.gguf',
        "a?b.gguf",
    ],
)
def test_windows_and_posix_escapes_are_refused(name: str):
    with pytest.raises(DownloadError, match="unsafe"):
        item(name)


@pytest.mark.parametrize("repo_id", ["C:/name", "owner/NUL", "owner/..", "owner/name."])
def test_the_repo_id_is_checked_too(repo_id: str):
    with pytest.raises(DownloadError, match="unsafe"):
        item("a.gguf", repo_id)


@pytest.mark.parametrize(
    "name",
    [
        "model-Q4_K_M.gguf",
        "Q4_K_M/model-Q4_K_M-00001-of-00002.gguf",
        "CONFIG.gguf",  # only the exact device names are reserved
        "nullable.gguf",
        "COM10.gguf",
        "LPT.gguf",
        ".hidden.gguf",
        "a b/c d.gguf",
        "модель.gguf",
    ],
)
def test_ordinary_names_are_kept(name: str):
    for base in BASES:
        dest = item(name).main_path(base)  # type: ignore[arg-type]
        assert stays_inside(base, dest)
        assert dest.parts[len(base.parts) :] == ("owner", "name", *name.split("/"))


# Characters that matter to one flavour or the other, and a few ordinary ones.
_SPECIAL = list('/\\:. $\x00\u00b9?*"<>|~-_') + ["..", "C:", "NUL", "com1", "LPT"]
_ALPHABET = st.sampled_from(_SPECIAL + list("CcNnUuLlOoPpRrMmAaXx1239"))
_NAMES = st.lists(_ALPHABET, max_size=16).map("".join)


@settings(max_examples=400, deadline=None)
@given(_NAMES)
def test_any_accepted_name_stays_inside_the_models_folder(name: str):
    try:
        accepted = item(name)
    except DownloadError:
        return
    for base in BASES:
        dest = accepted.main_path(base)  # type: ignore[arg-type]
        assert stays_inside(base, dest), (name, dest)
        # One local part per part of the name: nothing was re-read as a drive or a separator.
        assert dest.parts[len(base.parts) :] == ("owner", "name", *name.split("/"))
        assert dest.drive == base.drive and dest.anchor == base.anchor
