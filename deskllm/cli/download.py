"""`deskllm download REPO [QUANT|FILE] [--json]`: fetch a model into the models folder, with a
progress bar on stderr. Run it again after an interruption and it resumes."""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import TextIO

from deskllm import settings as settings_mod
from deskllm.downloads.events import DownloadState, Progress
from deskllm.downloads.units import human_bytes, human_seconds


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "download",
        help="download a GGUF model from Hugging Face",
        description="Download a model file (all its parts) from a Hugging Face repo into the "
        "models folder, verify its sha256 and add it to the library. An interrupted download "
        "resumes where it stopped.",
    )
    parser.add_argument("repo", help="the repo, e.g. bartowski/SmolLM2-135M-Instruct-GGUF")
    parser.add_argument(
        "selector",
        nargs="?",
        metavar="QUANT|FILE",
        help="a quantization (Q4_K_M) or a file in the repo; default: what fits this machine",
    )
    parser.add_argument("--json", action="store_true", help="print one JSON object at the end")
    parser.set_defaults(func=run_download)


class ProgressBar:
    """One line redrawn in place on a terminal; a line per 10% (and per state) otherwise."""

    def __init__(self, stream: TextIO) -> None:
        self.stream = stream
        self.tty = stream.isatty()
        self._last_draw = 0.0
        self._last_step = -1
        self._last_state: DownloadState | None = None

    def __call__(self, event: Progress) -> None:
        changed = event.state != self._last_state
        self._last_state = event.state
        if event.state == DownloadState.FAILED and event.error:
            return  # the command prints the error once, at the end
        line = self.format(event)
        if self.tty:
            now = time.monotonic()
            if changed or now - self._last_draw >= 0.2:
                self._last_draw = now
                self.stream.write("\r" + line.ljust(79)[:119])
                self.stream.flush()
            return
        step = int(event.fraction * 10)
        if changed or step != self._last_step:
            self._last_step = step
            self.stream.write(line + "\n")
            self.stream.flush()

    @staticmethod
    def format(event: Progress) -> str:
        width = 24
        filled = int(event.fraction * width)
        bar = "#" * filled + "-" * (width - filled)
        size = f"{human_bytes(event.bytes_done)} / {human_bytes(event.total)}"
        if event.state != DownloadState.DOWNLOADING:
            return f"[{bar}] {event.fraction:6.1%}  {size}  {event.state.value}"
        speed = f"{human_bytes(event.speed_bps)}/s" if event.speed_bps else "--"
        return f"[{bar}] {event.fraction:6.1%}  {size}  {speed}  ETA {human_seconds(event.eta_s)}"

    def finish(self) -> None:
        if self.tty:
            self.stream.write("\n")
            self.stream.flush()


def run_download(args: argparse.Namespace) -> int:
    from deskllm.downloads.errors import DownloadError
    from deskllm.downloads.resolve import resolve
    from deskllm.downloads.single import download_one

    user = settings_mod.load()
    try:
        item = resolve(
            args.repo,
            args.selector,
            n_ctx=user.n_ctx,
            kv_type=user.kv_type,
            usable_tps=user.usable_tps,
        )
    except DownloadError as exc:
        return _fail(args, str(exc))
    bar = ProgressBar(sys.stderr)
    if not args.json:
        print(f"{item.what} ({item.quant or '?'}, {human_bytes(item.total)}"
              + (f", {len(item.parts)} parts" if len(item.parts) > 1 else "") + ")",
              file=sys.stderr)  # fmt: skip
    try:
        record, stats = download_one(item, user.models_path(), bar)
    except KeyboardInterrupt:
        bar.finish()
        print("paused; run the same command again to resume", file=sys.stderr)
        return 130
    bar.finish()
    if record.state != DownloadState.DONE:
        return _fail(args, record.error or f"the download ended {record.state.value}")
    if args.json:
        result = {
            "id": record.id,
            "repo": item.repo_id,
            "file": item.name,
            "quant": item.quant,
            "state": record.state.value,
            "path": record.path,
            "parts": [p.path for p in item.parts],
            "size_bytes": item.total,
            "sha256": [p.sha256 for p in item.parts],
            "model_id": record.model_id,
            "fetched_bytes": stats.fetched if stats else None,
            "resumed_from_bytes": stats.resumed_from if stats else None,
            "rehashed_bytes": stats.rehashed if stats else None,
            "retries": stats.retries if stats else None,
            "seconds": round(stats.seconds, 3) if stats else None,
        }
        json.dump(result, sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        print(record.path)
    return 0


def _fail(args: argparse.Namespace, message: str) -> int:
    if args.json:
        json.dump({"repo": args.repo, "state": "failed", "error": message}, sys.stdout)
        sys.stdout.write("\n")
    print(f"error: {message}", file=sys.stderr)
    return 1
