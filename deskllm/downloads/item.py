"""A download item: one model file, which may be several parts (gguf-split shards) fetched as
one, with one progress bar and one disk-space check."""

from __future__ import annotations

import json
import shutil
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path, PurePosixPath

from deskllm.downloads.control import Control
from deskllm.downloads.errors import DiskFullError, DownloadError
from deskllm.downloads.events import DownloadState, Progress, ProgressCallback, SpeedMeter
from deskllm.downloads.partfile import part_path
from deskllm.downloads.transfer import RemoteFile, TransferOptions, TransferStats, download_file
from deskllm.downloads.units import human_bytes


@dataclass(frozen=True)
class DownloadItem:
    repo_id: str
    parts: tuple[RemoteFile, ...]  # in order; llama.cpp opens the first and finds the rest
    quant: str | None = None

    def __post_init__(self) -> None:
        if not self.parts:
            raise ValueError("a download item needs at least one file")
        for part in self.parts:
            _safe_relative(part.path)
            _safe_relative(part.repo_id)

    @property
    def name(self) -> str:
        """The model file the user asked for: the first part's path in the repo."""
        return self.parts[0].path

    @property
    def what(self) -> str:
        return f"{self.repo_id}/{self.name}"

    @property
    def total(self) -> int:
        return sum(p.size for p in self.parts)

    def folder(self, models_dir: Path) -> Path:
        return models_dir.joinpath(*self.repo_id.split("/"))

    def dest(self, models_dir: Path, part: RemoteFile) -> Path:
        """<models>/<owner>/<name>/<path in repo>: shards keep their names and folder."""
        return self.folder(models_dir).joinpath(*PurePosixPath(part.path).parts)

    def main_path(self, models_dir: Path) -> Path:
        return self.dest(models_dir, self.parts[0])

    def bytes_on_disk(self, models_dir: Path) -> int:
        """Finished parts plus partial files: what a resume does not fetch again."""
        done = 0
        for part in self.parts:
            dest = self.dest(models_dir, part)
            if dest.is_file() and dest.stat().st_size == part.size:
                done += part.size
            elif part_path(dest).is_file():
                done += min(part.size, part_path(dest).stat().st_size)
        return done

    def to_json(self) -> str:
        return json.dumps([asdict(p) for p in self.parts])

    @classmethod
    def from_json(cls, repo_id: str, parts_json: str, quant: str | None = None) -> DownloadItem:
        return cls(repo_id, tuple(RemoteFile(**p) for p in json.loads(parts_json)), quant)


# Names Windows keeps for devices, with any extension ("NUL.gguf" is the NUL device too). The
# superscript digits count as digits there.
_DEVICES = frozenset(
    ["CON", "PRN", "AUX", "NUL", "CONIN$", "CONOUT$"]
    + [f"{port}{n}" for port in ("COM", "LPT") for n in "0123456789\u00b9\u00b2\u00b3"]
)
_FORBIDDEN = frozenset('<>:"|?*\\') | {chr(c) for c in range(32)} | {"\x7f"}


def _safe_relative(path: str) -> None:
    """Refuse a repo path that could land outside the models folder, or on another file than
    its name says, on any system: the file names come from the Hub, i.e. from anyone."""
    reason = _unsafe_part(path)
    if reason:
        raise DownloadError(f"refusing the unsafe file path {path!r} ({reason})")


def _unsafe_part(path: str) -> str | None:
    if not path or path.startswith("/"):
        return "not a relative path"
    for part in path.split("/"):
        if part in ("", ".", ".."):
            return "an empty, '.' or '..' part"
        bad = sorted(set(part) & _FORBIDDEN)
        if bad:
            # ':' makes "C:x.gguf" a drive-relative path on Windows (outside the folder) or
            # "a.gguf:s" an NTFS stream; a backslash is a separator there.
            return f"the character {bad[0]!r}"
        if part[-1] in ". ":
            return "a part ending in a dot or a space"  # Windows drops them: another name
        if part.split(".")[0].rstrip(" ").upper() in _DEVICES:
            return f"{part!r} is a device name on Windows"
    return None


@dataclass
class ItemResult:
    path: Path  # the first part: what the library and the engine open
    stats: TransferStats = field(default_factory=TransferStats)


def check_space(item: DownloadItem, models_dir: Path, margin: int) -> None:
    """All parts together must fit, with a margin, before the first byte is fetched."""
    folder = item.folder(models_dir)
    folder.mkdir(parents=True, exist_ok=True)
    remaining = item.total - item.bytes_on_disk(models_dir)
    free = shutil.disk_usage(folder).free
    if remaining > 0 and free < remaining + margin:
        raise DiskFullError(
            f"not enough free space in {folder}: {item.what} needs {human_bytes(remaining)} "
            f"more (and {human_bytes(margin)} to spare), {human_bytes(free)} is free. "
            "Free some space and try again.",
            str(folder),
            remaining + margin,
        )


class _Reporter:
    """Turns per-part byte counts into item Progress events, at most ~10 per second (plus
    every state change) so a fast link does not flood the GUI."""

    def __init__(
        self,
        item: DownloadItem,
        item_id: int | None,
        callback: ProgressCallback | None,
        interval_s: float = 0.1,
    ) -> None:
        self.item = item
        self.item_id = item_id
        self.callback = callback
        self.interval_s = interval_s
        self.base = 0  # bytes of the parts already finished
        self.meter = SpeedMeter()
        self._last = (0.0, None)
        self._held: Progress | None = None  # the newest event the throttle held back

    def part_done(self, part: RemoteFile) -> None:
        self.base += part.size

    def __call__(self, part_bytes: int, state: DownloadState) -> None:
        if self.callback is None or state == DownloadState.DONE:
            return  # a part is done, not the item: the caller reports that
        done = self.base + part_bytes
        speed = self.meter.add(done)
        event = Progress(
            id=self.item_id, name=self.item.what, state=state, bytes_done=done,
            total=self.item.total, speed_bps=speed,
            eta_s=SpeedMeter.eta(speed, self.item.total - done),
        )  # fmt: skip
        now = time.monotonic()
        last_at, last_state = self._last
        if state == last_state and now - last_at < self.interval_s:
            self._held = event
            return
        if self._held is not None and self._held.state != state:
            # Trailing edge: the bar shows the last bytes of a state before the next begins,
            # even when the whole transfer fit inside one throttle interval.
            self.callback(self._held)
        self._held = None
        self._last = (now, state)
        self.callback(event)


def download_item(
    item: DownloadItem,
    models_dir: Path,
    *,
    control: Control | None = None,
    on_progress: ProgressCallback | None = None,
    options: TransferOptions | None = None,
    item_id: int | None = None,
) -> ItemResult:
    """Fetch every part of `item` (each verified and renamed on its own). Emits DOWNLOADING
    and VERIFYING events; the caller reports the final state (DONE after it recorded it)."""
    options = options or TransferOptions()
    control = control or Control()
    check_space(item, models_dir, options.disk_margin_bytes)
    reporter = _Reporter(item, item_id, on_progress)
    result = ItemResult(item.main_path(models_dir))
    for part in item.parts:
        stats = download_file(
            part, item.dest(models_dir, part), control=control, on_progress=reporter,
            options=options,
        )  # fmt: skip
        result.stats.add(stats)
        reporter.part_done(part)
    return result
